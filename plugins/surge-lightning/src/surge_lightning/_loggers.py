"""The bus subscriber standing for a Lightning :class:`~surge_lightning.pytorch.loggers.logger.Logger` passed in
``Trainer(logger=...)`` (what its ``__surge_subscriber__`` returns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import surge

if TYPE_CHECKING:
    from surge import events as ev

    from surge_lightning.pytorch.loggers.logger import Logger

__all__ = ["LoggerAdapter"]

_STAGES = frozenset({"train", "validation", "test", "predict"})
"""``LogMetrics.stage`` values of the Trainer's own writes; any other is a plugin's (``trainer.log_metrics``),
which Lightning's callbacks write straight to the loggers, without ``epoch`` and without ``save()``."""


class LoggerAdapter:
    """The bus subscriber standing for a :class:`Logger` passed in ``Trainer(logger=...)`` (an observer, as every
    logger): its handlers call the logger's methods where Lightning's Trainer calls them."""

    surge_kind = "observer"

    def __init__(self, logger: Logger) -> None:
        self.__wrapped__ = logger  # what the Trainer returns in trainer.loggers, and the bus names in its messages
        name = getattr(logger, "surge_name", None)
        self.surge_name = name if isinstance(name, str) and name else type(logger).__name__
        self._graph_due = False

    def __repr__(self) -> str:
        return f"LoggerAdapter({self.__wrapped__!r})"

    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        hasattr(self.__wrapped__, "experiment")  # made before the run, as Lightning does: the version is chosen now
        self._graph_due = event.stage != "predict"

    @surge.hookimpl
    def log_hyperparams(self, event: ev.LogHyperparams) -> None:
        self.__wrapped__.log_hyperparams(dict(event.params))
        self._started(event.trainer, saved_something=True)

    # Without hyper-parameters, the run's start is the first of these (once per run, by _graph_due).
    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        self._started(event.trainer)

    @surge.hookimpl
    def validation_start(self, event: ev.ValidationStart) -> None:
        self._started(event.trainer)

    @surge.hookimpl
    def test_start(self, event: ev.TestStart) -> None:
        self._started(event.trainer)

    def _started(self, trainer: Any, saved_something: bool = False) -> None:
        """The end of a run's start, as in Lightning: the graph, after the hyper-parameters, then ``save()``."""
        graph, self._graph_due = self._graph_due, False
        if graph:
            self.__wrapped__.log_graph(trainer.module)
        if graph or saved_something:
            self.__wrapped__.save()

    @surge.hookimpl
    def log_metrics(self, event: ev.LogMetrics) -> None:
        if event.stage not in _STAGES:
            self.__wrapped__.log_metrics(dict(event.metrics), step=event.step)
            return
        metrics: dict[str, float] = dict(event.metrics)
        metrics.setdefault("epoch", event.epoch)
        self.__wrapped__.log_metrics(metrics, step=event.step)
        self.__wrapped__.save()

    @surge.hookimpl
    def after_checkpoint_save(self, event: ev.AfterCheckpointSave) -> None:
        self.__wrapped__.after_save_checkpoint(event.trainer.checkpoint_callback)

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        self.__wrapped__.finalize("success" if event.trainer.state.status == "finished" else "failed")
