"""Start-up cost: ``import surge; surge.Trainer()`` against ``import torch``, each in fresh interpreters.

Every command runs in its own ``python -c`` subprocess, interleaved (the order rotates each repeat), after one
untimed warm-up run of each (none with ``--quick``); the report gives medians of the wall time and the ratio to ``import torch``
(the issue's goal: at most 1.3x). ``surge.Trainer()`` runs with every installed plugin (the interpreter's
environment, normally the project's .venv), so discovery and plugin imports are included. When Lightning is
importable, ``import lightning; lightning.Trainer()`` is measured too, for reference.

A second part runs ``python -X importtime`` a few times and lists Surge's own slowest modules (self time)
and the third-party packages Surge's start-up imports on top of torch's.

Byte-code: the children run without ``PYTHONDONTWRITEBYTECODE`` so that, after the warm-up, every module
(including an editable install's sources) loads from its cached ``.pyc`` as in a normal installation; pass
``--keep-env`` to measure with the environment exactly as given.

Usage::

    python benchmarks/import_time.py [--repeats 15] [--importtime-runs 5] [--json PATH]
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
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

GOAL_RATIO = 1.3

CASES: dict[str, str] = {
    "python (empty)": "pass",
    "import torch": "import torch",
    "import surge; surge.Trainer()": "import surge; surge.Trainer()",
}
LIGHTNING_CASE = ("import lightning; lightning.Trainer()", "import lightning; lightning.Trainer()")

_SPLIT = (
    "import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); import surge; "
    "t2 = time.perf_counter(); surge.Trainer(); t3 = time.perf_counter(); surge.Trainer(); t4 = time.perf_counter(); "
    "print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)"
)


def child_env(keep: bool) -> dict[str, str]:
    env = dict(os.environ)
    if not keep:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_code(
    code: str, env: dict[str, str], cwd: str, extra: tuple[str, ...] = ()
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    cmd = [sys.executable, *extra, "-c", code]
    proc = subprocess.run(cmd, check=False, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"`python -c {code!r}` failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, proc


def measure_wall(
    cases: dict[str, str], repeats: int, env: dict[str, str], cwd: str, warmup: bool = True
) -> dict[str, list[float]]:
    names = list(cases)
    for name in names if warmup else ():  # warm-up: byte-code caches, page cache
        run_code(cases[name], env, cwd)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(run_code(cases[name], env, cwd)[0])
    return samples


def measure_split(repeats: int, env: dict[str, str], cwd: str) -> dict[str, float]:
    """In-process split of the surge command: import torch / import surge (the rest) / Trainer() / a 2nd Trainer()."""
    rows = []
    for _ in range(repeats):
        _, proc = run_code(_SPLIT, env, cwd)
        rows.append([float(v) for v in proc.stdout.split()])
    keys = ("import_torch_s", "import_surge_after_torch_s", "first_trainer_s", "second_trainer_s")
    return {k: statistics.median(r[i] for r in rows) for i, k in enumerate(keys)}


def parse_importtime(stderr: str) -> dict[str, tuple[int, int]]:
    """``-X importtime`` lines -> {module: (self_us, cumulative_us)}."""
    out: dict[str, tuple[int, int]] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:") :].split("|", 2)
        out[name.strip()] = (int(self_us), int(cumulative_us))
    return out


def importtime_profile(runs: int, env: dict[str, str], cwd: str, top: int) -> dict[str, Any]:
    surge_runs = [
        parse_importtime(run_code(CASES["import surge; surge.Trainer()"], env, cwd, ("-X", "importtime"))[1].stderr)
        for _ in range(runs)
    ]
    torch_runs = [
        parse_importtime(run_code("import torch", env, cwd, ("-X", "importtime"))[1].stderr) for _ in range(runs)
    ]
    torch_modules = set().union(*torch_runs)

    def median_of(name: str, idx: int) -> float:
        return statistics.median(r.get(name, (0, 0))[idx] for r in surge_runs) / 1000

    names = set().union(*surge_runs)
    own = sorted(
        (
            {"module": n, "self_ms": median_of(n, 0), "cumulative_ms": median_of(n, 1)}
            for n in names
            if n == "surge" or n.startswith(("surge.", "surge_"))
        ),
        key=lambda row: -row["self_ms"],
    )
    added: dict[str, float] = defaultdict(float)
    for n in names - torch_modules:
        if n == "surge" or n.startswith(("surge.", "surge_")):
            continue
        added[n.split(".")[0]] += median_of(n, 0)
    added_rows = sorted(({"package": p, "self_ms": ms} for p, ms in added.items()), key=lambda row: -row["self_ms"])
    total_surge = statistics.median(sum(v[0] for v in r.values()) for r in surge_runs) / 1000
    total_torch = statistics.median(sum(v[0] for v in r.values()) for r in torch_runs) / 1000
    return {
        "runs": runs,
        "total_import_self_ms": {"surge_command": total_surge, "import_torch": total_torch},
        "surge_modules": own[:top],
        "surge_modules_self_ms_sum": sum(r["self_ms"] for r in own),
        "packages_added_on_top_of_torch": added_rows[:top],
        "packages_added_self_ms_sum": sum(added.values()),
    }


def summarise(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    torch_s, empty = samples["import torch"], samples["python (empty)"]
    out = {}
    for name, values in samples.items():
        ratios = [v / t for v, t in zip(values, torch_s, strict=True)]
        net = [(v - e) / (t - e) for v, t, e in zip(values, torch_s, empty, strict=True)]
        out[name] = {
            "median_s": statistics.median(values),
            "min_s": min(values),
            "ratio_vs_torch": statistics.median(ratios),
            "ratio_vs_torch_net_of_startup": statistics.median(net),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        (
            f"### Start-up: fresh `python -c` subprocesses, {result['config']['repeats']} interleaved repeats, medians "
            f"(byte-code cache: {'as given' if result['config']['keep_env'] else 'on'})"
        ),
        "",
        "| command | median s | min s | ratio vs import torch | ratio net of interpreter start-up |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, s in result["summary"].items():
        lines.append(
            f"| `{name}` | {s['median_s']:.3f} | {s['min_s']:.3f} | {s['ratio_vs_torch']:.3f} | "
            f"{s['ratio_vs_torch_net_of_startup']:.3f} |"
        )
    surge_row = result["summary"]["import surge; surge.Trainer()"]
    verdict = "meets" if surge_row["ratio_vs_torch"] <= GOAL_RATIO else "MISSES"
    split = result["split"]
    lines += [
        "",
        (
            f"- goal: `import surge; surge.Trainer()` at most {GOAL_RATIO}x `import torch`: "
            f"{surge_row['ratio_vs_torch']:.3f}x, {verdict}"
        ),
        (
            f"- in-process split (medians): import torch {1000 * split['import_torch_s']:.0f} ms, then import surge "
            f"{1000 * split['import_surge_after_torch_s']:.0f} ms, first Trainer() {1000 * split['first_trainer_s']:.1f} ms, "
            f"second Trainer() {1000 * split['second_trainer_s']:.1f} ms"
        ),
    ]
    if not result["lightning"]:
        lines.append("- lightning row skipped: `import lightning` is not available in this interpreter")
    prof = result.get("importtime")
    if prof:
        lines += [
            "",
            f"#### `-X importtime` of `import surge; surge.Trainer()` (median of {prof['runs']} runs)",
            "",
            (
                f"Surge's own modules, slowest first (self ms; all surge modules together: "
                f"{prof['surge_modules_self_ms_sum']:.1f} ms):"
            ),
            "",
            "| module | self ms | cumulative ms |",
            "| --- | ---: | ---: |",
        ]
        lines += [f"| {r['module']} | {r['self_ms']:.1f} | {r['cumulative_ms']:.1f} |" for r in prof["surge_modules"]]
        lines += [
            "",
            (
                f"Packages imported on top of `import torch` (self ms summed per top-level package; all together: "
                f"{prof['packages_added_self_ms_sum']:.1f} ms):"
            ),
            "",
            "| package | self ms |",
            "| --- | ---: |",
        ]
        lines += [f"| {r['package']} | {r['self_ms']:.1f} |" for r in prof["packages_added_on_top_of_torch"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = child_env(args.keep_env)
    cases = dict(CASES)
    lightning = importlib.util.find_spec("lightning") is not None
    if lightning:
        cases[LIGHTNING_CASE[0]] = LIGHTNING_CASE[1]
    with tempfile.TemporaryDirectory(prefix="surge-bench-import-") as cwd:
        samples = measure_wall(cases, args.repeats, env, cwd, warmup=not args.quick)
        split = measure_split(args.split_runs or max(3, args.repeats // 3), env, cwd)
        prof = importtime_profile(args.importtime_runs, env, cwd, args.top) if args.importtime_runs else None
    return {
        "config": {"repeats": args.repeats, "keep_env": args.keep_env, "python": sys.executable},
        "lightning": lightning,
        "summary": summarise(samples),
        "samples_s": samples,
        "split": split,
        "importtime": prof,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats of every command (default 15)")
    parser.add_argument("--importtime-runs", type=int, default=5, help="-X importtime runs (0: skip; default 5)")
    parser.add_argument("--top", type=int, default=12, help="rows in the importtime tables")
    parser.add_argument("--keep-env", action="store_true", help="keep PYTHONDONTWRITEBYTECODE in the children")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: no warm-up, 1 repeat, 1 split run, 1 importtime run"
    )
    args = parser.parse_args(argv)
    args.split_runs = 0  # by default a third of the repeats, at least 3
    if args.quick:  # each run is an interpreter importing torch: as few as show that every part works
        args.repeats, args.importtime_runs, args.split_runs = 1, 1, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
