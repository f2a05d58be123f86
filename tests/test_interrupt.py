"""Ctrl-C: a real SIGINT sent with ``os.kill`` to a child process that is training.

The child (``_CHILD`` below) fits a model on an endless-ish loader, prints ``READY`` from inside a training
step, and at the end prints what it saw as one ``RESULT:`` JSON line. Every wait, here and in the child,
is bounded, so a broken interrupt fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_CHILD = r"""
import json, signal, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
import surge

MODE = sys.argv[1]
READY_AT = 5  # the global step whose training_step tells the parent to send SIGINT
DEADLINE = time.monotonic() + 60  # no wait in this child is unbounded


def say(line):
    print(line, flush=True)


def wait_until(condition):
    while not condition():
        if time.monotonic() > DEADLINE:
            say("TIMEOUT")
            return
        time.sleep(0.002)


class Recorder:
    surge_name = "recorder"

    def __init__(self):
        self.events = []
        self.said = []

    @surge.hookimpl
    def train_batch_start(self, event):
        self.events.append("train_batch_start")
        if MODE == "in_batch_start" and event.trainer.global_step == READY_AT and "READY" not in self.said:
            self.said.append("READY")
            say("READY")
            wait_until(lambda: event.trainer.interrupted)  # the SIGINT lands inside a batch-start handler

    @surge.hookimpl
    def train_batch_end(self, event):
        self.events.append("train_batch_end")

    @surge.hookimpl
    def train_epoch_end(self, event):
        self.events.append("train_epoch_end")

    @surge.hookimpl
    def exception(self, event):
        self.events.append("exception")

    @surge.hookimpl
    def keyboard_interrupt(self, event):
        self.events.append("keyboard_interrupt")
        if MODE == "slow_handler":  # a handler still busy with the first Ctrl-C when the second comes
            say("HANDLING")
            wait_until(lambda: False)
            self.events.append("handler_finished")

    @surge.hookimpl
    def teardown(self, event):
        self.events.append("teardown")


class Endless(surge.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.finished_steps = 0
        self.in_slow_step = False

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        if self.global_step == READY_AT and self.finished_steps == READY_AT and MODE != "in_batch_start":
            say("READY")
            if MODE in ("in_step", "slow_step", "slow_handler"):
                wait_until(lambda: self.trainer.interrupted)  # the first SIGINT lands inside this step
            if MODE == "slow_step":  # a step that goes on long after the first Ctrl-C
                self.in_slow_step = True  # before FIRST: the second SIGINT may land right after it
                say("FIRST")
                wait_until(lambda: False)
                self.in_slow_step = False
        time.sleep(0.003)
        self.finished_steps += 1
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
recorder = Recorder()
trainer = surge.Trainer(
    max_epochs=1000, plugins=[recorder], logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False,
)
model = Endless()
try:
    trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=4))
    outcome = "returned"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
events = recorder.events
say("RESULT: " + json.dumps({
    "outcome": outcome,
    "interrupted": trainer.interrupted,
    "status": trainer.state.status,
    "global_step": trainer.global_step,
    "finished_steps": model.finished_steps,
    "in_slow_step": model.in_slow_step,
    "counts": {name: events.count(name) for name in set(events)},
    "last": events[-3:],
    "handler_restored": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
}))
"""


def _run(tmp_path: Path, mode: str, markers: list[str]) -> dict:
    """Run the child in ``mode``; after each marker line it prints, send it one SIGINT."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-u", str(script), mode],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=tmp_path,
            # SIGINT as an interactive shell leaves it, even when the suite itself runs as a background job
            # (which starts with SIGINT ignored, and Python then installs no KeyboardInterrupt handler)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []

    def next_line() -> str | None:
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            raise AssertionError(f"no output from the child for 120 s; so far: {seen}") from None
        if line is not None:
            seen.append(line)
        return line

    try:
        for marker in markers:
            while (line := next_line()) != marker:
                assert line is not None, f"child ended before printing {marker!r}: {seen}\n{stderr_path.read_text()}"
            os.kill(child.pid, signal.SIGINT)
        while next_line() is not None:
            pass
        returncode = child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    stderr_text = stderr_path.read_text()
    assert returncode == 0, f"child exited {returncode}\nstdout: {seen}\nstderr:\n{stderr_text}"
    assert "TIMEOUT" not in seen, f"a wait in the child timed out: {seen}\n{stderr_text}"
    result = json.loads(next(line for line in seen if line.startswith("RESULT: "))[len("RESULT: ") :])
    result["stderr"] = stderr_text
    return result


def test_ctrl_c_stops_at_a_step_boundary_and_returns(tmp_path: Path) -> None:
    # The SIGINT lands wherever the loop happens to be, a few steps into the fit.
    result = _run(tmp_path, "anywhere", ["READY"])
    assert result["outcome"] == "returned"
    assert result["interrupted"] is True and result["status"] == "interrupted"
    counts = result["counts"]
    assert counts["keyboard_interrupt"] == 1 and counts["teardown"] == 1
    assert "exception" not in counts
    # every batch that started also ended: the batch in flight finished, and no step was cut in half
    assert counts["train_batch_start"] == counts["train_batch_end"] == result["global_step"]
    assert result["finished_steps"] == result["global_step"] > 5
    # the stop is at the step boundary: nothing of the epoch's end runs after the interrupted batch
    assert result["last"] == ["train_batch_end", "keyboard_interrupt", "teardown"]
    assert result["handler_restored"]
    assert "interrupted by Ctrl-C" in result["stderr"]


def test_ctrl_c_inside_a_step_finishes_that_step_then_stops(tmp_path: Path) -> None:
    result = _run(tmp_path, "in_step", ["READY"])
    assert result["outcome"] == "returned" and result["status"] == "interrupted"
    # the signal arrived during the step of global step 5: that step completes, none follows
    assert result["global_step"] == result["finished_steps"] == 6
    assert result["counts"]["train_batch_start"] == result["counts"]["train_batch_end"] == 6
    assert result["counts"]["keyboard_interrupt"] == 1 and result["counts"]["teardown"] == 1


def test_ctrl_c_inside_a_batch_start_handler_still_runs_that_batch(tmp_path: Path) -> None:
    # The batch whose train_batch_start fired is not dropped: its step and train_batch_end follow.
    result = _run(tmp_path, "in_batch_start", ["READY"])
    assert result["outcome"] == "returned" and result["status"] == "interrupted"
    assert result["global_step"] == result["finished_steps"] == 6
    assert result["counts"]["train_batch_start"] == result["counts"]["train_batch_end"] == 6


def test_second_ctrl_c_interrupts_a_slow_step_and_still_returns(tmp_path: Path) -> None:
    result = _run(tmp_path, "slow_step", ["READY", "FIRST"])
    # KeyboardInterrupt came out of the sleeping step at once (the step never finished, no TIMEOUT) and the
    # Trainer turned it into an interrupted run: control returns normally, no sys.exit
    assert result["in_slow_step"] is True
    assert result["outcome"] == "returned"
    assert result["interrupted"] is True and result["status"] == "interrupted"
    counts = result["counts"]
    assert counts["keyboard_interrupt"] == 1 and counts["teardown"] == 1 and "exception" not in counts
    assert result["global_step"] == result["finished_steps"] == 5  # the aborted step took no optimizer step
    assert counts["train_batch_start"] == counts["train_batch_end"] + 1
    assert result["handler_restored"]


def test_second_ctrl_c_during_the_interrupt_handlers_reaches_the_caller_after_teardown(tmp_path: Path) -> None:
    result = _run(tmp_path, "slow_handler", ["READY", "HANDLING"])
    # The user insisted: the KeyboardInterrupt reaches the caller (who can catch it), but teardown ran first.
    assert result["outcome"] == "KeyboardInterrupt"
    assert result["status"] == "interrupted"
    counts = result["counts"]
    assert counts["keyboard_interrupt"] == 1 and counts["teardown"] == 1 and "handler_finished" not in counts
    assert result["last"][-1] == "teardown"
    assert result["handler_restored"]


# `surge fit` of a model that, once, waits inside a step of its second epoch (after the first epoch's checkpoint)
# for the Ctrl-C the test sends.
_CLI_MODEL = r"""
import os, time
from surge.testing import TinyModule


class WaitsForCtrlC(TinyModule):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 12 and not os.path.exists("interrupted-once"):
            open("interrupted-once", "w").close()
            print("READY", flush=True)
            deadline = time.monotonic() + 60
            while not self.trainer.interrupted and time.monotonic() < deadline:
                time.sleep(0.005)
        return super().training_step(batch, batch_idx)
"""


def test_after_ctrl_c_surge_fit_says_how_to_resume_and_the_resumed_run_says_from_which_file(tmp_path: Path) -> None:
    (tmp_path / "case.py").write_text(_CLI_MODEL)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_") and k != "PYTHONPATH"}
    args = [
        "fit",
        "--model.class_path=case.WaitsForCtrlC",
        "--data.class_path=surge.testing.TinyDataModule",  # 8 steps an epoch
        "--trainer.max_epochs=2",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path / 'root'}",
    ]
    child = subprocess.Popen(
        [sys.executable, "-m", "surge", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:  # the child's own 60 s wait bounds this
            if line.strip() == "READY":
                os.kill(child.pid, signal.SIGINT)
                break
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, f"{out}\n{err}"
    assert (
        "interrupted by Ctrl-C: fit stopped at a step boundary (epoch 1, global step 13); fit() again on this Trainer "
        "with the same model continues from there, and in a new process fit(..., ckpt_path='last') resumes from the "
        "newest checkpoint"
    ) in err
    saved = tmp_path / "root" / "surge_runs" / "version_0" / "checkpoints" / "epoch=0-step=8.ckpt"
    assert f"checkpoint: the newest checkpoint of this run is {saved}; ckpt_path='last'" in err, err
    (resume,) = [line.split(": ", 1)[1] for line in err.splitlines() if line.startswith("resume it with: ")]
    assert resume.endswith(" fit " + " ".join(args[1:]) + " --ckpt_path=last")
    resumed = subprocess.run(["bash", "-c", resume], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert resumed.returncode == 0, f"{resumed.stdout}\n{resumed.stderr}"
    assert f"resuming from {saved} (saved in epoch 0 at global step 8)" in resumed.stdout.splitlines(), resumed.stdout
