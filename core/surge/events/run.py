"""What a handler sees of the run: :class:`Run`, the type of every event's ``trainer`` field.

The Trainer is the object behind it; this protocol is the part of it that is the plugin contract. Every
attribute here is read-only to a handler (a property: assigning one is a type error), and the run changes only
through the named mutators at the end (:meth:`Run.request_stop`, :meth:`Run.request_checkpoint`,
:meth:`Run.log_metrics`, :meth:`Run.set_accumulation`), each documented with the events it may be called from.
Anything a handler reaches outside this protocol is not part of the contract and may change without notice.

Provider objects (``strategy``, ``accelerator``, ``precision_plugin``) are typed by their own protocols in
:mod:`surge.plugins.backends`; here they are ``Any`` because this module sits below the plugins layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

    def request_checkpoint(self, save: Callable[[Any], object], reason: str) -> None:
        """Run ``save(trainer)`` on the training thread at the next step boundary (any thread may call it)."""

    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None, *, source: str) -> None:
        """Write ``metrics`` to every logger (observers' ``log_metrics`` event), ``source`` naming the writer."""

    def emit(self, event: Event) -> None:
        """Publish an event an installed plugin declares (``surge.Plugin(events=[...])``) to its subscribers."""

    def set_accumulation(self, factor: int) -> None:
        """Accumulate gradients over ``factor`` batches from now on. Only in ``train_epoch_start`` (the factor
        changes at epoch boundaries, where no accumulation window is open); elsewhere it raises."""
