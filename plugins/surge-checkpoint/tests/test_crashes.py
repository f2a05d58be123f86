"""Real processes killed with real signals: kill -9 during saves, and SIGTERM then resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from surge import checkpoint as store
from surge.testing import ChildLines
from surge_checkpoint import ModelCheckpoint

CHILD = str(Path(__file__).with_name("_child.py"))


def _committed(directory: Path) -> list[Path]:
    return [p for p in directory.glob("*.ckpt") if Path(f"{p}.sha256").exists()]


@pytest.mark.slow
def test_kill_9_at_random_moments_during_saves(tmp_path):
    directory = tmp_path / "ckpts"
    zygote = subprocess.Popen(
        [sys.executable, CHILD, "zygote", str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    lines = ChildLines(zygote)
    rng = random.Random(20240917)
    resolved_step = 0
    temp_files_left = 0
    try:
        for round_ in range(21):  # 20 kills, then one more start to see the last kill's temp files swept
            zygote.stdin.write(f"fork {round_ % 2}\n")  # synchronous and asynchronous saving in turn
            zygote.stdin.flush()
            pid = int(lines.expect("pid "))
            start = lines.expect("start ")
            step, temps = (int(part.split("=")[1]) for part in start.split())
            assert temps == 0, f"round {round_}: {temps} temp file(s) survived the start-up sweep"
            assert step == resolved_step, f"round {round_}: resumed at step {step}, the newest valid is {resolved_step}"
            time.sleep(rng.uniform(0.02, 0.35) if round_ < 20 else 0.0)
            os.kill(pid, signal.SIGKILL)
            zygote.stdin.write(f"reap {pid}\n")
            zygote.stdin.flush()
            lines.expect("reaped ")

            if not directory.exists():  # killed before its first save (a loaded machine starts it slowly)
                continue
            temp_files_left += len([p for p in directory.iterdir() if p.name.startswith(".")])
            last = ModelCheckpoint(dirpath=directory).surge_checkpoint_path("last")
            if last is None:
                assert not _committed(directory)
                continue
            checkpoint = store.load(last)  # the newest loadable checkpoint loads
            if checkpoint["global_step"] < resolved_step:
                for p in sorted(directory.iterdir()):
                    info = ""
                    if p.name.endswith(".ckpt"):
                        try:
                            info = store.load(str(p))["global_step"]
                        except Exception as exc:
                            info = repr(exc)[:100]
                    print(p.name, p.stat().st_mtime, info)
            assert checkpoint["global_step"] >= resolved_step
            resolved_step = checkpoint["global_step"]
            # Only an overwrite in place (last.ckpt) has an instant where its data and marker disagree.
            broken = [p.name for p in _committed(directory) if not store.is_valid(str(p))]
            assert broken in ([], ["last.ckpt"]), broken
    finally:
        zygote.kill()
        zygote.wait()
    assert resolved_step > 0
    print(f"temp files left by the 20 kills (each swept by the next start): {temp_files_left}")


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_after_a_real_sigterm_equals_an_uninterrupted_run(tmp_path, num_workers):
    def run(name: str, mode: str, **kwargs):
        return subprocess.Popen(
            [
                sys.executable,
                CHILD,
                "preempt",
                str(tmp_path / name),
                str(tmp_path / f"{name}-{mode}.pt"),
                mode,
                str(num_workers),
            ],
            text=True,
            stderr=subprocess.PIPE,
            **kwargs,
        )

    full = run("full", "full")
    interrupted = run("cut", "interrupt", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert ChildLines(interrupted).expect("ready") == ""
    interrupted.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    interrupted.stdin.write("go\n")
    interrupted.stdin.flush()
    _, cut_err = interrupted.communicate(timeout=120)
    assert interrupted.returncode != 0, "a preempted run must exit with a non-zero status"
    assert "Preempted: preempted by SIGTERM" in cut_err, cut_err
    assert store.load(str(tmp_path / "cut" / "last.ckpt"))["global_step"] == 5  # batch 11 of accumulation 2

    resumed = run("cut", "resume")
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    _, err = full.communicate(timeout=120)
    assert full.returncode == 0, err

    a = torch.load(tmp_path / "full-full.pt", weights_only=True)
    b = torch.load(tmp_path / "cut-resume.pt", weights_only=True)
    assert a["step"] == b["step"] == 12
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    for idx, state in a["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][idx][name]), (idx, name)
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
