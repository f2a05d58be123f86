"""The handler contract as types (docs/events.md, "Writing a handler"): mypy accepts a handler that reads the
run and changes it through the named mutators, and rejects one that assigns what the contract makes read-only."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

GOOD = """
import surge
from surge import events


class Fine:
    @surge.hookimpl(every_n_steps=10)
    def train_batch_end(self, event: events.TrainBatchEnd) -> None:
        if event.trainer.global_step > 100 and event.trainer.state.should_stop is False:
            event.trainer.request_stop("enough")
        event.trainer.log_metrics({"x": 1.0}, source="fine")

    @surge.hookimpl
    def train_epoch_start(self, event: events.TrainEpochStart) -> None:
        event.trainer.set_accumulation(2 if event.epoch > 3 else 1)
"""

BAD = {
    "state.should_stop = True": 'Property "should_stop" defined in "RunState" is read-only',
    "accumulate_grad_batches = 2": 'Property "accumulate_grad_batches" defined in "Run" is read-only',
    "global_step = 0": 'Property "global_step" defined in "Run" is read-only',
    "state.stop_reason = 'x'": 'Property "stop_reason" defined in "RunState" is read-only',
}


def _mypy(tmp_path: Path, source: str, cache: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "handler.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_the_contract_type_checks_and_assignments_do_not(tmp_path: Path, mypy_cache: Path) -> None:
    # one mypy run (it reads surge and torch: tens of seconds): the good handler, then one meddler per assignment
    source = textwrap.dedent(GOOD)
    lines: dict[str, int] = {}
    for i, assignment in enumerate(sorted(BAD)):
        source += textwrap.dedent(
            f"""

            class Meddler{i}:
                @surge.hookimpl
                def train_batch_end(self, event: events.TrainBatchEnd) -> None:
                    event.trainer.{assignment}
            """
        )
        lines[assignment] = source.count("\n")
    done = _mypy(tmp_path, source, mypy_cache)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == len(BAD), done.stdout + done.stderr
    for assignment, message in BAD.items():
        assert any(e.startswith(f"handler.py:{lines[assignment]}:") and message in e for e in errors), (
            assignment,
            errors,
        )


def test_what_mypy_rejects_raises_at_run_time_too(make_trainer: Any) -> None:
    """Each assignment mypy rejects above, done on the object handlers get (``event.trainer``: ``trainer.view``),
    raises an AttributeError naming the attribute; reading the same attribute works."""
    trainer = make_trainer()
    for assignment in BAD:
        target = assignment.split("=")[0].strip()
        with pytest.raises(AttributeError, match=rf"{re.escape(target)} is read-only to a handler"):
            exec(f"run.{assignment}", {"run": trainer.view})
        assert eval(f"run.{target}", {"run": trainer.view}) == eval(f"trainer.{target}", {"trainer": trainer})
