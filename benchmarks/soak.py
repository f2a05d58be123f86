"""Memory over a long run: 20,000 training steps of a tiny model, sampling RSS and traced Python memory.

Each variant runs in its own child interpreter: ``surge.testing.TinyModule`` (it calls ``self.log`` every
training and validation step) on 8,000 training samples in batches of 8 (1,000 steps an epoch) and 16
validation samples, ``max_steps=20000``, ``val_check_interval=100`` (a validation run every 100 steps),
``log_every_n_steps=1`` (a CSV row every step), every default plugin on (CSV logger, progress bar writing
to a pipe, model summary, and the checkpoint plugin, which saves after every validation and removes the
previous file), no sanity check.

* ``default``: ``surge.Trainer`` with the settings above;
* ``simple``: the same with ``profiler="simple"`` (surge-profilers), which times every action and handler.

``tracemalloc`` starts before the Trainer is built (after one optimizer step on a throwaway layer, so that
torch's lazy imports at the first step are not traced: they take seconds under tracing). An observer
samples, at every ``--sample-every``-th optimizer step (after ``gc.collect()``), the traced memory
(``tracemalloc.get_traced_memory()[0]``: what the Python allocator holds, including tensors' Python objects
but not their storage) and the process's RSS (psutil). Growth is judged on the traced memory, compared between the first and last thirds of the samples
(the first sample is a warm-up and left out): the medians of the two thirds, and a least-squares slope in
bytes per 1,000 steps over all samples after warm-up. RSS is reported beside it (it moves with the
allocator's arenas and the page cache of the files written, so it is noisier). The largest growths between
the warm-up sample and the end of the run, by allocating line, are listed to point at a leak's cause
(``--top``; the baseline snapshot is written to a file and dropped, so it does not stay in memory).

Usage::

    python benchmarks/soak.py                          # both variants, 20,000 steps each
    python benchmarks/soak.py --steps 4000 --variant simple --json out.json
    python benchmarks/soak.py --quick                  # a smoke run (300 steps)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import surge

RESULT = "RESULT: "
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "simple": {"profiler": "simple"}}
BATCH = 8


class MemorySampler:
    """Observer: traced Python memory and RSS every ``every`` optimizer steps, after a full collection."""

    surge_name = "soak_memory_sampler"
    surge_kind = "observer"

    def __init__(self, every: int, baseline: Path | None) -> None:
        import psutil

        self.every = every
        self.baseline = baseline
        self.process = psutil.Process()
        self.samples: list[dict[str, float]] = []
        self.start = time.perf_counter()
        self.validations = 0
        self.metric_writes = 0

    @surge.hookimpl
    def validation_end(self, event: Any) -> None:
        self.validations += 1

    @surge.hookimpl
    def log_metrics(self, event: Any) -> None:
        self.metric_writes += 1

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        step = event.trainer.global_step
        if step % self.every or (self.samples and self.samples[-1]["step"] == step):
            return
        gc.collect()
        traced, peak = tracemalloc.get_traced_memory()
        self.samples.append(
            {
                "step": step,
                "traced_bytes": traced,
                "traced_peak_bytes": peak,
                "rss_bytes": self.process.memory_info().rss,
                "seconds": time.perf_counter() - self.start,
            }
        )
        if len(self.samples) == 1 and self.baseline is not None:
            # The leak hunt's baseline, at the warm-up sample (which the analysis leaves out): written to a file
            # and dropped, so the snapshot's own memory is not held through the samples that are compared.
            tracemalloc.take_snapshot().dump(str(self.baseline))
            gc.collect()


def _import_lazily_loaded_modules() -> None:
    """One optimizer step on a throwaway layer: torch imports much of ``torch._dynamo`` at the first
    ``optimizer.step()``, which under ``tracemalloc`` takes seconds; it happens here, before tracing starts."""
    import torch

    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_child(variant: str, steps: int, every: int, val_every: int, root: str, top: int) -> dict[str, Any]:
    import torch
    from surge.testing import TinyDataModule, TinyModule

    torch.set_num_threads(1)
    _import_lazily_loaded_modules()
    tracemalloc.start(1)
    baseline = Path(root, "baseline.tracemalloc") if top else None
    sampler = MemorySampler(every, baseline)
    data = TinyDataModule(n_train=1000 * BATCH, n_val=2 * BATCH, batch_size=BATCH)
    trainer = surge.Trainer(
        max_steps=steps,
        max_epochs=-1,
        val_check_interval=val_every,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        default_root_dir=root,
        plugins=[sampler],
        **VARIANTS[variant],
    )
    trainer.fit(TinyModule(), datamodule=data)
    gc.collect()
    growth: list[dict[str, Any]] = []
    if baseline is not None and baseline.exists():
        last = tracemalloc.take_snapshot()
        for stat in last.compare_to(tracemalloc.Snapshot.load(str(baseline)), "lineno")[:top]:
            growth.append(
                {
                    "size_diff_bytes": stat.size_diff,
                    "count_diff": stat.count_diff,
                    "where": [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback],
                }
            )
    tracemalloc.stop()
    return {
        "variant": variant,
        "steps": trainer.global_step,
        "validations": sampler.validations,
        "metric_writes": sampler.metric_writes,
        "profiler": type(trainer.profiler).__name__ if trainer.profiler is not None else None,
        "samples": sampler.samples,
        "top_growth": growth,
    }


def analyse(samples: list[dict[str, float]], key: str = "traced_bytes") -> dict[str, float]:
    """Growth of ``key`` after warm-up: the last third's median minus the first third's, and the slope."""
    after = samples[1:]
    if len(after) < 3:
        raise ValueError(f"need at least 4 samples to compare thirds, got {len(samples)}")
    third = len(after) // 3
    first, last = after[:third], after[-third:]
    growth = statistics.median(s[key] for s in last) - statistics.median(s[key] for s in first)
    xs = [s["step"] / 1000 for s in after]
    ys = [s[key] for s in after]
    slope = statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0
    return {
        "first_third_median": statistics.median(s[key] for s in first),
        "last_third_median": statistics.median(s[key] for s in last),
        "growth_bytes": growth,
        "slope_bytes_per_1000_steps": slope,
        "min": min(ys),
        "max": max(ys),
    }


def run_variant(
    variant: str, steps: int, sample_every: int, val_every: int, top: int = 0, timeout: float = 3600
) -> dict[str, Any]:
    """One variant in a child interpreter (its own memory); progress and summaries go to a pipe."""
    with tempfile.TemporaryDirectory(prefix="surge-soak-") as root:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            variant,
            "--steps",
            str(steps),
            "--sample-every",
            str(sample_every),
            "--val-every",
            str(val_every),
            "--top",
            str(top),
            "--root",
            root,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        elapsed = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"soak child {variant} failed (rc={done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT) :])
    result["wall_seconds"] = elapsed
    result["traced"] = analyse(result["samples"], "traced_bytes")
    result["rss"] = analyse(result["samples"], "rss_bytes")
    return result


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        (
            f"### Soak: {cfg['steps']:,} steps of a tiny model, `self.log` every step, a CSV row every step, "
            f"validation every {cfg['val_every']} steps, memory sampled every {cfg['sample_every']:,} steps"
        ),
        "",
        (
            "| variant | wall s | traced: first third MB | traced: last third MB | traced growth KB | "
            "traced slope KB/1k steps | RSS first third MB | RSS last third MB | RSS growth MB |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, v in result["variants"].items():
        t, r = v["traced"], v["rss"]
        lines.append(
            f"| {name} | {v['wall_seconds']:.0f} | {t['first_third_median'] / 1e6:.3f} | "
            f"{t['last_third_median'] / 1e6:.3f} | {t['growth_bytes'] / 1e3:+.1f} | "
            f"{t['slope_bytes_per_1000_steps'] / 1e3:+.2f} | {r['first_third_median'] / 1e6:.1f} | "
            f"{r['last_third_median'] / 1e6:.1f} | {r['growth_bytes'] / 1e6:+.2f} |"
        )
    lines += [
        "",
        (
            "traced: Python allocations seen by `tracemalloc` (started before the Trainer), after `gc.collect()`; "
            "first/last third: medians of the samples after the first (warm-up) one."
        ),
    ]
    for name, v in result["variants"].items():
        if v.get("top_growth"):
            lines += [
                "",
                f"Largest traced growth by allocation line ({name}, from the warm-up sample to the end of the run):",
                "",
            ]
            for g in v["top_growth"]:
                lines.append(f"- {g['size_diff_bytes'] / 1e3:+.1f} KB ({g['count_diff']:+d} blocks) at {g['where'][0]}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="optimizer steps per variant (default 20,000)")
    parser.add_argument("--sample-every", type=int, default=1000, help="steps between memory samples")
    parser.add_argument("--val-every", type=int, default=100, help="val_check_interval (default 100)")
    parser.add_argument("--variant", choices=[*VARIANTS, "all"], default="all")
    parser.add_argument("--top", type=int, default=10, help="allocation sites listed by growth (0: none)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a variant may take")
    parser.add_argument("--json", metavar="PATH", help="also write the results and samples as JSON")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 steps, a sample every 50")
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.sample_every, args.val_every = 300, 50, 25
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.child:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            out = run_child(args.child, args.steps, args.sample_every, args.val_every, args.root, args.top)
        print(RESULT + json.dumps(out), flush=True)
        return out
    names = list(VARIANTS) if args.variant == "all" else [args.variant]
    result = {
        "config": {"steps": args.steps, "sample_every": args.sample_every, "val_every": args.val_every},
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "variants": {
            name: run_variant(name, args.steps, args.sample_every, args.val_every, args.top, args.timeout)
            for name in names
        },
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
