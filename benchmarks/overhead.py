"""Per-step overhead of Surge (and Lightning, when installed) over a raw PyTorch loop.

One process runs every variant on the same MLP (SGD, cross-entropy, one CPU thread), interleaved round by
round (raw, surge, ..., raw, surge, ...; the order rotates each round), and reports medians of per-round
paired comparisons against the raw loop of the same round. ``--model tiny`` (the default): 32 -> 64 -> 64 ->
10, batch 32, where a step's compute is tens of microseconds, so the ratio is nearly all framework cost;
``--model medium``: 1024 -> 1024 -> 1024 -> 1024 -> 10 (four layers, 4.2 M parameters), batch 64, about 10-20
ms of compute a step on one CPU thread: the ratio a real model of that size sees. ``--device cuda``: the same
variants on the first GPU (the raw loop moves each batch with ``non_blocking=True``, as Surge does; the clocks
are read after ``torch.cuda.synchronize()``); ``benchmarks/gpu_check.py`` runs it so.

What is timed: whole training epochs. Each run builds its model, optimizer and trainer (not timed), runs one
warm-up epoch (not timed), then ``--epochs`` epochs that are timed from the start of the first timed epoch to
the end of training. Surge is timed by an observer that only subscribes to ``train_epoch_start`` and
``train_end`` (no per-step event), Lightning by a callback with the same two hooks. There is no validation
data, so there is no sanity check and no validation. Every run records two clocks: wall time and this
thread's CPU time (the same work without the time the OS gave to other processes; steadier when the
machine is shared).

Variants:

* ``raw``: the plain loop: ``zero_grad(set_to_none=True)``, forward, ``backward()``, ``step()``.
* ``surge-minimal``: ``logger=False, enable_checkpointing=False, enable_progress_bar=False,
  enable_model_summary=False`` and no ``self.log``.
* ``surge-logging``: the CSV logger (a row every ``log_every_n_steps=50`` steps), the progress bar (plain
  lines: the output is not a terminal) and the model summary on, checkpointing off; the module logs its
  loss each step with ``self.log(..., prog_bar=True)``.
* ``surge-default``: ``surge.Trainer()`` with its defaults (every installed default plugin on, so also a
  durable checkpoint at the end of every epoch); the module logs as above.
* ``surge-default+20-empty-plugins``: 20 plugin distributions whose participant subscribes to nothing are
  generated as wheels, installed with ``pip install --target`` into a temporary directory, and a child
  process (``PYTHONPATH`` = that directory) compares it with ``surge-default`` (the 20 blocked with
  ``SURGE_DISABLE_PLUGINS``) and ``raw``, interleaved in that child.
* ``lightning-bare`` / ``lightning-logging`` / ``lightning-default`` (when ``import lightning`` works): the
  same settings as the three Surge rows above, on the same module code (``lightning-logging`` with
  Lightning's ``CSVLogger``; ``lightning-default`` takes Lightning's default logger, TensorBoard when it is
  installed).

Usage::

    python benchmarks/overhead.py                 # markdown table on stdout
    python benchmarks/overhead.py --json out.json # and the raw samples as JSON
    python benchmarks/overhead.py --quick         # a smoke run (seconds, numbers meaningless)
    python benchmarks/overhead.py --model medium --rounds 5 --batches 30 --no-empty-plugins
    python benchmarks/overhead.py --device cuda --no-empty-plugins   # on the GPU, against a raw CUDA loop

Numbers are only meaningful relative to the raw row of the same run; the machine is assumed noisy.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import gc
import hashlib
import io
import itertools
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import surge
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:  # Lightning is optional: its rows appear when it is importable
    import lightning as L

    HAVE_LIGHTNING = True
except Exception:  # any import failure just drops the Lightning rows
    L = None  # type: ignore[assignment]
    HAVE_LIGHTNING = False

IN_FEATURES, HIDDEN, CLASSES, BATCH, LR = 32, 64, 10, 32, 0.01


@dataclass(frozen=True)
class ModelSpec:
    """An MLP: ``widths`` from the input features to the classes (ReLU between layers), and the batch size."""

    widths: tuple[int, ...]
    batch: int

    def describe(self) -> str:
        return f"MLP {'-'.join(map(str, self.widths))}, batch {self.batch}"


MODELS = {
    "tiny": ModelSpec((IN_FEATURES, HIDDEN, HIDDEN, CLASSES), BATCH),
    "medium": ModelSpec((1024, 1024, 1024, 1024, CLASSES), 64),
}
"""``tiny``: the per-step cost is almost all framework (tens of microseconds of compute); ``medium``: four
layers of width 1024 (4.2 M parameters), batch 64, milliseconds of compute per step on one CPU thread."""
EMPTY_PREFIX = "bench_empty_"
N_EMPTY = 20

GOAL_RATIO = 1.05
GOALS = ("surge-logging", "surge-default")
"""At most 5% over the raw loop: CSV logging every 50 steps with the progress bar (issue 5), and every
default plugin (issue 2; since checkpointing became a default, that includes a durable save per epoch)."""


# -- the workload ------------------------------------------------------------------------------------


def make_net(spec: ModelSpec = MODELS["tiny"]) -> nn.Module:
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(spec.widths):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class Workload:
    """One dataset, one DataLoader object shared by every variant, one initial set of weights, and the device
    every variant trains on (the loader yields CPU tensors: each variant moves them, as a user's loop would)."""

    def __init__(self, batches_per_epoch: int, seed: int = 0, model: str = "tiny", device: str = "cpu") -> None:
        self.spec = spec = MODELS[model]
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        n = batches_per_epoch * spec.batch
        x = torch.randn(n, spec.widths[0], generator=gen)
        y = torch.randint(0, spec.widths[-1], (n,), generator=gen)
        self.loader = DataLoader(TensorDataset(x, y), batch_size=spec.batch, shuffle=True)
        self.batches_per_epoch = batches_per_epoch
        torch.manual_seed(seed)
        self._init = copy.deepcopy(make_net(spec).state_dict())

    def fresh_net(self) -> nn.Module:
        net = make_net(self.spec)
        net.load_state_dict(self._init)
        return net


def make_optimizer(params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR)


Clocks = tuple[float, float]  # (wall, this thread's CPU time) in seconds


def now() -> Clocks:
    return time.perf_counter(), time.thread_time()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously), so that a clock read next includes it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def since(start: Clocks, end: Clocks | None = None) -> Clocks:
    end = end or now()
    return end[0] - start[0], end[1] - start[1]


CLOCKS = ("wall", "cpu")
"""Every run records both: wall time (``perf_counter``) and this thread's CPU time (``thread_time``). With
one torch thread and ``num_workers=0`` all the work runs on this thread, so the CPU time is the same work
measured without the time the OS gave to other processes: the steadier number on a shared machine."""
Runner = Callable[[Workload, int, str], tuple[Clocks, dict[str, Any]]]


# -- raw PyTorch ---------------------------------------------------------------------------------------


def run_raw(work: Workload, epochs: int, tmp: str) -> tuple[Clocks, dict[str, Any]]:
    device = work.device
    net = work.fresh_net().to(device)
    optimizer = make_optimizer(net.parameters())
    loader = work.loader
    net.train()

    def epoch() -> None:
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()

    def device_epoch() -> None:  # the same loop, each batch moved first (as Surge's strategy moves it)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()

    run_epoch = epoch if device.type == "cpu" else device_epoch
    run_epoch()  # warm-up
    synchronize(device)
    gc.collect()
    start = now()
    for _ in range(epochs):
        run_epoch()
    synchronize(device)
    return since(start), {}


# -- Surge ---------------------------------------------------------------------------------------------


class SurgeModule(surge.Module):
    def __init__(self, net: nn.Module, log: bool) -> None:
        super().__init__()
        self.net = net
        self.log_each_step = log

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.log_each_step:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.net.parameters())


class SurgeEpochTimer:
    """Times from the start of epoch ``warmup`` to the end of training; subscribes to no per-step event."""

    surge_name = "bench_epoch_timer"
    surge_kind = "observer"

    def __init__(self, warmup: int = 1) -> None:
        self.warmup = warmup
        self.start: Clocks | None = None
        self.end: Clocks | None = None

    @surge.hookimpl
    def train_epoch_start(self, event: Any) -> None:
        if event.epoch == self.warmup:
            synchronize(event.trainer.strategy.root_device)
            gc.collect()
            self.start = now()

    @surge.hookimpl
    def train_end(self, event: Any) -> None:
        synchronize(event.trainer.strategy.root_device)
        self.end = now()

    def elapsed(self) -> Clocks:
        if self.start is None or self.end is None:
            raise RuntimeError("the epoch timer did not fire; did the fit run its epochs?")
        return since(self.start, self.end)


SURGE_MINIMAL = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


SURGE_LOGGING = {"enable_checkpointing": False}
"""Issue 5's configuration: the CSV logger (writing every ``log_every_n_steps=50`` steps), the progress bar
and the model summary on; checkpointing off."""


def _surge_runner(options: dict[str, Any], log: bool, empty_plugins: str | None = None) -> Runner:
    """``options``: Trainer arguments over the defaults; ``log``: ``self.log(..., prog_bar=True)`` every step;
    ``empty_plugins``: None (leave discovery alone), "block" or "allow" the generated empty plugins."""

    def run(work: Workload, epochs: int, tmp: str) -> tuple[Clocks, dict[str, Any]]:
        timer = SurgeEpochTimer(warmup=1)
        kwargs: dict[str, Any] = {
            "max_epochs": 1 + epochs,
            "default_root_dir": tmp,
            "plugins": [timer],
            "accelerator": work.device.type,  # not "auto": on a GPU machine that would leave a CPU raw row behind
            "devices": 1,
            **options,
        }
        with _empty_plugins_env(empty_plugins), _quiet():
            trainer = surge.Trainer(**kwargs)
            module = SurgeModule(work.fresh_net(), log=log)
            trainer.fit(module, train_dataloaders=work.loader)
        names = trainer.plugin_names
        handled = {event: trainer.event_order(event) for event in surge.events.EVENTS}
        info = {
            "plugins": [n for n in names if not n.startswith(EMPTY_PREFIX)],
            "empty_plugins_active": sum(n.startswith(EMPTY_PREFIX) for n in names),
            "events_with_handlers": sorted(event for event, order in handled.items() if order),
            "empty_plugins_in_any_event_order": any(
                n.startswith(EMPTY_PREFIX) for order in handled.values() for n in order
            ),
            "global_step": trainer.global_step,
        }
        return timer.elapsed(), info

    return run


@contextlib.contextmanager
def _empty_plugins_env(mode: str | None) -> Iterator[None]:
    if mode != "block":
        yield
        return
    previous = os.environ.get("SURGE_DISABLE_PLUGINS")
    names = [f"{EMPTY_PREFIX}{i:02d}" for i in range(N_EMPTY)]
    os.environ["SURGE_DISABLE_PLUGINS"] = ",".join(([previous] if previous else []) + names)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("SURGE_DISABLE_PLUGINS", None)
        else:
            os.environ["SURGE_DISABLE_PLUGINS"] = previous


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Progress bars and summaries go nowhere (identically for every variant), so the table stays readable."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- Lightning -----------------------------------------------------------------------------------------

if HAVE_LIGHTNING:

    class LightningBenchModule(L.LightningModule):
        def __init__(self, net: nn.Module, log: bool) -> None:
            super().__init__()
            self.net = net
            self.log_each_step = log

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if self.log_each_step:
                self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return make_optimizer(self.net.parameters())

    class LightningEpochTimer(L.Callback):
        def __init__(self, warmup: int = 1) -> None:
            self.warmup = warmup
            self.start: Clocks | None = None
            self.end: Clocks | None = None

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == self.warmup:
                synchronize(pl_module.device)
                gc.collect()
                self.start = now()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            synchronize(pl_module.device)
            self.end = now()

    def _lightning_runner(mode: str) -> Runner:
        """``mode``: "bare" (as surge-minimal), "logging" (as surge-logging, with Lightning's CSVLogger) or
        "default" (Lightning's own defaults, which pick TensorBoard as the logger when it is installed)."""

        def run(work: Workload, epochs: int, tmp: str) -> tuple[Clocks, dict[str, Any]]:
            timer = LightningEpochTimer(warmup=1)
            options: dict[str, Any] = {
                "max_epochs": 1 + epochs,
                "default_root_dir": tmp,
                "callbacks": [timer],
                "accelerator": work.device.type,
                "devices": 1,  # Lightning's "auto" takes every GPU (and DDP) on a machine with several
            }
            if mode == "bare":
                options.update(SURGE_MINIMAL)
            elif mode == "logging":
                options.update(SURGE_LOGGING, logger=L.pytorch.loggers.CSVLogger(tmp))
            with _quiet():
                trainer = L.Trainer(**options)
                module = LightningBenchModule(work.fresh_net(), log=mode != "bare")
                trainer.fit(module, train_dataloaders=work.loader)
            info = {
                "callbacks": [type(c).__name__ for c in trainer.callbacks if c is not timer],
                "loggers": [type(lg).__name__ for lg in trainer.loggers],
                "global_step": trainer.global_step,
            }
            assert timer.start is not None and timer.end is not None
            return since(timer.start, timer.end), info

        return run

    for _name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(_name).setLevel(logging.ERROR)


# -- the interleaved measurement ------------------------------------------------------------------------


def measure(
    variants: dict[str, Runner], rounds: int, epochs: int, batches: int, model: str = "tiny", device: str = "cpu"
) -> dict[str, Any]:
    """Run every variant once per round, rotating the order; return per-round seconds per step."""
    torch.set_num_threads(1)
    work = Workload(batches, model=model, device=device)
    steps = epochs * batches
    names = list(variants)
    samples: dict[str, dict[str, list[float]]] = {clock: {n: [] for n in names} for clock in CLOCKS}
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="surge-bench-") as tmp:
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                run_dir = os.path.join(tmp, f"{name}-{r}")
                os.makedirs(run_dir)
                seconds, details = variants[name](work, epochs, run_dir)
                for clock, value in zip(CLOCKS, seconds, strict=True):
                    samples[clock][name].append(value / steps)
                info.setdefault(name, details)
    return {"samples_s_per_step": samples, "info": info, "steps_per_round": steps}


def summarise(samples: dict[str, list[float]], baseline: str = "raw") -> dict[str, dict[str, float]]:
    base = samples[baseline]
    out: dict[str, dict[str, float]] = {}
    for name, values in samples.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        diffs_us = [1e6 * (v - b) for v, b in zip(values, base, strict=True)]
        out[name] = {
            "median_us_per_step": 1e6 * statistics.median(values),
            "best_us_per_step": 1e6 * min(values),
            "best_overhead_us_per_step": 1e6 * (min(values) - min(base)),
            "ratio_vs_raw": statistics.median(ratios),
            "overhead_us_per_step": statistics.median(diffs_us),
            "overhead_us_q1": _quartiles(diffs_us)[0],
            "overhead_us_q3": _quartiles(diffs_us)[1],
        }
    return out


def paired(samples: dict[str, list[float]], name: str, against: str) -> dict[str, float]:
    diffs_us = [1e6 * (v - b) for v, b in zip(samples[name], samples[against], strict=True)]
    ratios = [v / b for v, b in zip(samples[name], samples[against], strict=True)]
    q1, q3 = _quartiles(diffs_us)
    lo, hi = _bootstrap_median_ci(diffs_us)
    return {
        "diff_us_per_step": statistics.median(diffs_us),
        "diff_us_q1": q1,
        "diff_us_q3": q3,
        "diff_us_ci95_low": lo,
        "diff_us_ci95_high": hi,
        "ratio": statistics.median(ratios),
    }


def _bootstrap_median_ci(values: list[float], resamples: int = 4000) -> tuple[float, float]:
    """A 95% bootstrap interval of the median (fixed seed, so a report is reproducible from its samples)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


# -- 20 empty plugins, really installed ------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_empty_plugin_wheels(dest: Path, count: int = N_EMPTY) -> list[Path]:
    """Write ``count`` minimal but standard wheels, each a distribution with one ``surge.plugins`` entry point
    whose participant (on by default) subscribes to nothing."""
    wheels = []
    for i in range(count):
        plugin_name = f"{EMPTY_PREFIX}{i:02d}"
        module = f"surge_bench_empty_{i:02d}"
        dist = f"surge_bench_empty_{i:02d}"
        version = "0.0.1"
        info = f"{dist}-{version}.dist-info"
        files = {
            f"{module}/__init__.py": (
                '"""A Surge plugin that subscribes to nothing (overhead benchmark)."""\n\nimport surge\n\n\n'
                "class Empty:\n    pass\n\n\n"
                f'plugin = surge.Plugin(name="{plugin_name}", kind="participant", default=True, factory=Empty)\n'
            ),
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: surge-bench-empty-{i:02d}\nVersion: {version}\n"
            "Summary: empty Surge plugin for the overhead benchmark\nRequires-Dist: surge\n\n",
            f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: surge-benchmarks\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            f"{info}/entry_points.txt": f"[surge.plugins]\n{plugin_name} = {module}:plugin\n",
        }
        record = [f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path, text in files.items()]
        record.append(f"{info}/RECORD,,")
        files[f"{info}/RECORD"] = "\n".join(record) + "\n"
        wheel = dest / f"{dist}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
            for path, text in files.items():
                zf.writestr(path, text)
        wheels.append(wheel)
    return wheels


def install_empty_plugins(target: Path, work: Path) -> None:
    wheels = build_empty_plugin_wheels(work)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "--target",
        str(target),
        *map(str, wheels),
    ]
    subprocess.run(cmd, check=True)


def run_empty_plugin_child(args: argparse.Namespace) -> dict[str, Any]:
    """Install the 20 empty plugins into a temporary target and measure in a child process that sees them."""
    with tempfile.TemporaryDirectory(prefix="surge-bench-plugins-") as tmp:
        target, wheels, out = Path(tmp, "site"), Path(tmp, "wheels"), Path(tmp, "child.json")
        wheels.mkdir()
        install_empty_plugins(target, wheels)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child-empty-plugins",
            "--json",
            str(out),
            "--rounds",
            str(args.rounds),
            "--epochs",
            str(args.epochs),
            "--batches",
            str(args.batches),
            "--model",
            args.model,
            "--device",
            args.device,
        ]
        subprocess.run(cmd, check=True, env=env)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


# -- report ------------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": 1,
        "surge": surge.__version__,
        "lightning": getattr(L, "__version__", None) if HAVE_LIGHTNING else None,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    return env


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    model = cfg.get("model", "tiny")
    device = cfg.get("device", "cpu")
    where = "1 thread" if device == "cpu" else f"on {device}, 1 CPU thread"
    lines = [
        (
            f"### Per-step overhead vs a raw PyTorch loop ({model} {MODELS[model].describe()}, SGD, {where}; "
            f"{cfg['rounds']} interleaved rounds x {cfg['epochs']} timed epochs x "
            f"{cfg['batches']} steps)"
        ),
        "",
        "| variant | us/step | ratio vs raw | overhead us/step (IQR) | cpu: ratio vs raw | cpu: overhead us/step (IQR) |",
        "| --- | ---: | ---: | --- | ---: | --- |",
    ]

    def row(label: str, wall: dict[str, float], cpu: dict[str, float]) -> str:
        return (
            f"| {label} | {wall['median_us_per_step']:.1f} | {wall['ratio_vs_raw']:.3f} | "
            f"{wall['overhead_us_per_step']:+.1f} ({wall['overhead_us_q1']:+.1f} .. {wall['overhead_us_q3']:+.1f}) | "
            f"{cpu['ratio_vs_raw']:.3f} | "
            f"{cpu['overhead_us_per_step']:+.1f} ({cpu['overhead_us_q1']:+.1f} .. {cpu['overhead_us_q3']:+.1f}) |"
        )

    for name in result["summary"]["wall"]:
        lines.append(row(name, result["summary"]["wall"][name], result["summary"]["cpu"][name]))
    child = result.get("empty_plugins")
    if child:
        for name in child["summary"]["wall"]:
            lines.append(row(f"{name} (child)", child["summary"]["wall"][name], child["summary"]["cpu"][name]))
    lines += [
        "",
        (
            "us/step: median wall time per step over the rounds. Ratio and overhead: medians of the per-round values "
            "paired with the raw loop of the same round (the child's rows with the child's raw loop); IQR: their "
            "interquartile range. cpu: the same from this thread's CPU time, which leaves out the time the OS gave "
            "to other processes (the steadier number on a shared machine)."
        ),
        "",
    ]
    notes = []
    for clock in CLOCKS:
        for name in GOALS:
            measured = result["summary"][clock].get(name)
            if measured:
                verdict = "meets" if measured["ratio_vs_raw"] <= GOAL_RATIO else "MISSES"
                notes.append(
                    f"- goal ({clock}): {name} at most {GOAL_RATIO:.2f}x raw: {measured['ratio_vs_raw']:.3f}x, {verdict}"
                )
    if child:
        info = child["info"]
        with_empty = info.get("surge-default+20-empty-plugins", {})
        notes.append(
            f"- 20 empty plugins: {with_empty.get('empty_plugins_active')} active "
            f"({info.get('surge-default', {}).get('empty_plugins_active')} in the child's surge-default, where "
            f"SURGE_DISABLE_PLUGINS blocks them); in any event's handler list: "
            f"{with_empty.get('empty_plugins_in_any_event_order')}"
        )
        for clock in CLOCKS:
            p = child["paired_vs_default"][clock]
            notes.append(
                f"- 20 empty plugins vs surge-default in the same child ({clock}): {p['diff_us_per_step']:+.2f} us/step "
                f"(95% CI of the median {p['diff_us_ci95_low']:+.2f} .. {p['diff_us_ci95_high']:+.2f}; "
                f"IQR {p['diff_us_q1']:+.2f} .. {p['diff_us_q3']:+.2f}; ratio {p['ratio']:.3f})"
            )
    for name, details in result["info"].items():
        if details:
            notes.append(f"- {name}: {json.dumps(details)}")
    if not HAVE_LIGHTNING:
        notes.append("- lightning rows skipped: `import lightning` failed in this interpreter")
    return "\n".join(lines + notes)


def build_variants(child: bool) -> dict[str, Runner]:
    if child:
        return {
            "raw": run_raw,
            "surge-default": _surge_runner({}, log=True, empty_plugins="block"),
            "surge-default+20-empty-plugins": _surge_runner({}, log=True, empty_plugins="allow"),
        }
    variants: dict[str, Runner] = {
        "raw": run_raw,
        "surge-minimal": _surge_runner(SURGE_MINIMAL, log=False),
        "surge-logging": _surge_runner(SURGE_LOGGING, log=True),
        "surge-default": _surge_runner({}, log=True),
    }
    if HAVE_LIGHTNING:
        variants["lightning-bare"] = _lightning_runner("bare")
        variants["lightning-logging"] = _lightning_runner("logging")
        variants["lightning-default"] = _lightning_runner("default")
    return variants


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = {
        "rounds": args.rounds,
        "epochs": args.epochs,
        "batches": args.batches,
        "model": args.model,
        "device": args.device,
    }
    if args.child_empty_plugins:
        measured = measure(build_variants(child=True), args.rounds, args.epochs, args.batches, args.model, args.device)
        samples = measured["samples_s_per_step"]
        return {
            "config": config,
            "summary": {clock: summarise(samples[clock]) for clock in CLOCKS},
            "paired_vs_default": {
                clock: paired(samples[clock], "surge-default+20-empty-plugins", "surge-default") for clock in CLOCKS
            },
            **measured,
        }
    measured = measure(build_variants(child=False), args.rounds, args.epochs, args.batches, args.model, args.device)
    samples = measured["samples_s_per_step"]
    result = {
        "config": config,
        "environment": environment(),
        "summary": {clock: summarise(samples[clock]) for clock in CLOCKS},
        **measured,
    }
    if not args.no_empty_plugins:
        result["empty_plugins"] = run_empty_plugin_child(args)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per round, after one warm-up epoch")
    parser.add_argument("--batches", type=int, default=200, help="steps per epoch (default 200)")
    parser.add_argument(
        "--model",
        choices=list(MODELS),
        default="tiny",
        help="the workload: " + "; ".join(f"{name}: {spec.describe()}" for name, spec in MODELS.items()),
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="where every variant trains (cuda: the first GPU)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results and raw samples as JSON")
    parser.add_argument("--no-empty-plugins", action="store_true", help="skip the 20-empty-plugins child")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, 1 epoch of 20 steps (medium: 5)")
    parser.add_argument("--child-empty-plugins", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(
            f"--device cuda: torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda}); run on a machine with a GPU and a CUDA build of torch, or use --device cpu"
        )
    if args.quick:  # a medium step takes milliseconds: fewer of them
        args.rounds, args.epochs, args.batches = 2, 1, 20 if args.model == "tiny" else 5
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if not args.child_empty_plugins:
        print(markdown(result))
    return result


if __name__ == "__main__":
    main()
