"""Real processes: a run killed with SIGKILL leaves what it logged in the store; importing the plugin does
not import MLflow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from surge.testing import ChildLines

CHILD = str(Path(__file__).with_name("_child.py"))


@pytest.mark.slow
def test_a_run_killed_with_sigkill_keeps_what_it_logged(store_uri, client, experiment, history):
    child = subprocess.Popen(
        [sys.executable, CHILD, "train", store_uri, experiment, "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = ChildLines(child)
    try:
        lines.expect("waiting")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()

    logged: list[tuple[int, float]] = []
    for line in lines.seen:
        if line.startswith("logged "):
            step, pair = line.split()[1:3]
            name, value = pair.split("=")
            assert name == "train_loss"
            logged.append((int(step), float(value)))
    assert [step for step, _ in logged] == [1, 2, 3, 4, 5]

    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    (run,) = client.search_runs([experiment_id])
    assert run.info.status == "RUNNING"  # nobody was left to end it: MLflow cannot tell it from a live run
    assert history(client, run.info.run_id, "train_loss") == logged


@pytest.mark.slow
def test_importing_the_plugin_or_building_a_trainer_does_not_import_mlflow():
    result = subprocess.run([sys.executable, CHILD, "imports"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "after import: []",
        "after Trainer(): []",
        "after Trainer(logger='mlflow'): []",
    ]
