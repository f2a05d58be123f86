"""``WandbLogger``: one W&B run per Trainer, fed by the ``log_hyperparams`` and ``log_metrics`` events.

When things happen (global rank zero only; other ranks never import wandb):

* ``setup``: notes the stage. For ``validate``/``test`` the run opens here. For ``fit`` it opens at the
  first ``log_hyperparams`` or ``fit_start``, both after a checkpoint's plugin states are restored (so a
  resumed fit continues the run its checkpoint names) and before the sanity check and the first batch (so a
  run that cannot start stops the fit before it trains).
* ``log_hyperparams``: ``run.config.update``; ``log_metrics``: one ``run.log`` per write.
* ``checkpoint_saved`` / ``checkpoint_removed`` (surge-checkpoint's events, when it runs): note which
  committed checkpoints the fit keeps (``log_checkpoints``).
* ``teardown``: logs the committed checkpoints as an artifact (``log_checkpoints``) and finishes the run with
  the Trainer's status as its exit code: ``finished`` -> 0, ``failed`` -> 1, ``interrupted`` (Ctrl-C) -> 255,
  wandb's own code for it; a preemption stop (``surge_checkpoint.Preempted``) -> 255, marked preempting.
  ``predict`` logs nothing.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import surge
from pydantic import BaseModel, ConfigDict, Field, field_validator
from surge import checkpoint, logger

if TYPE_CHECKING:
    from surge import events as ev
    from surge.events.run import Run  # what a handler sees of the Trainer (event.trainer)

__all__ = ["WandbConfig", "WandbError", "WandbLogger"]

PLUGIN_NAME = "wandb"
STEP_METRIC = "trainer/global_step"
"""Every write carries its step under this name (Lightning's), the x-axis of every metric. wandb's own
``step`` argument is not used: wandb drops a write whose step is lower than the run's last, and Surge's steps
may go back (an evaluation's ``on_step`` values count its own batches; a resumed fit repeats the steps logged
after its checkpoint)."""

_EXIT_CODES = {"finished": 0, "failed": 1, "interrupted": 255}
_CHECKPOINT_SAVED = "checkpoint_saved"  # surge-checkpoint's event (surge_checkpoint.CheckpointSaved)
_KILLED = 255
# wandb.init arguments this plugin sets itself: in init_kwargs they are an error naming the setting to use.
_SETTINGS = ("project", "entity", "name", "group", "job_type", "notes", "tags", "mode", "dir", "id")
_MANAGED = ("resume", "reinit", "config", "resume_from", "fork_from")
_URL_CHARS = set("/\\#?%:")  # refused by W&B in project and entity names
_RUN_ID_CHARS = set(":;,#?/'")  # refused by wandb in a run id
_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_HINT = (
    "For a W&B server, log in (`wandb login` or WANDB_API_KEY) and check the project, the entity and the "
    "network; or keep the run on disk for a later `wandb sync`: Trainer(plugins={'wandb': {'mode': 'offline'}})"
)


class WandbError(surge.SurgeError):
    """wandb could not start, continue or finish the run; the message says what was attempted and how to fix
    it."""


class WandbConfig(BaseModel):
    """The settings of :class:`WandbLogger`, also its section of a run config
    (``Trainer(plugins={"wandb": {...}})``)."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, min_length=1, max_length=128)
    """Default: a resumed fit's checkpoint's project, else ``WANDB_PROJECT``, else ``"surge"``."""
    entity: str | None = Field(None, min_length=1)
    """The user or team; default: a resumed fit's checkpoint's, else ``WANDB_ENTITY``, else your default."""
    name: str | None = None
    """The run's display name; default: the run directory's name (``version_3``) for a new run."""
    group: str | None = None
    job_type: str | None = None
    notes: str | None = None
    tags: list[str] = Field(default_factory=list)
    mode: Literal["online", "offline", "disabled"] | None = None
    """``None``: wandb's choice (``WANDB_MODE``, ``wandb offline``, else online)."""
    dir: str | None = None
    """A local directory for wandb's files (``<dir>/wandb/``); default: the run directory."""
    id: str | None = None
    """Log into this run (continued when it exists, created otherwise) instead of a new one."""
    log_checkpoints: bool = False
    """At the end of each fit, log the committed checkpoints it kept as a model artifact (those surge-checkpoint
    reports with its ``checkpoint_saved`` event and has not removed since)."""
    checkpoint_name: str | None = None
    """The checkpoints' artifact name; default ``model-<run id>`` (Lightning's)."""
    init_kwargs: dict[str, Any] = Field(default_factory=dict)
    """More ``wandb.init`` arguments (``save_code``, ``settings``, ``config_exclude_keys``, ...)."""

    @field_validator("project", "entity")
    @classmethod
    def _url_safe(cls, value: str | None) -> str | None:
        if value is not None and _URL_CHARS & set(value):
            raise ValueError(f"{value!r} holds characters W&B refuses in names: {' '.join(sorted(_URL_CHARS))}")
        return value

    @field_validator("id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value != value.strip() or _RUN_ID_CHARS & set(value)):
            raise ValueError(
                f"{value!r} is not a W&B run id: it needs a character other than a space, no leading or trailing "
                f"spaces and none of {' '.join(sorted(_RUN_ID_CHARS))}"
            )
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        bad = [tag for tag in value if not 1 <= len(tag) <= 64]
        if bad:
            raise ValueError(f"W&B tags hold 1 to 64 characters; shorten {bad}")
        return value

    @field_validator("dir", mode="before")
    @classmethod
    def _dir(cls, value: object) -> object:
        value = os.fspath(value) if isinstance(value, os.PathLike) else value
        if isinstance(value, str) and "://" in value and not value.startswith("file://"):
            raise ValueError(f"{value!r} is not a local directory; wandb writes its files to a local one")
        return value

    @field_validator("checkpoint_name")
    @classmethod
    def _artifact_name(cls, value: str | None) -> str | None:
        if value is not None and not _ARTIFACT_NAME.match(value):
            raise ValueError(f"{value!r}: W&B artifact names hold up to 128 letters, digits, '_', '-' and '.'")
        return value

    @field_validator("init_kwargs")
    @classmethod
    def _init_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key in _SETTINGS:
                raise ValueError(f"{key!r} is a setting of its own: plugins={{'wandb': {{{key!r}: ...}}}}")
            if key in _MANAGED:
                raise ValueError(
                    f"{key!r} is set by the plugin (it continues the run of a resumed fit and logs hparams as "
                    "the config); leave it out"
                )
        return value


class WandbLogger:
    """Logs a Surge run to Weights & Biases. The ``wandb`` plugin builds one from its settings
    (``Trainer(logger="wandb")`` or ``plugins={"wandb": {...}}``); the keyword arguments are those of
    :class:`WandbConfig`.

    Stateful: ``state_dict()`` (the run's id, project and entity) goes into every checkpoint, so that
    ``fit(ckpt_path=...)`` continues the same W&B run. ``run_id`` is the run this logger writes to once a run
    has started.
    """

    surge_name = PLUGIN_NAME
    surge_kind = "observer"
    state_key = PLUGIN_NAME

    def __init__(self, **settings: Any) -> None:
        self.config = WandbConfig(**settings)
        self.run: Any = None
        """The ``wandb`` Run this logger writes to (the last one, finished, after a stage ends)."""
        self.run_id: str | None = None
        self._project: str | None = None  # where run_id lives, once a run has started
        self._entity: str | None = None
        self._restored: dict[str, Any] | None = None  # from a checkpoint, applied when the run opens
        self._stage: str | None = None  # set while a stage runs on global rank zero
        self._open = False  # self.run is running and ours to log into
        self._owned = True  # False: the process's own wandb.run, which its owner finishes
        self._error: BaseException | None = None
        self._other_rank = False  # the last run's setup found this process is not global rank zero
        self._checkpoints: dict[str, str] = {}  # committed checkpoint -> its name in the artifact (log_checkpoints)

    @property
    def experiment(self) -> Any:
        """Lightning's ``logger.experiment``: the ``wandb`` Run this logger writes to, for calls of your own
        (``self.logger.experiment.log({"samples": wandb.Image(...)})``). There from ``fit_start`` on (the
        steps, ``on_train_start``, ...), or from the ``setup`` of validate and test; after a stage, the
        finished run. On ranks other than zero, which log nothing, an object whose every method does nothing."""
        if self.run is not None:
            return self.run
        if self._other_rank:
            return _NoExperiment()
        raise surge.SurgeError(
            "wandb: logger.experiment (the wandb Run) exists once this logger has opened its run: from fit_start "
            "on (the steps, on_train_start, ...), or from the setup of validate and test; not in the Module's "
            "setup or configure_optimizers, which run before"
        )

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "project": self._project, "entity": self._entity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Called when a fit resumes from a checkpoint (after ``setup``, before ``fit_start``): the run named
        there is continued when the run opens."""
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
        elif self.config.log_checkpoints and (
            _CHECKPOINT_SAVED not in event.trainer.event_names or not event.trainer.checkpoint_callbacks
        ):
            logger.warning(
                "wandb: log_checkpoints=True, but no active checkpoint plugin publishes {!r}, so no checkpoint will be "
                "logged; switch the checkpoint plugin on (enable_checkpointing=True, or pip install surge-checkpoint)",
                _CHECKPOINT_SAVED,
            )

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        self._open_run(event.trainer)

    @surge.hookimpl(optional=True)
    def checkpoint_saved(self, event: _CheckpointEvent) -> None:
        """surge-checkpoint committed ``event.path``: logged at the end of the fit, unless removed before."""
        if self.config.log_checkpoints and self._stage == "fit":
            self._checkpoints[event.path] = _artifact_name(event.path, event.trainer.run_dir)

    @surge.hookimpl(optional=True)
    def checkpoint_removed(self, event: _CheckpointEvent) -> None:
        self._checkpoints.pop(event.path, None)

    @surge.hookimpl
    def log_hyperparams(self, event: ev.LogHyperparams) -> None:
        run = self._open_run(event.trainer)
        if run is not None:
            run.config.update(dict(event.params), allow_val_change=True)  # plain values already

    @surge.hookimpl
    def log_metrics(self, event: ev.LogMetrics) -> None:
        run = self._open_run(event.trainer)
        if run is not None:
            run.log({**event.metrics, STEP_METRIC: event.step})

    @surge.hookimpl
    def exception(self, event: ev.Exception_) -> None:
        self._error = event.error  # written with the status at teardown

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        stage, self._stage = self._stage, None
        if stage is None or not self._open:
            return
        self._open = False
        if not self._owned:
            return  # the process's wandb.run: whoever started it finishes it
        trainer, run = event.trainer, self.run
        preempted = trainer.state.status == "failed" and _is_preemption(self._error)
        exit_code = _KILLED if preempted else _EXIT_CODES.get(trainer.state.status, 1)
        summary: dict[str, Any] = {"surge/status": trainer.state.status}
        if trainer.state.stop_reason:
            summary["surge/stop_reason"] = trainer.state.stop_reason
        if self._error is not None:
            summary["surge/error"] = f"{type(self._error).__name__}: {self._error}"
        try:
            if stage == "fit" and self.config.log_checkpoints:
                self._log_checkpoints(trainer, run)
        except Exception as exc:
            summary["surge/error"] = f"logging checkpoints failed: {type(exc).__name__}: {exc}"
            exit_code = 1
            raise
        finally:
            with self._calling(f"finishing run {self.run_id}"):
                run.summary.update(summary)
                if preempted:
                    run.mark_preempting()
                run.finish(exit_code=exit_code)

    # -- the run ------------------------------------------------------------------------------------------
    def _open_run(self, trainer: Run) -> Any:
        """The Run this stage writes to, started or continued on first use; ``None`` where this process logs
        nothing (not global rank zero, ``predict``, outside a run)."""
        if self._stage is None:
            return None
        if self._open:
            return self.run
        restored, self._restored = self._restored, None
        import wandb  # about half a second, so only when a run starts

        if wandb.run is not None:  # started by the user's code: log into it, as Lightning does
            logger.warning(
                "wandb: this process already has a run ({}), started with wandb.init(); logging into it, without "
                "the plugin's settings, and leaving it open. Call wandb.finish() before fitting to get a run of "
                "the plugin's own",
                wandb.run.id,
            )
            self._adopt(wandb.run, owned=False)
            return self.run

        config = self.config
        run_id = config.id or (restored or {}).get("run_id") or self.run_id
        project = config.project or (restored or {}).get("project") or self._project
        entity = config.entity or (restored or {}).get("entity") or self._entity
        if project is None and "WANDB_PROJECT" not in os.environ:
            project = "surge"
        on_disk = config.mode != "disabled"  # a disabled run writes nothing, so it makes no run directory
        name = config.name
        if name is None and run_id is None and on_disk and trainer.run_dir:
            name = posixpath.basename(trainer.run_dir.rstrip("/"))
        directory = _local_dir(config.dir, trainer) if on_disk else None
        what = f"continuing run {run_id}" if run_id else "starting a run"
        mode = repr(config.mode) if config.mode else "from WANDB_MODE or wandb's settings"
        with self._calling(f"{what} (project {project!r}, mode {mode})"):
            run = wandb.init(
                project=project,
                entity=entity,
                name=name,
                group=config.group,
                job_type=config.job_type,
                notes=config.notes,
                tags=config.tags or None,
                mode=config.mode,
                dir=directory,
                id=run_id,
                resume="allow" if run_id else None,
                reinit="create_new",  # never finishes nor returns another run of this process
                **config.init_kwargs,
            )
        self._adopt(run, owned=True)
        if on_disk and trainer.run_dir:
            run.summary["surge/run_dir"] = trainer.run_dir
        logger.info("wandb: {} run {} in project {!r}", "continuing" if run_id else "started", run.id, run.project)
        return run

    def _adopt(self, run: Any, *, owned: bool) -> None:
        self.run, self._owned, self._open = run, owned, True
        self.run_id, self._project, self._entity = run.id, run.project or None, run.entity or None
        run.define_metric(STEP_METRIC)
        run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)

    @contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            raise WandbError(
                f"wandb: {what} failed: {type(exc).__name__}: {_first_line(exc).rstrip('.')}. {_HINT}"
            ) from exc

    def _log_checkpoints(self, trainer: Run, run: Any) -> None:
        """The committed checkpoints the fits of this Trainer kept (``checkpoint_saved`` minus
        ``checkpoint_removed``), each with its commit marker so that a downloaded copy loads with
        ``surge.checkpoint.load``, as one version of a ``model`` artifact. One that no longer verifies is left
        out, with a warning."""
        import fsspec
        import wandb
        from fsspec.implementations.local import LocalFileSystem

        kept: dict[str, str] = {}  # url -> its name in the artifact
        for url, name in self._checkpoints.items():
            fs, path = fsspec.core.url_to_fs(url)
            if fs.isdir(path):
                continue  # a sharded checkpoint (a directory of shards): not logged
            if checkpoint.is_valid(url):
                kept[url] = name
            else:
                logger.warning("wandb: the checkpoint {} is gone or no longer verifies; not logged", url)
        if not kept:
            return
        committed = sorted(kept.values())
        artifact = wandb.Artifact(
            self.config.checkpoint_name or f"model-{run.id}",
            type="model",
            metadata={"checkpoints": committed, "global_step": trainer.global_step, "run_dir": trainer.run_dir},
        )
        marker = checkpoint.MARKER_SUFFIX
        with tempfile.TemporaryDirectory(prefix="surge-wandb-") as local:
            for url, name in kept.items():
                fs, path = fsspec.core.url_to_fs(url)
                for source, entry in ((path, name), (path + marker, name + marker)):
                    if not isinstance(fs, LocalFileSystem):
                        staged = os.path.join(local, entry)
                        os.makedirs(os.path.dirname(staged), exist_ok=True)
                        fs.get(source, staged)
                        source = staged
                    artifact.add_file(source, name=entry)  # copied into wandb's staging area here
        with self._calling(f"logging {len(committed)} checkpoint(s) of run {run.id}"):
            run.log_artifact(artifact, aliases=["latest"])
        logger.info("wandb: logged {} checkpoint(s) as artifact {!r}: {}", len(committed), artifact.name, committed)


class _CheckpointEvent(Protocol):
    """What this logger reads of surge-checkpoint's ``checkpoint_saved`` and ``checkpoint_removed`` events
    (surge_checkpoint.CheckpointSaved, CheckpointRemoved); the plugin need not be installed."""

    @property
    def trainer(self) -> Any: ...

    @property
    def path(self) -> str: ...


def _artifact_name(url: str, run_dir: str | None) -> str:
    """A checkpoint's name in the artifact: its file name for the run directory's own (``<run_dir>/checkpoints``),
    ``<name of its directory>/<file name>`` for a ``ModelCheckpoint(dirpath=...)``."""
    directory, _, name = url.replace(os.sep, "/").rpartition("/")
    if run_dir and directory == f"{run_dir.replace(os.sep, '/').rstrip('/')}/checkpoints":
        return name
    return f"{directory.rpartition('/')[2] or 'root'}/{name}"


def _local_dir(setting: str | None, trainer: Run) -> str:
    """wandb's directory: ``setting``, else the run directory; created, as wandb writes into it."""
    directory = setting or trainer.run_dir
    if directory is None:
        raise WandbError("wandb: this process has no run directory; set one: plugins={'wandb': {'dir': ...}}")
    if directory.startswith("file://"):
        directory = directory[len("file://") :]
    elif "://" in directory:
        raise WandbError(
            f"wandb: the run directory {directory!r} is not a local directory, and wandb writes its files to a "
            "local one; set one: Trainer(plugins={'wandb': {'dir': '/local/path'}})"
        )
    path = Path(directory).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _is_preemption(error: BaseException | None) -> bool:
    # surge-checkpoint stops a preempted fit by raising Preempted. If its module was never imported, the
    # error cannot be one, and this plugin does not depend on it.
    module = sys.modules.get("surge_checkpoint")
    preempted = getattr(module, "Preempted", None)
    return error is not None and isinstance(preempted, type) and isinstance(error, preempted)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


class _NoExperiment:
    """What ``experiment`` is on ranks other than zero: every method call does nothing (Lightning's
    ``DummyExperiment``), so a step that logs an image runs unchanged on every process."""

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self._nothing

    def __getitem__(self, key: Any) -> _NoExperiment:
        return self
