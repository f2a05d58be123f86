"""``TensorBoardLogger``: which events become which TensorBoard records, and when they reach the disk.

Scalars come from ``log_metrics`` and are flushed at once, so a killed run leaves every write before the
kill readable; hyper-parameters from ``log_hyperparams``; the graph, histograms and the run's outcome from
the loop's own events. Only global rank zero writes.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import TYPE_CHECKING, Annotated, Any

import surge
from loguru import logger
from pydantic import AfterValidator, Field

if TYPE_CHECKING:
    from surge import events as ev
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardConfig", "TensorBoardLogger"]

_HISTOGRAM_HOOKS = frozenset({"train_epoch_start", "before_optimizer_step", "train_epoch_end"})
_GRADIENT_HOOKS = frozenset({"train_epoch_start", "before_optimizer_step"})


def _relative(value: str | None) -> str | None:
    if value is not None and (
        not value or "://" in value or PurePath(value).is_absolute() or ".." in PurePath(value).parts
    ):
        raise ValueError(f"{value!r} must be a relative path inside the run directory, e.g. 'tensorboard'")
    return value


class TensorBoardLogger:
    """Writes a run's metrics, hyper-parameters, graph and histograms as TensorBoard event files.

    The ``tensorboard`` plugin builds one per Trainer from its settings; an instance can also be passed
    directly (``Trainer(logger=[TensorBoardLogger(log_graph=True)])``); its keyword arguments are the
    plugin's settings.

    Args:
        sub_dir: Write into ``<run_dir>/<sub_dir>`` instead of the run directory itself (TensorBoard then shows
            the run as ``version_N/<sub_dir>``). A relative path.
        log_graph: Add the model's graph, traced on the Module's ``example_input_array``, once per run
            directory.
        histograms_every_n_epochs: Every n training epochs, histograms of the weights (at the epoch's end) and,
            with ``histogram_gradients``, of the gradients (at the epoch's first optimizer step). ``None``:
            none.
        histogram_gradients: Include gradient histograms when ``histograms_every_n_epochs`` is set.
        default_hp_metric: Write Lightning's ``hp_metric = -1`` placeholder when hyper-parameters are logged at
            step 0. The HPARAMS tab works without it (every scalar is offered as a metric); turn it on for
            dashboards that expect ``hp_metric``, and log the real value under that name.
        flush_secs: Background flush interval for records not followed by a metrics write. Metrics are flushed
            at every ``log_metrics`` regardless.
    """

    surge_name = "tensorboard"
    surge_kind = "observer"

    @surge.validated
    def __init__(
        self,
        *,
        sub_dir: Annotated[str | None, AfterValidator(_relative)] = None,
        log_graph: bool = False,
        histograms_every_n_epochs: Annotated[int | None, Field(ge=1)] = None,
        histogram_gradients: bool = True,
        default_hp_metric: bool = False,
        flush_secs: Annotated[float, Field(gt=0)] = 120.0,
    ) -> None:
        self.sub_dir = sub_dir
        self.log_graph = log_graph
        self.histograms_every_n_epochs = histograms_every_n_epochs
        """Read by ``train_epoch_end``'s ``@surge.hookimpl(every_n_epochs=...)`` when a run starts."""
        self.histogram_gradients = histogram_gradients
        self.default_hp_metric = default_hp_metric
        self.flush_secs = flush_secs
        self.log_dir: str | None = None
        """Where the current (or last) run's event files go; ``None`` before a run and on other ranks."""
        self._active = False  # between setup and teardown, on global rank zero
        self._writer: SummaryWriter | None = None
        self._hparams_written = False
        self._graph_dir: str | None = None  # the directory the graph was last written to
        self._epoch_step: int | None = None  # the step the ``epoch`` scalar was last written at
        self._gradients_due = False
        self._other_rank = False  # the last run's setup found this process is not global rank zero

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        """Without histograms (or without gradient histograms) the per-epoch and per-step handlers are not
        dispatched at all."""
        if self.histograms_every_n_epochs is None:
            return _HISTOGRAM_HOOKS
        return frozenset() if self.histogram_gradients else _GRADIENT_HOOKS

    @property
    def writer(self) -> SummaryWriter | None:
        """The current run's ``torch.utils.tensorboard.SummaryWriter``, for records of your own
        (``add_image``, ``add_text``, ...): ``None`` outside a run and on ranks other than zero."""
        return self._open() if self._active else None

    @property
    def experiment(self) -> Any:
        """Lightning's ``logger.experiment``: the run's ``SummaryWriter`` (:attr:`writer`), as
        ``self.logger.experiment.add_image(...)`` in a step uses it. On ranks other than zero, which write
        nothing, an object whose every method does nothing, as Lightning's; outside a run, an error."""
        if self._active:
            return self._open()
        if self._other_rank:
            return _NoExperiment()
        raise surge.SurgeError(
            "tensorboard: logger.experiment is the SummaryWriter of a running fit, validate or test, open from the "
            "logger's setup to its teardown; use it in the steps and the on_* hooks (from on_fit_start), or read "
            f"the event files in log_dir ({self.log_dir or 'no run yet'}) afterwards"
        )

    # -- run brackets -----------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        trainer = event.trainer
        self._close()
        self._hparams_written, self._epoch_step, self._gradients_due = False, None, False
        self._other_rank = not trainer.is_global_zero
        self._active = trainer.is_global_zero and trainer.run_dir is not None
        if not self._active:
            self.log_dir = None  # setup fires on every rank; only global rank zero has a run directory
            return
        assert trainer.run_dir is not None
        sub_dir = self.sub_dir
        run_dir = trainer.run_dir
        if sub_dir is None:
            self.log_dir = run_dir
        elif "://" in run_dir:
            self.log_dir = f"{run_dir.rstrip('/')}/{sub_dir}"
        else:
            self.log_dir = os.path.join(run_dir, sub_dir)
        if self.log_graph and event.stage != "predict" and self._graph_dir != self.log_dir:
            self._graph_dir = self.log_dir
            self._add_graph(trainer)

    @surge.hookimpl
    def exception(self, event: ev.Exception_) -> None:
        self._flush()

    @surge.hookimpl
    def keyboard_interrupt(self, event: ev.KeyboardInterrupt_) -> None:
        self._flush()

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        self._active = False
        try:
            if self._writer is not None and self._hparams_written:  # the run's outcome, for the HPARAMS tab
                from surge_tensorboard import _tb

                trainer = event.trainer
                _tb.add_summary(self._writer, _tb.session_end(trainer.state.status), trainer.global_step)
        finally:
            self._close()

    # -- what the loggers' events carry ---------------------------------------------------------------------
    @surge.hookimpl
    def log_hyperparams(self, event: ev.LogHyperparams) -> None:
        if not self._active:
            return
        from surge_tensorboard import _tb

        writer, step = self._open(), event.trainer.global_step
        _tb.add_summary(writer, _tb.session_start(_tb.flatten_hparams(event.params)), step)
        self._hparams_written = True
        if self.default_hp_metric and step == 0:  # a resumed run's placeholder would predate its data
            _tb.add_summary(writer, _tb.scalars({"hp_metric": -1.0}), 0)

    @surge.hookimpl
    def log_metrics(self, event: ev.LogMetrics) -> None:
        if not self._active:
            return
        from surge_tensorboard import _tb

        values = dict(event.metrics)
        # As in Lightning, an ``epoch`` series maps steps to epochs; once per step, not once per write.
        if "epoch" not in values and event.step != self._epoch_step:
            values["epoch"] = float(event.epoch)
            self._epoch_step = event.step
        writer = self._open()
        _tb.add_summary(writer, _tb.scalars(values), event.step)
        writer.flush()  # a killed run keeps every write up to here

    # -- histograms -------------------------------------------------------------------------------------
    @surge.hookimpl  # not filtered: in the other epochs it clears a flag left set by an epoch without a step
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        self._gradients_due = self._histogram_epoch(event.epoch)

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        if not self._gradients_due:
            return
        self._gradients_due = False
        from surge_tensorboard import _tb

        grads = {name: p.grad for name, p in event.module.named_parameters() if p.grad is not None}
        # at the step this update makes, where the batch's training loss is logged too
        _tb.add_histograms(self._open(), "gradients", grads, event.trainer.global_step + 1)

    @surge.hookimpl(every_n_epochs="histograms_every_n_epochs")  # None: not dispatched
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        if not self._active:
            return
        from surge_tensorboard import _tb

        weights = dict(event.module.named_parameters())
        _tb.add_histograms(self._open(), "weights", weights, event.trainer.global_step)

    def _histogram_epoch(self, epoch: int) -> bool:
        n = self.histograms_every_n_epochs
        return self._active and n is not None and (epoch + 1) % n == 0

    # -- the writer -------------------------------------------------------------------------------------
    def _add_graph(self, trainer: surge.Trainer) -> None:
        module = trainer.module
        example = getattr(module, "example_input_array", None)
        if example is None:
            logger.warning(
                "tensorboard: log_graph=True, but {} has no example_input_array; set it in __init__ (e.g. "
                "self.example_input_array = torch.zeros(1, 8)) to log the graph, or set log_graph=False",
                type(module).__name__,
            )
            return
        from surge_tensorboard import _tb

        try:
            example = trainer.precision_plugin.convert_input(trainer.strategy.batch_to_device(example))  # as a batch
            _tb.add_graph(self._open(), module, example)
        except Exception as exc:  # a graph the tracer cannot follow should not stop the training
            logger.warning(
                "tensorboard: could not trace {} for log_graph ({}: {}); the run goes on without its graph",
                type(module).__name__,
                type(exc).__name__,
                exc,
            )

    def _open(self) -> SummaryWriter:
        if self._writer is None:
            from surge_tensorboard import _tb

            assert self._active and self.log_dir is not None
            self._writer = _tb.SummaryWriter(self.log_dir, flush_secs=self.flush_secs)
        return self._writer

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


class _NoExperiment:
    """What ``experiment`` is on ranks other than zero: every method call does nothing (Lightning's
    ``DummyExperiment``), so a step that writes images runs unchanged on every process."""

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self._nothing

    def __getitem__(self, key: Any) -> _NoExperiment:
        return self


TensorBoardConfig = surge.settings_model(TensorBoardLogger)
"""The ``tensorboard`` plugin's settings, derived from :class:`TensorBoardLogger`'s signature."""
