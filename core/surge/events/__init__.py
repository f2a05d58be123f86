"""Typed lifecycle events: one frozen dataclass per event.

Every hook receives exactly one argument, ``event``. Fields are read-only; a handler changes the run only
through named methods on ``event.trainer`` (``request_stop(reason)``, ...) or, for the checkpoint events,
by adding its own entry to ``event.checkpoint``. New fields may be added to an event at any time, so
handlers should read the fields they need by name and ignore the rest.

Each event is declared once, here: its class's docstring is its contract, when it fires, then a paragraph
``May change: ...`` saying what a handler may change (:func:`contract` parses it). The pluggy hook specs
(:mod:`surge.events.specs`), the bus's dispatchers and the events table of docs/events.md
(``python -m surge.events --markdown docs/events.md``) are derived from these classes, and so are those of the
events plugins declare.

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

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
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
    """In ``Trainer(...)``, as soon as its arguments are validated, its plugins activated and its bus built: before it
    checks the plugins' state keys and builds its run state (metrics, data slots, accumulation). ``trainer.state``
    exists (all counters at zero); the Module and the data do not.

    May change: Nothing: the trainer is not ready to run. Use it to check the configuration."""

    name: ClassVar[str] = "init_start"


@dataclass(frozen=True, slots=True)
class InitEnd(Event):
    """At the end of ``Trainer(...)``, once accelerator, strategy and precision are chosen.

    May change: Nothing."""

    name: ClassVar[str] = "init_end"


@dataclass(frozen=True, slots=True)
class Setup(_StageEvent):
    """At the start of ``fit``/``validate``/``test``/``predict``, after the model is on its device and before any data
    is read. ``event.stage`` names the entry point. The user's ``Module.setup(stage)`` and
    ``DataModule.setup(stage)`` run here.

    May change: Handlers may prepare state for the stage."""

    name: ClassVar[str] = "setup"


@dataclass(frozen=True, slots=True)
class FitStart(Event):
    """Once per ``fit``, after ``setup`` and the optimizers are configured, before the sanity check.

    May change: Nothing."""

    name: ClassVar[str] = "fit_start"


@dataclass(frozen=True, slots=True)
class SanityCheckStart(Event):
    """Before the validation sanity check (``num_sanity_val_steps``). Skipped entirely when there is none.

    May change: Nothing; metrics logged during the sanity check reach ``callback_metrics`` only, from its
    ``validation_epoch_end`` until ``sanity_check_end``, as Lightning's (no logger, bar or ``logged_metrics`` gets
    them), and are gone once it ends."""

    name: ClassVar[str] = "sanity_check_start"


@dataclass(frozen=True, slots=True)
class SanityCheckEnd(Event):
    """After the validation sanity check, with ``trainer.sanity_checking`` still true and the check's values in
    ``callback_metrics`` (as in Lightning). A stop requested during the sanity check is dropped here: the check only
    checks.

    May change: Nothing."""

    name: ClassVar[str] = "sanity_check_end"


# -- training ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainStart(Event):
    """Before the first training epoch.

    May change: Nothing."""

    name: ClassVar[str] = "train_start"


@dataclass(frozen=True, slots=True)
class TrainEpochStart(_EpochEvent):
    """At the start of every training epoch; ``event.epoch`` counts from 0.

    May change: A handler may call ``trainer.set_accumulation(factor)``: the loop reads the accumulation factor
    right after this event (the ``gradient_accumulation_scheduler`` does)."""

    name: ClassVar[str] = "train_epoch_start"


@dataclass(frozen=True, slots=True)
class TrainBatchStart(_BatchStart):
    """Before ``training_step`` for every batch, after the batch is on the device.

    May change: A handler may call ``trainer.request_stop(reason)``; the stop takes effect at this step boundary."""

    name: ClassVar[str] = "train_batch_start"


@dataclass(frozen=True, slots=True)
class BeforeBackward(_LossEvent):
    """Before ``loss.backward()`` (in manual optimization: inside ``self.manual_backward(loss)``); ``event.loss`` is
    the loss already divided for gradient accumulation.

    May change: Nothing (the loss is read-only)."""

    name: ClassVar[str] = "before_backward"


@dataclass(frozen=True, slots=True)
class AfterBackward(_LossEvent):
    """After the backward pass; gradients are populated (and still accumulating when ``accumulate_grad_batches > 1``).

    May change: Handlers may inspect gradients; changing them in place is allowed and is the documented way to
    transform gradients."""

    name: ClassVar[str] = "after_backward"


@dataclass(frozen=True, slots=True)
class BeforeOptimizerStep(_OptimizerEvent):
    """Before ``optimizer.step()``: gradients are accumulated and unscaled (true scale), not yet clipped
    (``gradient_clip_val`` applies right after this event, as in Lightning).

    May change: Handlers may inspect or modify gradients in place."""

    name: ClassVar[str] = "before_optimizer_step"


@dataclass(frozen=True, slots=True)
class AfterOptimizerStep(_OptimizerEvent):
    """After ``optimizer.step()``; gradients (clipped, if clipping is on) are still present and ``trainer.global_step``
    is not yet incremented.

    May change: Nothing."""

    name: ClassVar[str] = "after_optimizer_step"


@dataclass(frozen=True, slots=True)
class BeforeZeroGrad(_OptimizerEvent):
    """Before the optimizer's gradients are reset, after each optimizer step.

    May change: Nothing."""

    name: ClassVar[str] = "before_zero_grad"


@dataclass(frozen=True, slots=True)
class AfterZeroGrad(_OptimizerEvent):
    """After the optimizer's gradients are reset.

    May change: Nothing."""

    name: ClassVar[str] = "after_zero_grad"


@dataclass(frozen=True, slots=True)
class TrainBatchEnd(_BatchEnd):
    """After the training step (and the optimizer step, when this batch completes an accumulation window);
    ``event.outputs`` is what ``training_step`` returned. The step's logged values are in ``callback_metrics``.

    May change: A handler may call ``trainer.request_stop(reason)``, ``trainer.save_checkpoint(path)`` (a fit
    resumed from it continues exactly after this batch) or ``trainer.request_checkpoint(save, reason)``. What it
    logs with ``event.module.log(...)`` belongs to this step, as in Lightning: in ``callback_metrics`` at once,
    and in this step's logger row."""

    name: ClassVar[str] = "train_batch_end"


@dataclass(frozen=True, slots=True)
class TrainEpochEnd(_EpochEvent):
    """After the last training batch of the epoch and any validation run at the epoch's end; epoch-level metrics are in
    ``trainer.callback_metrics``.

    May change: A handler may call ``trainer.request_stop(reason)`` or ``trainer.save_checkpoint(path)`` (a fit
    resumed from it goes on with the next epoch)."""

    name: ClassVar[str] = "train_epoch_end"


@dataclass(frozen=True, slots=True)
class TrainEnd(Event):
    """After the last training epoch.

    May change: Nothing."""

    name: ClassVar[str] = "train_end"


# -- validation, test, predict -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidationStart(Event):
    """Before a validation run: during ``fit`` (sanity check included), or from ``Trainer.validate``.

    May change: Nothing."""

    name: ClassVar[str] = "validation_start"


@dataclass(frozen=True, slots=True)
class ValidationEpochStart(_EpochEvent):
    """At the start of a validation run, after the model is switched to eval mode.

    May change: Nothing."""

    name: ClassVar[str] = "validation_epoch_start"


@dataclass(frozen=True, slots=True)
class ValidationBatchStart(_EvalBatchStart):
    """Before ``validation_step`` for every batch.

    May change: Nothing."""

    name: ClassVar[str] = "validation_batch_start"


@dataclass(frozen=True, slots=True)
class ValidationBatchEnd(_EvalBatchEnd):
    """After ``validation_step``; ``event.outputs`` is what it returned.

    May change: Nothing."""

    name: ClassVar[str] = "validation_batch_end"


@dataclass(frozen=True, slots=True)
class ValidationEpochEnd(_EpochEvent):
    """After the last validation batch; epoch metrics are in ``trainer.callback_metrics``.

    May change: A handler may call ``trainer.request_stop(reason)`` (early stopping does)."""

    name: ClassVar[str] = "validation_epoch_end"


@dataclass(frozen=True, slots=True)
class ValidationEnd(Event):
    """After a validation run, before the model returns to train mode.

    May change: A handler may call ``trainer.save_checkpoint(path)``; during ``fit``, a fit resumed from it
    continues after this validation."""

    name: ClassVar[str] = "validation_end"


@dataclass(frozen=True, slots=True)
class TestStart(Event):
    """Before a test run (``Trainer.test``).

    May change: Nothing."""

    name: ClassVar[str] = "test_start"


@dataclass(frozen=True, slots=True)
class TestEpochStart(_EpochEvent):
    """At the start of a test run.

    May change: Nothing."""

    name: ClassVar[str] = "test_epoch_start"


@dataclass(frozen=True, slots=True)
class TestBatchStart(_EvalBatchStart):
    """Before ``test_step`` for every batch.

    May change: Nothing."""

    name: ClassVar[str] = "test_batch_start"


@dataclass(frozen=True, slots=True)
class TestBatchEnd(_EvalBatchEnd):
    """After ``test_step``.

    May change: Nothing."""

    name: ClassVar[str] = "test_batch_end"


@dataclass(frozen=True, slots=True)
class TestEpochEnd(_EpochEvent):
    """After the last test batch; metrics are in ``trainer.callback_metrics``.

    May change: Nothing."""

    name: ClassVar[str] = "test_epoch_end"


@dataclass(frozen=True, slots=True)
class TestEnd(Event):
    """After a test run.

    May change: Nothing."""

    name: ClassVar[str] = "test_end"


@dataclass(frozen=True, slots=True)
class PredictStart(Event):
    """Before a prediction run (``Trainer.predict``).

    May change: Nothing."""

    name: ClassVar[str] = "predict_start"


@dataclass(frozen=True, slots=True)
class PredictEpochStart(_EpochEvent):
    """At the start of a prediction run.

    May change: Nothing."""

    name: ClassVar[str] = "predict_epoch_start"


@dataclass(frozen=True, slots=True)
class PredictBatchStart(_EvalBatchStart):
    """Before ``predict_step`` for every batch.

    May change: Nothing."""

    name: ClassVar[str] = "predict_batch_start"


@dataclass(frozen=True, slots=True)
class PredictBatchEnd(_EvalBatchEnd):
    """After ``predict_step``; ``event.outputs`` is the prediction.

    May change: Nothing."""

    name: ClassVar[str] = "predict_batch_end"


@dataclass(frozen=True, slots=True)
class PredictEpochEnd(_EpochEvent):
    """After the last prediction batch.

    May change: Nothing."""

    name: ClassVar[str] = "predict_epoch_end"


@dataclass(frozen=True, slots=True)
class PredictEnd(Event):
    """After a prediction run.

    May change: Nothing."""

    name: ClassVar[str] = "predict_end"


# -- checkpoints -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeforeCheckpointSave(_CheckpointEvent):
    """When a checkpoint dict has been assembled, before it is written. ``event.checkpoint`` is that dict.

    May change: A handler may add its own entry under its own key; it must not change or remove others' entries."""

    name: ClassVar[str] = "before_checkpoint_save"


@dataclass(frozen=True, slots=True)
class AfterCheckpointSave(_CheckpointEvent):
    """After a checkpoint has been written and committed.

    May change: Nothing."""

    name: ClassVar[str] = "after_checkpoint_save"


@dataclass(frozen=True, slots=True)
class BeforeCheckpointLoad(_CheckpointEvent):
    """After a checkpoint file is read and verified, before anything is restored from it.

    May change: A handler may migrate its own entry in ``event.checkpoint`` (for example from an older format)."""

    name: ClassVar[str] = "before_checkpoint_load"


@dataclass(frozen=True, slots=True)
class AfterCheckpointLoad(_CheckpointEvent):
    """After weights, optimizers, loop progress and plugin states are restored from ``event.checkpoint``.

    May change: A handler may read its own entry and restore anything not covered by ``load_state_dict``."""

    name: ClassVar[str] = "after_checkpoint_load"


# -- logging -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogHyperparams(Event):
    """Once per ``fit``/``validate``/``test``, on global rank zero, after ``setup`` and before the first batch, when
    the Module or DataModule has hyper-parameters (``self.save_hyperparameters()``). ``event.params``: the Module's
    ``hparams`` merged with the DataModule's (the Module's win on a clash), less those saved with
    ``save_hyperparameters(..., logger=False)``.

    May change: Nothing. Loggers record the parameters (the CSV logger writes ``hparams.yaml``)."""

    params: Mapping[str, Any]
    name: ClassVar[str] = "log_hyperparams"


@dataclass(frozen=True, slots=True)
class LogMetrics(Event):
    """On global rank zero whenever logged metrics are written: after a training batch's ``train_batch_end``
    every ``log_every_n_steps`` optimizer steps, after each validation or test batch that logged
    ``on_step=True`` values, at the end of each training, validation and test epoch, and when a plugin calls
    ``trainer.log_metrics``.
    ``event.metrics``: names to Python floats (the core moves every value to the host in one batched copy per
    device, only when there is a subscriber); ``step``: ``trainer.global_step`` when written (an evaluation
    batch's ``on_step`` values: that dataloader's batches evaluated so far in the run, Lightning's step);
    ``epoch``: ``trainer.current_epoch``; ``stage``: ``"train"``, ``"validation"``, ``"test"``, ``"predict"`` or
    the name of the plugin that wrote them through ``trainer.log_metrics``.

    May change: Nothing. Loggers write the row; they should flush so that a killed run leaves it on disk."""

    metrics: Mapping[str, float]
    step: int
    epoch: int
    stage: str
    name: ClassVar[str] = "log_metrics"


# -- closing ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitEnd(Event):
    """Once per ``fit``, after ``train_end``, when training finished or was stopped by request.

    May change: Nothing."""

    name: ClassVar[str] = "fit_end"


@dataclass(frozen=True, slots=True)
class Exception_(Event):  # the trailing underscore keeps the builtin ``Exception`` usable here
    """Exactly once when a run fails: ``event.error`` is the exception. Every subscriber sees it even when another
    subscriber raises; the original exception is re-raised afterwards, and ``teardown`` still runs.

    May change: Nothing. Use it to flush, mark a run as failed, or clean up."""

    error: BaseException
    stage: Stage | None
    name: ClassVar[str] = "exception"


@dataclass(frozen=True, slots=True)
class KeyboardInterrupt_(Event):
    """When Ctrl-C (SIGINT) stopped the run at a step boundary. Control then returns to the caller;
    ``trainer.interrupted`` is true.

    May change: Nothing."""

    stage: Stage | None
    name: ClassVar[str] = "keyboard_interrupt"


@dataclass(frozen=True, slots=True)
class Teardown(_StageEvent):
    """Always, as the last event of ``fit``/``validate``/``test``/``predict``, on success, failure or interrupt. Every
    subscriber sees it even when another raises. The user's ``Module.teardown(stage)`` runs here.

    May change: Handlers release what they acquired in ``setup`` and flush what they buffer."""

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
    """When ``fit``/``validate``/``test``/``predict`` got ``ckpt_path=alias`` (``event.alias``: ``"last"`` or
    ``"best"``), before anything is restored. A handler returns the path or URL of the checkpoint the alias names,
    or ``None`` to let the next plugin (in bus order) answer; with no answer, ``fit`` starts from scratch for
    ``"last"``, and anything else is an error.

    May change: Nothing. Returns: ``str | None``."""

    name: ClassVar[str] = "checkpoint_path"
    alias: str
    stage: Stage


@dataclass(frozen=True, slots=True)
class ResumePath(Query):
    """When ``fit`` was called without ``ckpt_path``, before anything is restored: a handler returns the path or URL
    of a checkpoint this fit continues from (a plugin translating another API's "resume from" argument does), or
    ``None``. The first answer is the fit's ``ckpt_path``; with none, the fit starts from scratch (or continues
    this Trainer's interrupted fit).

    May change: Nothing. Returns: ``str | None``."""

    name: ClassVar[str] = "resume_path"


QUERIES: dict[str, type[Query]] = {CheckpointPath.name: CheckpointPath, ResumePath.name: ResumePath}
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


@dataclass(frozen=True)
class Contract:
    """What an event (or question) class says of itself, read from its docstring: the one source of its hook
    spec, its row in docs/events.md and ``surge plugins --event NAME``."""

    name: str
    cls: type[Event]
    fields: tuple[str, ...]
    """The payload's fields, ``trainer`` aside."""
    when: str
    """When it fires: the docstring before ``May change:``, on one line."""
    may_change: str
    """What a handler may change: the docstring after ``May change:``, on one line (empty when it says nothing)."""


def contract(cls: type[Event]) -> Contract:
    """The contract ``cls``'s docstring states: when it fires, then a paragraph ``May change: ...``."""
    doc = "" if cls.__doc__ == _dataclass_doc(cls) else inspect.cleandoc(cls.__doc__ or "")
    when, _, may_change = doc.partition("May change:")
    return Contract(
        name=cls.name,
        cls=cls,
        fields=tuple(f.name for f in fields(cls) if f.name != "trainer"),
        when=" ".join(when.split()),
        may_change=" ".join(may_change.split()),
    )


# -- events that plugins declare ------------------------------------------------------------------------------

_EVENT_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")


def event_problems(declared: Sequence[type[Event]]) -> list[str]:
    """What is wrong with the event classes one plugin declares (``surge.Plugin(events=[...])``); empty when
    nothing is. Each must be a frozen dataclass subclass of :class:`Event` with a ``name`` ClassVar in
    snake_case with at least two words, not a core event's name, documented (its docstring is its contract:
    when it fires, then ``May change: ...``, as :func:`contract` reads it), and a span's two ends (``x_start``/``x_end``,
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
        said = contract(cls)
        if not said.when:
            problems.append(f"{what} ({name!r}) has no docstring: say when it fires and what a handler may change")
        elif not said.may_change:
            problems.append(
                f"{what} ({name!r}): its docstring does not say what a handler may change; end it with a paragraph "
                "'May change: ...' (nothing, or the mutators a handler may call)"
            )
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


def _direct_builder(cls: type[Event]) -> Callable[[Any, Any, Any, Any], Event]:
    """A function ``build(a, b, c, d)`` that makes the same event as ``cls(a, b, c, d)``, for the events of four
    fields fired on every batch (``TrainBatchEnd``): it sets the slots directly, where a frozen dataclass's
    ``__init__`` calls ``object.__setattr__`` once per field (about half the cost of the event). The result is
    a ``cls``, equal to and as immutable as one built by ``cls``. ``cls`` itself is returned when that could
    differ: another number of fields, a default, a ``__post_init__``, a field not stored in a slot."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    slots = [inspect.getattr_static(cls, name, None) for name in names]
    parameters = inspect.signature(cls).parameters.values()
    if (
        len(names) != 4
        or hasattr(cls, "__post_init__")
        or any(type(slot).__name__ != "member_descriptor" for slot in slots)
        or [p.name for p in parameters] != names
        or any(p.default is not inspect.Parameter.empty for p in parameters)
    ):
        return cls
    new = object.__new__
    set_a, set_b, set_c, set_d = (slot.__set__ for slot in slots)

    def build(a: Any, b: Any, c: Any, d: Any) -> Event:
        event = new(cls)
        set_a(event, a)
        set_b(event, b)
        set_c(event, c)
        set_d(event, d)
        return event

    return build
