"""Real processes killed with SIGKILL while they train and write: the event file reads back with every write
made before the kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = str(Path(__file__).with_name("_child.py"))


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child exited with {proc.returncode} before it was ready: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the child was not ready after {timeout} s")
        time.sleep(0.02)


def _check(tb, report: dict, at_least: int) -> None:
    run = tb.Run(report["run_dir"])  # the reader accepts the file as the kill left it
    scalars = run.scalars()
    values = {(tag, step): value for tag, series in scalars.items() for step, value in series}
    for tag, step, value in report["writes"]:
        assert values.get((tag, step)) == tb.f32(value), f"{tag} at step {step} is missing or differs"
    train_steps = [step for step, _ in scalars["train_loss"]]
    assert train_steps == list(range(1, len(train_steps) + 1))  # a gapless prefix of the run
    assert len(train_steps) >= at_least
    assert [step for step, _ in scalars["val_loss"]][:2] == [8, 16]
    hparams = run.hparams()
    assert "session_start_info" in hparams and "session_end_info" not in hparams  # it never ended


@pytest.mark.slow
def test_sigkill_from_outside_while_training_and_writing(tmp_path, tb):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, CHILD, str(tmp_path / "root"), str(ready), "20", "parent"], stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(ready, proc)
        os.kill(proc.pid, signal.SIGKILL)  # it goes on training and writing meanwhile
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    _check(tb, json.loads(ready.read_text()), at_least=20)


@pytest.mark.slow
def test_sigkill_right_after_a_write_keeps_that_write(tmp_path, tb):
    """The kill comes a few microseconds after step 20's ``log_metrics``: only a flush in that event gets its
    records from the writer's queue into the file in time."""
    ready = tmp_path / "ready.json"
    proc = subprocess.run(
        [sys.executable, CHILD, str(tmp_path / "root"), str(ready), "20", "self"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    report = json.loads(ready.read_text())
    assert max(step for _, step, _ in report["writes"]) == 20
    _check(tb, report, at_least=20)
