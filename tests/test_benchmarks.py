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
    assert {"raw", "surge-default", "surge-minimal"} <= set(rows)
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
