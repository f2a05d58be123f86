"""The progress bar shows an EarlyStopping's patience from surge-callbacks' ``early_stopping_check`` event, in plain
lines and on the rich training bar, and runs unchanged when nothing publishes that event."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from surge.testing import TinyModule
from surge_progress import ProgressBar

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# val_loss per epoch; with min_delta=0.02 and patience=2 the checks leave 0, 0, 0, 1, 2 checks without improvement
SCRIPT = [1.0, 0.8, 0.7, 0.75, 0.69, 0.72]
STOPPING = {"early_stopping": {"monitor": "val_loss", "min_delta": 0.02, "patience": 2}}


class Scripted(TinyModule):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.tensor(SCRIPT[self.trainer.current_epoch]), prog_bar=True)


def test_plain_lines_end_with_the_patience_after_each_check(fit, capsys):
    fit(plugins={**STOPPING, "progress": {"plain_interval": None}}, model=Scripted(), max_epochs=6)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("sanity check") and "patience" not in lines[0]  # no check during the sanity check
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [re.findall(r"  patience/val_loss=(\d/\d)$", line) for line in epochs] == [
        ["0/2"],
        ["0/2"],
        ["0/2"],
        ["1/2"],
        ["2/2"],  # and the fit stops
    ]
    validations = [line for line in lines[1:] if line.startswith("validation")]
    assert [line.rsplit("=", 1)[1] for line in validations] == ["0/2", "0/2", "0/2", "1/2", "2/2"]


def test_the_rich_training_bar_shows_it(fit, capsys):
    fit(
        plugins=[ProgressBar(mode="rich", leave=True, refresh_interval=0), STOPPING],
        enable_progress_bar=False,
        model=Scripted(),
        max_epochs=4,
    )
    screen = ANSI.sub("", capsys.readouterr().err)
    # the first check without improvement comes in epoch 3: shown on its bar, never before it
    assert "patience/val_loss=1/2" in screen[screen.rindex("Epoch 3/3") :]
    assert "patience/val_loss=0/2" in screen and "patience/val_loss=1/2" not in screen[: screen.index("Epoch 3/3")]


@pytest.mark.parametrize("switch", [{"early_stopping": False}, {}], ids=["switched-off", "not-requested"])
def test_without_the_publisher_nothing_about_patience_is_shown(fit, capsys, switch):
    trainer = fit(plugins={**switch, "progress": {"plain_interval": None}}, model=Scripted(), max_epochs=2)
    assert "early_stopping_check" in trainer.event_names  # declared while surge-callbacks is installed
    err = capsys.readouterr().err
    assert "epoch 1  4/4" in err and "patience" not in err


def test_a_bar_switched_off_beside_the_publisher_shows_nothing(fit, capsys):
    trainer = fit(plugins={**STOPPING, "progress": {"refresh_rate": 0}}, model=Scripted(), max_epochs=2)
    assert "early_stopping_check" in trainer.event_names and capsys.readouterr().err == ""
