"""The benchmark scripts still run and measure what they claim (a smoke run; no timing is asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench_module(name: str):  # type: ignore[no-untyped-def]
    """A benchmark script imported as a module (they are scripts beside each other, not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCH))


def _main_in_process(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``python benchmarks/<name>.py ARGV`` in this process (its ``main``; the interpreter it would start spends
    seconds importing what this one has imported), torch's thread count put back after; its stdout."""
    threads = torch.get_num_threads()
    try:
        _bench_module(name).main(argv)
    finally:
        torch.set_num_threads(threads)
    return capsys.readouterr().out


@pytest.mark.slow
def test_overhead_benchmark_smoke(tmp_path, capsys):
    out = tmp_path / "overhead.json"
    stdout = _main_in_process("overhead", ["--quick", "--no-empty-plugins", "--json", str(out)], capsys)
    result = json.loads(out.read_text())
    rows = result["summary"]["wall"]
    assert {"raw", "surge-default", "surge-logging", "surge-minimal"} <= set(rows)
    assert rows["raw"]["ratio_vs_raw"] == 1.0
    # every variant really trained: the same number of optimizer steps as the raw loop
    assert result["info"]["surge-default"]["global_step"] == result["info"]["surge-minimal"]["global_step"] > 0
    assert "| surge-default |" in stdout


@pytest.mark.slow
def test_import_benchmark_smoke(tmp_path):
    out = tmp_path / "import.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "import_time.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "import surge; surge.Trainer()" in proc.stdout
    assert json.loads(out.read_text())


@pytest.mark.slow
def test_instruction_benchmark_child_and_report() -> None:
    """The callgrind run itself takes minutes (``make bench``); here its child runs without valgrind and the
    report is built from known counts."""
    child = subprocess.Popen(  # the command line valgrind runs, in a fresh interpreter
        [sys.executable, str(BENCH / "instructions.py"), "--child", "surge-logging", "1", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    instructions = _bench_module("instructions")
    threads = torch.get_num_threads()
    try:  # meanwhile the raw loop's child, in this process (a second interpreter would only add its imports)
        instructions.main(["--child", "raw", "1", "5"])
    finally:
        torch.set_num_threads(threads)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stderr
    per_step = {"raw": 1000.0, "surge-minimal": 1010.0, "surge-logging": 1020.0, "surge-default": 1100.0}
    table = instructions.markdown(
        {
            "config": {"short_epochs": 1, "long_epochs": 3, "batches": 200, "extra_steps": 400},
            "instructions_per_step": per_step,
            "ratio_vs_raw": {k: v / 1000.0 for k, v in per_step.items()},
        }
    )
    assert "| surge-logging | 1,020 | 1.020 | +20 |" in table


@pytest.mark.slow
def test_overhead_benchmark_medium_model_smoke(tmp_path, capsys):
    out = tmp_path / "medium.json"
    options = ["--quick", "--model", "medium", "--no-empty-plugins", "--json", str(out)]
    stdout = _main_in_process("overhead", options, capsys)
    result = json.loads(out.read_text())
    assert result["config"]["model"] == "medium"
    assert result["info"]["surge-default"]["global_step"] == result["info"]["surge-minimal"]["global_step"] > 0
    assert "MLP 1024-1024-1024-1024-10, batch 64" in stdout
    overhead = _bench_module("overhead")
    net = overhead.make_net(overhead.MODELS["medium"])
    assert sum(p.numel() for p in net.parameters()) == 3 * (1024 * 1024 + 1024) + 1024 * 10 + 10


@pytest.mark.slow
def test_discovery_benchmark_smoke(tmp_path):
    out = tmp_path / "discovery.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "discovery.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    count = result["config"]["count"]
    # the children really saw the generated plugins: found, imported, and all active in a default Trainer()
    assert result["plugins"][f"+{count}"] == result["plugins"]["0"] + count
    assert result["loaded"][f"+{count}"] == result["loaded"]["0"] + count
    assert result["active"][f"+{count}"] == result["active"]["0"] + count
    assert set(result["summary"]) == {"first_discover_ms", "discover_warm_ms", "entry_points_scan_ms", "trainer_ms"}
    assert f"| ratio +{count} / 0 |" in proc.stdout


@pytest.mark.slow
def test_compile_benchmark_smoke(tmp_path, capsys):
    out = tmp_path / "compile.json"
    stdout = _main_in_process("compile", ["--quick", "--backend", "aot_eager", "--json", str(out)], capsys)
    result = json.loads(out.read_text())
    variants = {"raw-eager", "raw-compiled", "surge-eager", "surge-compiled"}
    assert set(result["step_s"]["wall"]) == set(result["step_s"]["cpu"]) == set(result["first_step_s"]) == variants
    # both Surge variants trained the same steps, and only the compiled one compiled, through the plugin
    info = result["info"]
    assert info["surge-compiled"]["global_step"] == info["surge-eager"]["global_step"] > 0
    assert "compile" in info["surge-compiled"]["plugins"] and "compile" not in info["surge-eager"]["plugins"]
    assert info["surge-compiled"]["compile_seconds"] > 0 and info["surge-eager"]["compile_seconds"] is None
    assert "| compiled / eager step time |" in stdout


@pytest.mark.slow
def test_soak_benchmark_smoke(tmp_path, capsys):
    """The script's own process only starts the variant's child: it runs here (the child is a fresh one)."""
    out = tmp_path / "soak.json"
    stdout = _main_in_process("soak", ["--quick", "--variant", "default", "--top", "3", "--json", str(out)], capsys)
    run = json.loads(out.read_text())["variants"]["default"]
    assert run["steps"] == 300 and run["validations"] == 12  # --quick: validation every 25 steps
    assert [s["step"] for s in run["samples"]] == [50, 100, 150, 200, 250, 300]
    assert all(s["traced_bytes"] > 0 and s["rss_bytes"] > 0 for s in run["samples"])
    assert 0 < len(run["top_growth"]) <= 3
    assert "| default |" in stdout


def test_ddp_report_from_known_samples() -> None:
    """The 2-process run itself is covered by surge-ddp's tests and ``make bench``; here the report's arithmetic."""
    ddp = _bench_module("ddp")
    result = {
        "config": {"rounds": 3, "size": 1024, "width": 8, "batch": 32, "epochs": 1},
        "samples": {"reference": [1.0, 2.0, 1.0], "surge": [1.1, 2.0, 1.3]},
        "ratios": [1 / 1.1, 1.0, 1 / 1.3],
        "steps": 16.0,
    }
    summary = ddp.summary(result)
    assert summary["time_ratio"] == pytest.approx(1.1)
    assert summary["surge_s"] == pytest.approx(1.3)
    assert "| surge strategy='ddp' | 1.300 | 12.3 | 0.909 | 0.769-1.000 |" in ddp.markdown(result)
    assert "lightning" not in ddp.markdown(result)
    result["samples"]["lightning"] = [2.0, 2.0, 1.5]
    result["lightning_ratios"] = [0.5, 1.0, 1 / 1.5]
    assert "| lightning strategy='ddp' | 2.000 | 8.0 | 0.667 | 0.500-1.000 |" in ddp.markdown(result)


def test_checkpoint_scale_report_from_known_results() -> None:
    """Part 3 of benchmarks/checkpoint.py runs in ``make bench`` and its smoke test; here the report's arithmetic:
    time ratios to the raw row, memory as a multiple of the checkpoint, a measurement that did not fit left out."""
    checkpoint = _bench_module("checkpoint")

    def row(seconds: float, added: float) -> dict:
        return {"median_s": seconds, "median_added": added}

    size = {
        "label": "1GB",
        "checkpoint_bytes": 1e9,
        "rounds": 3,
        "operations": {
            "save": {"raw": row(2.0, 0.0), "surge": row(2.4, 2e7)},
            "load": {"raw": row(1.0, 1e9), "surge": row(1.1, 1.02e9)},
            "load_from_checkpoint": {"raw": row(1.5, 2e9), "surge": row(1.6, 2e9), "lightning": row(1.5, 2e9)},
            "resume": {"raw": row(1.2, 1e9), "surge": row(1.3, 1e9), "lightning": row(1.4, 1e9)},
        },
        "skipped_parts": {"save: lightning": "needs 2.8 GB of available memory, 2.0 GB"},
    }
    report = checkpoint.scale_markdown({"sizes": [size, {"label": "quarter", "skipped": "needs 7 GB"}]})
    assert "| save: Surge `Trainer.save_checkpoint` | 2.40 s (1.20x), +0.02x |" in report
    assert "| load: Surge `surge.checkpoint.load` | 1.10 s (1.10x), +1.02x |" in report
    assert "| resume: Lightning | 1.40 s (1.17x), +1.00x |" in report
    assert "save: Lightning" not in report.split("Medians")[0]  # not measured at this size
    assert "1GB save: lightning (needs 2.8 GB" in report and "quarter (needs 7 GB)" in report


def _overhead_result(raw_us: float, surge: dict[str, float], lightning: bool) -> dict:
    rows = {"raw": raw_us, **surge}
    summary = {
        name: {"median_us_per_step": us, "ratio_vs_raw": us / raw_us}
        for name, us in rows.items()
        if lightning or not name.startswith("lightning")
    }
    return {
        "config": {"model": "tiny"},
        "environment": {"lightning": "2.6" if lightning else None},
        "summary": {"wall": summary, "cpu": summary},
    }


def test_run_all_summary_table_from_known_results() -> None:
    run_all = _bench_module("run_all")
    tiny = _overhead_result(
        100.0,
        {"surge-default": 103.0, "surge-minimal": 101.0, "lightning-default": 250.0, "lightning-bare": 200.0},
        True,
    )
    medium = _overhead_result(10_000.0, {"surge-default": 10_100.0, "surge-minimal": 10_050.0}, False)
    medium["config"]["model"] = "medium"
    results = {
        "overhead": tiny,
        "overhead_medium": medium,
        "import_time": {
            "summary": {
                "import torch": {"median_s": 2.0, "ratio_vs_torch": 1.0},
                "import surge; surge.Trainer()": {"median_s": 2.4, "ratio_vs_torch": 1.2},
            }
        },
        "discovery": {
            "config": {"count": 500},
            "summary": {
                "trainer_ms": {"zero_ms": 20.0, "many_ms": 200.0, "ratio": 10.0},
                "first_discover_ms": {"zero_ms": 50.0, "many_ms": 250.0, "ratio": 5.0},
            },
        },
        "checkpoint": {
            "async": {
                "checkpoint_mb": 101.0,
                "ratio_in_flight": 1.1,
                "steps_by_kind": {"normal": {"median_ms": 50.0}, "in flight": {"median_ms": 55.0}},
            },
            "sync": {
                "checkpoint_mb": 101.0,
                "variants": {
                    "torch.save (bare)": {"median_s": 0.2},
                    "torch.save + fsync": {"median_s": 0.5},
                    "Trainer.save_checkpoint": {"median_s": 0.6},
                    "lightning Trainer.save_checkpoint": {"median_s": 0.3},
                },
            },
        },
        "ddp": {"samples": {"reference": [4.0], "surge": [5.0]}, "ratios": [0.8], "steps": 512.0},
        "compile": {
            "config": {"model": "medium"},
            "summary": {
                "wall": {
                    "step_us": {"raw-compiled": 9_000.0, "surge-compiled": 9_090.0},
                    "compiled_vs_eager": {"raw": 0.9, "surge": 0.9},
                    "surge_vs_raw": {"compiled": 1.01},
                },
                "cpu": {"surge_vs_raw": {"compiled": 1.02}},
                "compile_s": {"raw-compiled": 10.0, "surge-compiled": 11.0},
                "compile_time_ratio": 1.1,
            },
        },
    }
    table = run_all.summary_table(results)
    assert "| step time, tiny model, optional plugins off | 100 us | 101 us | 1.010x (cpu 1.010x) | 200 us |" in table
    assert (
        "| step time, medium model, optional plugins off | 10,000 us | 10,050 us | 1.005x (cpu 1.005x) | — | — |"
        in table
    )
    assert "| 2.00 s | 2.40 s | 1.20x | — | — |" in table  # start-up, no Lightning row measured
    assert "| 20 ms | 200 ms | 10.00x | — | — |" in table
    assert "| 50.0 ms | 55.0 ms | 1.10x | — | — |" in table
    assert "| 0.500 s | 0.600 s | 1.20x | 0.300 s | 1.50x |" in table  # Lightning against bare torch.save
    assert "| 4.00 s | 5.00 s | 1.25x | — | — |" in table
    assert "| 9,000 us | 9,090 us | 1.010x (cpu 1.020x) | — | — |" in table
    assert "| torch.compile, medium model: compiled / eager step time | 0.900x | 0.900x | 1.000x | — | — |" in table
    assert "| 10.00 s | 11.00 s | 1.10x | — | — |" in table
