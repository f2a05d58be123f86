"""Checkpointing cost: training steps while an asynchronous save is in flight, and synchronous save throughput.

Part 1, asynchronous saving. One real ``Trainer.fit`` of an MLP of about 100 MB of float32 weights
(1024 -> 4096 -> 4096 -> 1024, SGD without momentum, so the checkpoint is the weights plus a few KB) with
``ModelCheckpoint(every_n_train_steps=K, async_save=True)``. An observer takes the time at every
``train_batch_start``; the writer's ``surge.checkpoint.save`` calls are timed too. Each step (one start to
the next) is classed as

* ``snapshot``: the step whose ``train_batch_end`` handed a save to the writer (it pays for
  ``dump_checkpoint`` and the copy of every tensor to fresh CPU memory);
* ``in flight``: any other step that overlaps the writer's work;
* ``normal``: a step with no save in flight.

The goal (issue 4): the median ``in flight`` step at most 1.2x the median ``normal`` step. K is chosen so
that a save finishes before the next one is due (a due save waits for the previous one).

Part 2, synchronous throughput, on the checkpoint dict of the same run, interleaved repeats, medians:

* ``torch.save`` bare: the state dict into a file (no fsync: the page cache decides when it reaches disk);
* ``torch.save + fsync``: the same, durable;
* ``surge.checkpoint.save``: temp file, SHA-256 while writing, fsync, commit marker, atomic renames, fsync
  of the directory;
* ``Trainer.save_checkpoint``: ``dump_checkpoint`` (every state, events) plus ``surge.checkpoint.save``.

Usage::

    python benchmarks/checkpoint.py                 # markdown table on stdout
    python benchmarks/checkpoint.py --json out.json
    python benchmarks/checkpoint.py --quick         # a smoke run (seconds, numbers meaningless)
    python benchmarks/checkpoint.py --dir /mnt/ssd  # where the files go (default: a temp dir)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import surge
import torch
from surge import checkpoint as store
from surge_checkpoint import ModelCheckpoint, _writer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

GOAL_RATIO = 1.2


class Wide(surge.Module):
    def __init__(self, width: int, io: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(io, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, io)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-4)


class StepClock:
    """Observer: the time of every ``train_batch_start``, and of the end of the run."""

    surge_name = "bench_step_clock"
    surge_kind = "observer"

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.end = 0.0

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self.starts.append(time.perf_counter())

    @surge.hookimpl
    def train_end(self, event: Any) -> None:
        self.end = time.perf_counter()


def _size_mb(checkpoint: dict[str, Any]) -> float:
    total = 0
    seen: set[int] = set()

    def walk(obj: Any) -> None:
        nonlocal total
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)

    walk(checkpoint)
    return total / 1e6


def measure_async(directory: Path, args: argparse.Namespace) -> tuple[dict[str, Any], surge.Trainer]:
    torch.manual_seed(0)
    model = Wide(args.width, args.io)
    steps = args.warmup + args.saves * args.every
    x = torch.randn(args.batch * 16, args.io)
    loader = DataLoader(TensorDataset(x, x.flip(1)), batch_size=args.batch, shuffle=True)

    writes: list[tuple[float, float]] = []  # (start, end) of each save on the writer thread
    submits: list[float] = []
    save = store.save

    def timed_save(checkpoint: dict[str, Any], url: str) -> str:
        start = time.perf_counter()
        try:
            return save(checkpoint, url)  # type: ignore[no-any-return]
        finally:
            writes.append((start, time.perf_counter()))

    callback = ModelCheckpoint(dirpath=str(directory / "async"), every_n_train_steps=args.every, async_save=True)
    submit = callback._writer.submit  # private: the benchmark marks when the loop hands a save over

    def timed_submit(*a: Any, **kw: Any) -> None:
        submit(*a, **kw)
        submits.append(time.perf_counter())

    callback._writer.submit = timed_submit  # type: ignore[method-assign]
    clock = StepClock()
    trainer = surge.Trainer(
        plugins=[callback, clock],
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(directory / "root"),
    )
    store.save = timed_save
    try:
        trainer.fit(model, train_dataloaders=loader)
    finally:
        store.save = save
    marks = [*clock.starts, clock.end]
    kinds: dict[str, list[float]] = {"normal": [], "in flight": [], "snapshot": []}
    for i, (start, end) in enumerate(itertools.pairwise(marks)):
        if i < args.warmup:
            continue
        if any(start <= s <= end for s in submits):
            kinds["snapshot"].append(end - start)
        elif any(ws < end and start < we for ws, we in writes):
            kinds["in flight"].append(end - start)
        else:
            kinds["normal"].append(end - start)
    summary = {kind: _stats(values) for kind, values in kinds.items()}
    normal = summary["normal"]["median_ms"]
    result = {
        "checkpoint_mb": _size_mb(trainer.dump_checkpoint()),
        "steps": steps,
        "every_n_train_steps": args.every,
        "saves": len(writes),
        "save_seconds": [round(we - ws, 4) for ws, we in writes],
        "steps_by_kind": summary,
        "ratio_in_flight": summary["in flight"]["median_ms"] / normal if normal else float("nan"),
        "ratio_in_flight_mean": summary["in flight"]["mean_ms"] / summary["normal"]["mean_ms"]
        if summary["normal"]["mean_ms"]
        else float("nan"),
        "ratio_snapshot": summary["snapshot"]["median_ms"] / normal if normal else float("nan"),
        "samples_ms": {kind: [round(v * 1e3, 3) for v in values] for kind, values in kinds.items()},
    }
    return result, trainer


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "median_ms": float("nan"), "mean_ms": float("nan")}
    return {"n": len(values), "median_ms": statistics.median(values) * 1e3, "mean_ms": statistics.fmean(values) * 1e3}


def measure_sync(directory: Path, trainer: surge.Trainer, repeats: int) -> dict[str, Any]:
    checkpoint = trainer.dump_checkpoint()
    size = _size_mb(checkpoint)
    target = directory / "sync"
    target.mkdir(parents=True, exist_ok=True)

    def bare(path: Path) -> None:
        torch.save(checkpoint, path)

    def durable(path: Path) -> None:
        with open(path, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())

    def surge_save(path: Path) -> None:
        store.save(checkpoint, str(path))

    def trainer_save(path: Path) -> None:
        trainer.save_checkpoint(str(path))

    variants = {
        "torch.save (bare)": bare,
        "torch.save + fsync": durable,
        "surge.checkpoint.save": surge_save,
        "Trainer.save_checkpoint": trainer_save,
    }
    lightning_save = _lightning_saver(trainer.module, directory)
    if lightning_save is not None:
        variants["lightning Trainer.save_checkpoint"] = lightning_save
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(repeats + 1):  # round 0 warms up
        order = list(variants)
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for name in order:
            path = target / f"{name.split()[0].replace('.', '_')}-{round_}.ckpt"
            start = time.perf_counter()
            variants[name](path)
            elapsed = time.perf_counter() - start
            if round_:
                times[name].append(elapsed)
            for leftover in target.iterdir():
                leftover.unlink()
    base = statistics.median(times["torch.save (bare)"])
    return {
        "checkpoint_mb": size,
        "repeats": repeats,
        "variants": {
            name: {
                "median_s": statistics.median(values),
                "mb_per_s": size / statistics.median(values),
                "ratio_vs_bare": statistics.median(values) / base,
                "samples_s": [round(v, 4) for v in values],
            }
            for name, values in times.items()
        },
    }


def _lightning_saver(module: surge.Module, directory: Path) -> Any:
    """When Lightning is importable: ``lightning.Trainer.save_checkpoint`` of a copy of the same network, after a
    one-step fit (so it holds the same state kinds); ``None`` otherwise. Lightning writes without fsync, so its
    raw equivalent is the bare ``torch.save``."""
    try:
        import lightning as L
    except Exception:  # Lightning is optional
        return None
    import copy
    import logging
    import warnings

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    class LitWide(L.LightningModule):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-4)

    net = copy.deepcopy(module.net)
    width = net[0].in_features
    x = torch.randn(2, width)
    lit_trainer = L.Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=str(directory / "lightning"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit_trainer.fit(LitWide(net), DataLoader(TensorDataset(x, x), batch_size=2))

    def save(path: Path) -> None:
        lit_trainer.save_checkpoint(str(path))

    return save


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "surge": surge.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "writer_niceness": _writer.WRITER_NICENESS,
        "platform": platform.platform(),
    }


def markdown(result: dict[str, Any]) -> str:
    a, s = result["async"], result["sync"]
    k = a["steps_by_kind"]
    verdict = "met" if a["ratio_in_flight"] <= GOAL_RATIO else "MISSED"
    lines = [
        (
            f"### Checkpointing ({a['checkpoint_mb']:.0f} MB checkpoint, {result['environment']['torch_threads']} torch "
            f"threads, writer at nice +{result['environment']['writer_niceness']}, files in {result['directory_kind']})"
        ),
        "",
        "| asynchronous save (`async_save=True`) | steps | median ms/step | ratio to normal |",
        "| --- | ---: | ---: | ---: |",
        f"| normal steps (no save in flight) | {k['normal']['n']} | {k['normal']['median_ms']:.1f} | 1.00 |",
        (
            f"| steps while a save is in flight | {k['in flight']['n']} | {k['in flight']['median_ms']:.1f} | "
            f"**{a['ratio_in_flight']:.2f}** (mean {a['ratio_in_flight_mean']:.2f}) |"
        ),
        (
            f"| the step that hands the snapshot over | {k['snapshot']['n']} | {k['snapshot']['median_ms']:.1f} | "
            f"{a['ratio_snapshot']:.2f} |"
        ),
        "",
        (
            f"Goal: steps with a save in flight at most {GOAL_RATIO}x normal steps: {verdict}. Each background save "
            f"took {statistics.median(a['save_seconds']):.2f} s (median of {a['saves']}); one every "
            f"{a['every_n_train_steps']} steps."
        ),
        "",
        "| synchronous save | median s | MB/s | time vs bare torch.save |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, v in s["variants"].items():
        lines.append(f"| {name} | {v['median_s']:.3f} | {v['mb_per_s']:.0f} | {v['ratio_vs_bare']:.2f}x |")
    lines += [
        "",
        (
            f"Medians of {s['repeats']} interleaved repeats. `torch.save (bare)` does not wait for the disk; the "
            "others fsync, and `surge.checkpoint.save` also hashes, writes the commit marker and renames "
            "(Lightning's `save_checkpoint`, when installed, does not fsync)."
        ),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="directory for the checkpoint files (default: a new temp dir)")
    parser.add_argument("--width", type=int, default=4096, help="hidden width (4096: a 100 MB model)")
    parser.add_argument("--io", type=int, default=1024, help="input and output width")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--every", type=int, default=30, help="steps between saves (a save must finish in time)")
    parser.add_argument("--saves", type=int, default=4, help="asynchronous saves to measure")
    parser.add_argument("--warmup", type=int, default=5, help="steps not measured at the start")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each synchronous save")
    parser.add_argument("--json", metavar="PATH", help="also write the results and samples as JSON")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a 1 MB model, few steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.io, args.batch, args.every, args.saves, args.warmup, args.repeats = 256, 256, 8, 4, 2, 1, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="surge-bench-ckpt-", dir=args.dir) as tmp:
        directory = Path(tmp)
        result_async, trainer = measure_async(directory, args)
        result_sync = measure_sync(directory, trainer, args.repeats)
    assert not [t for t in threading.enumerate() if t.name == "surge-checkpoint-writer"]
    result = {
        "environment": environment(),
        "directory_kind": args.dir or tempfile.gettempdir(),
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "async": result_async,
        "sync": result_sync,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
