"""``benchmarks/ddp.py`` still runs and reports both variants (a smoke run with tiny sizes; no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "ddp.py"


@pytest.mark.slow
def test_ddp_benchmark_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The script's own process only starts the torchrun launches and reads their results: it runs here, its
    ``main`` called as the command line would (each variant still runs in its fresh processes)."""
    spec = importlib.util.spec_from_file_location("_ddp_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp)
    out = tmp_path / "ddp.json"
    ddp.main(["--quick", "--json", str(out)])  # a failed variant raises SystemExit with its output
    stdout = capsys.readouterr().out
    assert "| surge strategy='ddp' |" in stdout and "| torch DDP (hand-written) |" in stdout
    assert "| lightning strategy='ddp' |" in stdout  # Lightning is installed by `make test`
    result = json.loads(out.read_text())
    assert len(result["samples"]["surge"]) == len(result["samples"]["reference"]) == 1 and result["steps"] > 0
