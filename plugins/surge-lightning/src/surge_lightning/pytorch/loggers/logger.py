"""``lightning.pytorch.loggers.logger``: :class:`Logger`, the base of a logger object passed in
``Trainer(logger=...)``, and ``rank_zero_experiment``, the decorator of its ``experiment``.

A ``Logger`` joins Surge's bus through its ``__surge_subscriber__``: an observer, as every logger, whose handlers
call the logger's methods where Lightning's Trainer calls them: ``log_metrics`` then ``save`` at every write (with
``epoch`` added, as Lightning adds it), ``log_hyperparams`` then ``save`` when a run starts, followed by ``log_graph``
and ``save``, ``after_save_checkpoint`` after each checkpoint save, and ``finalize`` with ``"success"`` or
``"failed"`` at the end of each run. Metrics and hyper-parameters reach global rank zero only (Surge writes them
there); the rest runs on every rank, as in Lightning, whose loggers guard their methods with ``@rank_zero_only``
and their ``experiment`` with ``@rank_zero_experiment``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from argparse import Namespace
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from surge.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from surge_lightning._loggers import LoggerAdapter

__all__ = ["DummyExperiment", "Logger", "rank_zero_experiment"]

_F = TypeVar("_F", bound=Callable[..., Any])


class Logger(ABC):
    """Lightning's ``Logger``: subclass it and implement ``name``, ``version``, ``log_metrics(metrics, step)``
    and ``log_hyperparams(params)``; ``log_dir``, ``save_dir``, ``root_dir``, ``experiment``, ``log_graph``,
    ``save``, ``finalize(status)`` and ``after_save_checkpoint`` are optional. Pass it in
    ``Trainer(logger=[...])``, where its adapter joins the bus for it; ``self.logger``,
    ``self.loggers`` and ``trainer.loggers`` return it as given."""

    @property
    @abstractmethod
    def name(self) -> str | None:
        """The experiment's name."""

    @property
    @abstractmethod
    def version(self) -> int | str | None:
        """The experiment's version."""

    @property
    def root_dir(self) -> str | None:
        """The directory holding every version of the experiment; ``None`` when nothing is saved locally."""
        return None

    @property
    def log_dir(self) -> str | None:
        """The directory of this version of the experiment; ``None`` when nothing is saved locally."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The root directory of the logs; ``None`` when nothing is saved locally."""
        return None

    @property
    def group_separator(self) -> str:
        return "/"

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record ``metrics`` at ``step``, as soon as they are received."""

    @abstractmethod
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Record the hyper-parameters."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:  # noqa: B027 (optional, as in Lightning)
        """Record the model's graph (``input_array``: the input of its ``forward``)."""

    def save(self) -> None:  # noqa: B027 (optional, as in Lightning)
        """Write out what is buffered."""

    def finalize(self, status: str) -> None:
        """End the experiment; ``status`` is ``"success"`` or ``"failed"``."""
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:  # noqa: B027 (optional, as in Lightning)
        """Called after each checkpoint save, with the Trainer's ``checkpoint_callback``."""

    def __surge_subscriber__(self) -> LoggerAdapter:
        """What joins Surge's bus for this logger when it is passed in ``Trainer(logger=...)`` (its adapter)."""
        from surge_lightning._loggers import LoggerAdapter

        return LoggerAdapter(self)


class DummyExperiment:
    """What ``experiment`` is on ranks other than zero: every method call does nothing."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self.nop

    def __getitem__(self, idx: Any) -> DummyExperiment:
        return self

    def __setitem__(self, *args: Any) -> None:
        pass


def rank_zero_experiment(fn: _F) -> _F:
    """Lightning's decorator for a logger's ``experiment`` property: the real object on global rank zero, one
    that does nothing elsewhere."""

    @functools.wraps(fn)
    def experiment(self: Logger) -> Any:
        return fn(self) if rank_zero_only.rank == 0 else DummyExperiment()

    return experiment  # type: ignore[return-value]
