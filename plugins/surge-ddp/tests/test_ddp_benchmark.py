"""``benchmarks/ddp.py`` still runs and reports both variants (a smoke run with tiny sizes; no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "ddp.py"


@pytest.mark.slow
def test_ddp_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| surge strategy='ddp' |" in done.stdout and "| torch DDP (hand-written) |" in done.stdout
    assert "| lightning strategy='ddp' |" in done.stdout  # Lightning is installed by `make test`
    result = json.loads(out.read_text())
    assert len(result["samples"]["surge"]) == len(result["samples"]["reference"]) == 1 and result["steps"] > 0
