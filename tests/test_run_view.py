"""What a handler may change, enforced at run time (issue 18, item 2): every event carries ``trainer.view``, the
Trainer read-only with its named mutators. Assigning through it, or through its ``state``, raises an
``AttributeError`` naming the attribute and the mutator to use; the mutators work; Lightning's callbacks and the
user's Module still get the Trainer itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
import surge
import surge.events as ev
import torch
from surge.events.run import RunView, StateView
from surge.testing import EventRecorder, TinyDataModule, TinyModule
from surge_lightning.pytorch.callbacks import Callback

# Events the Trainer builds itself (the loops build the others): they carry the view in any case.
BUILT_BY_THE_TRAINER = {
    "init_start",
    "init_end",
    "setup",
    "log_hyperparams",
    "log_metrics",
    "before_backward",
    "after_backward",
    "before_checkpoint_save",
    "after_checkpoint_save",
    "teardown",
}


@pytest.fixture
def hidden(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    return plugin_env


def _fit(make_trainer: Any, *plugins: object, model: surge.Module | None = None, **kwargs: Any) -> surge.Trainer:
    kwargs = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 0, **kwargs}
    trainer = make_trainer(plugins=list(plugins), **kwargs)
    trainer.fit(model or TinyModule(), datamodule=TinyDataModule())
    return trainer


@pytest.mark.parametrize(
    ("assign", "message"),
    [
        (lambda run: setattr(run, "max_epochs", 3), "event.trainer.max_epochs is read-only to a handler"),
        (lambda run: setattr(run, "should_stop", True), "call trainer.request_stop(reason) to stop the run"),
        (lambda run: setattr(run.state, "should_stop", True), "trainer.state.should_stop is read-only to a handler"),
        (lambda run: setattr(run.state, "global_step", 0), "trainer.state.global_step is read-only"),
        (lambda run: setattr(run, "accumulate_grad_batches", 2), "set_accumulation(factor) from a train_epoch_start"),
        (lambda run: setattr(run, "state", None), "event.trainer.state is read-only"),
        (lambda run: delattr(run, "module"), "event.trainer.module is read-only"),
    ],
)
def test_a_handler_assigning_through_the_view_fails_naming_the_mutator(
    hidden: Any, make_trainer: Any, assign: Any, message: str
) -> None:
    class Meddler:
        @surge.hookimpl
        def before_backward(self, event: ev.BeforeBackward) -> None:
            assign(event.trainer)

    with pytest.raises(AttributeError, match=re.escape(message)) as info:
        _fit(make_trainer, Meddler())
    assert "request_stop(reason), request_checkpoint(save, reason), log_metrics" in str(info.value)
    assert any("Meddler" in note and "before_backward" in note for note in info.value.__notes__)


def test_the_metrics_a_handler_reads_are_read_only(hidden: Any, make_trainer: Any) -> None:
    view = make_trainer().view
    with pytest.raises(TypeError):
        view.callback_metrics["loss"] = torch.tensor(0.0)  # type: ignore[index]
    with pytest.raises(TypeError):
        view.logged_metrics["loss"] = torch.tensor(0.0)  # type: ignore[index]
    with pytest.raises(AttributeError, match="log_metrics\\(metrics, source=..., publish=True\\)"):
        view.callback_metrics = {}  # type: ignore[misc]


def test_the_view_reads_the_trainer_and_is_built_once(hidden: Any, make_trainer: Any) -> None:
    recorder = EventRecorder()
    trainer = _fit(make_trainer, recorder, max_epochs=2, limit_val_batches=1)
    view = trainer.view
    assert isinstance(view, RunView) and isinstance(view.state, StateView) and trainer.view is view
    for name in ("global_step", "current_epoch", "should_stop", "sanity_checking", "is_global_zero", "max_epochs"):
        assert getattr(view, name) == getattr(trainer, name), name
    for name in ("stage", "status", "global_step", "batch_idx", "stop_reason", "total_batches", "validated_at"):
        assert getattr(view.state, name) == getattr(trainer.state, name), name
    assert view.module is trainer.module and view.strategy is trainer.strategy and view.config is trainer.config
    assert dict(view.callback_metrics) == trainer.callback_metrics and "val_loss" in view.callback_metrics
    assert view.plugin(recorder.surge_name) is recorder and view.event_order("setup") == trainer.event_order("setup")
    assert view == trainer and hash(view) == hash(trainer) and {trainer: 1}[view] == 1
    assert "strategy" in dir(view) and "_bus" not in dir(view)
    with pytest.raises(AttributeError, match="private attributes are no part of the plugin contract"):
        view._bus  # noqa: B018
    built_here = [event for name, event in recorder.events if name in BUILT_BY_THE_TRAINER]
    assert {event.name for event in built_here} >= {"setup", "before_backward", "log_metrics", "teardown"}
    assert all(event.trainer is view for event in built_here)
    assert all(event.trainer is trainer.view for _, event in recorder.events)  # every event carries the view


def test_the_named_mutators_work_through_the_view(hidden: Any, make_trainer: Any) -> None:
    class Steering:
        def __init__(self) -> None:
            self.factors: list[int] = []

        @surge.hookimpl
        def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
            event.trainer.set_accumulation(2)

        @surge.hookimpl
        def after_backward(self, event: ev.AfterBackward) -> None:
            run = event.trainer
            self.factors.append(run.accumulate_grad_batches)
            run.log_metrics({"probe": 3.0}, source="steering", publish=True)
            if run.state.batch_idx == 3:
                run.request_stop("four batches are enough")

    steering = Steering()
    trainer = _fit(make_trainer, steering, max_epochs=3, limit_train_batches=6)
    assert steering.factors == [2, 2, 2, 2]
    assert trainer.global_step == 2 and trainer.state.stop_reason == "four batches are enough"
    assert float(trainer.callback_metrics["probe"]) == 3.0
    with pytest.raises(surge.SurgeError, match="outside train_epoch_start"):
        trainer.view.set_accumulation(3)


def test_lightning_callbacks_and_the_module_get_the_trainer_itself(hidden: Any, make_trainer: Any) -> None:
    seen: dict[str, Any] = {}

    class Lightningish(Callback):
        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            seen["callback"] = trainer

        def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
            seen["callback_backward"] = trainer

    class Hooked(TinyModule):
        def on_before_backward(self, trainer: Any, event: ev.BeforeBackward) -> None:
            seen["module"], seen["module_event"] = trainer, event

        def on_after_backward(self, event: ev.AfterBackward) -> None:
            seen["module_event_only"] = event

    trainer = make_trainer(callbacks=[Lightningish()], max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    trainer.fit(Hooked(), datamodule=TinyDataModule())
    assert seen["callback"] is trainer and seen["callback_backward"] is trainer and seen["module"] is trainer
    assert seen["module_event"].trainer is trainer and seen["module_event_only"].trainer is trainer
    assert isinstance(seen["module_event"], ev.BeforeBackward) and seen["module_event"].loss is not None


def test_a_checkpoint_request_is_served_with_the_view(hidden: Any, make_trainer: Any, tmp_path: Any) -> None:
    saved: list[object] = []

    class Requester:
        @surge.hookimpl
        def after_backward(self, event: ev.AfterBackward) -> None:
            if not saved:
                event.trainer.request_checkpoint(lambda run: saved.append(run), "probe")

    trainer = _fit(make_trainer, Requester())
    assert saved == [trainer] and saved[0] is trainer.view


def test_a_lightning_callback_still_stops_the_fit_by_setting_should_stop(hidden: Any, make_trainer: Any) -> None:
    class StopLikeLightning(Callback):
        def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
            trainer.should_stop = True  # Lightning's API, on the Trainer itself

    trainer = make_trainer(callbacks=[StopLikeLightning()], max_epochs=3, limit_train_batches=4, limit_val_batches=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 1 and trainer.should_stop
    assert trainer.state.stop_reason == "trainer.should_stop was set to True (a Lightning callback)"
