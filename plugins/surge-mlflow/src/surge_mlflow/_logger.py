"""``MLflowLogger``: one MLflow run per Trainer, fed by the ``log_hyperparams`` and ``log_metrics`` events.

When things happen (global rank zero only; other ranks never import MLflow):

* ``setup``: notes the stage. For ``validate``/``test`` the run opens here. For ``fit`` it opens at the
  first ``log_hyperparams`` or ``fit_start``, both after a checkpoint's plugin states are restored, so a
  resumed fit continues the run its checkpoint names instead of starting one, and both before the sanity
  check and the first batch, so an unreachable store stops the fit before it trains.
* ``log_hyperparams`` / ``log_metrics``: one synchronous batch write each (the data is in the store when
  the handler returns, so a killed process keeps it).
* ``checkpoint_saved`` / ``checkpoint_removed`` (surge-checkpoint's events, when it runs): note which
  committed checkpoints the fit keeps (``log_checkpoints``).
* ``teardown``: uploads the committed checkpoints (``log_checkpoints``) and ends the run with the
  Trainer's status: ``finished`` -> FINISHED, ``interrupted`` -> KILLED, ``failed`` -> FAILED (a
  preemption stop, ``surge_checkpoint.Preempted``, -> KILLED). ``predict`` logs nothing.
"""

from __future__ import annotations

import getpass
import json
import os
import posixpath
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import surge
from pydantic import AfterValidator, BeforeValidator, Field
from surge import checkpoint, logger

from surge_mlflow import _names

if TYPE_CHECKING:
    from surge import events as ev

    from surge_mlflow._store import Store

__all__ = ["MLflowConfig", "MLflowLogger", "TrackingStoreError"]

PLUGIN_NAME = "mlflow"
DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"
CHECKPOINT_ARTIFACTS = "checkpoints"
_SQLITE = "sqlite:///"

_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}
_CHECKPOINT_SAVED = "checkpoint_saved"  # surge-checkpoint's event (surge_checkpoint.CheckpointSaved)


class TrackingStoreError(surge.SurgeError):
    """The MLflow tracking store at ``uri`` cannot be reached or refused a request; the message names the
    store, what was attempted and how to fix it."""

    def __init__(self, message: str, uri: str = "") -> None:
        super().__init__(message)
        self.uri = uri


def _uri(value: object) -> object:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _tag_values(value: object) -> object:
    # Numbers and booleans are fine as tag values; MLflow stores every value as a string.
    if isinstance(value, Mapping):
        return {k: str(v) if isinstance(v, (int, float)) else v for k, v in value.items()}
    return value


def _tag_keys(value: Mapping[str, str] | None) -> Mapping[str, str] | None:
    refused = {key: _names.valid_name(key) for key in value or {} if _names.valid_name(key) != key}
    if refused:
        hint = ", ".join(f"{key!r} (try {fixed!r})" for key, fixed in refused.items())
        raise ValueError(
            f"MLflow refuses the tag name(s) {hint}: names may hold letters, digits, '_', '-', '.', ' ' and '/'"
        )
    return value


class MLflowLogger:
    """Logs a Surge run to MLflow. The ``mlflow`` plugin builds one from its settings
    (``Trainer(logger="mlflow")`` or ``plugins={"mlflow": {...}}``), whose keys are the arguments.

    Stateful: ``state_dict()`` (the run id and the store's URI) goes into every checkpoint, so that
    ``fit(ckpt_path=...)`` continues the same MLflow run. ``run_id`` is the run this logger writes to once
    a run has started.

    Args:
        tracking_uri: Any MLflow tracking URI (``http://host:5000``, ``sqlite:///path.db``, ``databricks``,
            ...). Default: an embedded SQLite store ``<default_root_dir>/mlflow.db`` with artifacts in
            ``<default_root_dir>/mlartifacts``.
        experiment_name: The MLflow experiment the run belongs to.
        run_name: Default: the name of the run directory (``version_3``).
        tags: Set on the run after the automatic ones (``surge.run_dir``, ``surge.plugins``, ...), which they
            override.
        log_checkpoints: At the end of each fit, upload the committed checkpoints it kept as artifacts (those
            surge-checkpoint reports with its ``checkpoint_saved`` event and has not removed since).
        run_id: Log into this existing run instead of creating one.
    """

    surge_name = PLUGIN_NAME
    surge_kind = "observer"
    state_key = PLUGIN_NAME

    @surge.validated
    def __init__(
        self,
        tracking_uri: Annotated[str | os.PathLike[str] | None, BeforeValidator(_uri)] = None,
        experiment_name: Annotated[str, Field(min_length=1, max_length=500)] = "surge",
        run_name: str | None = None,
        tags: Annotated[Mapping[str, str] | None, BeforeValidator(_tag_values), AfterValidator(_tag_keys)] = None,
        log_checkpoints: bool = False,
        run_id: str | None = None,
    ) -> None:
        self.tracking_uri = os.fspath(tracking_uri) if tracking_uri is not None else None
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.log_checkpoints = log_checkpoints
        self._requested_run_id = run_id

        self.run_id: str | None = run_id
        self.store: Store | None = None
        self._restored: dict[str, Any] | None = None  # from a checkpoint, applied when the run opens
        self._stage: str | None = None  # set while a stage runs on global rank zero
        self._open = False  # the run is RUNNING on our behalf
        self._error: BaseException | None = None
        self._names: dict[str, str] = {}  # logged metric name -> MLflow name
        self._other_rank = False  # the last run's setup found this process is not global rank zero
        self._checkpoints: dict[str, str] = {}  # committed checkpoint -> its artifact folder (log_checkpoints)

    @property
    def experiment(self) -> Any:
        """Lightning's ``logger.experiment``: the ``mlflow.tracking.MlflowClient`` of the tracking store this
        logger writes to, for calls of your own on :attr:`run_id` (``self.logger.experiment.log_text(
        self.logger.run_id, text, "notes.txt")``). There once the run is open (from ``fit_start``, or the
        ``setup`` of validate and test) and after it. On ranks other than zero, which log nothing, an object
        whose every method does nothing, as Lightning's."""
        if self.store is not None:
            return self.store.client
        if self._other_rank:
            return _NoExperiment()
        raise surge.SurgeError(
            "mlflow: logger.experiment (the MlflowClient) exists once this logger has opened its run: from "
            "fit_start on (the steps, on_train_start, ...), or from the setup of validate and test; not in "
            "the Module's setup or configure_optimizers, which run before"
        )

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        uri = self.store.uri if self.store is not None else self.tracking_uri
        return {"run_id": self.run_id, "tracking_uri": uri}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Called when a fit resumes from a checkpoint (after ``setup``, before ``fit_start``): the run
        named there is continued when the run opens."""
        if state.get("run_id"):
            self._restored = dict(state)

    # -- events -------------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        self._other_rank = not event.trainer.is_global_zero
        if not event.trainer.is_global_zero or event.stage == "predict":
            return
        self._stage, self._error = event.stage, None
        if event.stage != "fit":
            self._open_run(event.trainer)
        elif self.log_checkpoints and (
            _CHECKPOINT_SAVED not in event.trainer.event_names or not event.trainer.checkpoint_callbacks
        ):
            logger.warning(
                "mlflow: log_checkpoints=True, but no active checkpoint plugin publishes {!r}, so no checkpoint will be "
                "uploaded; switch the checkpoint plugin on (enable_checkpointing=True, or pip install surge-checkpoint)",
                _CHECKPOINT_SAVED,
            )

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        self._open_run(event.trainer)

    @surge.hookimpl(optional=True)
    def checkpoint_saved(self, event: _CheckpointEvent) -> None:
        """surge-checkpoint committed ``event.path``: uploaded at the end of the fit, unless removed before."""
        if self.log_checkpoints and self._stage == "fit":
            self._checkpoints[event.path] = _artifact_folder(event.path, event.trainer.run_dir)

    @surge.hookimpl(optional=True)
    def checkpoint_removed(self, event: _CheckpointEvent) -> None:
        self._checkpoints.pop(event.path, None)

    @surge.hookimpl
    def log_hyperparams(self, event: ev.LogHyperparams) -> None:
        run_id = self._open_run(event.trainer)
        if run_id is None or self.store is None:
            return
        params = _names.flatten_params(event.params)
        logged = self.store.params(run_id)  # a continued run has some already; MLflow params never change
        changed = sorted(key for key, value in params.items() if key in logged and logged[key] != value)
        if changed:
            logger.warning(
                "mlflow: run {} already has the params {} with other values; MLflow params cannot change, so "
                "the run keeps the first values",
                run_id,
                changed,
            )
        new = {key: value for key, value in params.items() if key not in logged}
        if new:
            self.store.log_params(run_id, new)

    @surge.hookimpl
    def log_metrics(self, event: ev.LogMetrics) -> None:
        run_id = self._open_run(event.trainer)
        if run_id is None or self.store is None:
            return
        metrics = {self._metric_name(name): float(value) for name, value in event.metrics.items()}
        self.store.log_metrics(run_id, metrics, event.step)

    @surge.hookimpl
    def exception(self, event: ev.Exception_) -> None:
        self._error = event.error  # written with the status at teardown

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        stage, self._stage = self._stage, None
        if stage is None or not self._open:
            return
        self._open = False
        trainer, store, run_id = event.trainer, self.store, self.run_id
        assert store is not None and run_id is not None
        status = self._mlflow_status(trainer)
        tags = {"surge.status": trainer.state.status}
        if trainer.state.stop_reason:
            tags["surge.stop_reason"] = _names.tag_value(trainer.state.stop_reason)
        if self._error is not None:
            tags["surge.error"] = _names.tag_value(f"{type(self._error).__name__}: {self._error}")
        try:
            if stage == "fit" and self.log_checkpoints:
                self._upload_checkpoints(store, run_id)
        except Exception as exc:
            tags["surge.error"] = _names.tag_value(f"uploading checkpoints failed: {type(exc).__name__}: {exc}")
            status = "FAILED"
            raise
        finally:
            store.set_tags(run_id, tags)
            store.terminate(run_id, status)

    # -- the run ------------------------------------------------------------------------------------------
    def _open_run(self, trainer: surge.Trainer) -> str | None:
        """The id of the run this stage writes to, created or reopened on first use; ``None`` where this
        process logs nothing (not global rank zero, ``predict``, outside a run)."""
        if self._stage is None:
            return None
        if self._open:
            return self.run_id
        restored, self._restored = self._restored, None
        if restored is not None and self._requested_run_id is None:
            self._follow_checkpoint(restored, trainer)
        if self.store is None:
            self.store = self._connect(self.tracking_uri or _default_uri(trainer))
        store = self.store
        if self.run_id is not None:
            if not store.run_exists(self.run_id):
                raise TrackingStoreError(
                    f"mlflow: run {self.run_id} does not exist in the tracking store {store.uri!r}; check "
                    "trainer.plugins.mlflow.run_id (and tracking_uri), or leave run_id out to start a new run",
                    uri=store.uri,
                )
            store.reopen(self.run_id)
            self._open = True
            store.set_tags(self.run_id, self._run_tags(trainer, new=False))
            logger.info("mlflow: continuing run {} in {}", self.run_id, store.uri)
        else:
            experiment_id = store.experiment_id(self.experiment_name, _artifact_location(store.uri))
            name = self.run_name or (posixpath.basename(trainer.run_dir.rstrip("/")) if trainer.run_dir else None)
            self.run_id = store.create_run(experiment_id, name, self._run_tags(trainer, new=True))
            self._open = True
            logger.info(
                "mlflow: run {} ({}) in experiment {!r} at {}", self.run_id, name, self.experiment_name, store.uri
            )
        return self.run_id

    def _follow_checkpoint(self, restored: Mapping[str, Any], trainer: surge.Trainer) -> None:
        """Continue the run a checkpoint names, in its store unless ``tracking_uri`` was given. A run that
        cannot be found there starts over, with a warning."""
        run_id, uri = str(restored["run_id"]), restored.get("tracking_uri")
        if self.tracking_uri is None and isinstance(uri, str) and uri and (self.store is None or self.store.uri != uri):
            if _missing_sqlite_file(uri):
                logger.warning(
                    "mlflow: the checkpoint's run {} lives in {}, which no longer exists; a new run is started",
                    run_id,
                    uri,
                )
                self.run_id = None
                return
            self.store = self._connect(uri)
        store = self.store or self._connect(self.tracking_uri or _default_uri(trainer))
        self.store = store
        if store.run_exists(run_id):
            self.run_id = run_id
        else:
            logger.warning(
                "mlflow: the checkpoint's run {} is not in the tracking store {}; a new run is started",
                run_id,
                store.uri,
            )
            self.run_id = None

    def _connect(self, uri: str) -> Store:
        from surge_mlflow._store import Store  # imports MLflow (about a second), so only when a run starts

        return Store(uri)

    def _run_tags(self, trainer: surge.Trainer, *, new: bool) -> dict[str, str]:
        tags: dict[str, str] = {
            "surge.run_dir": trainer.run_dir or "",
            "surge.plugins": json.dumps(trainer.plugin_set(), separators=(",", ":")),
            "surge.version": surge.__version__,
            "surge.world_size": str(trainer.world_size),
        }
        if new:  # what MLflow's fluent API would record, for the UI's columns
            tags["mlflow.user"] = _user()
            tags["mlflow.source.name"] = sys.argv[0] if sys.argv and sys.argv[0] else "python"
            tags["mlflow.source.type"] = "LOCAL"
        tags.update(self.tags)
        return {key: _names.tag_value(value) for key, value in tags.items()}

    def _mlflow_status(self, trainer: surge.Trainer) -> str:
        if trainer.state.status == "failed" and _is_preemption(self._error):
            return "KILLED"
        return _STATUS.get(trainer.state.status, "FAILED")

    def _metric_name(self, name: str) -> str:
        mlflow_name = self._names.get(name)
        if mlflow_name is None:
            mlflow_name = self._names[name] = _names.valid_name(name)
            if mlflow_name != name:
                others = [n for n, m in self._names.items() if m == mlflow_name and n != name]
                clash = f"; so is {others[0]!r}, their values share one metric" if others else ""
                logger.warning(
                    "mlflow: metric {!r} is logged as {!r} (MLflow refuses the name){}", name, mlflow_name, clash
                )
        return mlflow_name

    def _upload_checkpoints(self, store: Store, run_id: str) -> None:
        """The committed checkpoints the fits of this Trainer kept (``checkpoint_saved`` minus
        ``checkpoint_removed``), each with its commit marker so that a downloaded copy loads with
        ``surge.checkpoint.load``, as artifacts under ``checkpoints/``. One that no longer verifies is left out,
        with a warning."""
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        folders: dict[str, list[str]] = {}  # artifact folder -> local files to upload there
        uploaded: list[str] = []
        with tempfile.TemporaryDirectory(prefix="surge-mlflow-") as local:
            for url, folder in self._checkpoints.items():
                fs, path = fsspec.core.url_to_fs(url)
                if fs.isdir(path):
                    continue  # a sharded checkpoint (a directory of shards): not logged
                if not checkpoint.is_valid(url):
                    logger.warning("mlflow: the checkpoint {} is gone or no longer verifies; not uploaded", url)
                    continue
                files = [path, path + checkpoint.MARKER_SUFFIX]
                if not isinstance(fs, LocalFileSystem):
                    staged = os.path.join(local, str(len(uploaded)))
                    os.makedirs(staged)
                    for f in files:
                        fs.get(f, os.path.join(staged, posixpath.basename(f)))
                    files = [os.path.join(staged, posixpath.basename(f)) for f in files]
                folders.setdefault(folder, []).extend(files)
                uploaded.append(url)
            for folder, files in folders.items():
                store.upload(run_id, files, folder)
        if uploaded:
            logger.info("mlflow: uploaded {} checkpoint(s) to run {}: {}", len(uploaded), run_id, uploaded)


class _CheckpointEvent(Protocol):
    """What this logger reads of surge-checkpoint's ``checkpoint_saved`` and ``checkpoint_removed`` events
    (surge_checkpoint.CheckpointSaved, CheckpointRemoved); the plugin need not be installed."""

    @property
    def trainer(self) -> Any: ...

    @property
    def path(self) -> str: ...


def _artifact_folder(url: str, run_dir: str | None) -> str:
    """Where a checkpoint goes among the run's artifacts: ``checkpoints`` for the run directory's own
    (``<run_dir>/checkpoints``), ``checkpoints/<name of its directory>`` for a ``ModelCheckpoint(dirpath=...)``."""
    directory = url.replace(os.sep, "/").rpartition("/")[0]
    if run_dir and directory == f"{run_dir.replace(os.sep, '/').rstrip('/')}/checkpoints":
        return CHECKPOINT_ARTIFACTS
    return f"{CHECKPOINT_ARTIFACTS}/{directory.rpartition('/')[2] or 'root'}"


def _default_uri(trainer: surge.Trainer) -> str:
    return _SQLITE + (_local_root(trainer) / DEFAULT_DB).as_posix()


def _artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: next to a local SQLite file (``mlartifacts/``), so that the
    store and its artifacts stay together; elsewhere (a server) the store decides."""
    if not uri.startswith(_SQLITE) or ":memory:" in uri:
        return None
    return (Path(uri[len(_SQLITE) :]).resolve().parent / DEFAULT_ARTIFACTS).as_uri()


def _local_root(trainer: surge.Trainer) -> Path:
    root = trainer.default_root_dir
    if root.startswith("file://"):
        root = root[len("file://") :]
    elif "://" in root:
        raise TrackingStoreError(
            f"mlflow: default_root_dir {root!r} is not a local directory, so it cannot hold the default embedded "
            "store; pass a tracking store: Trainer(plugins={'mlflow': {'tracking_uri': 'http://...'}})",
            uri=root,
        )
    return Path(root).resolve()


def _missing_sqlite_file(uri: str) -> bool:
    return uri.startswith(_SQLITE) and ":memory:" not in uri and not Path(uri[len(_SQLITE) :]).exists()


def _is_preemption(error: BaseException | None) -> bool:
    # surge-checkpoint stops a preempted fit by raising Preempted. If its module was never imported, the
    # error cannot be one, and this plugin does not depend on it.
    module = sys.modules.get("surge_checkpoint")
    preempted = getattr(module, "Preempted", None)
    return error is not None and isinstance(preempted, type) and isinstance(error, preempted)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (some containers)
        return "unknown"


class _NoExperiment:
    """What ``experiment`` is on ranks other than zero: every method call does nothing (Lightning's
    ``DummyExperiment``), so a step that logs an artifact runs unchanged on every process."""

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self._nothing

    def __getitem__(self, key: Any) -> _NoExperiment:
        return self


MLflowConfig = surge.settings_model(MLflowLogger)
"""The ``mlflow`` plugin's settings, derived from :class:`MLflowLogger`'s signature."""
