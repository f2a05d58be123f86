"""Plugin discovery at scale: ``surge.plugins.discover`` and ``surge.Trainer()`` with 500 extra plugins installed.

:func:`write_distributions` lays out ``count`` tiny plugin distributions as real installed metadata, the way
pip leaves them in ``site-packages``: a ``<name>-<version>.dist-info`` directory (``METADATA``,
``entry_points.txt`` with one ``surge.plugins`` entry point, ``RECORD``, ``INSTALLER``) and a one-file module,
split over two directories (even numbers in one, odd in the other, so discovery has to merge two ``sys.path``
entries). Each plugin is a default-on participant that subscribes to no event (the most a plugin can cost
at start-up without touching the training loop: it is imported, validated and activated).

Each measurement runs in a fresh child interpreter whose ``PYTHONPATH`` holds the two directories (the
"+500" case) or nothing extra (the "0" case: only the environment's installed first-party plugins). Rounds
alternate the two cases after one untimed warm-up child of each (which also writes the generated modules'
byte-code; ``--quick`` has none). In each child, after ``import surge``:

* ``first discover``: the first ``surge.plugins.discover`` of the process: the entry-point scan, the lab
  profile lookup and the import of every plugin module;
* ``discover (warm)``: the median of further calls (modules already imported: the scan, sorting, checks);
* ``entry_points scan``: ``importlib.metadata.entry_points(group="surge.plugins")`` alone (median);
* ``Trainer()``: ``surge.Trainer()`` with its defaults after the first discover (median), which discovers
  again, resolves providers and activates every default-on plugin (the 500 included).

Reported: medians over the rounds in milliseconds and the ratio of the +500 case to the 0 case.

Usage::

    python benchmarks/discovery.py                 # markdown table on stdout
    python benchmarks/discovery.py --json out.json # and the samples as JSON
    python benchmarks/discovery.py --quick         # a smoke run (seconds, numbers meaningless)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

COUNT = 500
PREFIX = "scale"
RESULT = "RESULT: "

PLUGIN_SOURCE = '''\
"""Generated plugin {name!r}: a default-on participant subscribing to no event (discovery benchmark)."""

import surge


class Nothing:
    pass


plugin = surge.Plugin(name={name!r}, kind="participant", default=True, factory=Nothing)
'''


def plugin_name(index: int) -> str:
    return f"{PREFIX}-{index:03d}"


def distribution_name(index: int) -> str:
    return f"surge-{PREFIX}-plugin-{index:03d}"


def version(index: int) -> str:
    return f"0.{index // 100}.{index % 100}"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_distributions(root: Path, count: int = COUNT) -> list[Path]:
    """Install ``count`` plugin distributions under ``root`` as dist-info metadata plus a module each.

    Returns the two ``sys.path`` entries (even-numbered distributions in the first, odd in the second).
    Distribution ``i`` is ``surge-scale-plugin-<i>`` version :func:`version` ``(i)``, declaring the plugin
    :func:`plugin_name` ``(i)`` (entry point ``surge_scale_plugin_<i>:plugin``). They are written in reverse
    order, so neither the creation order nor a directory listing is already sorted.
    """
    entries = [root / "site-even", root / "site-odd"]
    for entry in entries:
        entry.mkdir(parents=True, exist_ok=True)
    for i in reversed(range(count)):
        site = entries[i % 2]
        module = distribution_name(i).replace("-", "_")
        info = f"{module}-{version(i)}.dist-info"
        files = {
            f"{module}.py": PLUGIN_SOURCE.format(name=plugin_name(i)).encode(),
            f"{info}/METADATA": (
                f"Metadata-Version: 2.1\nName: {distribution_name(i)}\nVersion: {version(i)}\n"
                "Summary: generated Surge plugin (discovery benchmark)\nRequires-Dist: surge\n"
            ).encode(),
            f"{info}/entry_points.txt": f"[surge.plugins]\n{plugin_name(i)} = {module}:plugin\n".encode(),
            f"{info}/INSTALLER": b"surge-benchmarks\n",
        }
        record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
        files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
        for path, data in files.items():
            target = site / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return entries


# -- the child -----------------------------------------------------------------------------------------

CHILD = """
import importlib.metadata, json, statistics, sys, time
repeats = int(sys.argv[1])
t0 = time.perf_counter()
import surge, surge.plugins
from surge.settings import load_settings
t1 = time.perf_counter()
first = surge.plugins.discover(load_settings())
t2 = time.perf_counter()

def median_ms(fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)

out = {
    "import_surge_ms": 1e3 * (t1 - t0),
    "first_discover_ms": 1e3 * (t2 - t1),
    "discover_warm_ms": median_ms(lambda: surge.plugins.discover(load_settings())),
    "entry_points_scan_ms": median_ms(lambda: list(importlib.metadata.entry_points(group="surge.plugins"))),
    "trainer_ms": median_ms(lambda: surge.Trainer()),
    "plugins": len(first.records),
    "loaded": len(first.loaded()),
    "active": len(surge.Trainer().plugin_names),
}
print("RESULT: " + json.dumps(out))
"""

METRICS = {
    "first_discover_ms": "first `discover()` of a process (scan + import of every plugin module)",
    "discover_warm_ms": "`discover()`, modules already imported (median of repeats)",
    "entry_points_scan_ms": '`importlib.metadata.entry_points(group="surge.plugins")` alone',
    "trainer_ms": "`surge.Trainer()` with its defaults (discovery + activation)",
}


def child_env(paths: list[Path]) -> dict[str, str]:
    """The child's environment: no inherited ``SURGE_*`` settings; ``paths`` (if any) on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_") and k != "PYTHONPATH"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # generated modules load from byte-code after the warm-up
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return env


def run_child(paths: list[Path], repeats: int, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(repeats)],
        env=child_env(paths),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"discovery child failed (rc={done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(RESULT) :])  # type: ignore[no-any-return]


def measure(count: int, rounds: int, repeats: int, warmup: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="surge-bench-discovery-") as tmp:
        root = Path(tmp)
        entries = write_distributions(root / "dists", count)
        cases = {"0": [], f"+{count}": entries}
        samples: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        for paths in cases.values() if warmup else ():  # warm-up: byte-code, page cache
            run_child(paths, 1, root)
        for r in range(rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for case in order:
                samples[case].append(run_child(cases[case], repeats, root))
    base, many = samples["0"], samples[f"+{count}"]
    summary: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        zero = statistics.median(s[metric] for s in base)
        full = statistics.median(s[metric] for s in many)
        ratios = [m[metric] / b[metric] for b, m in zip(base, many, strict=True)]
        summary[metric] = {"zero_ms": zero, "many_ms": full, "ratio": statistics.median(ratios)}
    return {
        "config": {"count": count, "rounds": rounds, "repeats": repeats},
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "plugins": {case: s[0]["plugins"] for case, s in samples.items()},
        "loaded": {case: s[0]["loaded"] for case, s in samples.items()},
        "active": {case: s[0]["active"] for case, s in samples.items()},
        "summary": summary,
        "samples": samples,
    }


def markdown(result: dict[str, Any]) -> str:
    cfg, count = result["config"], result["config"]["count"]
    many = f"+{count}"
    lines = [
        (
            f"### Plugin discovery with {count} extra installed plugin distributions (fresh interpreters, "
            f"{cfg['rounds']} alternating rounds, medians)"
        ),
        "",
        f"| measurement | 0 extra: ms | +{count}: ms | ratio +{count} / 0 | +{count}: ms per extra plugin |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for metric, label in METRICS.items():
        s = result["summary"][metric]
        per = (s["many_ms"] - s["zero_ms"]) / count
        lines.append(f"| {label} | {s['zero_ms']:.1f} | {s['many_ms']:.1f} | {s['ratio']:.2f} | {per:.3f} |")
    lines += [
        "",
        (
            f"Entry points found: {result['plugins']['0']} (the environment's own) and {result['plugins'][many]}; "
            f"active in `Trainer()`: {result['active']['0']} and {result['active'][many]}. Each generated plugin is "
            "a default-on participant subscribing to nothing, installed as dist-info metadata on two `sys.path` "
            "entries."
        ),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=COUNT, help=f"generated distributions (default {COUNT})")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of fresh children (default 5)")
    parser.add_argument("--repeats", type=int, default=9, help="in-child repeats of the warm measurements")
    parser.add_argument("--json", metavar="PATH", help="also write the results and samples as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 50 plugins, no warm-up children, 1 round, 2 repeats"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.rounds, args.repeats = 50, 1, 2
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = measure(args.count, args.rounds, args.repeats, warmup=not args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
