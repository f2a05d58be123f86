"""Lightning's ``WandbLogger`` (``surge_lightning.pytorch.loggers.WandbLogger``): Lightning's arguments and methods, on wandb's
own client, as this plugin's logger.

As Lightning's: the run is made on first use of ``experiment`` (the Trainer's setup, or sooner by your code) with
``wandb.init(name=, project=, dir=save_dir or dir, id=version or id, resume="allow", **kwargs)``; it is the
process's ``wandb.run`` (``wandb.log`` writes to it too), and a run the process already has is used instead,
with a warning. Every metric is plotted against ``trainer/global_step``, which each write carries; the
hyper-parameters are the run's config; ``log_model=True`` logs ``ModelCheckpoint``'s files as ``model`` artifacts
when a fit ends well, ``"all"`` (or ``True`` with ``save_top_k=-1``) after each save. ``finalize`` does not finish
the run, so that ``fit`` then ``test`` log into one run: ``wandb.finish()`` does, or the end of the process.

Unlike Lightning's: ``offline=True`` is ``wandb.init(mode="offline")``, where Lightning sets ``WANDB_MODE`` in the
process's environment for every later run; ``log_model`` works offline (the artifacts wait with the run for
``wandb sync``); a checkpoint artifact holds the commit marker ``model.ckpt.sha256`` beside ``model.ckpt``, so
that a downloaded copy loads with ``load_from_checkpoint``; ``anonymous`` (which wandb ignores) is passed only
when true; and a ``wandb.init`` that fails is a :class:`~surge_wandb.WandbError` saying how to fix it.
"""

from __future__ import annotations

import inspect
import json
import os
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import surge
from surge import checkpoint
from surge.rank_zero import rank_zero_only, rank_zero_warn
from surge_lightning.pytorch.loggers.logger import Logger, rank_zero_experiment

from surge_wandb._logger import _ARTIFACT_NAME, STEP_METRIC, WandbError, _first_line

if TYPE_CHECKING:
    from wandb import Run

__all__ = ["WandbLogger"]

_CALLBACK_SETTINGS = {
    "monitor": "monitor",
    "mode": "mode",
    "save_last": "save_last",
    "save_top_k": "save_top_k",
    "save_weights_only": "save_weights_only",
    "_every_n_train_steps": "every_n_train_steps",
}
"""The checkpoint callback's settings in an artifact's metadata: Lightning's key -> Surge's attribute."""


class WandbLogger(Logger):
    """Lightning's ``WandbLogger(name=None, save_dir=".", version=None, offline=False, dir=None, id=None,
    anonymous=None, project=None, log_model=False, experiment=None, prefix="", checkpoint_name=None,
    add_file_policy="mutable", **kwargs)``; ``kwargs`` go to ``wandb.init`` (``entity``, ``group``, ``tags``,
    ``notes``, ``config``, ``settings``, ...). ``project`` defaults to ``WANDB_PROJECT``, else
    ``"lightning_logs"``."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] | None = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        if log_model not in (True, False, "all"):
            raise surge.SurgeError(
                f"WandbLogger(log_model={log_model!r}): use False (no checkpoints), True (ModelCheckpoint's files "
                "when the fit ends) or 'all' (each checkpoint as it is saved)"
            )
        if add_file_policy not in ("mutable", "immutable"):
            raise surge.SurgeError(
                f"WandbLogger(add_file_policy={add_file_policy!r}): use 'mutable' (wandb copies each checkpoint "
                "when it is logged) or 'immutable' (it reads the file when uploading)"
            )
        if checkpoint_name is not None and not _ARTIFACT_NAME.match(checkpoint_name):
            raise surge.SurgeError(
                f"WandbLogger(checkpoint_name={checkpoint_name!r}): W&B artifact names hold up to 128 letters, "
                "digits, '_', '-' and '.'"
            )
        directory = save_dir if save_dir is not None else dir
        self._wandb_init: dict[str, Any] = {
            "name": name,
            "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": None if directory is None else os.fspath(directory),
            "id": version or id,
            "resume": "allow",
        }
        if anonymous:
            self._wandb_init["anonymous"] = "allow"
        if offline:
            self._wandb_init["mode"] = "offline"
        self._wandb_init.update(kwargs)
        self._project: str | None = self._wandb_init.get("project")
        self._save_dir: str | None = self._wandb_init.get("dir")
        self._name: str | None = self._wandb_init.get("name")
        self._id: str | None = self._wandb_init.get("id")
        self._offline = offline
        self._log_model = log_model
        self._prefix = prefix
        self._experiment = experiment
        self._checkpoint_name = checkpoint_name
        self.add_file_policy = add_file_policy
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callbacks: dict[int, Any] = {}

    # -- the run ------------------------------------------------------------------------------------------
    @property
    @rank_zero_experiment
    def experiment(self) -> Run:
        """The ``wandb`` Run: ``self.logger.experiment.log({...})``, ``.config``, ``.id``; made on first use."""
        if self._experiment is None:
            import wandb

            if wandb.run is not None:
                rank_zero_warn(
                    "There is a wandb run already in progress and newly created instances of `WandbLogger` will "
                    "reuse this run. If this is not desired, call `wandb.finish()` before instantiating `WandbLogger`."
                )
                self._experiment = wandb.run
            else:
                self._experiment = self._init(wandb)
                if self._wandb_init.get("sync_tensorboard"):
                    self._experiment.define_metric("*", step_metric="global_step")
                else:
                    self._experiment.define_metric(STEP_METRIC)
                    self._experiment.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        return self._experiment

    def _init(self, wandb: Any) -> Run:
        try:
            return wandb.init(**self._wandb_init)
        except Exception as exc:
            mode = self._wandb_init.get("mode") or os.environ.get("WANDB_MODE") or "wandb's setting"
            raise WandbError(
                f"WandbLogger: wandb.init(project={self._project!r}, mode {mode}) failed: {type(exc).__name__}: "
                f"{_first_line(exc).rstrip('.')}. For a W&B server, log in (`wandb login` or WANDB_API_KEY) and "
                "check the project, the entity and the network; or keep the run on disk for a later `wandb sync`: "
                "WandbLogger(offline=True)"
            ) from exc

    @property
    def name(self) -> str | None:
        """The project (the run's display name is ``experiment.name``)."""
        return self._project

    @property
    def version(self) -> str | None:
        """The run's id once the run exists, else the ``version``/``id`` given."""
        return self._experiment.id if self._experiment else self._id

    @property
    def save_dir(self) -> str | None:
        """Where wandb writes its files (``<save_dir>/wandb/``)."""
        return self._save_dir

    @property
    def surge_run_dir(self) -> str | None:
        """``save_dir/project/<run id>``: the run directory of a Trainer whose first logger this is, with its
        checkpoints in ``checkpoints/``, where Lightning's ``ModelCheckpoint`` puts them; ``None`` (the Trainer's
        own) without a ``save_dir``."""
        if self._save_dir is None:
            return None
        _ = self.experiment  # the run's id names the directory
        return os.path.join(self._save_dir, str(self.name), str(self.version))

    def __getstate__(self) -> dict[str, Any]:
        """A copy continues the same run (``resume="allow"``); the Run object itself is not pickled."""
        state = self.__dict__.copy()
        if self._experiment is not None:
            state["_id"] = state["_wandb_init"]["id"] = self._experiment.id
        state["_experiment"] = None
        return state

    # -- what ---------------------------------------------------------------------------------------------
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """``experiment.config.update(params, allow_val_change=True)``; a class or function is logged as its
        name and any other value JSON cannot hold as its ``str`` (Lightning calls a function to log its result)."""
        self.experiment.config.update(_config_values(params), allow_val_change=True)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """One ``experiment.log`` with ``trainer/global_step`` set to ``step`` (unless ``sync_tensorboard``)."""
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}": value for key, value in metrics.items()}
        if step is not None and not self._wandb_init.get("sync_tensorboard"):
            self.experiment.log({**metrics, STEP_METRIC: step})
        else:
            self.experiment.log(dict(metrics))

    @rank_zero_only
    def log_table(
        self,
        key: str,
        columns: list[Any] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """A ``wandb.Table`` from ``columns`` and ``data`` or from a pandas ``dataframe``, under ``key``."""
        import wandb

        self.log_metrics({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)

    @rank_zero_only
    def log_text(
        self,
        key: str,
        columns: list[Any] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """Text as a table: :meth:`log_table`."""
        self.log_table(key, columns, data, dataframe, step)

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """``wandb.Image``s (tensors, arrays, PIL images or file paths) under ``key``; each keyword is a list with
        one value per image (``caption=[...]``, ``masks=[...]``, ``boxes=[...]``)."""
        import wandb

        if not isinstance(images, list):
            raise TypeError(f"WandbLogger.log_image({key!r}): images must be a list, got {type(images).__name__}")
        for name, values in kwargs.items():
            if len(values) != len(images):
                raise ValueError(
                    f"WandbLogger.log_image({key!r}): {name}= has {len(values)} values for {len(images)} images; "
                    "give one per image"
                )
        per_image = [{name: values[i] for name, values in kwargs.items()} for i in range(len(images))]
        self.log_metrics({key: [wandb.Image(image, **kw) for image, kw in zip(images, per_image, strict=True)]}, step)

    def watch(
        self,
        model: Any,
        log: Literal["gradients", "parameters", "all"] | None = "gradients",
        log_freq: int = 100,
        log_graph: bool = True,
    ) -> None:
        """``experiment.watch``: the gradients (``log="all"``: and the parameters) every ``log_freq`` steps."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    # -- checkpoints ----------------------------------------------------------------------------------------
    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if checkpoint_callback is None:
            return
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callbacks[id(checkpoint_callback)] = checkpoint_callback

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """With ``log_model=True``, after a fit that ended well, log the checkpoints not logged yet. The run stays
        open (``wandb.finish()`` ends it), as in Lightning."""
        if status != "success" or self._experiment is None:
            return
        for checkpoint_callback in self._checkpoint_callbacks.values():
            self._log_checkpoints(checkpoint_callback)

    def _log_checkpoints(self, checkpoint_callback: Any) -> None:
        """Each checkpoint of the callback that is new or changed since logged, oldest first, as a version of the
        ``model`` artifact: ``model.ckpt`` and its commit marker, aliases ``latest`` (and ``best``)."""
        import wandb

        for modified, path, score in _new_checkpoints(checkpoint_callback, self._logged_model_time):
            settings = {
                key: getattr(checkpoint_callback, name)
                for key, name in _CALLBACK_SETTINGS.items()
                if hasattr(checkpoint_callback, name)
            }
            metadata = {
                "score": score.item() if hasattr(score, "item") else score,
                "original_filename": Path(path).name,
                type(checkpoint_callback).__name__: settings,
            }
            if not self._checkpoint_name:
                self._checkpoint_name = f"model-{self.experiment.id}"
            artifact = wandb.Artifact(name=self._checkpoint_name, type="model", metadata=metadata)
            artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
            marker = checkpoint.marker_url(path)
            if os.path.isfile(marker):
                artifact.add_file(marker, name=f"model.ckpt{checkpoint.MARKER_SUFFIX}", policy=self.add_file_policy)
            aliases = ["latest", "best"] if path == checkpoint_callback.best_model_path else ["latest"]
            self.experiment.log_artifact(artifact, aliases=aliases)
            self._logged_model_time[path] = modified


def _new_checkpoints(checkpoint_callback: Any, logged: Mapping[str, float]) -> list[tuple[float, str, Any]]:
    """``(modified time, path, score)`` of the callback's local files (last, best, top k) not logged since they
    were last written, oldest first."""
    scored: dict[str, Any] = {}
    if getattr(checkpoint_callback, "last_model_path", ""):
        scored[checkpoint_callback.last_model_path] = getattr(checkpoint_callback, "current_score", None)
    if getattr(checkpoint_callback, "best_model_path", ""):
        scored[checkpoint_callback.best_model_path] = getattr(checkpoint_callback, "best_model_score", None)
    scored.update(getattr(checkpoint_callback, "best_k_models", {}))
    found = sorted((os.path.getmtime(p), p, s) for p, s in scored.items() if os.path.isfile(p))
    return [(t, p, s) for t, p, s in found if logged.get(p, -1.0) < t]


def _config_values(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    values = vars(params) if isinstance(params, Namespace) else dict(params or {})
    return {key: _config_value(value) for key, value in values.items()}


def _config_value(value: Any) -> Any:
    if inspect.isclass(value) or inspect.isroutine(value):
        return getattr(value, "__name__", repr(value))
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    try:
        json.dumps(value)
    except (TypeError, ValueError, OverflowError):
        return str(value)
    return value
