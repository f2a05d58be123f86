"""Lightning's loggers (``lightning.pytorch.loggers``): :class:`Logger`, the base of a logger object passed in
``Trainer(logger=...)``, and the Lightning-shaped ``TensorBoardLogger``, ``CSVLogger``, ``MLFlowLogger`` and
``WandbLogger``.

Those four live in the plugin distributions whose writers they use (``surge_tensorboard.lightning``,
``surge_csv.lightning``, ``surge_mlflow.lightning``, ``surge_wandb.lightning``) and are read from them when first asked for, so that the
core imports no plugin and a missing one is named.

A ``Logger`` passed in ``Trainer(logger=...)`` joins the bus through :class:`LoggerAdapter`, an observer as every
logger, whose handlers call the logger's methods where Lightning's Trainer calls them: ``log_metrics`` then
``save`` at every write (with ``epoch`` added, as Lightning adds it), ``log_hyperparams`` then ``save`` when a
run starts, followed by ``log_graph`` and ``save``, ``after_save_checkpoint`` after each checkpoint save, and ``finalize`` with
``"success"`` or ``"failed"`` at the end of each run. Metrics and hyper-parameters reach global rank zero only
(Surge writes them there); the rest runs on every rank, as in Lightning, whose loggers guard their methods with
``@rank_zero_only`` and their ``experiment`` with ``@rank_zero_experiment``.
"""

from __future__ import annotations

import enum
import functools
import importlib
import os
import posixpath
from abc import ABC, abstractmethod
from argparse import Namespace
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import surge
from surge._rank_zero import rank_zero_only

if TYPE_CHECKING:
    from surge import events as ev
    from surge.events.run import Run

__all__ = [
    "Logger",
    "LoggerAdapter",
    "VersionedLogger",
    "next_version",
    "rank_zero_experiment",
    "save_hparams_to_yaml",
]

_F = TypeVar("_F", bound=Callable[..., Any])

_STAGES = frozenset({"train", "validation", "test", "predict"})
"""``LogMetrics.stage`` values of the Trainer's own writes; any other is a plugin's (``trainer.log_metrics``),
which Lightning's callbacks write straight to the loggers, without ``epoch`` and without ``save()``."""

_FROM_PLUGINS = {
    "TensorBoardLogger": "surge-tensorboard",
    "CSVLogger": "surge-csv",
    "MLFlowLogger": "surge-mlflow",
    "WandbLogger": "surge-wandb",
}
"""Lightning-shaped logger -> the distribution shipping it, in its module ``<import name>.lightning``."""


class Logger(ABC):
    """Lightning's ``Logger``: subclass it and implement ``name``, ``version``, ``log_metrics(metrics, step)``
    and ``log_hyperparams(params)``; ``log_dir``, ``save_dir``, ``root_dir``, ``experiment``, ``log_graph``,
    ``save``, ``finalize(status)`` and ``after_save_checkpoint`` are optional. Pass it in
    ``Trainer(logger=[...])``, where a :class:`LoggerAdapter` joins the bus for it; ``self.logger``,
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

    def surge_subscriber(self) -> LoggerAdapter:
        """What joins Surge's bus for this logger when it is passed in ``Trainer(logger=...)``."""
        return LoggerAdapter(self)


class VersionedLogger(Logger):
    """A :class:`Logger` writing to ``save_dir/name/version_N`` as Lightning's file loggers do: the subclass
    sets ``_save_dir``, ``_name`` and ``_version`` (``None``: the next free version, chosen on first use)."""

    _save_dir: str
    _name: str
    _version: int | str | None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        """The version given, else the next after those in ``root_dir`` (chosen on first use)."""
        if self._version is None:
            self._version = next_version(self.root_dir)
        return self._version

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def root_dir(self) -> str:
        return os.path.join(self._save_dir, self._name)

    @property
    def versioned_dir(self) -> str:
        """``root_dir/version_N`` (or ``root_dir/<version>`` for a version given as a string)."""
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        return os.path.join(self.root_dir, version)


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

    def _started(self, trainer: Run, saved_something: bool = False) -> None:
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


class _DummyExperiment:
    """What ``experiment`` is on ranks other than zero: every method call does nothing."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self.nop

    def __getitem__(self, idx: Any) -> _DummyExperiment:
        return self

    def __setitem__(self, *args: Any) -> None:
        pass


def rank_zero_experiment(fn: _F) -> _F:
    """Lightning's decorator for a logger's ``experiment`` property: the real object on global rank zero, one
    that does nothing elsewhere."""

    @functools.wraps(fn)
    def experiment(self: Logger) -> Any:
        return fn(self) if rank_zero_only.rank == 0 else _DummyExperiment()

    return experiment  # type: ignore[return-value]


def __getattr__(name: str) -> Any:
    distribution = _FROM_PLUGINS.get(name)
    if distribution is None:
        raise AttributeError(
            f"module 'surge.compat.loggers' has no attribute {name!r}; Lightning's loggers ported are "
            f"Logger, {', '.join(_FROM_PLUGINS)} (docs/porting.md, 'Loggers')"
        )
    package = distribution.replace("-", "_")
    try:
        module = importlib.import_module(f"{package}.lightning")
    except ModuleNotFoundError as exc:
        if exc.name != package:  # the plugin is there, something it imports is not: that error says what
            raise
        raise ImportError(
            f"surge.compat.loggers.{name} comes from the plugin distribution {distribution}, which is not "
            f"installed: `pip install {distribution}`"
        ) from exc
    return getattr(module, name)


def save_hparams_to_yaml(config_yaml: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace) -> None:
    """Write ``hparams`` to the YAML file ``config_yaml`` (a path or an fsspec URL), as Lightning's loggers write
    ``hparams.yaml``: containers and scalars as they are, an ``Enum`` member as its name, a numpy scalar or 0-d
    tensor as its number, a bigger tensor or array as nested lists, anything else as its ``repr``."""
    import fsspec
    import yaml

    params = vars(hparams) if isinstance(hparams, Namespace) else dict(hparams)
    with fsspec.open(os.fspath(config_yaml), "w", encoding="utf-8") as f:
        f.write(yaml.safe_dump(_yaml_safe(params), sort_keys=False))


def _yaml_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _yaml_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_safe(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # a tensor, a numpy array or scalar
        return _yaml_safe(value.tolist())
    for kind in (bool, int, float, str):  # the builtin type: safe_dump refuses subclasses (numpy.float64)
        if isinstance(value, kind):
            return kind(value)
    return None if value is None else repr(value)


def next_version(root_dir: str | os.PathLike[str]) -> int:
    """The version a Lightning logger takes in ``root_dir`` (a path or an fsspec URL): one more than the highest
    ``version_N`` directory there, 0 when there is none or no ``root_dir``."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(os.fspath(root_dir))
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    taken = [
        int(base[len("version_") :])
        for entry in entries
        if entry["type"] == "directory"
        and (base := posixpath.basename(str(entry["name"]).rstrip("/"))).startswith("version_")
        and base[len("version_") :].isdigit()
    ]
    return max(taken, default=-1) + 1
