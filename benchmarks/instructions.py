"""Per-step cost in CPU instructions, counted by valgrind's callgrind: deterministic, so unlike wall time
it does not move with whatever else the (shared) machine is doing.

Each variant of ``overhead.py`` (raw loop, Surge minimal, Surge with CSV logging and the progress bar,
Surge defaults) runs twice under callgrind on the tiny MLP, once with ``--short`` and once with ``--long``
timed epochs of ``--batches`` steps; everything else (interpreter, imports, Trainer construction, warm-up)
is the same in both runs, so the difference divided by the extra steps is the instruction count of one
training step. Ratios are against the raw loop's count.

Usage::

    python benchmarks/instructions.py                  # markdown table (about 10 minutes on 2 cores)
    python benchmarks/instructions.py --json out.json

Needs ``valgrind`` on PATH. What instructions do not show: time spent waiting (fsync, a contended lock),
cache misses and the cost of instructions that differ (a division is not an addition).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("raw", "surge-minimal", "surge-logging", "surge-default")
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def child(variant: str, epochs: int, batches: int) -> None:
    """Run one variant for ``epochs`` timed epochs (after one warm-up epoch) in this process."""
    sys.path.insert(0, str(HERE))
    import overhead
    import torch

    torch.set_num_threads(1)
    runners = {
        "raw": overhead.run_raw,
        "surge-minimal": overhead._surge_runner(overhead.SURGE_MINIMAL, log=False),
        "surge-logging": overhead._surge_runner(overhead.SURGE_LOGGING, log=True),
        "surge-default": overhead._surge_runner({}, log=True),
    }
    work = overhead.Workload(batches)
    with tempfile.TemporaryDirectory(prefix="surge-instr-") as tmp:
        runners[variant](work, epochs, tmp)


def count(variant: str, epochs: int, batches: int) -> int:
    """Instructions of one whole child run under callgrind."""
    with tempfile.TemporaryDirectory(prefix="surge-callgrind-") as tmp:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={tmp}/out",
            sys.executable,
            __file__,
            "--child",
            variant,
            str(epochs),
            str(batches),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        match = COLLECTED.search(done.stderr)
        if done.returncode != 0 or match is None:
            raise RuntimeError(f"{variant} under callgrind failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return int(match.group(1))


def measure(short: int, long: int, batches: int, jobs: int) -> dict[str, Any]:
    runs = [(variant, epochs) for variant in VARIANTS for epochs in (short, long)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda r: count(r[0], r[1], batches), runs), strict=True))
    steps = (long - short) * batches
    per_step = {v: (totals[(v, long)] - totals[(v, short)]) / steps for v in VARIANTS}
    return {
        "config": {"short_epochs": short, "long_epochs": long, "batches": batches, "extra_steps": steps},
        "totals": {f"{v}@{e}": n for (v, e), n in totals.items()},
        "instructions_per_step": per_step,
        "ratio_vs_raw": {v: per_step[v] / per_step["raw"] for v in VARIANTS},
    }


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"### Instructions per training step (callgrind; tiny MLP, {cfg['extra_steps']} extra steps between a "
        f"{cfg['short_epochs']}- and a {cfg['long_epochs']}-epoch run of {cfg['batches']} steps each)",
        "",
        "| variant | instructions/step | ratio vs raw | extra instructions/step |",
        "| --- | ---: | ---: | ---: |",
    ]
    raw = result["instructions_per_step"]["raw"]
    for name, n in result["instructions_per_step"].items():
        lines.append(f"| {name} | {n:,.0f} | {result['ratio_vs_raw'][name]:.3f} | {n - raw:+,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1], int(argv[2]), int(argv[3]))
        return None
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=1, help="timed epochs of the short run (default 1)")
    parser.add_argument("--long", type=int, default=3, help="timed epochs of the long run (default 3)")
    parser.add_argument("--batches", type=int, default=200, help="steps per epoch (default 200)")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (default 2)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py needs valgrind on PATH (Debian: apt-get install valgrind)")
    result = measure(args.short, args.long, args.batches, args.jobs)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
