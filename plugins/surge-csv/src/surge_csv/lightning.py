"""Lightning's ``CSVLogger`` (``surge_lightning.pytorch.loggers.CSVLogger``): Lightning's arguments, directories and file
columns, written with this plugin's metrics file (:class:`surge_csv._file.MetricsFile`).

``save_dir/name/version_N`` gets ``metrics.csv`` (columns sorted, ``step`` among them, one row per
``log_metrics``) and ``hparams.yaml``, as Lightning's. Each row is appended whole as it is logged, so a killed
run keeps every row; ``flush_logs_every_n_steps`` (Lightning's buffer size) therefore changes nothing.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

import fsspec
from surge.rank_zero import rank_zero_only, rank_zero_warn
from surge_lightning.file_loggers import VersionedLogger
from surge_lightning.pytorch.core.saving import save_hparams_to_yaml
from surge_lightning.pytorch.loggers.logger import rank_zero_experiment

from surge_csv._file import MetricsFile

__all__ = ["CSVLogger", "ExperimentWriter"]


class ExperimentWriter:
    """``CSVLogger.experiment``: ``metrics.csv`` and ``hparams.yaml`` in ``log_dir``. An existing
    ``metrics.csv`` there is replaced (with a warning), as in Lightning."""

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        self.hparams: dict[str, Any] = {}
        fs = fsspec.core.url_to_fs(log_dir)[0]
        if fs.exists(log_dir) and fs.ls(log_dir):
            rank_zero_warn(
                f"Experiment logs directory {log_dir} exists and is not empty. Previous log files in this directory "
                "will be deleted when the new ones are saved!"
            )
            if fs.isfile(self.metrics_file_path):
                fs.rm_file(self.metrics_file_path)
        fs.makedirs(log_dir, exist_ok=True)
        self._file = MetricsFile(self.metrics_file_path, sort_columns=True)

    @property
    def metrics_keys(self) -> list[str]:
        """The columns of ``metrics.csv``."""
        return list(self._file.columns)

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
        """Append a row (tensors as their numbers); ``step`` defaults to the number of rows so far."""
        row = {key: value.item() if hasattr(value, "item") else value for key, value in metrics_dict.items()}
        row["step"] = self._file.rows if step is None else step
        self._file.append(row)

    def log_hparams(self, params: Mapping[str, Any]) -> None:
        """Merge ``params`` into the hyper-parameters and rewrite ``hparams.yaml``."""
        self.hparams.update(params)
        save_hparams_to_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def save(self) -> None:
        """Nothing to do: each row is on disk once logged."""

    def close(self) -> None:
        """Close the file (the next row opens it again)."""
        self._file.close()


class CSVLogger(VersionedLogger):
    """Lightning's ``CSVLogger(save_dir, name="lightning_logs", version=None, prefix="",
    flush_logs_every_n_steps=100)``."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        self._save_dir = os.fspath(save_dir)
        self._name = name or ""
        self._version = version
        self._prefix = prefix
        self._flush_logs_every_n_steps = flush_logs_every_n_steps
        self._fs = fsspec.core.url_to_fs(self._save_dir)[0]
        self._experiment: ExperimentWriter | None = None

    @property
    def log_dir(self) -> str:
        return self.versioned_dir

    @property
    def surge_run_dir(self) -> str:
        """:attr:`log_dir`: the run directory of a Trainer whose first logger this is, where its checkpoints
        go, as Lightning's."""
        return self.log_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ExperimentWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}": value for key, value in metrics.items()}
        self.experiment.log_metrics(metrics, step)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace | None = None) -> None:
        self.experiment.log_hparams(vars(params) if isinstance(params, Namespace) else dict(params or {}))

    @rank_zero_only
    def save(self) -> None:
        self.experiment.save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is not None:
            self._experiment.close()
