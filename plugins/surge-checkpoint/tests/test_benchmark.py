"""benchmarks/checkpoint.py still runs and measures what it claims (a smoke run; no timing is asserted)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "checkpoint.py"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """One ``--quick`` run of the whole script (parts 1, 2 and 3), shared by the smoke tests below: its files'
    directory, its JSON and its stdout."""
    where = tmp_path_factory.mktemp("checkpoint-bench")
    out = where / "checkpoint.json"
    # the script's main in this process (a fresh interpreter would only add its imports; part 3's measurements
    # run in children of their own all the same), as `python benchmarks/checkpoint.py ARGS` runs it
    spec = importlib.util.spec_from_file_location("_checkpoint_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        script.main(["--quick", "--dir", str(where), "--json", str(out)])
    return where, json.loads(out.read_text()), stdout.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not SCRIPT.exists(), reason="runs from Surge's repository only")
def test_checkpoint_benchmark_smoke(quick_run: tuple[Path, dict, str]) -> None:
    """Parts 1 and 2: the asynchronous saves and the synchronous save variants."""
    where, result, stdout = quick_run
    kinds = result["async"]["steps_by_kind"]
    assert result["async"]["saves"] == 2 and kinds["snapshot"]["n"] == 2 and kinds["normal"]["n"] > 0
    surge_rows = {"torch.save (bare)", "torch.save + fsync", "surge.checkpoint.save", "Trainer.save_checkpoint"}
    lightning_rows = {"lightning Trainer.save_checkpoint"}  # when Lightning is installed (the bench extra)
    assert surge_rows <= set(result["sync"]["variants"]) <= surge_rows | lightning_rows
    assert "| steps while a save is in flight |" in stdout
    assert not list(where.glob("surge-bench-ckpt-*"))  # its files are cleaned up


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not SCRIPT.exists(), reason="runs from Surge's repository only")
def test_checkpoint_benchmark_at_scale_smoke(quick_run: tuple[Path, dict, str]) -> None:
    """Part 3 at one small size, one round: every operation by every party runs in its child and is reported."""
    where, result, stdout = quick_run
    (size,) = result["scale"]["sizes"]
    for operation, parties in size["operations"].items():
        assert {"raw", "surge"} <= set(parties), operation
        for party in parties.values():
            assert party["median_s"] > 0 and len(party["samples_s"]) == 1
    load = size["operations"]["load"]["surge"]["median_added"]
    assert 0 < load < 2 * size["checkpoint_bytes"]  # the tensors were read, so the measure saw them
    assert "| load: Surge `surge.checkpoint.load` |" in stdout
    assert not list(where.glob("surge-bench-ckpt-*"))
