"""Signals on real child processes, the parts other tests do not already cover.

Already covered, and not repeated here:

* one SIGINT (graceful stop at a step boundary, ``keyboard_interrupt``, ``fit`` returns, exit 0):
  ``tests/test_interrupt.py::test_ctrl_c_stops_at_a_step_boundary_and_returns`` (and its ``in_step`` and
  ``in_batch_start`` variants);
* a second SIGINT stopping at once (without checkpointing): ``tests/test_interrupt.py``'s
  ``test_second_ctrl_c_interrupts_a_slow_step_and_still_returns`` and
  ``test_second_ctrl_c_during_the_interrupt_handlers_reaches_the_caller_after_teardown``;
* SIGTERM (checkpoint, non-zero exit, resume with ``ckpt_path="last"`` equal to an uninterrupted run):
  ``plugins/surge-checkpoint/tests/test_crashes.py::test_resume_after_a_real_sigterm_equals_an_uninterrupted_run``;
* SIGKILL at random moments of a run that saves every step, each next start sweeping and resuming from the
  newest valid checkpoint: ``plugins/surge-checkpoint/tests/test_crashes.py::test_kill_9_at_random_moments_during_saves``.

Here: the second SIGINT lands *inside a checkpoint save* (every checkpoint file must still pass
:func:`surge.checkpoint.verify`), and a SIGKILL lands inside a save at a known moment, so the temp file it
leaves is seen before the next start sweeps it.

The child (``_CHILD``) fits with the checkpoint plugin saving every step. At the save of step ``PAUSE_AT`` a
participant adds an entry to the checkpoint (``before_checkpoint_save``) whose pickling prints ``SAVING``
and waits: the save is then in flight, its temp file created. Every wait is bounded, so a broken signal
path fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from surge import checkpoint as store
from surge.testing import ChildLines

pytestmark = pytest.mark.slow

PAUSE_AT = 3  # the global step whose checkpoint save is held in flight
STEPS = 6  # training batches of the whole fit (one epoch)

_CHILD = r"""
import json, os, sys, time
import torch
import surge
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint

MODE, DIRECTORY, PAUSE_AT, STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
CKPTS = os.path.join(DIRECTORY, "ckpts")
DEADLINE = time.monotonic() + 60


def say(line):
    print(line, flush=True)


def temps():
    return sorted(n for n in os.listdir(CKPTS) if n.endswith(".surge-tmp")) if os.path.isdir(CKPTS) else []


class Pause:
    # Pickled by torch.save inside the checkpoint write: holds the save in flight until a signal ends it.
    def __init__(self, trainer):
        self.trainer = trainer

    def __reduce__(self):
        say("SAVING " + json.dumps(temps()))
        said_first = False
        while time.monotonic() < DEADLINE:
            if self.trainer.interrupted and not said_first:
                said_first = True
                say("FIRST")  # the first SIGINT only asked for a stop: the save goes on
            time.sleep(0.005)
        say("TIMEOUT")
        return (int, (0,))


class Probe:
    surge_name = "probe"

    def __init__(self):
        self.events = []

    @surge.hookimpl
    def train_start(self, event):
        say("START " + json.dumps({"step": event.trainer.global_step, "temps": temps()}))

    @surge.hookimpl
    def before_checkpoint_save(self, event):
        if MODE != "resume" and event.trainer.global_step == PAUSE_AT and "pause" not in self.events:
            self.events.append("pause")
            event.checkpoint["probe"] = Pause(event.trainer)

    @surge.hookimpl
    def keyboard_interrupt(self, event):
        self.events.append("keyboard_interrupt")

    @surge.hookimpl
    def exception(self, event):
        self.events.append("exception")

    @surge.hookimpl
    def teardown(self, event):
        self.events.append("teardown")


torch.set_num_threads(1)
surge.seed_everything(0)
probe = Probe()
checkpoints = ModelCheckpoint(dirpath=CKPTS, every_n_train_steps=1, save_last=True, save_top_k=-1)
trainer = surge.Trainer(
    plugins=[checkpoints, probe], default_root_dir=os.path.join(DIRECTORY, "root"), max_epochs=1,
    limit_train_batches=STEPS, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
    enable_progress_bar=False, enable_model_summary=False,
)
model = TinyModule()
try:
    trainer.fit(model, datamodule=TinyDataModule(), ckpt_path="last" if MODE == "resume" else None)
    outcome = "returned"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
say("RESULT " + json.dumps({
    "outcome": outcome,
    "status": trainer.state.status,
    "global_step": trainer.global_step,
    "events": probe.events,
    "weights": {k: v.tolist() for k, v in model.state_dict().items()},
}))
"""


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], ChildLines]:
    """Start the child in ``mode`` on the run directory ``tmp_path``."""
    tmp_path.mkdir(exist_ok=True)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
    with open(tmp_path / f"{mode}.stderr", "w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-u", str(script), mode, str(tmp_path), str(PAUSE_AT), str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=tmp_path,
            # SIGINT as an interactive shell leaves it, even when the suite runs as a background job
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    return child, ChildLines(child)


def _finish(child: subprocess.Popen[str], lines: ChildLines, tmp_path: Path, mode: str) -> dict[str, Any]:
    """Wait for the child's RESULT line and its exit 0; returns the result."""
    result = json.loads(lines.expect("RESULT "))
    returncode = child.wait(timeout=60)
    stderr = (tmp_path / f"{mode}.stderr").read_text()
    assert returncode == 0, f"child exited {returncode}\n{lines.seen}\n{stderr}"
    assert "TIMEOUT" not in lines.seen, f"a wait in the child timed out: {lines.seen}\n{stderr}"
    return result  # type: ignore[no-any-return]


def _reap(child: subprocess.Popen[str]) -> None:
    """Kill the child if a failed assertion left it running."""
    if child.poll() is None:
        child.kill()
        child.wait()


def _checkpoints(tmp_path: Path) -> dict[str, int]:
    """Every ``*.ckpt`` of the run, each checked with ``verify``: name -> global step."""
    found = {}
    for path in sorted((tmp_path / "ckpts").glob("*.ckpt")):
        store.verify(str(path))  # raises CheckpointError naming the file
        found[path.name] = store.load(str(path))["global_step"]
    return found


def _temps(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "ckpts").glob("*.surge-tmp"))


def test_a_second_sigint_inside_a_checkpoint_save_leaves_every_checkpoint_valid(tmp_path: Path) -> None:
    child, lines = _start(tmp_path, "sigint")
    try:
        in_flight = json.loads(lines.expect("SAVING "))
        assert len(in_flight) == 1, in_flight  # the save of step PAUSE_AT is writing its temp file
        os.kill(child.pid, signal.SIGINT)  # first: a stop at the next step boundary, the save goes on
        lines.expect("FIRST")
        os.kill(child.pid, signal.SIGINT)  # second: at once, in the middle of the save
        result = _finish(child, lines, tmp_path, "sigint")
    finally:
        _reap(child)
    assert result["outcome"] == "returned" and result["status"] == "interrupted"
    assert result["global_step"] == PAUSE_AT  # no step after the one whose save was cut
    assert result["events"] == ["pause", "keyboard_interrupt", "teardown"]
    # the cut save committed nothing and replaced nothing: last.ckpt is still the previous step's
    assert _checkpoints(tmp_path) == {
        **{f"epoch=0-step={step}.ckpt": step for step in range(1, PAUSE_AT)},
        "last.ckpt": PAUSE_AT - 1,
    }
    assert _temps(tmp_path) == []  # the interrupted save removed its own temp file


def test_sigkill_inside_a_save_then_the_next_start_sweeps_and_resumes_from_the_newest_valid(tmp_path: Path) -> None:
    child, lines = _start(tmp_path, "kill")
    try:
        in_flight = json.loads(lines.expect("SAVING "))
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        _reap(child)
    assert len(in_flight) == 1 and _temps(tmp_path) == in_flight  # kill -9 runs no clean-up: the temp file stays
    assert _checkpoints(tmp_path)["last.ckpt"] == PAUSE_AT - 1  # every file valid, the newest at the last commit

    full, full_lines = _start(tmp_path / "full", "resume")  # an uninterrupted run, alongside (no checkpoint yet)
    child, lines = _start(tmp_path, "resume")  # fit(ckpt_path="last")
    try:
        start = json.loads(lines.expect("START "))
        result = _finish(child, lines, tmp_path, "resume")
        uninterrupted = _finish(full, full_lines, tmp_path / "full", "resume")
    finally:
        _reap(child)
        _reap(full)
    assert start == {"step": PAUSE_AT - 1, "temps": []}  # swept before training, resumed at the newest valid
    assert result["outcome"] == "returned" and result["status"] == "finished"
    assert result["global_step"] == STEPS and "exception" not in result["events"]
    assert result["weights"] == uninterrupted["weights"]  # the resume continued exactly
    assert _checkpoints(tmp_path)["last.ckpt"] == STEPS
    assert _temps(tmp_path) == []
