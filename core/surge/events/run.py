"""What a handler sees of the run: :class:`Run`, the type of every event's ``trainer`` field.

The object behind it is a :class:`RunView` of the Trainer (``trainer.view``, built once per Trainer), and this
protocol is the part of it that is the plugin contract. Every attribute here is read-only to a handler: assigning
one is a type error for mypy and an ``AttributeError`` at run time, naming the mutator to use. The run changes only
through the named mutators at the end (:meth:`Run.request_stop`, :meth:`Run.request_checkpoint`,
:meth:`Run.log_metrics`, :meth:`Run.emit`, :meth:`Run.set_accumulation`), each documented with the events it may
be called from. Anything a handler reaches outside this protocol is not part of the contract and may change
without notice.

Provider objects (``strategy``, ``accelerator``, ``precision_plugin``) are typed by their own protocols in
:mod:`surge.plugins.backends`; here they are ``Any`` because this module sits below the plugins layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

if TYPE_CHECKING:
    from surge.events import Event

Status = Literal["initializing", "running", "finished", "interrupted", "failed"]


class RunState(Protocol):
    """Where the run stands (``trainer.state``), read-only."""

    @property
    def stage(self) -> str | None:
        """``'fit'``, ``'validate'``, ``'test'`` or ``'predict'`` while a run is active."""

    @property
    def status(self) -> Status: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def batch_idx(self) -> int: ...

    @property
    def sanity_checking(self) -> bool: ...

    @property
    def should_stop(self) -> bool: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def interrupted(self) -> bool: ...


class Run(Protocol):
    """The run as a handler sees it: read-only attributes, and the named mutators below."""

    # -- where the run stands -------------------------------------------------------------------------------
    @property
    def state(self) -> RunState: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def max_epochs(self) -> int: ...

    @property
    def max_steps(self) -> int: ...

    @property
    def should_stop(self) -> bool: ...

    @property
    def sanity_checking(self) -> bool: ...

    @property
    def is_last_batch(self) -> bool: ...

    @property
    def should_log(self) -> bool:
        """Whether this training step is one ``log_every_n_steps`` writes."""

    @property
    def accumulate_grad_batches(self) -> int: ...

    @property
    def estimated_stepping_batches(self) -> float: ...

    @property
    def num_training_batches(self) -> float: ...

    @property
    def num_val_batches(self) -> list[float]: ...

    @property
    def num_sanity_val_batches(self) -> list[float]: ...

    @property
    def fast_dev_run(self) -> int | bool: ...

    @property
    def config(self) -> Any:
        """The validated Trainer arguments (:class:`surge.config.TrainerConfig`)."""

    # -- what runs ----------------------------------------------------------------------------------------
    @property
    def module(self) -> Any:
        """The user's :class:`surge.Module`."""

    @property
    def datamodule(self) -> Any: ...

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]: ...

    @property
    def lr_scheduler_configs(self) -> list[Any]: ...

    @property
    def strategy(self) -> Any: ...

    @property
    def accelerator(self) -> Any: ...

    @property
    def precision_plugin(self) -> Any: ...

    @property
    def profiler(self) -> Any: ...

    @property
    def train_dataloader(self) -> Any: ...

    @property
    def val_dataloaders(self) -> Any: ...

    @property
    def test_dataloaders(self) -> Any: ...

    @property
    def predict_dataloaders(self) -> Any: ...

    # -- processes ----------------------------------------------------------------------------------------
    @property
    def global_rank(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    # -- metrics, files, plugins --------------------------------------------------------------------------
    @property
    def callback_metrics(self) -> Mapping[str, torch.Tensor]: ...

    @property
    def logged_metrics(self) -> Mapping[str, torch.Tensor]: ...

    @property
    def progress_bar_metrics(self) -> Mapping[str, float]: ...

    @property
    def default_root_dir(self) -> str: ...

    @property
    def run_dir(self) -> str | None:
        """The run's versioned directory (created at the first write), or ``None`` when nothing writes."""

    @property
    def loggers(self) -> list[Any]: ...

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The active checkpointing plugins' objects (``ModelCheckpoint``)."""

    @property
    def checkpoint_callback(self) -> Any: ...

    @property
    def early_stopping_callback(self) -> Any: ...

    def event_order(self, event: str) -> list[str]: ...

    def plugin(self, name: str) -> object:
        """The object an active plugin's handlers run on (a :class:`LookupError` when none is named so)."""

    @property
    def event_names(self) -> list[str]:
        """The run's events: the core's, then those the active plugins declare."""

    def plugin_set(self) -> list[dict[str, Any]]: ...

    def dump_checkpoint(self, weights_only: bool = False) -> dict[str, Any]: ...

    def save_checkpoint(self, path: str, weights_only: bool = False) -> str: ...

    # -- the mutators ---------------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Stop the run at the next step boundary, ``reason`` recorded in ``state.stop_reason``. From any event."""

    def request_checkpoint(self, save: Callable[[Run], object], reason: str) -> None:
        """Run ``save(run)`` on the training thread at the next step boundary (any thread may call it)."""

    def log_metrics(
        self,
        metrics: Mapping[str, float | torch.Tensor],
        step: int | None = None,
        *,
        source: str,
        publish: bool = False,
    ) -> None:
        """Write ``metrics`` to every logger (observers' ``log_metrics`` event), ``source`` naming the writer;
        ``publish=True`` also adds them to ``callback_metrics`` (as the learning-rate monitor does)."""

    def emit(self, event: Event) -> None:
        """Publish an event an installed plugin declares (``surge.Plugin(events=[...])``) to its subscribers."""

    def set_accumulation(self, factor: int) -> None:
        """Accumulate gradients over ``factor`` batches from now on. Only in ``train_epoch_start`` (the factor
        changes at epoch boundaries, where no accumulation window is open); elsewhere it raises."""


# -- the view every event carries ------------------------------------------------------------------------------

_MUTATORS = (
    "request_stop(reason), request_checkpoint(save, reason), log_metrics(metrics, source=...), emit(event), "
    "set_accumulation(factor) (from train_epoch_start), save_checkpoint(path)"
)
_HOW = {
    "should_stop": "call trainer.request_stop(reason) to stop the run",
    "stop_reason": "call trainer.request_stop(reason) to stop the run",
    "accumulate_grad_batches": "call trainer.set_accumulation(factor) from a train_epoch_start handler",
    "callback_metrics": "call trainer.log_metrics(metrics, source=..., publish=True) to add values to it",
}


def _refusal(owner: str, name: str) -> AttributeError:
    how = _HOW.get(name, "the run's counters and settings change only as it runs")
    return AttributeError(
        f"{owner}.{name} is read-only to a handler: {how}. A handler changes the run only through the "
        f"trainer's named mutators: {_MUTATORS} (surge.events.run.Run; docs/events.md, 'Writing a handler')"
    )


class StateView:
    """``trainer.state`` as a handler sees it: every field of the run's state readable, none assignable."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        object.__setattr__(self, "_state", state)

    @property
    def stage(self) -> str | None:
        return self._state.stage  # type: ignore[no-any-return]

    @property
    def status(self) -> Status:
        return self._state.status  # type: ignore[no-any-return]

    @property
    def current_epoch(self) -> int:
        return self._state.current_epoch  # type: ignore[no-any-return]

    @property
    def global_step(self) -> int:
        return self._state.global_step  # type: ignore[no-any-return]

    @property
    def batch_idx(self) -> int:
        return self._state.batch_idx  # type: ignore[no-any-return]

    @property
    def sanity_checking(self) -> bool:
        return self._state.sanity_checking  # type: ignore[no-any-return]

    @property
    def should_stop(self) -> bool:
        return self._state.should_stop  # type: ignore[no-any-return]

    @property
    def stop_reason(self) -> str | None:
        return self._state.stop_reason  # type: ignore[no-any-return]

    @property
    def interrupted(self) -> bool:
        return self._state.interrupted  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:  # the state's other fields (total_batches, ...)
        if name.startswith("_"):
            raise AttributeError(f"trainer.state has no attribute {name!r} a handler may read")
        return getattr(self._state, name)

    def __setattr__(self, name: str, value: object) -> None:
        raise _refusal("trainer.state", name)

    def __delattr__(self, name: str) -> None:
        raise _refusal("trainer.state", name)

    def __repr__(self) -> str:
        return f"StateView({self._state!r})"


class RunView:
    """What every event carries as ``event.trainer``: the Trainer read-only, with its named mutators.

    Built once per Trainer (``trainer.view``). Reading forwards to the Trainer: the attributes handlers read every
    step are properties here, every other public one (``strategy``, ``plugin(name)``, ``optimizers``, ...)
    is the Trainer's own; ``state`` is a :class:`StateView` and ``callback_metrics``/``logged_metrics`` are
    read-only mappings. Assigning any attribute raises an ``AttributeError`` naming the mutator to use; the
    mutators (``request_stop``, ``request_checkpoint``, ``log_metrics``, ``emit``, ``set_accumulation``,
    ``save_checkpoint``) work as on the Trainer. What the view hands out (the Module, the optimizers, the strategy,
    a checkpoint dict) is the run's own object. The view equals the Trainer and hashes as it does, so state a plugin
    keeps per run is found under either.
    """

    __slots__ = ("_trainer", "_state", "state", "__weakref__")

    def __init__(self, trainer: Any) -> None:
        object.__setattr__(self, "_trainer", trainer)
        object.__setattr__(self, "_state", trainer.state)
        object.__setattr__(self, "state", StateView(trainer.state))

    # -- read every step: one attribute load from the state, no forwarding ----------------------------------------
    @property
    def global_step(self) -> int:
        return self._state.global_step  # type: ignore[no-any-return]

    @property
    def current_epoch(self) -> int:
        return self._state.current_epoch  # type: ignore[no-any-return]

    @property
    def should_stop(self) -> bool:
        return self._state.should_stop  # type: ignore[no-any-return]

    @property
    def sanity_checking(self) -> bool:
        return self._state.sanity_checking  # type: ignore[no-any-return]

    @property
    def interrupted(self) -> bool:
        return self._state.interrupted  # type: ignore[no-any-return]

    @property
    def module(self) -> Any:
        return self._trainer.module

    @property
    def is_global_zero(self) -> bool:
        return self._trainer.is_global_zero  # type: ignore[no-any-return]

    @property
    def accumulate_grad_batches(self) -> int:
        return self._trainer.accumulate_grad_batches  # type: ignore[no-any-return]

    @property
    def callback_metrics(self) -> Mapping[str, torch.Tensor]:
        return MappingProxyType(self._trainer.callback_metrics)

    @property
    def logged_metrics(self) -> Mapping[str, torch.Tensor]:
        return MappingProxyType(self._trainer.logged_metrics)

    # -- each evaluation stage's loaders, a list: Surge's shape, whatever shape a Trainer subclass gives its own API
    @property
    def val_dataloaders(self) -> list[Any]:
        return self._trainer._val_loaders  # type: ignore[no-any-return]

    @property
    def test_dataloaders(self) -> list[Any]:
        return self._trainer._test_loaders  # type: ignore[no-any-return]

    @property
    def predict_dataloaders(self) -> list[Any]:
        return self._trainer._predict_loaders  # type: ignore[no-any-return]

    # -- the rest of Run: forwarding properties added below; anything else public: the Trainer's --------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(
                f"event.trainer has no attribute {name!r}: the Trainer's private attributes are no part of the plugin "
                "contract (surge.events.run.Run lists what a handler may use)"
            )
        return getattr(self._trainer, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(n for n in dir(self._trainer) if not n.startswith("_"))})

    def __setattr__(self, name: str, value: object) -> None:
        raise _refusal("event.trainer", name)

    def __delattr__(self, name: str) -> None:
        raise _refusal("event.trainer", name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self._trainer

    def __hash__(self) -> int:
        return hash(self._trainer)

    def __repr__(self) -> str:
        return f"RunView({self._trainer!r})"


def _forwarding(name: str) -> property:
    return property(lambda view: getattr(view._trainer, name), doc=f"The Trainer's ``{name}``.")


# Each member of Run that RunView does not define reads through a property of its own: a plain lookup, where
# __getattr__ would run only after a failed one (several times slower; it serves what Run does not list).
for _name in [n for n in vars(Run) if not n.startswith("_") and n not in vars(RunView)]:
    setattr(RunView, _name, _forwarding(_name))


def trainer_of(run: object) -> Any:
    """The Trainer behind ``run`` (a :class:`RunView`), or ``run`` itself. For adapters that hand another
    framework's callbacks the Trainer itself, as that framework does (a Lightning callback sets
    ``trainer.should_stop``), and for the user's Module (``self.trainer``); a plugin's own handlers keep the view."""
    return run._trainer if type(run) is RunView else run
