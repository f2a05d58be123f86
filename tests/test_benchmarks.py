"""The benchmark scripts still run and measure what they claim (a smoke run; no timing is asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
def test_overhead_benchmark_smoke(tmp_path):
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "overhead.py"), "--quick", "--no-empty-plugins", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    rows = result["summary"]["wall"]
    assert {"raw", "surge-default", "surge-logging", "surge-minimal"} <= set(rows)
    assert rows["raw"]["ratio_vs_raw"] == 1.0
    # every variant really trained: the same number of optimizer steps as the raw loop
    assert result["info"]["surge-default"]["global_step"] == result["info"]["surge-minimal"]["global_step"] > 0
    assert "| surge-default |" in proc.stdout


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


def test_instruction_benchmark_child_and_report() -> None:
    """The callgrind run itself takes minutes (``make bench``); here its child runs without valgrind and the
    report is built from known counts."""
    for variant in ("raw", "surge-logging"):
        proc = subprocess.run(
            [sys.executable, str(BENCH / "instructions.py"), "--child", variant, "1", "5"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
    sys.path.insert(0, str(BENCH))
    try:
        import instructions
    finally:
        sys.path.remove(str(BENCH))
    per_step = {"raw": 1000.0, "surge-minimal": 1010.0, "surge-logging": 1020.0, "surge-default": 1100.0}
    table = instructions.markdown(
        {
            "config": {"short_epochs": 1, "long_epochs": 3, "batches": 200, "extra_steps": 400},
            "instructions_per_step": per_step,
            "ratio_vs_raw": {k: v / 1000.0 for k, v in per_step.items()},
        }
    )
    assert "| surge-logging | 1,020 | 1.020 | +20 |" in table
