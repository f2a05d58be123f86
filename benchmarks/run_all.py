"""Run every benchmark and print one combined report (``make bench`` calls this).

Each benchmark runs in its own subprocess of this interpreter (so the start-up benchmark's children and the
overhead benchmark's single-threaded loop do not share state); the combined JSON holds all the results.
The report starts with one summary table, each figure as a ratio to the raw PyTorch equivalent measured in
the same invocation (Lightning's beside it when it is installed): the table docs/benchmarks.md
holds. ``--markdown FILE`` writes that table (with its notes) to a file.

Usage::

    python benchmarks/run_all.py [--quick] [--json PATH] [--markdown PATH] [--no-instructions]

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
import compile as compile_bench  # noqa: E402 - benchmarks/compile.py (the name would shadow the builtin)
import ddp  # noqa: E402
import discovery  # noqa: E402
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
    sync = ckpt["sync"]["variants"]
    save = sync["Trainer.save_checkpoint"]["median_s"] / sync["torch.save + fsync"]["median_s"]
    rows.append(
        f"| `Trainer.save_checkpoint` of a {ckpt['sync']['checkpoint_mb']:.0f} MB checkpoint at most "
        f"{checkpoint.SAVE_GOAL}x `torch.save` + fsync | {save:.2f}x | "
        f"{'met' if save <= checkpoint.SAVE_GOAL else 'MISSED'} |"
    )
    for size in ckpt.get("scale", {}).get("sizes", []):
        ops = size.get("operations", {})
        if "surge" not in ops.get("load", {}) or "raw" not in ops.get("load", {}):
            continue
        gb = size["checkpoint_bytes"] / 1e9
        load, raw = ops["load"]["surge"], ops["load"]["raw"]
        time_ratio = load["median_s"] / raw["median_s"]
        memory = load["median_added"] / size["checkpoint_bytes"]
        rows.append(
            f"| `surge.checkpoint.load` of {gb:.2f} GB: at most {checkpoint.LOAD_GOAL}x the time of `torch.load`, "
            f"at most {checkpoint.MEMORY_GOAL}x the checkpoint added to memory | {time_ratio:.2f}x, +{memory:.2f}x | "
            f"{'met' if time_ratio <= checkpoint.LOAD_GOAL and memory <= checkpoint.MEMORY_GOAL else 'MISSED'} |"
        )
    return rows


MEDIUM = ["--model", "medium", "--no-empty-plugins", "--rounds", "5", "--epochs", "1", "--batches", "30"]
"""The medium model's overhead run: its steps take milliseconds, so fewer of them give a steady median."""


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _seconds(row: dict[str, Any] | None, digits: int = 3) -> str:
    return "—" if row is None else f"{row['median_s']:.{digits}f} s"


def _step_row(label: str, result: dict[str, Any], surge: str, lightning: str) -> str:
    wall, cpu = result["summary"]["wall"], result["summary"]["cpu"]

    def cell(name: str) -> tuple[str, str]:
        if name not in wall:
            return "—", "—"
        return (
            f"{wall[name]['median_us_per_step']:,.0f} us",
            f"{wall[name]['ratio_vs_raw']:.3f}x (cpu {cpu[name]['ratio_vs_raw']:.3f}x)",
        )

    surge_value, surge_ratio = cell(surge)
    lightning_value, lightning_ratio = cell(lightning)
    raw = f"{wall['raw']['median_us_per_step']:,.0f} us"
    return f"| {label} | {raw} | {surge_value} | {surge_ratio} | {lightning_value} | {lightning_ratio} |"


def summary_table(results: dict[str, Any]) -> str:
    """One table: every figure against its raw PyTorch equivalent of the same invocation."""
    tiny, medium = results["overhead"], results["overhead_medium"]
    imp, disc, ckpt, dist = results["import_time"], results["discovery"], results["checkpoint"], results["ddp"]
    tiny_model = overhead.MODELS[tiny["config"].get("model", "tiny")].describe()
    medium_model = overhead.MODELS[medium["config"]["model"]].describe()
    rows = [
        "| measurement | raw PyTorch | Surge | Surge / raw | Lightning | Lightning / raw |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _step_row(f"step time, tiny model ({tiny_model}), default plugins", tiny, "surge-default", "lightning-default"),
        _step_row("step time, tiny model, optional plugins off", tiny, "surge-minimal", "lightning-bare"),
        _step_row(
            f"step time, medium model ({medium_model}), default plugins", medium, "surge-default", "lightning-default"
        ),
        _step_row("step time, medium model, optional plugins off", medium, "surge-minimal", "lightning-bare"),
    ]
    starts = imp["summary"]
    torch_s = starts["import torch"]["median_s"]
    surge_start = starts["import surge; surge.Trainer()"]
    lightning_start = starts.get(import_time.LIGHTNING_CASE[0])
    rows.append(
        f"| start-up: `import` + `Trainer()` in a fresh interpreter (raw: `import torch`) | {torch_s:.2f} s | "
        f"{surge_start['median_s']:.2f} s | {surge_start['ratio_vs_torch']:.2f}x | "
        f"{_seconds(lightning_start, 2)} | "
        f"{_ratio(lightning_start['ratio_vs_torch'] if lightning_start else None)} |"
    )
    count = disc["config"]["count"]
    d = disc["summary"]
    rows.append(
        f"| plugin discovery, `Trainer()` with {count} extra plugins installed (raw: with none) | "
        f"{d['trainer_ms']['zero_ms']:.0f} ms | {d['trainer_ms']['many_ms']:.0f} ms | {d['trainer_ms']['ratio']:.2f}x "
        "| — | — |"
    )
    rows.append(
        f"| plugin discovery, first `discover()` with {count} extra plugins (raw: with none) | "
        f"{d['first_discover_ms']['zero_ms']:.0f} ms | {d['first_discover_ms']['many_ms']:.0f} ms | "
        f"{d['first_discover_ms']['ratio']:.2f}x | — | — |"
    )
    a = ckpt["async"]
    kinds = a["steps_by_kind"]
    rows.append(
        f"| asynchronous checkpoint ({a['checkpoint_mb']:.0f} MB): step while a save is in flight (raw: a step "
        f"with none) | {kinds['normal']['median_ms']:.1f} ms | {kinds['in flight']['median_ms']:.1f} ms | "
        f"{a['ratio_in_flight']:.2f}x | — | — |"
    )
    sync = ckpt["sync"]["variants"]
    durable = sync["torch.save + fsync"]["median_s"]
    bare = sync["torch.save (bare)"]["median_s"]
    trainer_save = sync["Trainer.save_checkpoint"]["median_s"]
    lightning_save = sync.get("lightning Trainer.save_checkpoint")
    rows.append(
        f"| synchronous checkpoint ({ckpt['sync']['checkpoint_mb']:.0f} MB): `Trainer.save_checkpoint` (raw: "
        f"`torch.save` + fsync; Lightning's, which does not fsync: against bare `torch.save`, {bare:.3f} s) | "
        f"{durable:.3f} s | {trainer_save:.3f} s | {trainer_save / durable:.2f}x | "
        f"{_seconds(lightning_save)} | "
        f"{_ratio(lightning_save['median_s'] / bare if lightning_save else None)} |"
    )
    comp = results.get("compile")
    if comp is not None:
        c, size = comp["summary"], comp["config"]["model"]
        wall, cpu = c["wall"], c["cpu"]
        us, per = wall["step_us"], wall["compiled_vs_eager"]
        rows += [
            f"| torch.compile, {size} model: compiled step (raw: `torch.compile(net)` in the raw loop) | "
            f"{us['raw-compiled']:,.0f} us | {us['surge-compiled']:,.0f} us | {wall['surge_vs_raw']['compiled']:.3f}x "
            f"(cpu {cpu['surge_vs_raw']['compiled']:.3f}x) | — | — |",
            f"| torch.compile, {size} model: compiled / eager step time | {per['raw']:.3f}x | {per['surge']:.3f}x | "
            f"{per['surge'] / per['raw']:.3f}x | — | — |",
            f"| torch.compile, {size} model: compile time (first step minus a compiled step) | "
            f"{c['compile_s']['raw-compiled']:.2f} s | {c['compile_s']['surge-compiled']:.2f} s | "
            f"{c['compile_time_ratio']:.2f}x | — | — |",
        ]
    if dist is not None:
        ds = ddp.summary(dist)
        steps = dist["steps"]
        rows.append(
            f"| 2-process DDP (gloo, CPU), time for {int(steps)} steps (raw: hand-written torch DDP) | "
            f"{ds['reference_s']:.2f} s | {ds['surge_s']:.2f} s | {ds['time_ratio']:.2f}x | — | — |"
        )
    notes = [
        "",
        (
            "Ratios are time over the raw equivalent's time in the same invocation (1.00x: no overhead; below 1: "
            "faster). Step times: medians of interleaved rounds, the ratio the median of per-round pairs on the "
            "wall clock (cpu: this thread's CPU time, steadier on a shared machine). Default plugins: "
            "`Trainer()` as installed (CSV logger, progress bar, model summary, a checkpoint each epoch) with "
            "`self.log` each step; optional plugins off: `logger=False, enable_checkpointing=False, "
            "enable_progress_bar=False, enable_model_summary=False`, no `self.log`. Lightning: the same settings on "
            "`lightning.Trainer`. Discovery: Lightning has no plugin discovery. DDP: both from the start of "
            "training (after process group, wrapper and loaders) to its end; no Lightning run. torch.compile: "
            "inductor with torch's defaults, surge-compile's plugin against `torch.compile(net)` in the raw loop, "
            "optional plugins off, every round compiling from scratch (benchmarks/compile.py)."
        ),
    ]
    if not tiny["environment"].get("lightning"):
        notes.append("Lightning columns empty: `import lightning` failed in this interpreter.")
    return "\n".join(rows + notes)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run of every benchmark (numbers meaningless)")
    parser.add_argument("--json", metavar="PATH", help="write every result as one JSON file")
    parser.add_argument(
        "--markdown", metavar="PATH", help="write the summary table (docs/benchmarks.md's) to this file"
    )
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-process DDP run")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile run (a minute or two)")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the callgrind instruction counts (about 8 minutes)"
    )
    args = parser.parse_args(argv)
    extra = ["--quick"] if args.quick else []
    with tempfile.TemporaryDirectory(prefix="surge-bench-all-") as tmp:
        imp = run_benchmark("import_time.py", extra, Path(tmp, "import.json"))
        ovh = run_benchmark("overhead.py", extra, Path(tmp, "overhead.json"))
        medium = run_benchmark("overhead.py", [*MEDIUM[:3], *(extra or MEDIUM[3:])], Path(tmp, "medium.json"))
        disc = run_benchmark("discovery.py", extra, Path(tmp, "discovery.json"))
        ckpt = run_benchmark("checkpoint.py", extra, Path(tmp, "checkpoint.json"))
        dist = None if args.no_ddp else run_benchmark("ddp.py", extra, Path(tmp, "ddp.json"))
        comp = None if args.no_compile else run_benchmark("compile.py", extra, Path(tmp, "compile.json"))
        instr = None
        if not args.no_instructions and shutil.which("valgrind"):
            short = ["--batches", "20", "--long", "2"] if args.quick else []
            instr = run_benchmark("instructions.py", short, Path(tmp, "instructions.json"))
    combined = {
        "overhead": ovh,
        "overhead_medium": medium,
        "import_time": imp,
        "discovery": disc,
        "checkpoint": ckpt,
        "ddp": dist,
        "compile": comp,
        "instructions": instr,
    }
    env = ovh.get("environment", {})
    table = summary_table(combined)
    report = [
        "# Surge benchmarks",
        "",
        (
            f"python {platform.python_version()} ({sys.executable}), torch {env.get('torch')}, surge {env.get('surge')}, "
            f"lightning {env.get('lightning') or 'not installed'}, {env.get('cpus')} CPUs; {platform.platform()}"
        ),
        "",
        "## Summary (against raw PyTorch in this run)",
        "",
        table,
        "",
        "## Goals",
        "",
        *goals(ovh, imp, ckpt),
        "",
        overhead.markdown(ovh),
        "",
        overhead.markdown(medium),
        "",
        instructions.markdown(instr) if instr else "(instruction counts skipped: no valgrind, or --no-instructions)",
        "",
        import_time.markdown(imp),
        "",
        discovery.markdown(disc),
        "",
        checkpoint.markdown(ckpt),
        "",
        ddp.markdown(dist) if dist else "(2-process DDP skipped: --no-ddp)",
        "",
        compile_bench.markdown(comp) if comp else "(torch.compile skipped: --no-compile)",
    ]
    print("\n".join(report))
    if args.markdown:
        Path(args.markdown).write_text(f"{report[2]}\n\n{table}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(combined, indent=2))
    return combined


if __name__ == "__main__":
    main()
