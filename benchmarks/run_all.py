"""Run every benchmark and print one combined report (``make bench`` calls this).

Each benchmark runs in its own subprocess of this interpreter (so the start-up benchmark's children and the
overhead benchmark's single-threaded loop do not share state); the combined JSON holds all the results.

Usage::

    python benchmarks/run_all.py [--quick] [--json PATH]

Run it with an interpreter where Lightning is installed (``import lightning`` works) to get Lightning's rows;
see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checkpoint  # noqa: E402 - the benchmarks are scripts beside this one, not a package
import import_time  # noqa: E402
import instructions  # noqa: E402
import overhead  # noqa: E402


def run_benchmark(script: str, extra: list[str], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / script), *extra, "--json", str(out)]
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"  ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def goals(ovh: dict[str, Any], imp: dict[str, Any], ckpt: dict[str, Any]) -> list[str]:
    rows = ["| goal (from the issue) | measured | verdict |", "| --- | --- | --- |"]
    labels = {
        "surge-logging": "CSV logging every 50 steps + progress bar (checkpointing off)",
        "surge-default": "every default plugin (a durable checkpoint each epoch included)",
    }
    limit = overhead.GOAL_RATIO
    for name in overhead.GOALS:
        wall, cpu = ovh["summary"]["wall"][name], ovh["summary"]["cpu"][name]
        rows.append(
            f"| {labels[name]} at most {limit:.2f}x the raw loop (tiny MLP) | wall {wall['ratio_vs_raw']:.3f}x "
            f"({wall['overhead_us_per_step']:+.1f} us/step); cpu {cpu['ratio_vs_raw']:.3f}x "
            f"({cpu['overhead_us_per_step']:+.1f} us/step) | "
            f"{'met' if max(wall['ratio_vs_raw'], cpu['ratio_vs_raw']) <= limit else 'MISSED (by at least one clock)'} |"
        )
    child = ovh.get("empty_plugins")
    if child:
        p = child["paired_vs_default"]["cpu"]
        w = child["paired_vs_default"]["wall"]
        within = all(q["diff_us_ci95_low"] <= 0 <= q["diff_us_ci95_high"] for q in (p, w))
        rows.append(
            f"| 20 installed empty plugins: no measurable change | cpu {p['diff_us_per_step']:+.2f} us/step "
            f"(95% CI {p['diff_us_ci95_low']:+.2f} .. {p['diff_us_ci95_high']:+.2f}); wall {w['diff_us_per_step']:+.2f} "
            f"(95% CI {w['diff_us_ci95_low']:+.2f} .. {w['diff_us_ci95_high']:+.2f}) | "
            f"{'no measurable change' if within else 'CHANGE? (a CI excludes 0; re-run, the machine may be noisy)'} |"
        )
    start = imp["summary"]["import surge; surge.Trainer()"]
    rows.append(
        f"| `import surge; surge.Trainer()` at most {import_time.GOAL_RATIO}x `import torch` | "
        f"{start['ratio_vs_torch']:.3f}x | {'met' if start['ratio_vs_torch'] <= import_time.GOAL_RATIO else 'MISSED'} |"
    )
    ratio = ckpt["async"]["ratio_in_flight"]
    rows.append(
        f"| training steps with an asynchronous save of a {ckpt['async']['checkpoint_mb']:.0f} MB checkpoint in "
        f"flight at most {checkpoint.GOAL_RATIO}x normal steps | {ratio:.2f}x | "
        f"{'met' if ratio <= checkpoint.GOAL_RATIO else 'MISSED'} |"
    )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run of every benchmark (numbers meaningless)")
    parser.add_argument("--json", metavar="PATH", help="write both results as one JSON file")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the callgrind instruction counts (about 8 minutes)"
    )
    args = parser.parse_args(argv)
    extra = ["--quick"] if args.quick else []
    with tempfile.TemporaryDirectory(prefix="surge-bench-all-") as tmp:
        imp = run_benchmark("import_time.py", extra, Path(tmp, "import.json"))
        ovh = run_benchmark("overhead.py", extra, Path(tmp, "overhead.json"))
        ckpt = run_benchmark("checkpoint.py", extra, Path(tmp, "checkpoint.json"))
        instr = None
        if not args.no_instructions and shutil.which("valgrind"):
            short = ["--batches", "20", "--long", "2"] if args.quick else []
            instr = run_benchmark("instructions.py", short, Path(tmp, "instructions.json"))
    env = ovh.get("environment", {})
    report = [
        "# Surge benchmarks",
        "",
        (
            f"python {platform.python_version()} ({sys.executable}), torch {env.get('torch')}, surge {env.get('surge')}, "
            f"lightning {env.get('lightning') or 'not installed'}, {env.get('cpus')} CPUs; {platform.platform()}"
        ),
        "",
        "## Goals",
        "",
        *goals(ovh, imp, ckpt),
        "",
        overhead.markdown(ovh),
        "",
        instructions.markdown(instr) if instr else "(instruction counts skipped: no valgrind, or --no-instructions)",
        "",
        import_time.markdown(imp),
        "",
        checkpoint.markdown(ckpt),
    ]
    print("\n".join(report))
    combined = {"overhead": ovh, "import_time": imp, "checkpoint": ckpt, "instructions": instr}
    if args.json:
        Path(args.json).write_text(json.dumps(combined, indent=2))
    return combined


if __name__ == "__main__":
    main()
