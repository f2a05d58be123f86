"""The MLflow side: one ``MlflowClient`` on one tracking store, every call's failure named with the store.

Imported only when a run starts on global rank zero: importing MLflow takes about a second, and plugin
discovery imports ``surge_mlflow`` in every ``Trainer()``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from surge_mlflow import _names
from surge_mlflow._logger import TrackingStoreError

_SQLITE = "sqlite:///"
_MISSING = "RESOURCE_DOES_NOT_EXIST"
_EXISTS = "RESOURCE_ALREADY_EXISTS"


def now_ms() -> int:
    return int(time.time() * 1000)


class Store:
    """A tracking store at ``uri``. Every method raises :class:`TrackingStoreError` naming the URI and what
    was attempted when MLflow (or the store behind it) fails."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        with self._calling("connecting to"):
            if uri.startswith(_SQLITE) and ":memory:" not in uri:  # SQLite creates the file, not its directory
                Path(uri[len(_SQLITE) :]).parent.mkdir(parents=True, exist_ok=True)
            self.client = MlflowClient(tracking_uri=uri)

    @contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        try:
            yield
        except TrackingStoreError:
            raise
        except Exception as exc:
            raise TrackingStoreError(
                f"mlflow: {what} the tracking store {self.uri!r} failed: {type(exc).__name__}: {_first_line(exc)}. "
                "Check the URI (Trainer(plugins={'mlflow': {'tracking_uri': ...}})), that the server is running "
                "and reachable, and its credentials",
                uri=self.uri,
            ) from exc

    def experiment_id(self, name: str, artifact_location: str | None) -> str:
        """The id of the active experiment ``name``, created (with ``artifact_location``) if missing."""
        with self._calling(f"looking up experiment {name!r} in"):
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                try:
                    return str(self.client.create_experiment(name, artifact_location=artifact_location))
                except MlflowException as exc:  # another process created it meanwhile
                    if exc.error_code != _EXISTS:
                        raise
                    experiment = self.client.get_experiment_by_name(name)
                    assert experiment is not None
        if experiment.lifecycle_stage != "active":
            raise TrackingStoreError(
                f"mlflow: experiment {name!r} in {self.uri!r} is deleted; restore it (`mlflow experiments restore "
                f"--experiment-id {experiment.experiment_id}`) or choose another experiment_name",
                uri=self.uri,
            )
        return str(experiment.experiment_id)

    def run_exists(self, run_id: str) -> bool:
        with self._calling(f"looking up run {run_id} in"):
            try:
                self.client.get_run(run_id)
            except MlflowException as exc:
                if exc.error_code == _MISSING:
                    return False
                raise
        return True

    def create_run(self, experiment_id: str, name: str | None, tags: Mapping[str, str]) -> str:
        with self._calling("creating a run in"):
            return str(self.client.create_run(experiment_id, run_name=name, tags=dict(tags)).info.run_id)

    def reopen(self, run_id: str) -> None:
        with self._calling(f"reopening run {run_id} in"):
            self.client.update_run(run_id, status="RUNNING")

    def params(self, run_id: str) -> dict[str, str]:
        with self._calling(f"reading the params of run {run_id} from"):
            return dict(self.client.get_run(run_id).data.params)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """One synchronous batch (more only beyond MLflow's 1000 metrics per request), so that what is
        logged is in the store when the call returns and survives a killed process."""
        timestamp = now_ms()
        entries = [Metric(key, value, timestamp, step) for key, value in metrics.items()]
        with self._calling(f"writing metrics of step {step} to run {run_id} in"):
            for chunk in _names.chunks(entries, _names.MAX_METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=chunk, synchronous=True)

    def log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        entries = [Param(key, value) for key, value in params.items()]
        with self._calling(f"writing params to run {run_id} in"):
            for chunk in _names.chunks(entries, _names.MAX_PARAMS_PER_BATCH):
                self.client.log_batch(run_id, params=chunk, synchronous=True)

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        entries = [RunTag(key, value) for key, value in tags.items()]
        with self._calling(f"writing tags to run {run_id} in"):
            for chunk in _names.chunks(entries, _names.MAX_PARAMS_PER_BATCH):
                self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def upload(self, run_id: str, paths: Sequence[str], artifact_path: str) -> None:
        with self._calling(f"uploading {len(paths)} file(s) as artifacts of run {run_id} to"):
            for path in paths:
                self.client.log_artifact(run_id, path, artifact_path=artifact_path)

    def terminate(self, run_id: str, status: str) -> None:
        with self._calling(f"ending run {run_id} ({status}) in"):
            self.client.set_terminated(run_id, status=status, end_time=now_ms())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
