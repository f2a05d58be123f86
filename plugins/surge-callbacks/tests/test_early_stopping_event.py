"""The event the ``early_stopping`` plugin publishes, ``early_stopping_check``, seen by a subscriber of another
plugin through real fits: its payload at each check, when it fires, and runs where nothing publishes it."""

from __future__ import annotations

from typing import Any

import pytest
import surge
import surge_callbacks
import torch
from surge.testing import TinyModule
from surge_callbacks import EarlyStopping, EarlyStoppingCheck

# val_loss per epoch; with min_delta=0.02 and patience=2 the fit stops at epoch 4 (test_early_stopping.py's script)
SCRIPT = [1.0, 0.8, 0.7, 0.75, 0.69, 0.72, 0.71]
SETTINGS = {"monitor": "val_loss", "min_delta": 0.02, "patience": 2}


class Scripted(TinyModule):
    """Logs ``val_loss`` = ``SCRIPT[epoch]`` in validation and ``score`` = the same as a training epoch value."""

    def _value(self) -> torch.Tensor:
        return torch.tensor(SCRIPT[self.trainer.current_epoch], dtype=torch.float64)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("score", self._value(), on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._value())


class Listener:
    """Another plugin's subscriber: each check's payload, and where it came among the events it sees."""

    surge_name = "listener"
    surge_kind = "observer"

    def __init__(self) -> None:
        self.checks: list[tuple[Any, ...]] = []
        self.order: list[str] = []

    @surge.hookimpl(optional=True)
    def early_stopping_check(self, event: EarlyStoppingCheck) -> None:
        self.checks.append(
            (
                event.epoch,
                event.monitor,
                event.value,
                event.best,
                event.best_epoch,
                event.improved,
                event.wait_count,
                event.patience,
                event.stop_reason,
                event.trainer.should_stop,
            )
        )
        self.order.append("check")

    @surge.hookimpl
    def validation_end(self, event: Any) -> None:
        self.order.append("validation_end")

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        self.order.append("train_epoch_end")


def test_the_plugin_declares_its_event():
    assert surge_callbacks.early_stopping_plugin.events == [EarlyStoppingCheck]
    assert EarlyStoppingCheck.name == "early_stopping_check"


def test_each_check_is_published_with_the_state_it_left(fit):
    listener = Listener()
    fit([listener, {"early_stopping": SETTINGS}], model=Scripted(), max_epochs=7)
    reason = "val_loss did not improve by 0.02 for 2 checks; best 0.7 at epoch 2"
    assert listener.checks == [
        (0, "val_loss", 1.0, 1.0, 0, True, 0, 2, None, False),
        (1, "val_loss", 0.8, 0.8, 1, True, 0, 2, None, False),
        (2, "val_loss", 0.7, 0.7, 2, True, 0, 2, None, False),
        (3, "val_loss", 0.75, 0.7, 2, False, 1, 2, None, False),
        (4, "val_loss", 0.69, 0.7, 2, False, 2, 2, reason, True),  # after request_stop: the fit ends here
    ]
    # checked after validation, before the observers' own handlers of its end
    assert listener.order[:3] == ["check", "validation_end", "train_epoch_end"]


def test_a_check_at_the_training_epoch_end_is_published_there(fit):
    listener = Listener()
    settings = {**SETTINGS, "monitor": "score", "check_on_train_epoch_end": True}
    fit([listener, {"early_stopping": settings}], model=Scripted(), max_epochs=2)
    assert [c[:3] for c in listener.checks] == [(0, "score", 1.0), (1, "score", 0.8)]
    assert listener.order[:3] == ["validation_end", "check", "train_epoch_end"]


def test_a_check_without_the_metric_publishes_nothing(fit):
    listener = Listener()
    fit([listener, {"early_stopping": {"monitor": "missing", "strict": False}}], model=Scripted(), max_epochs=2)
    assert listener.checks == [] and listener.order.count("validation_end") == 2


@pytest.mark.parametrize("publisher", [EarlyStopping(**SETTINGS), None], ids=["instance", "none"])
def test_without_the_plugin_active_an_instance_publishes_and_none_publishes_nothing(fit, publisher):
    listener = Listener()
    trainer = fit([listener, *([publisher] if publisher else [])], model=Scripted(), max_epochs=7)
    # the event is declared while surge-callbacks is installed, so an instance passed in publishes it too
    assert "early_stopping_check" in trainer.event_names
    assert [c[0] for c in listener.checks] == ([0, 1, 2, 3, 4] if publisher else [])
    assert trainer.current_epoch == (5 if publisher else 7)  # the instance still stops the fit at epoch 4
