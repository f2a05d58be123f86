"""``torch.compile``: compiled against eager step time, and compile time, raw PyTorch and Surge side by side.

One process, ``overhead.py``'s medium model (MLP 1024-1024-1024-1024-10, batch 64, SGD, cross-entropy, one CPU
thread; ``--model tiny`` for its tiny one) and one DataLoader shared by four variants, interleaved round by round
(the order rotates each round):

* ``raw-eager``: the plain loop, ``zero_grad(set_to_none=True)``, forward, ``backward()``, ``step()``;
* ``raw-compiled``: the same loop on ``torch.compile(net)`` (inductor, torch's defaults; ``--backend`` picks
  another backend);
* ``surge-eager``: ``Trainer`` with every optional plugin off (``logger=False, enable_checkpointing=False,
  enable_progress_bar=False, enable_model_summary=False``), no ``self.log``; the Module calls ``self(x)``;
* ``surge-compiled``: the same with ``plugins={"compile": {}}`` (surge-compile: the Module's ``forward``
  compiled with torch's defaults; with ``--backend``, ``{"compile": {"backend": ...}}``).

Per run: the model and optimizer are built from the same initial weights (not timed); the first step is timed
alone (for the compiled variants it includes compiling the forward and backward graphs); the rest of that epoch
warms up (not timed); then ``--epochs`` epochs are timed, start of the first to the end of training. Before each
compiled run ``torch._dynamo.reset()`` drops what the previous round compiled, and inductor's on-disk caches are
off (``torch._inductor.config.force_disable_caches``), so every round compiles from scratch; ``--quick`` leaves
the caches on.

Reported, on the wall clock and on this thread's CPU time (the steadier one on a shared machine: with one torch
thread the compiled kernels run on it too): median step time per variant; per round the ratios compiled/eager
(raw and Surge) and Surge/raw (eager and compiled), their medians; and, on the wall clock (the C++ compiler runs
in other processes), the compile time: the first step minus a steady step of the same run.

Usage::

    python benchmarks/compile.py                 # markdown table on stdout
    python benchmarks/compile.py --json out.json
    python benchmarks/compile.py --quick         # a smoke run (numbers meaningless)
    python benchmarks/compile.py --quick --backend aot_eager   # the same without inductor's C++ compiler (tests)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import overhead  # noqa: E402 - the benchmarks are scripts beside each other, not a package
import surge  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.config  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

VARIANTS = ("raw-eager", "raw-compiled", "surge-eager", "surge-compiled")
Timing = tuple[float, overhead.Clocks]  # (first step's wall seconds, seconds per steady step: wall and thread CPU)


# -- raw PyTorch ---------------------------------------------------------------------------------------


BACKEND = "inductor"
"""The ``torch.compile`` backend of both compiled variants (``--backend``; inductor, torch's default, unless told)."""


def run_raw(work: overhead.Workload, epochs: int, compiled: bool, tmp: str) -> tuple[Timing, dict[str, Any]]:
    net = work.fresh_net()
    optimizer = overhead.make_optimizer(net.parameters())
    model: Callable[[torch.Tensor], torch.Tensor] = torch.compile(net, backend=BACKEND) if compiled else net
    net.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    start = time.perf_counter()
    batches = iter(work.loader)
    step(*next(batches))
    first = time.perf_counter() - start
    for x, y in batches:  # the rest of the first epoch: warm-up
        step(x, y)
    gc.collect()
    timed = overhead.now()
    for _ in range(epochs):
        for x, y in work.loader:
            step(x, y)
    return (first, _per_step(overhead.since(timed), epochs * work.batches_per_epoch)), {}


def _per_step(clocks: overhead.Clocks, steps: int) -> overhead.Clocks:
    return clocks[0] / steps, clocks[1] / steps


# -- Surge ---------------------------------------------------------------------------------------------


class Net(surge.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return overhead.make_optimizer(self.net.parameters())


class Clock:
    """The first step (from the first epoch's start to its first ``train_batch_end``) and the epochs from
    ``warmup`` to the end of training."""

    surge_name = "bench_compile_clock"
    surge_kind = "observer"

    def __init__(self, warmup: int = 1) -> None:
        self.warmup = warmup
        self.marks: dict[str, float] = {}  # the first step's start and end
        self.start: overhead.Clocks = (0.0, 0.0)
        self.end: overhead.Clocks = (0.0, 0.0)

    @surge.hookimpl
    def train_epoch_start(self, event: Any) -> None:
        if event.epoch == 0:
            self.marks["first_start"] = time.perf_counter()
        elif event.epoch == self.warmup:
            gc.collect()
            self.start = overhead.now()

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if "first_end" not in self.marks:
            self.marks["first_end"] = time.perf_counter()

    @surge.hookimpl
    def train_end(self, event: Any) -> None:
        self.end = overhead.now()


def run_surge(work: overhead.Workload, epochs: int, compiled: bool, tmp: str) -> tuple[Timing, dict[str, Any]]:
    clock = Clock()
    options = {} if BACKEND == "inductor" else {"backend": BACKEND}  # inductor: the plugin's own default
    plugins: list[Any] = [clock, *([{"compile": options}] if compiled else [])]
    with overhead._quiet():
        trainer = surge.Trainer(max_epochs=1 + epochs, default_root_dir=tmp, plugins=plugins, **overhead.SURGE_MINIMAL)
        module = Net(work.fresh_net())
        trainer.fit(module, train_dataloaders=work.loader)
    m = clock.marks
    first = m["first_end"] - m["first_start"]
    plugin = next((c for c in trainer.callbacks if hasattr(c, "compile_seconds")), None)
    info = {
        "global_step": trainer.global_step,
        "plugins": trainer.plugin_names,
        "compile_seconds": plugin.compile_seconds if plugin is not None else None,  # what torch's callbacks saw
    }
    return (first, _per_step(overhead.since(clock.start, clock.end), epochs * work.batches_per_epoch)), info


RUNNERS: dict[str, Callable[[overhead.Workload, int, str], tuple[Timing, dict[str, Any]]]] = {
    "raw-eager": lambda w, e, t: run_raw(w, e, False, t),
    "raw-compiled": lambda w, e, t: run_raw(w, e, True, t),
    "surge-eager": lambda w, e, t: run_surge(w, e, False, t),
    "surge-compiled": lambda w, e, t: run_surge(w, e, True, t),
}


# -- measurement and report --------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    global BACKEND
    BACKEND = args.backend
    torch.set_num_threads(1)
    torch._inductor.config.force_disable_caches = not args.quick
    work = overhead.Workload(args.batches, model=args.model)
    first: dict[str, list[float]] = {name: [] for name in VARIANTS}
    step: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in VARIANTS} for clock in overhead.CLOCKS}
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="surge-bench-compile-") as tmp:
        for r in range(args.rounds):
            shift = r % len(VARIANTS)
            for name in VARIANTS[shift:] + VARIANTS[:shift]:
                if name.endswith("compiled"):
                    torch._dynamo.reset()  # compile from scratch, as a fresh process would
                (first_s, step_s), details = RUNNERS[name](work, args.epochs, f"{tmp}/{name}-{r}")
                first[name].append(first_s)
                for clock, value in zip(overhead.CLOCKS, step_s, strict=True):
                    step[clock][name].append(value)
                info.setdefault(name, details)
    return {"first_step_s": first, "step_s": step, "info": info}


def _median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def summarise(samples: dict[str, Any]) -> dict[str, Any]:
    """Per clock (``wall``, ``cpu``): median step times, compiled/eager and Surge/raw ratios; and the compile
    times (wall clock: the C++ compiler runs in other processes)."""
    first, wall = samples["first_step_s"], samples["step_s"]["wall"]
    compile_s = {name: [f - s for f, s in zip(first[name], wall[name], strict=True)] for name in VARIANTS[1::2]}
    summary: dict[str, Any] = {
        "first_step_s": {name: statistics.median(values) for name, values in first.items()},
        "compile_s": {name: statistics.median(values) for name, values in compile_s.items()},
        "compile_time_ratio": _median_ratio(compile_s["surge-compiled"], compile_s["raw-compiled"]),
    }
    for clock, step in samples["step_s"].items():
        summary[clock] = {
            "step_us": {name: 1e6 * statistics.median(values) for name, values in step.items()},
            "compiled_vs_eager": {
                "raw": _median_ratio(step["raw-compiled"], step["raw-eager"]),
                "surge": _median_ratio(step["surge-compiled"], step["surge-eager"]),
            },
            "surge_vs_raw": {
                "eager": _median_ratio(step["surge-eager"], step["raw-eager"]),
                "compiled": _median_ratio(step["surge-compiled"], step["raw-compiled"]),
            },
        }
    return summary


def markdown(result: dict[str, Any]) -> str:
    cfg, s = result["config"], result["summary"]
    model = overhead.MODELS[cfg["model"]].describe()
    wall, cpu, compile_s = s["wall"], s["cpu"], s["compile_s"]
    cold = "inductor caches off: every round compiles from scratch" if cfg["cold"] else "inductor caches on"
    backend = cfg.get("backend", "inductor")
    if backend != "inductor":
        cold = f"backend {backend}"

    def row(label: str, variant: str) -> str:
        return (
            f"| {label} | {wall['step_us'][f'raw-{variant}']:,.0f} us | {wall['step_us'][f'surge-{variant}']:,.0f} us | "
            f"{wall['surge_vs_raw'][variant]:.3f}x (cpu {cpu['surge_vs_raw'][variant]:.3f}x) |"
        )

    per_raw, per_surge = wall["compiled_vs_eager"]["raw"], wall["compiled_vs_eager"]["surge"]
    return "\n".join(
        [
            f"### torch.compile ({model}, 1 torch thread, {cfg['rounds']} rounds of {cfg['epochs']} timed epochs of "
            f"{cfg['batches']} steps; {cold})",
            "",
            "| | raw PyTorch | Surge | Surge / raw |",
            "| --- | ---: | ---: | ---: |",
            row("eager step", "eager"),
            row("compiled step", "compiled"),
            f"| compiled / eager step time | {per_raw:.3f}x (cpu {cpu['compiled_vs_eager']['raw']:.3f}x) | "
            f"{per_surge:.3f}x (cpu {cpu['compiled_vs_eager']['surge']:.3f}x) | — |",
            f"| compile time (first step minus a compiled step) | {compile_s['raw-compiled']:.2f} s | "
            f"{compile_s['surge-compiled']:.2f} s | {s['compile_time_ratio']:.2f}x |",
            "",
            "Ratios are medians of per-round pairs, on the wall clock (cpu: this thread's CPU time, steadier on a "
            "shared machine). Compile time, wall clock: the first step of a compiled run (tracing, forward and "
            "backward graphs, C++ code generation and its compiler) minus a steady step of that run.",
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(overhead.MODELS), default="medium")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs per run")
    parser.add_argument("--batches", type=int, default=30, help="steps per epoch")
    parser.add_argument("--json", metavar="PATH", help="also write the results and samples as JSON")
    parser.add_argument(
        "--backend",
        default="inductor",
        help="torch.compile's backend for both compiled variants (default inductor, torch's; a smoke test may take "
        "aot_eager: dynamo and AOT autograd without inductor's code generation and C++ compiler)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: the tiny model, inductor caches on")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.rounds, args.epochs, args.batches = "tiny", 1, 1, 4
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # torch's and Surge's chatter stays off the report
        samples = measure(args)
    config = {k: v for k, v in vars(args).items() if k not in ("json", "quick")} | {"cold": not args.quick}
    result = {"environment": overhead.environment(), "config": config, "summary": summarise(samples), **samples}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
