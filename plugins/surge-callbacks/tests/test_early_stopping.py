"""The ``early_stopping`` plugin: where a scripted metric sequence makes it stop, across a resume too."""

from __future__ import annotations

import math
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyModule
from surge_callbacks import EarlyStopping

# val_loss per epoch. By hand, with min_delta=0.02 and patience=2 (an improvement must beat best - 0.02):
# epoch 0: 1.0 (best), 1: 0.8 < 0.98 (best), 2: 0.7 < 0.78 (best), 3: 0.75 (wait 1),
# 4: 0.69 is not < 0.68 (wait 2 = patience): stop at epoch 4, best 0.7 at epoch 2.
SCRIPT = [1.0, 0.8, 0.7, 0.75, 0.69, 0.72, 0.71, 0.5, 0.4, 0.3]
HAND_STOP_EPOCH = 4


def reference_stop(values: list[float], min_delta: float, patience: int) -> int | None:
    """The epoch a plain re-statement of the rule stops at (an independent check of the hand computation)."""
    best, wait = math.inf, 0
    for epoch, value in enumerate(values):
        if value < best - min_delta:
            best, wait = value, 0
        else:
            wait += 1
            if wait >= patience:
                return epoch
    return None


class Scripted(TinyModule):
    """Logs ``val_loss`` = ``values[epoch]`` (and ``score`` per training epoch); records the epochs trained."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = values
        self.epochs: list[int] = []

    def on_train_epoch_start(self) -> None:
        self.epochs.append(self.trainer.current_epoch)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("score", torch.tensor(self.values[self.trainer.current_epoch]), on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.tensor(self.values[self.trainer.current_epoch]))


class SaveAtEpochEnd:
    """Saves a checkpoint in ``train_epoch_end`` of ``epoch``."""

    surge_name = "save_at_epoch_end"

    def __init__(self, epoch: int, path: str) -> None:
        self.epoch, self.path = epoch, path

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        if event.epoch == self.epoch:
            event.trainer.save_checkpoint(self.path)


def test_stops_where_the_hand_computation_says(fit):
    assert reference_stop(SCRIPT, 0.02, 2) == HAND_STOP_EPOCH
    stopper = EarlyStopping(monitor="val_loss", min_delta=0.02, patience=2)
    model = Scripted(SCRIPT)
    trainer = fit([stopper], model=model, max_epochs=len(SCRIPT))
    assert model.epochs == list(range(HAND_STOP_EPOCH + 1))
    assert stopper.stopped_epoch == HAND_STOP_EPOCH
    assert trainer.state.stop_reason == "val_loss did not improve by 0.02 for 2 checks; best 0.7 at epoch 2"
    assert stopper.state_dict() == {
        "wait_count": 2,
        "best_score": pytest.approx(0.7),
        "best_epoch": 2,
        "stopped_epoch": HAND_STOP_EPOCH,
        "patience": 2,
        "stopping_reason": 3,  # EarlyStoppingReason.PATIENCE_EXHAUSTED, Lightning's value
        "stopping_reason_message": trainer.state.stop_reason,
    }


def test_a_resumed_fit_stops_at_the_same_epoch(fit, tmp_path):
    path = str(tmp_path / "epoch3.ckpt")
    first = EarlyStopping(min_delta=0.02, patience=2)
    fit([first, SaveAtEpochEnd(3, path)], model=Scripted(SCRIPT), max_epochs=len(SCRIPT))
    assert first.stopped_epoch == HAND_STOP_EPOCH
    saved = torch.load(path, weights_only=True)["plugins"][first.state_key]
    assert saved["wait_count"] == 1 and saved["best_epoch"] == 2  # mid-way: one check without improvement

    resumed = EarlyStopping(min_delta=0.02, patience=2)
    model = Scripted(SCRIPT)
    fit([resumed], model=model, ckpt_path=path, max_epochs=len(SCRIPT))
    # a fresh state would take 0.69 at epoch 4 as an improvement and stop only at epoch 6
    assert reference_stop(SCRIPT[4:], 0.02, 2) == 2
    assert model.epochs == [HAND_STOP_EPOCH]
    assert resumed.stopped_epoch == HAND_STOP_EPOCH
    assert resumed.best_score == pytest.approx(0.7)


def test_by_name_with_settings_checks_at_train_epoch_end_without_validation(fit):
    # score per epoch, mode max, stopping_threshold 0.75: epoch 2's 0.8 is the first to reach it
    values = [0.2, 0.5, 0.8, 0.9]
    model = Scripted(values)
    trainer = fit(
        {"early_stopping": {"monitor": "score", "mode": "max", "stopping_threshold": 0.75, "patience": 10}},
        model=model,
        max_epochs=4,
        limit_val_batches=0,
    )
    assert model.epochs == [0, 1, 2]
    assert trainer.state.stop_reason == "score = 0.8 reached the stopping threshold 0.75"
    assert "early_stopping" in trainer.event_order("train_epoch_end")


def test_not_finite_and_divergence_stop_with_their_reason(fit):
    model = Scripted([1.0, 0.9, math.nan, 0.5])
    trainer = fit([EarlyStopping(patience=5)], model=model, max_epochs=4)
    assert model.epochs == [0, 1, 2]
    assert trainer.state.stop_reason == "val_loss = nan is not finite; best 0.9 at epoch 1"

    model = Scripted([1.0, 0.9, 3.0, 0.5])
    trainer = fit([EarlyStopping(patience=5, divergence_threshold=2.0)], model=model, max_epochs=4)
    assert model.epochs == [0, 1, 2]
    assert trainer.state.stop_reason == ("val_loss = 3 is worse than the divergence threshold 2; best 0.9 at epoch 1")


def test_check_on_train_epoch_end_leaves_validation_end_out(fit):
    stopper = EarlyStopping(check_on_train_epoch_end=True)
    trainer = fit([stopper], model=Scripted(SCRIPT), max_epochs=1)
    assert stopper.surge_name == "early_stopping[monitor=val_loss,mode=min]"
    assert stopper.surge_name in trainer.event_order("train_epoch_end")
    assert stopper.surge_name not in trainer.event_order("validation_end")
    trainer = fit({"early_stopping": {"check_on_train_epoch_end": False}}, model=Scripted(SCRIPT), max_epochs=1)
    assert "early_stopping" in trainer.event_order("validation_end")
    assert "early_stopping" not in trainer.event_order("train_epoch_end")


def test_strict_names_the_logged_metrics(fit):
    with pytest.raises(surge.SurgeError, match=r"'val_los' was not logged.*\['train_loss', 'val_loss'\]"):
        fit([EarlyStopping(monitor="val_los")], model=Scripted(SCRIPT), max_epochs=3)
    model = Scripted(SCRIPT)
    trainer = fit([EarlyStopping(monitor="val_los", strict=False)], model=model, max_epochs=3)
    assert model.epochs == [0, 1, 2] and not trainer.should_stop


def test_bad_settings_are_config_errors(fit):
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(plugins={"early_stopping": {"mode": "mn", "patience": -1, "monitr": "x"}}, logger=False)
    paths = [path for path, _ in info.value.problems]
    assert "trainer.plugins.early_stopping.mode" in paths
    assert "trainer.plugins.early_stopping.patience" in paths
    assert "trainer.plugins.early_stopping.monitr" in paths
