"""Typed lifecycle events: one frozen dataclass per event.

Every hook receives exactly one argument, ``event``. Fields are read-only; a handler changes the run only
through named methods on ``event.trainer`` (``request_stop(reason)``, ...) or, for the checkpoint events,
by adding its own entry to ``event.checkpoint``. New fields may be added to an event at any time, so
handlers should read the fields they need by name and ignore the rest.

Names follow one grammar that tools can rely on:

* ``<stage>_<scope>_start`` / ``<stage>_<scope>_end`` for scopes: ``fit``, ``sanity_check``, ``train``,
  ``train_epoch``, ``train_batch`` and the same for ``validation``, ``test`` and ``predict``;
* ``before_<op>`` / ``after_<op>`` for operations: ``backward``, ``optimizer_step``, ``zero_grad``,
  ``checkpoint_save``, ``checkpoint_load``;
* plus ``init_start``/``init_end``, ``setup``, ``teardown``, ``exception`` and ``keyboard_interrupt``;
* plus two point events for loggers, ``log_hyperparams`` and ``log_metrics``: they mark a write, not a
  scope or an operation, so they have no pair (:func:`span_of` gives ``None`` for them).

:func:`span_of` turns a name into ``(span, "start" | "end")`` so a profiler can open and close spans from
names alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    import torch

    from surge.module import Module
    from surge.trainer import Trainer

Stage = Literal["fit", "validate", "test", "predict"]

EVENTS: dict[str, type[Event]] = {}
"""Every event name mapped to its class, in declaration order."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all events. ``trainer`` is the running :class:`surge.Trainer`."""

    trainer: Trainer
    name: ClassVar[str] = ""

    @property
    def module(self) -> Module:
        """The user's :class:`surge.Module` being run."""
        return self.trainer.module


# -- shapes shared by several events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _StageEvent(Event):
    stage: Stage


@dataclass(frozen=True, slots=True)
class _EpochEvent(Event):
    epoch: int


@dataclass(frozen=True, slots=True)
class _BatchStart(Event):
    batch: Any
    batch_idx: int


@dataclass(frozen=True, slots=True)
class _BatchEnd(Event):
    outputs: Any
    batch: Any
    batch_idx: int


@dataclass(frozen=True, slots=True)
class _EvalBatchStart(Event):
    batch: Any
    batch_idx: int
    dataloader_idx: int


@dataclass(frozen=True, slots=True)
class _EvalBatchEnd(Event):
    outputs: Any
    batch: Any
    batch_idx: int
    dataloader_idx: int


@dataclass(frozen=True, slots=True)
class _LossEvent(Event):
    loss: torch.Tensor


@dataclass(frozen=True, slots=True)
class _OptimizerEvent(Event):
    optimizer: torch.optim.Optimizer
    optimizer_idx: int


@dataclass(frozen=True, slots=True)
class _CheckpointEvent(Event):
    checkpoint: dict[str, Any]


# -- construction and stage brackets ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitStart(Event):
    name: ClassVar[str] = "init_start"


@dataclass(frozen=True, slots=True)
class InitEnd(Event):
    name: ClassVar[str] = "init_end"


@dataclass(frozen=True, slots=True)
class Setup(_StageEvent):
    name: ClassVar[str] = "setup"


@dataclass(frozen=True, slots=True)
class FitStart(Event):
    name: ClassVar[str] = "fit_start"


@dataclass(frozen=True, slots=True)
class SanityCheckStart(Event):
    name: ClassVar[str] = "sanity_check_start"


@dataclass(frozen=True, slots=True)
class SanityCheckEnd(Event):
    name: ClassVar[str] = "sanity_check_end"


# -- training ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainStart(Event):
    name: ClassVar[str] = "train_start"


@dataclass(frozen=True, slots=True)
class TrainEpochStart(_EpochEvent):
    name: ClassVar[str] = "train_epoch_start"


@dataclass(frozen=True, slots=True)
class TrainBatchStart(_BatchStart):
    name: ClassVar[str] = "train_batch_start"


@dataclass(frozen=True, slots=True)
class BeforeBackward(_LossEvent):
    name: ClassVar[str] = "before_backward"


@dataclass(frozen=True, slots=True)
class AfterBackward(_LossEvent):
    name: ClassVar[str] = "after_backward"


@dataclass(frozen=True, slots=True)
class BeforeOptimizerStep(_OptimizerEvent):
    name: ClassVar[str] = "before_optimizer_step"


@dataclass(frozen=True, slots=True)
class AfterOptimizerStep(_OptimizerEvent):
    name: ClassVar[str] = "after_optimizer_step"


@dataclass(frozen=True, slots=True)
class BeforeZeroGrad(_OptimizerEvent):
    name: ClassVar[str] = "before_zero_grad"


@dataclass(frozen=True, slots=True)
class AfterZeroGrad(_OptimizerEvent):
    name: ClassVar[str] = "after_zero_grad"


@dataclass(frozen=True, slots=True)
class TrainBatchEnd(_BatchEnd):
    name: ClassVar[str] = "train_batch_end"


@dataclass(frozen=True, slots=True)
class TrainEpochEnd(_EpochEvent):
    name: ClassVar[str] = "train_epoch_end"


@dataclass(frozen=True, slots=True)
class TrainEnd(Event):
    name: ClassVar[str] = "train_end"


# -- validation, test, predict -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidationStart(Event):
    name: ClassVar[str] = "validation_start"


@dataclass(frozen=True, slots=True)
class ValidationEpochStart(_EpochEvent):
    name: ClassVar[str] = "validation_epoch_start"


@dataclass(frozen=True, slots=True)
class ValidationBatchStart(_EvalBatchStart):
    name: ClassVar[str] = "validation_batch_start"


@dataclass(frozen=True, slots=True)
class ValidationBatchEnd(_EvalBatchEnd):
    name: ClassVar[str] = "validation_batch_end"


@dataclass(frozen=True, slots=True)
class ValidationEpochEnd(_EpochEvent):
    name: ClassVar[str] = "validation_epoch_end"


@dataclass(frozen=True, slots=True)
class ValidationEnd(Event):
    name: ClassVar[str] = "validation_end"


@dataclass(frozen=True, slots=True)
class TestStart(Event):
    name: ClassVar[str] = "test_start"


@dataclass(frozen=True, slots=True)
class TestEpochStart(_EpochEvent):
    name: ClassVar[str] = "test_epoch_start"


@dataclass(frozen=True, slots=True)
class TestBatchStart(_EvalBatchStart):
    name: ClassVar[str] = "test_batch_start"


@dataclass(frozen=True, slots=True)
class TestBatchEnd(_EvalBatchEnd):
    name: ClassVar[str] = "test_batch_end"


@dataclass(frozen=True, slots=True)
class TestEpochEnd(_EpochEvent):
    name: ClassVar[str] = "test_epoch_end"


@dataclass(frozen=True, slots=True)
class TestEnd(Event):
    name: ClassVar[str] = "test_end"


@dataclass(frozen=True, slots=True)
class PredictStart(Event):
    name: ClassVar[str] = "predict_start"


@dataclass(frozen=True, slots=True)
class PredictEpochStart(_EpochEvent):
    name: ClassVar[str] = "predict_epoch_start"


@dataclass(frozen=True, slots=True)
class PredictBatchStart(_EvalBatchStart):
    name: ClassVar[str] = "predict_batch_start"


@dataclass(frozen=True, slots=True)
class PredictBatchEnd(_EvalBatchEnd):
    name: ClassVar[str] = "predict_batch_end"


@dataclass(frozen=True, slots=True)
class PredictEpochEnd(_EpochEvent):
    name: ClassVar[str] = "predict_epoch_end"


@dataclass(frozen=True, slots=True)
class PredictEnd(Event):
    name: ClassVar[str] = "predict_end"


# -- checkpoints -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeforeCheckpointSave(_CheckpointEvent):
    name: ClassVar[str] = "before_checkpoint_save"


@dataclass(frozen=True, slots=True)
class AfterCheckpointSave(_CheckpointEvent):
    name: ClassVar[str] = "after_checkpoint_save"


@dataclass(frozen=True, slots=True)
class BeforeCheckpointLoad(_CheckpointEvent):
    name: ClassVar[str] = "before_checkpoint_load"


@dataclass(frozen=True, slots=True)
class AfterCheckpointLoad(_CheckpointEvent):
    name: ClassVar[str] = "after_checkpoint_load"


# -- logging -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogHyperparams(Event):
    """``params``: the Module's ``hparams`` merged with the DataModule's (the Module's win on a clash)."""

    params: Mapping[str, Any]
    name: ClassVar[str] = "log_hyperparams"


@dataclass(frozen=True, slots=True)
class LogMetrics(Event):
    """``metrics``: names to Python floats, already on the host; ``step``: ``trainer.global_step`` when
    written (an evaluation batch's ``on_step`` values: that dataloader's batches evaluated so far in the run,
    Lightning's step); ``epoch``: ``trainer.current_epoch``; ``stage``: ``"train"``, ``"validation"``,
    ``"test"``, ``"predict"`` or the name of the plugin that wrote them through ``trainer.log_metrics``."""

    metrics: Mapping[str, float]
    step: int
    epoch: int
    stage: str
    name: ClassVar[str] = "log_metrics"


# -- closing ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitEnd(Event):
    name: ClassVar[str] = "fit_end"


@dataclass(frozen=True, slots=True)
class Exception_(Event):
    """Named with a trailing underscore only to keep the builtin ``Exception`` usable here."""

    error: BaseException
    stage: Stage | None
    name: ClassVar[str] = "exception"


@dataclass(frozen=True, slots=True)
class KeyboardInterrupt_(Event):
    stage: Stage | None
    name: ClassVar[str] = "keyboard_interrupt"


@dataclass(frozen=True, slots=True)
class Teardown(_StageEvent):
    name: ClassVar[str] = "teardown"


EVENTS.update(
    (obj.name, obj) for obj in list(globals().values()) if isinstance(obj, type) and issubclass(obj, Event) and obj.name
)

ExceptionEvent = Exception_
KeyboardInterruptEvent = KeyboardInterrupt_


def span_of(event_name: str) -> tuple[str, Literal["start", "end"]] | None:
    """Split an event name by the grammar: ``"train_batch_end"`` gives ``("train_batch", "end")``,
    ``"before_backward"`` gives ``("backward", "start")``; a name outside the grammar gives ``None``."""
    if event_name.endswith("_start"):
        return event_name[: -len("_start")], "start"
    if event_name.endswith("_end"):
        return event_name[: -len("_end")], "end"
    if event_name.startswith("before_"):
        return event_name[len("before_") :], "start"
    if event_name.startswith("after_"):
        return event_name[len("after_") :], "end"
    return None
