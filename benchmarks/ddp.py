"""2-process DDP throughput of Surge (``strategy="ddp"``) as a ratio to a hand-written torch DDP loop.

Both variants are the program ``plugins/surge-ddp/tests/_program.py`` (``surge`` / ``reference``), started
the same way, ``python -m torch.distributed.run --standalone --nproc-per-node=2``, on the gloo backend with
one CPU thread per process: the same MLP, data, ``DistributedSampler`` and SGD, no per-step host copy
(``--no-record``), and, when Lightning is installed, the same on Lightning's ``Trainer(strategy="ddp")`` with
its optional features off. Each rank reports the seconds of its training (Surge and Lightning: from
``on_train_start``, after the process group, the DDP wrapper and the loaders are set up, to the end of
``trainer.fit``; the reference: from after building its wrapper and loader to the end of its loop); a run counts
as its slowest rank. Each round runs every variant, in an order that rotates from round to round; the table
reports medians, the median of the per-round throughput ratios to the reference, and their spread (min-max).
Issue 27's goal: Surge at least 0.97x the hand-written loop over 10 rounds.

Usage::

    python benchmarks/ddp.py                  # markdown table on stdout
    python benchmarks/ddp.py --json out.json  # and the samples as JSON
    python benchmarks/ddp.py --quick          # a smoke run (seconds, numbers meaningless)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

PROGRAM = Path(__file__).resolve().parents[1] / "plugins" / "surge-ddp" / "tests" / "_program.py"


def run(variant: str, sizes: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env["OMP_NUM_THREADS"] = "1"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        done = subprocess.run(
            [*command, str(PROGRAM), variant, out, "--no-record", *sizes], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{variant} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        ranks = [torch.load(Path(out) / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    return {"seconds": max(r["seconds"] for r in ranks), "steps": float(ranks[0]["step"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--size", type=int, default=16384, help="samples in the data set")
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--batch", type=int, default=32, help="batch size per process")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke run")
    parser.add_argument("--no-lightning", action="store_true", help="leave Lightning's row out")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.size, args.width, args.epochs = 1, 64, 8, 1
    sizes = [f"--size={args.size}", f"--width={args.width}", f"--batch={args.batch}", f"--epochs={args.epochs}"]
    variants = ["reference", "surge"]
    if not args.no_lightning and importlib.util.find_spec("lightning") is not None:
        variants.append("lightning")
    samples: dict[str, list[float]] = {variant: [] for variant in variants}
    ratios: list[float] = []
    lightning_ratios: list[float] = []
    steps = 0.0
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        result = {variant: run(variant, sizes) for variant in order}
        for variant in order:
            samples[variant].append(result[variant]["seconds"])
        steps = result["surge"]["steps"]
        assert all(r["steps"] == steps for r in result.values()), "every variant must take the same optimizer steps"
        ratios.append(result["reference"]["seconds"] / result["surge"]["seconds"])
        if "lightning" in result:
            lightning_ratios.append(result["reference"]["seconds"] / result["lightning"]["seconds"])
    config = {"rounds": args.rounds, "size": args.size, "width": args.width, "batch": args.batch, "epochs": args.epochs}
    report: dict[str, Any] = {"config": config, "samples": samples, "ratios": ratios, "steps": steps}
    if lightning_ratios:
        report["lightning_ratios"] = lightning_ratios
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def summary(result: dict[str, Any]) -> dict[str, float]:
    """Median seconds of each variant, and the median per-round ratios (Surge's time over torch's, and its
    throughput over torch's)."""
    samples = result["samples"]
    times = [s / r for s, r in zip(samples["surge"], samples["reference"], strict=True)]
    found = {
        "reference_s": statistics.median(samples["reference"]),
        "surge_s": statistics.median(samples["surge"]),
        "time_ratio": statistics.median(times),
        "throughput_ratio": statistics.median(result["ratios"]),
        "throughput_min": min(result["ratios"]),
        "throughput_max": max(result["ratios"]),
    }
    if result.get("lightning_ratios"):
        found["lightning_s"] = statistics.median(samples["lightning"])
        found["lightning_ratio"] = statistics.median(result["lightning_ratios"])
        found["lightning_min"], found["lightning_max"] = (
            min(result["lightning_ratios"]),
            max(result["lightning_ratios"]),
        )
    return found


def markdown(result: dict[str, Any]) -> str:
    cfg, steps, s = result["config"], result["steps"], summary(result)
    return "\n".join(
        [
            (
                f"### 2-process DDP (gloo, CPU, 1 thread per process), MLP width {cfg['width']}, batch "
                f"{cfg['batch']}/process, {int(steps)} steps, {cfg['rounds']} round(s)"
            ),
            "",
            "| variant | median seconds | steps/s | throughput vs torch DDP (median) | spread (min-max) |",
            "| --- | ---: | ---: | ---: | ---: |",
            f"| torch DDP (hand-written) | {s['reference_s']:.3f} | {steps / s['reference_s']:.1f} | 1.000 | - |",
            (
                f"| surge strategy='ddp' | {s['surge_s']:.3f} | {steps / s['surge_s']:.1f} | "
                f"{s['throughput_ratio']:.3f} | {s['throughput_min']:.3f}-{s['throughput_max']:.3f} |"
            ),
            *(
                [
                    f"| lightning strategy='ddp' | {s['lightning_s']:.3f} | {steps / s['lightning_s']:.1f} | "
                    f"{s['lightning_ratio']:.3f} | {s['lightning_min']:.3f}-{s['lightning_max']:.3f} |"
                ]
                if "lightning_ratio" in s
                else []
            ),
        ]
    )


if __name__ == "__main__":
    main()
