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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    import torch

    from surge.events.run import Run

Stage = Literal["fit", "validate", "test", "predict"]

EVENTS: dict[str, type[Event]] = {}
"""Every event name mapped to its class, in declaration order."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all events. ``trainer`` is the run as a handler sees it (:class:`surge.events.run.Run`: read-only,
    with named mutators)."""

    trainer: Run
    name: ClassVar[str] = ""

    @property
    def module(self) -> Any:
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
    """``params``: the Module's ``hparams`` merged with the DataModule's (the Module's win on a clash), less
    those saved with ``save_hyperparameters(..., logger=False)``."""

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


# -- questions the core asks its plugins ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query(Event):
    """Base of the questions the core asks the plugins (value-returning hooks, pluggy's ``firstresult``): the
    handlers are asked in bus order and the first answer that is not ``None`` is taken. Not events: they mark
    no point of the run, and no profiler span or trace follows them."""


@dataclass(frozen=True, slots=True)
class CheckpointPath(Query):
    """``fit``/``validate``/``test``/``predict`` got ``ckpt_path=alias`` (``"last"`` or ``"best"``): a handler
    returns the path or URL of the checkpoint the alias names, or ``None`` to let the next plugin answer."""

    name: ClassVar[str] = "checkpoint_path"
    alias: str
    stage: Stage


QUERIES: dict[str, type[Query]] = {CheckpointPath.name: CheckpointPath}
"""The questions the core asks plugins, by hook name; each a ``firstresult`` hook of :mod:`surge.events.specs`."""


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


# -- events that plugins declare ------------------------------------------------------------------------------

_EVENT_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")


def event_problems(declared: Sequence[type[Event]]) -> list[str]:
    """What is wrong with the event classes one plugin declares (``surge.Plugin(events=[...])``); empty when
    nothing is. Each must be a frozen dataclass subclass of :class:`Event` with a ``name`` ClassVar in
    snake_case with at least two words, not a core event's name, documented (its docstring is its contract:
    when it fires and what a handler may change), and a span's two ends (``x_start``/``x_end``,
    ``before_x``/``after_x``) are declared together, so that a profiler can open and close the span from the
    names alone. A name outside the span grammar is a point event (``checkpoint_saved``)."""
    problems: list[str] = []
    names: dict[str, type[Event]] = {}
    for cls in declared:
        what = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', repr(cls))}"
        if not (isinstance(cls, type) and issubclass(cls, Event)):
            problems.append(f"{what} is not a subclass of surge.events.Event")
            continue
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__dataclass_params__" not in vars(cls):
            problems.append(f"{what} must be a frozen dataclass: @dataclass(frozen=True, slots=True)")
        name = vars(cls).get("name")
        if not isinstance(name, str) or not _EVENT_NAME.match(name):
            problems.append(
                f"{what} needs `name: ClassVar[str] = '<words>'` in snake_case with at least two words "
                f"(like 'checkpoint_saved' or 'lr_find_trial_end'); got {name!r}"
            )
            continue
        if name in EVENTS:
            problems.append(f"{what} takes the name {name!r} of a core event; choose a name of the plugin's own")
        elif name in names:
            problems.append(f"{what} and {names[name].__qualname__} are both declared as {name!r}")
        if not (cls.__doc__ or "").strip() or cls.__doc__ == _dataclass_doc(cls):
            problems.append(f"{what} ({name!r}) has no docstring: say when it fires and what a handler may change")
        names[name] = cls
    for name in names:
        span = span_of(name)
        if span is None:
            continue
        scope, end = span
        pair = {
            ("start", True): f"{scope}_end",
            ("end", True): f"{scope}_start",
            ("start", False): f"after_{scope}",
            ("end", False): f"before_{scope}",
        }[(end, name.endswith(("_start", "_end")))]
        if pair not in names:
            problems.append(f"event {name!r} opens or closes the span {scope!r}; declare {pair!r} with it")
    return problems


def _dataclass_doc(cls: type) -> str:
    """The docstring ``@dataclass`` writes for an undocumented class (its signature), to tell it from a real one."""
    import inspect

    try:
        return cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    except (TypeError, ValueError):
        return ""
