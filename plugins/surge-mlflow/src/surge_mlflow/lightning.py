"""Lightning's ``MLFlowLogger`` (``surge_lightning.pytorch.loggers.MLFlowLogger``): Lightning's arguments and methods,
written through this plugin's tracking store (:class:`surge_mlflow._store.Store`, every write synchronous and
every failure naming the store).

As Lightning's: the tracking URI is ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else ``file:<save_dir>``
(MLflow 3 refuses that file store unless ``MLFLOW_ALLOW_FILE_STORE=true``; pass ``sqlite:///...`` instead); the
run is created on first use of ``experiment`` (the run's setup); ``name`` is the experiment id and ``version``
the run id; nested hyper-parameters become ``a/b`` params; metric names MLflow refuses are made valid, with a
warning; ``finalize`` ends the run FINISHED or FAILED; ``log_model=True`` uploads the checkpoint callback's files
at the end, ``"all"`` (or ``True`` with ``save_top_k=-1``) after each save, under the file's stem.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import surge
from surge.rank_zero import rank_zero_only, rank_zero_warn
from surge_lightning.pytorch.loggers.logger import Logger, rank_zero_experiment

from surge_mlflow import _names
from surge_mlflow._logger import TrackingStoreError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from surge_mlflow._store import Store

__all__ = ["MLFlowLogger"]

_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}
_PARAM_VALUE_LENGTH = 250  # Lightning's cut


class MLFlowLogger(Logger):
    """Lightning's ``MLFlowLogger(experiment_name="lightning_logs", run_name=None, tracking_uri=None,
    tags=None, save_dir="./mlruns", log_model=False, prefix="", artifact_location=None, run_id=None,
    synchronous=None)``; ``synchronous`` changes nothing, as every write is synchronous."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        if log_model not in (True, False, "all"):
            raise surge.SurgeError(
                f"MLFlowLogger(log_model={log_model!r}): use False (no checkpoints), True (the checkpoint "
                "callback's files at the end of the fit) or 'all' (each checkpoint as it is saved)"
            )
        self._tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"file:{save_dir}"
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._run_id = run_id
        self._experiment_id: str | None = None
        self.tags = dict(tags or {})
        self._log_model = log_model
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._store: Store | None = None
        self._checkpoint_callback: Any = None
        self._logged_model_time: dict[str, float] = {}

    # -- the run ------------------------------------------------------------------------------------------
    @property
    @rank_zero_experiment
    def experiment(self) -> MlflowClient:
        """The ``MlflowClient`` of the tracking store; its first use creates the experiment if needed and the
        run (or finds ``run_id``)."""
        return self._open().client

    def _open(self) -> Store:
        if self._store is not None:
            return self._store
        from surge_mlflow._store import Store

        store = Store(self._tracking_uri)
        if self._run_id is not None:
            if not store.run_exists(self._run_id):
                raise TrackingStoreError(
                    f"MLFlowLogger(run_id={self._run_id!r}): no such run in the tracking store {store.uri!r}; check "
                    "run_id and tracking_uri, or leave run_id out to start a new run",
                    uri=store.uri,
                )
            self._experiment_id = str(store.client.get_run(self._run_id).info.experiment_id)
        else:
            from mlflow.tracking.context.registry import resolve_tags  # the user, the source, its git commit

            self._experiment_id = store.experiment_id(self._experiment_name, self._artifact_location)
            tags = {key: _names.tag_value(value) for key, value in resolve_tags(self.tags).items()}
            self._run_id = store.create_run(self._experiment_id, self._run_name, tags)
        self._store = store
        return store

    @property
    def run_id(self) -> str | None:
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        """The experiment's id."""
        return self.experiment_id

    @property
    def version(self) -> str | None:
        """The run's id."""
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The directory of a ``file:`` store, else ``None``."""
        return self._tracking_uri[len("file:") :] if self._tracking_uri.startswith("file:") else None

    # -- what ---------------------------------------------------------------------------------------------
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        store = self._open()
        flat = dict(_flatten(vars(params) if isinstance(params, Namespace) else dict(params or {}), ""))
        store.log_params(self._run(), {_names.valid_name(k): str(v)[:_PARAM_VALUE_LENGTH] for k, v in flat.items()})

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        store = self._open()
        values: dict[str, float] = {}
        for key, value in metrics.items():
            key = f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key
            if isinstance(value, str):
                rank_zero_warn(f"MLFlowLogger: discarding the metric {key}={value!r}, a string")
                continue
            name = _names.valid_name(key)
            if name != key:
                rank_zero_warn(f"MLFlowLogger: MLflow refuses the metric name {key!r}; it is logged as {name!r}")
            values[name] = float(value.item() if hasattr(value, "item") else value)
        store.log_metrics(self._run(), values, step or 0)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if self._store is None:
            return
        if self._checkpoint_callback is not None:
            self._log_checkpoints(self._checkpoint_callback)
        self._store.terminate(self._run(), _STATUS.get(status, status))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if checkpoint_callback is None:
            return
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback

    def _run(self) -> str:
        assert self._run_id is not None
        return self._run_id

    def _log_checkpoints(self, checkpoint_callback: Any) -> None:
        """Upload the callback's local checkpoint files that are new or changed since last uploaded."""
        paths = {checkpoint_callback.last_model_path, checkpoint_callback.best_model_path}
        paths |= set(checkpoint_callback.best_k_models)
        for path in sorted(p for p in paths if p and os.path.isfile(p)):
            modified = os.path.getmtime(path)
            if self._logged_model_time.get(path, -1.0) < modified:
                self._open().upload(self._run(), [path], Path(path).stem)
                self._logged_model_time[path] = modified


def _flatten(params: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{name}/")
        else:
            yield name, value
