"""Lightning's ``TensorBoardLogger`` (``surge_lightning.pytorch.loggers.TensorBoardLogger``): Lightning's arguments,
directories and methods, written with this plugin's TensorBoard records (:mod:`surge_tensorboard._tb`).

Event files go to ``save_dir/name/version_N[/sub_dir]``, N the next free version when the run starts, as in
Lightning; ``hparams.yaml`` next to them once the run ends well. Hyper-parameters are this plugin's hparams
records (no experiment record, so the HPARAMS tab gathers every run), with ``hp_metric = -1`` unless
``default_hp_metric=False``; the run's outcome is recorded when it ends.
"""

from __future__ import annotations

import inspect
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import fsspec
import surge
from surge.rank_zero import rank_zero_only, rank_zero_warn
from surge_lightning.file_loggers import VersionedLogger
from surge_lightning.pytorch.core.saving import save_hparams_to_yaml
from surge_lightning.pytorch.loggers.logger import rank_zero_experiment

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger(VersionedLogger):
    """Lightning's ``TensorBoardLogger(save_dir, name="lightning_logs", version=None, log_graph=False,
    default_hp_metric=True, prefix="", sub_dir=None, **kwargs)``; ``kwargs`` go to the ``SummaryWriter``
    (``flush_secs``, ``max_queue``, ...)."""

    NAME_HPARAMS_FILE = "hparams.yaml"
    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        from surge_tensorboard import _tb  # the writer's arguments are checked now, before anything is written

        try:
            inspect.signature(_tb.SummaryWriter).bind("log_dir", **kwargs)
        except TypeError as exc:
            raise surge.SurgeError(
                f"TensorBoardLogger(**{kwargs!r}): {exc}; its extra keyword arguments are those of "
                "torch.utils.tensorboard.SummaryWriter (flush_secs, max_queue, filename_suffix, ...)"
            ) from None
        self._save_dir = os.fspath(save_dir)
        self._name = name or ""
        self._version = version
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._kwargs = kwargs
        self._fs = fsspec.core.url_to_fs(self._save_dir)[0]
        self._experiment: SummaryWriter | None = None
        self._hparams_written = False
        self._last_step = 0
        self.hparams: dict[str, Any] = {}

    # -- where ------------------------------------------------------------------------------------------
    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    def log_dir(self) -> str:
        log_dir = self.surge_run_dir
        if self._sub_dir is not None:
            log_dir = os.path.join(log_dir, self._sub_dir)
        return os.path.expanduser(os.path.expandvars(log_dir))

    @property
    def surge_run_dir(self) -> str:
        """``root_dir/version_N`` (or the version string): the run directory of a Trainer whose first logger
        this is, where its checkpoints go, as Lightning's."""
        return self.versioned_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> SummaryWriter:
        """The ``torch.utils.tensorboard.SummaryWriter`` writing into :attr:`log_dir`."""
        if self._experiment is None:
            from surge_tensorboard import _tb

            if self.root_dir:
                self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _tb.SummaryWriter(log_dir=self.log_dir, **self._kwargs)
        return self._experiment

    # -- what -------------------------------------------------------------------------------------------
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        from surge_tensorboard import _tb

        values: dict[str, float] = {}
        for key, value in _prefixed(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, Mapping):
                self.experiment.add_scalars(key, dict(value), step)
                continue
            try:
                values[key] = float(value.item() if hasattr(value, "item") else value)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"TensorBoardLogger.log_metrics: {key}={value!r} is not a number ({exc}); log a number, a "
                    "0-d tensor or a dict of them (the dict becomes add_scalars)"
                ) from None
        if values:
            _tb.add_summary(self.experiment, _tb.scalars(values), step)  # type: ignore[arg-type]
        self._last_step = self._last_step if step is None else step

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, metrics: Any = None, step: int | None = None) -> None:
        """Keep ``params`` for ``hparams.yaml``; with ``metrics`` (``{"hp_metric": -1}`` by default), write them
        and the hparams record. Without either, TensorBoard gets nothing, as in Lightning."""
        from surge_tensorboard import _tb

        params = _plain_params(params)
        self.hparams.update(params)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else None
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if metrics:
            self.log_metrics(metrics, step)
            _tb.add_summary(self.experiment, _tb.session_start(_tb.flatten_hparams(params)), step)  # type: ignore[arg-type]
            self._hparams_written = True

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        if not self._log_graph:
            return
        import torch

        from surge_tensorboard import _tb

        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None:
            rank_zero_warn(
                "Could not log computational graph to TensorBoard: The `model.example_input_array` attribute is "
                "not set or `input_array` was not given."
            )
        elif not isinstance(example, (torch.Tensor, tuple)):
            rank_zero_warn(
                f"Could not log computational graph to TensorBoard: the input has type {type(example)}, which "
                "can't be traced; make it a tensor, or a tuple of the positional arguments of `forward()`."
            )
        else:
            trainer = model.trainer  # on the run's device and in its precision, as a batch
            example = trainer.precision_plugin.convert_input(trainer.strategy.batch_to_device(example))
            _tb.add_graph(self.experiment, model, example)

    @rank_zero_only
    def save(self) -> None:
        """Flush the writer, and write ``hparams.yaml`` into :attr:`log_dir` if it is not there yet."""
        self.experiment.flush()
        hparams_file = os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)
        if self._fs.isdir(self.log_dir) and not self._fs.isfile(hparams_file):
            save_hparams_to_yaml(hparams_file, self.hparams)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Record the run's outcome (after hyper-parameters), write ``hparams.yaml`` if the run succeeded, and
        close the writer; a later run of this logger opens a new one in the same directory."""
        if self._experiment is None:
            return
        if self._hparams_written:  # for the HPARAMS tab
            from surge_tensorboard import _tb

            outcome = "finished" if status in ("success", "finished") else "failed"
            _tb.add_summary(self._experiment, _tb.session_end(outcome), self._last_step)
        if status == "success":
            self.save()
        writer, self._experiment, self._hparams_written = self._experiment, None, False
        writer.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_experiment": None}


def _prefixed(metrics: Mapping[str, Any], prefix: str, separator: str) -> Mapping[str, Any]:
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()} if prefix else metrics


def _plain_params(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    if isinstance(params, Namespace):
        return vars(params)
    return dict(params or {})
