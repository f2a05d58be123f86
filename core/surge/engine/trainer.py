"""The Trainer: validates its arguments, activates plugins, and runs the loops with events at their seams."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from surge import _data
from surge import events as ev
from surge._logging import logger
from surge._plain import check_hparams, plain_hparams, recorded_hparams
from surge.config import TrainerConfig, build_config
from surge.engine import checkpointing
from surge.engine._compiled import unwrap_compiled
from surge.engine._metrics import MetricStore, to_host
from surge.engine._module_hooks import ModuleHooks
from surge.engine._resume import OpenBatch, ResumePoint
from surge.engine._storage import RunDirectory
from surge.engine.module import DataModule, Module, check_step_signatures, overrides
from surge.engine.state import Interrupted, TrainerState
from surge.errors import CheckpointSaveError, ConfigError, SurgeError
from surge.events.bus import Bus, Subscriber, Tier
from surge.events.run import Run, RunView
from surge.plugins import discover
from surge.plugins.arguments import translate_arguments
from surge.plugins.backends import Precision
from surge.plugins.lab import resolve as resolve_lab
from surge.plugins.selection import (
    activate,
    apply_switches,
    declared_events,
    module_claims,
    module_plugins,
    named_providers,
    parse_requests,
    resolve_providers,
    resolve_tuner,
    switched_plugins,
)
from surge.rank_zero import rank_zero_only
from surge.settings import load_settings

__all__ = ["Trainer", "LRSchedulerConfig"]


@dataclass
class LRSchedulerConfig:
    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None


@dataclass(frozen=True)
class _Loop:
    """The loop settings after defaults and ``fast_dev_run``/``overfit_batches`` are applied."""

    max_epochs: int  # -1: no limit
    min_epochs: int
    max_steps: int  # -1: no limit
    min_steps: int
    limit_train: int | float
    limit_val: int | float
    limit_test: int | float
    limit_predict: int | float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int
    overfit: bool

    @classmethod
    def from_config(cls, c: TrainerConfig) -> _Loop:
        max_epochs = c.max_epochs if c.max_epochs is not None else (-1 if c.max_steps != -1 else 1000)
        given = [c.limit_train_batches, c.limit_val_batches, c.limit_test_batches, c.limit_predict_batches]
        limits: list[int | float] = [1.0 if limit is None else limit for limit in given]
        overfit = c.overfit_batches > 0
        if overfit:
            limits[0] = limits[1] = c.overfit_batches
        val_check = 1.0 if c.val_check_interval is None else c.val_check_interval
        sanity, every_n, max_steps = c.num_sanity_val_steps, c.check_val_every_n_epoch, c.max_steps
        fast = c.fast_dev_run
        if fast:
            n = 1 if fast is True else int(fast)
            limits = [n, n, n, n]
            max_epochs, max_steps, val_check, sanity, every_n = 1, n, 1.0, 0, 1
        return cls(
            max_epochs=max_epochs,
            min_epochs=c.min_epochs or 0,
            max_steps=max_steps,
            min_steps=c.min_steps or 0,
            limit_train=limits[0],
            limit_val=limits[1],
            limit_test=limits[2],
            limit_predict=limits[3],
            val_check_interval=val_check,
            check_val_every_n_epoch=every_n,
            num_sanity_val_steps=sanity,
            overfit=overfit,
        )


class Trainer:
    """Runs a :class:`surge.Module` with everything the installed plugins add.

    Arguments are those of :class:`surge.config.TrainerConfig` (Lightning's names). Each may also come from
    an environment variable ``SURGE_TRAINER_<NAME>`` (JSON or a plain string); explicit arguments win. All
    problems are reported at once as a :class:`surge.ConfigError` before anything is created on disk.

    Under a lab profile (:mod:`surge.plugins.lab`) the environment is checked first, before any plugin is imported,
    and a mismatch raises :class:`surge.errors.LabError` with the diff; the profile's ``[trainer]`` table
    gives defaults under the environment's, and its ``[plugins]`` table forces plugins on or off.
    """

    def __init__(self, **options: Any) -> None:
        settings = load_settings()
        lab = resolve_lab(settings)
        if lab is not None:
            lab.verify()
        options = translate_arguments(options, settings, lab)  # another API's arguments, by the plugin taking them
        self.config: TrainerConfig = build_config(
            options,
            defaults=lab.profile.trainer if lab else None,
            defaults_source=f"the lab profile {lab.source}" if lab else "the defaults",
        )
        self._loop = _Loop.from_config(self.config)
        self.fast_dev_run = bool(self.config.fast_dev_run)
        requests = parse_requests(self.config, self.fast_dev_run)
        if lab is not None:
            lab.apply(requests)
        requested = requests.names | named_providers(self.config, settings) | switched_plugins(self.config)
        self.catalog = discover(settings, requested=requested, lab=lab)
        apply_switches(requests, self.catalog, self.config)  # the plugins serving the arguments set, with settings
        logger.debug("{}", self.catalog.summary())  # what was loaded, from where, under which lab
        providers = resolve_providers(self.catalog, self.config, requests.on, requests.checkpoint_io)
        self.accelerator = providers.accelerator
        self.strategy = providers.strategy
        self.precision_plugin = providers.precision
        self.profiler = providers.profiler
        """The profiler chosen by ``profiler=`` (``None``: none); a bus subscriber like the other providers."""
        self._tuner = providers.tuner  # the tuner asked for (its switches, plugins=); else tune() finds one
        self._plugin_subscribers: list[Subscriber] = providers.subscribers + activate(self.catalog, requests)
        self._module_claims = module_claims(self.catalog)  # Module methods plugins run (surge.Plugin(module_hooks=))
        self._plugin_settings = dict(requests.on)
        # the start-up line: short; `surge plugins`, plugins.json and DEBUG have the whole list
        logger.info("{}", self.catalog.headline(s.name.split(".")[0] for s in self._plugin_subscribers))
        self._trace = providers.bus_timing(settings.trace_plugins)  # untimed (None) unless traced or profiled
        self._known_names = set(self.catalog.records) | {"module"}
        self._events = declared_events(self.catalog)  # the active plugins' own events, on every bus of this Trainer
        self.state = TrainerState()
        self.view: Run = RunView(self)
        """The run as handlers see it, the ``trainer`` of every event: this Trainer read-only, with its named
        mutators (:class:`surge.events.run.RunView`); assigning through it raises, naming the mutator to use."""
        # The one bus of this Trainer: plugins checked and every event's order resolved now, the Module's place
        # included; each run binds its Module (see _run).
        self._bus = self._own_bus = Bus(
            self._plugin_subscribers,
            self._known_names,
            self._trace,
            self._handler_failed,
            self._events,
            module_slot=True,
        )
        if self._bus.init_start:
            self._bus.init_start(ev.InitStart(self.view))
        checkpointing.check_state_keys(self._plugin_subscribers)
        self._metrics = MetricStore(move_to_cpu=self.config.move_metrics_to_cpu)
        self._metrics.reduce_across = lambda t, op: self.strategy.reduce(t, op)
        self._metrics.writer = self._write_metrics
        self.module: Module = None  # type: ignore[assignment]
        self.datamodule: DataModule | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.train_dataloader: Any = None
        # the loaders of each evaluation stage, a list (the loops read these; the public properties below may be
        # given another shape by a subclass, as the Lightning API's Trainer does)
        self._val_loaders: list[Any] = []
        self._test_loaders: list[Any] = []
        self._predict_loaders: list[Any] = []
        self._keep_predictions = True  # predict(return_predictions=False): the outputs go to handlers only
        self.num_training_batches: float = 0
        self.accumulate_grad_batches: int = (
            self.config.accumulate_grad_batches if isinstance(self.config.accumulate_grad_batches, int) else 1
        )
        """Micro-batches per optimizer step, read when each training epoch starts (after ``train_epoch_start``,
        so a plugin may change it there with :meth:`set_accumulation`: the ``gradient_accumulation_scheduler``
        does)."""
        self._epoch_starting = False  # True while train_epoch_start fires: set_accumulation is allowed then
        self.num_val_batches: list[float] = []
        self.num_sanity_val_batches: list[float] = []
        self._run_dir: RunDirectory | None = None
        self._sigint_count = 0
        self._resume_point: ResumePoint | None = None  # set by restore_checkpoint in fit, consumed by the loops
        # What a checkpoint written now must record instead of the live state (see surge.engine._resume):
        self._stop_record: dict[str, Any] | None = None  # a stop cut the epoch short: the state at the stop
        self._open_batch: OpenBatch | None = None  # a training batch begun and not finished
        self._validation_rng: dict[str, Any] | None = None  # RNG states before the validation running in fit
        self._last_fit: tuple[str, Module] | None = None  # how this Trainer's last fit ended, and its model
        self.ckpt_path: str | None = None
        """The checkpoint the last ``fit``/``validate``/``test``/``predict`` loaded (``ckpt_path=`` resolved:
        ``"last"`` and ``"best"`` name the file their plugin chose), ``None`` when none (as Lightning's)."""
        self._checkpoint_requests: list[tuple[Callable[[Run], object], str]] = []
        self._agreement: Callable[[], torch.Tensor] | None = None  # the step boundary's all-reduce in flight
        self._agreed = [0, 0]  # with several processes: the Ctrl-C and stop flags the ranks agreed on (loops)
        self._unagreed = [0, 0]  # and this rank's own, kept for the next agreement
        self._takes_batch_idx: dict[str, bool] = {}  # per step method, read once per run (surge.engine.loops)
        self._overridden: frozenset[str] = frozenset()  # the Module's overridden steps, read once per run (loops)
        self._batch_steps: dict[str, Callable[..., Any]] = {}  # the batch-transfer steps overridden, by name
        if self._bus.init_end:
            self._bus.init_end(ev.InitEnd(self.view))

    # -- Lightning's read-only view of the run --------------------------------------------------------
    @property
    def current_epoch(self) -> int:
        return self.state.current_epoch

    @property
    def global_step(self) -> int:
        return self.state.global_step

    @property
    def max_epochs(self) -> int:
        return self._loop.max_epochs

    @property
    def val_dataloaders(self) -> list[Any]:
        """The validation loaders of the fit or validate run, a list ([] when none)."""
        return self._val_loaders

    @property
    def test_dataloaders(self) -> list[Any]:
        """The test loaders of the test run, a list ([] when none)."""
        return self._test_loaders

    @property
    def predict_dataloaders(self) -> list[Any]:
        """The prediction loaders of the predict run, a list ([] when none)."""
        return self._predict_loaders

    @property
    def max_steps(self) -> int:
        return self._loop.max_steps

    @property
    def should_stop(self) -> bool:
        return self.state.should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        """Lightning's way for a callback to stop the fit (its ``EarlyStopping`` sets ``trainer.should_stop = True``):
        :meth:`request_stop`. Lightning callbacks get the Trainer itself; a plugin's handler, whose
        ``event.trainer`` is the read-only view, calls ``request_stop(reason)``."""
        if value:
            self.request_stop("trainer.should_stop was set to True (a Lightning callback)")
        else:
            self.state.should_stop = False

    @property
    def interrupted(self) -> bool:
        return self.state.interrupted

    @property
    def sanity_checking(self) -> bool:
        return self.state.sanity_checking

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The values logged with ``prog_bar=True``, as Python floats (reading this copies them to the host;
        progress bars read it when they refresh, not every step)."""
        return to_host(self._metrics.progress_bar_metrics)

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self.strategy.node_rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def lightning_module(self) -> Module:
        return self.module

    @property
    def model(self) -> Module | None:
        """Lightning's ``trainer.model``: the Module of the current or last run (``None`` before the first). A
        distributed strategy's wrapper (``DistributedDataParallel``) stays the strategy's own: Lightning returns it
        here, Surge the Module inside it (docs/porting.md)."""
        return self.module

    @property
    def loggers(self) -> list[Any]:
        """The active loggers (Lightning's ``trainer.loggers``): the objects of the plugins with
        ``role="logger"`` and those passed in ``logger=[...]``, in the order ``logger=`` lists them."""
        given = self.config.logger if isinstance(self.config.logger, (list, tuple)) else [self.config.logger]
        records = self.catalog.records

        def is_logger(s: Subscriber) -> bool:
            record = records.get(s.name)
            role = record.plugin.role if record is not None and record.plugin is not None else None
            return role == "logger" or any(_unwrap(s.obj) is obj for obj in given)

        def place(s: Subscriber) -> int:
            return next(
                (i for i, g in enumerate(given) if g is _unwrap(s.obj) or (isinstance(g, str) and g == s.name)),
                len(given),
            )

        return [_unwrap(s.obj) for s in sorted(filter(is_logger, self._plugin_subscribers), key=place)]

    @property
    def logger(self) -> Any:
        """The first of :attr:`loggers`, ``None`` without any."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    @property
    def is_last_batch(self) -> bool:
        """Whether the running training batch is the last of its epoch (``False`` while the loader's length
        is unknown)."""
        return self.state.batch_idx + 1 >= self.num_training_batches

    @property
    def default_root_dir(self) -> str:
        return self.config.default_root_dir or os.getcwd()

    @property
    def run_dir(self) -> str | None:
        """This Trainer's versioned run directory (``<default_root_dir>/surge_runs/version_N``; an fsspec URL
        when ``default_root_dir`` is one), created on first use, with the run's plugin set in ``plugins.json``:
        by whatever writes into it (a logger, a checkpoint, a profiler) or reads this. So a run that writes
        nothing leaves nothing on disk, as in Lightning. ``None`` on processes other than global rank zero.

        With a Lightning ``TensorBoardLogger``/``CSVLogger`` object first in ``logger=``, its version directory
        (``save_dir/name/version_N``, its ``surge_run_dir``), as Lightning's ``trainer.log_dir`` and checkpoints."""
        if self._run_dir is None and self.is_global_zero:
            chosen = getattr(self.logger, "surge_run_dir", None)
            run_dir = RunDirectory.at(chosen) if chosen else RunDirectory.create(self.default_root_dir)
            run_dir.write_text("plugins.json", json.dumps(self.plugin_set(), indent=2))
            self._run_dir = run_dir
        return self._run_dir.url if self._run_dir else None

    log_dir = run_dir

    @property
    def should_log(self) -> bool:
        """Whether this training step's metrics are written (every ``log_every_n_steps`` optimizer steps)."""
        return self.state.global_step % self.config.log_every_n_steps == 0

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the fit will take, for schedulers such as ``OneCycleLR``."""
        per_epoch = math.ceil(self.num_training_batches / self.accumulate_grad_batches)
        total = per_epoch * self._loop.max_epochs if self._loop.max_epochs != -1 else math.inf
        return min(total, self._loop.max_steps) if self._loop.max_steps != -1 else total

    @property
    def plugin_names(self) -> list[str]:
        return [s.name for s in self._bus.subscribers]

    def event_order(self, event: str) -> list[str]:
        """Handler names for ``event`` in the order they are called (the Module is ``"module"``)."""
        return self._bus.order(event)

    def plugin(self, name: str) -> object:
        """The object plugin ``name``'s handlers run on in this Trainer (what its factory built, or the object
        passed in); a :class:`LookupError` naming the active plugins when none is active under that name."""
        for sub in self._plugin_subscribers:
            if sub.name == name:
                return sub.obj
        active = ", ".join(s.name for s in self._plugin_subscribers) or "none"
        raise LookupError(f"no active plugin is named '{name}'; active: {active}")

    @property
    def event_names(self) -> list[str]:
        """This run's events: the core's (:data:`surge.events.EVENTS`), then those the active plugins declare."""
        return [*ev.EVENTS, *(cls.name for cls in self._events)]

    # -- Lightning's callback accessors ---------------------------------------------------------------
    @property
    def callbacks(self) -> list[Any]:
        """The active participant and observer objects (plugins built by name, and the objects passed in
        ``callbacks=``/``plugins=``/``logger=``, a Lightning callback as itself), in registration order; providers
        aside."""
        return [_unwrap(s.obj) for s in self._plugin_subscribers if s.tier is not Tier.PROVIDER]

    def _callbacks_in_role(self, role: str) -> list[Any]:
        # duck-typed, so that the core imports no plugin: the object says which accessor returns it (None: none now)
        return [obj for obj in self.callbacks if getattr(obj, "surge_callback_role", None) == role]

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The active ``ModelCheckpoint`` objects (the default one unless it stands aside for yours)."""
        return self._callbacks_in_role("checkpoint")

    @property
    def checkpoint_callback(self) -> Any:
        """The first of :attr:`checkpoint_callbacks`, or ``None``."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """The active ``EarlyStopping`` objects."""
        return self._callbacks_in_role("early_stopping")

    @property
    def early_stopping_callback(self) -> Any:
        """The first of :attr:`early_stopping_callbacks`, or ``None``."""
        return next(iter(self.early_stopping_callbacks), None)

    def _handler_failed(self, event: str) -> None:
        if event == "teardown":  # the run fails: loggers closing after the failed handler record that
            self.state.status = "failed"

    # -- what handlers may change ---------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Ask the run to stop at the next step boundary (after ``min_epochs``/``min_steps`` are met)."""
        if not self.state.should_stop:
            logger.info("stop requested: {}", reason)
        self.state.should_stop = True
        self.state.stop_reason = reason

    def emit(self, event: ev.Event) -> None:
        """Publish ``event``, one of the events an installed plugin declares (``surge.Plugin(events=[...])``), to
        its subscribers, now and on this thread. The core's own events are the core's to emit."""
        if event.name in ev.EVENTS:
            raise SurgeError(
                f"trainer.emit({type(event).__qualname__}(...)): '{event.name}' is a core event, emitted by the core "
                "only; a plugin publishes events it declares itself"
            )
        self._bus.emit(event)

    def set_accumulation(self, factor: int) -> None:
        """Accumulate gradients over ``factor`` batches per optimizer step, from this epoch on. Only from a
        ``train_epoch_start`` handler: there no accumulation window is open, and the loop reads the factor
        right after that event."""
        if not self._epoch_starting:
            raise SurgeError(
                f"trainer.set_accumulation({factor!r}) was called outside train_epoch_start; the accumulation factor "
                "changes only when a training epoch starts (call it from a train_epoch_start handler)"
            )
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise SurgeError(f"trainer.set_accumulation({factor!r}): the factor must be an int >= 1")
        self.accumulate_grad_batches = factor

    def log_metrics(
        self,
        metrics: Mapping[str, float | torch.Tensor],
        step: int | None = None,
        *,
        source: str,
        publish: bool = False,
    ) -> None:
        """Write ``metrics`` to every active logger now (``log_metrics`` event), on global rank zero only.

        For plugins that measure something themselves (a learning-rate monitor, device statistics): tensors
        are copied to the host in one batch; ``step`` defaults to ``global_step``; ``source`` names the
        writer (it becomes the event's ``stage``). ``publish=True`` also puts them in ``callback_metrics`` on
        every process, as tensors, where other handlers (a scheduler, a checkpoint's ``monitor``) read them, as a
        value the Module logs is."""
        if publish:
            self._metrics.callback_metrics.update(
                {k: v if isinstance(v, torch.Tensor) else torch.tensor(v) for k, v in metrics.items()}
            )
        if self._bus.log_metrics and self.is_global_zero and metrics:
            values = to_host(metrics)
            if values:
                self._bus.log_metrics(
                    ev.LogMetrics(
                        self.view, values, self.global_step if step is None else step, self.current_epoch, source
                    )
                )

    def _write_metrics(self, pending: dict[str, torch.Tensor], stage: str, step: int | None) -> None:
        if self._bus.log_metrics and self.is_global_zero:  # no subscriber: nothing is copied to the host
            values = to_host(pending)
            if values:
                step = self.global_step if step is None else step
                self._bus.log_metrics(ev.LogMetrics(self.view, values, step, self.current_epoch, stage))

    def _log_hyperparams(self) -> None:
        if not (self._bus.log_hyperparams and self.is_global_zero):
            return
        # save_hyperparameters(logger=False) keeps an object's hparams from the loggers, as in Lightning
        dm = self.datamodule
        params: dict[str, Any] = dict(dm.hparams) if dm is not None and getattr(dm, "_log_hyperparams", True) else {}
        if getattr(self.module, "_log_hyperparams", True):
            params.update(recorded_hparams(self.module))
        if params:
            self._bus.log_hyperparams(ev.LogHyperparams(self.view, plain_hparams(params)))

    def request_checkpoint(self, save: Callable[[Run], object], reason: str) -> None:
        """Have ``save(trainer.view)`` called at the next step boundary of training, where a checkpoint resumes
        exactly: after the running batch's ``train_batch_end`` and the validation that follows it, or
        between epochs.

        It only records the request, so it is safe from a signal handler (SIGTERM) or another thread;
        ``save`` runs on the training thread, typically ``trainer.save_checkpoint(path)`` followed by
        ``trainer.request_stop(reason)`` or by raising. Requests are served in order, each once; those
        still pending when the run ends are dropped with a warning.
        """
        self._checkpoint_requests.append((save, reason))

    # -- entry points ---------------------------------------------------------------------------------
    def fit(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | None = None,
        trusted: bool = False,
    ) -> None:
        """Train ``model``. Data comes from ``datamodule``, from the loaders passed here, or from the
        module's own ``train_dataloader()``/``val_dataloader()``.

        ``ckpt_path`` (a path, an fsspec URL, or ``"last"``/``"best"`` as the active checkpoint plugin
        resolves them) continues the run saved there exactly, mid-epoch included; ``"last"`` with no
        checkpoint yet starts from scratch. ``trusted=True`` lets a checkpoint that holds pickled code
        load: only for files you trust.
        """
        loaders = {"train": train_dataloaders, "val": val_dataloaders}
        if ckpt_path is None:  # a plugin may name the checkpoint this fit continues (surge.events.ResumePath)
            ckpt_path, _ = self._own_bus.ask(ev.ResumePath(self.view))
        self._run("fit", model, datamodule, loaders, ckpt_path, trusted)

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | None = None,
        trusted: bool = False,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run one validation pass; returns one dict of epoch metrics per dataloader. ``ckpt_path`` (a path,
        a URL, ``"best"``/``"last"``) loads weights first; ``trusted`` as in :meth:`fit`. ``verbose`` prints
        the results as a table (global rank zero), as Lightning does."""
        results = self._run("validate", model, datamodule, {"val": dataloaders}, ckpt_path, trusted)
        if verbose and results and self.is_global_zero:
            print(_results_table(results, "validate"))
        return results  # type: ignore[no-any-return]

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | None = None,
        trusted: bool = False,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run one test pass; returns one dict of epoch metrics per dataloader. ``ckpt_path``, ``trusted`` and
        ``verbose`` as in :meth:`validate`."""
        results = self._run("test", model, datamodule, {"test": dataloaders}, ckpt_path, trusted)
        if verbose and results and self.is_global_zero:
            print(_results_table(results, "test"))
        return results  # type: ignore[no-any-return]

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | None = None,
        trusted: bool = False,
        return_predictions: bool = True,
    ) -> list[Any] | None:
        """Run ``predict_step`` over the data; returns the predictions (a list per loader when several).
        ``ckpt_path`` and ``trusted`` as in :meth:`validate`. ``return_predictions=False`` keeps none of them
        (the ``predict_batch_end`` handlers, a prediction writer, get each one) and returns ``None``: the memory of a
        large prediction run stays flat."""
        self._keep_predictions = bool(return_predictions)
        try:
            predictions = self._run("predict", model, datamodule, {"predict": dataloaders}, ckpt_path, trusted)
        finally:
            self._keep_predictions = True
        return predictions if return_predictions else None

    def tune(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Tune hyper-parameters before :meth:`fit` with a plugin's ``tuner`` provider (without one, the error says
        what to install): the one the Trainer's arguments or ``plugins=`` asked for, else the only one installed.
        ``options`` (Lightning's ``lr_find_kwargs``, ``scale_batch_size_kwargs``) go to it; it returns what the tuner
        found (:class:`surge.events.protocols.Tuner`)."""
        tuner = self._tuner if self._tuner is not None else resolve_tuner(self.catalog, {}, required=True)
        assert tuner is not None
        data = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders, "datamodule": datamodule}
        return tuner.tune(self, model, **data, **options)

    # -- the run bracket: setup, exception policy, interrupt, teardown ------------------------------
    def _run(
        self,
        stage: str,
        model: Module | None,
        datamodule: DataModule | None,
        loaders: dict[str, Any],
        ckpt_path: str | None,
        trusted: bool = False,
    ) -> Any:
        # trainer.fit(torch.compile(model)) as in Lightning: run the Module inside, compiled by the compile plugin
        model, compiling = unwrap_compiled(self, stage, model)
        datamodule = _datamodule_in_loaders(stage, datamodule, loaders)
        model = self._check_inputs(stage, model, datamodule, loaders)
        # the plugins only this run adds (the compile plugin, those running Module methods): a bus of its own
        joining = [*compiling, *module_plugins(self.catalog, self._module_claims, model, self._plugin_settings)]
        continuation = self._continuation(model) if stage == "fit" and ckpt_path is None else None
        if stage == "fit":
            self._stop_record = self._open_batch = None
        self._validation_rng = None
        self.module, self.datamodule = model, datamodule
        if datamodule is not None:
            datamodule.trainer = self  # Lightning's LightningDataModule.trainer
        model._surge_trainer = self
        self._bus = self._own_bus
        if joining:
            self._bus = Bus(
                [*self._plugin_subscribers, *joining],
                self._known_names,
                self._trace,
                self._handler_failed,
                self._events,
                module_slot=True,
            )
        bus = self._bus
        bus.bind(ModuleHooks(model))
        state = self.state
        state.stage, state.status = stage, "running"
        state.should_stop, state.stop_reason, state.interrupted = False, None, False
        self._resume_point, self._checkpoint_requests = None, []
        self._metrics.reset()
        self._apply_reproducibility()
        result: Any = None
        failure: BaseException | None = None
        with self._sigint_handler():
            try:
                self._setup(stage, loaders)
                url = checkpointing.resolve(self, ckpt_path, stage) if ckpt_path is not None else None
                self.ckpt_path = url
                if url is not None:
                    self.restore_checkpoint(url, trusted=trusted)
                    self._metrics.flush()  # values the checkpoint held reduced but unwritten: at their step
                elif continuation is not None:
                    checkpointing.restore(self, continuation, "the interrupted fit")
                if stage != "predict" and self.config.enable_autolog_hparams:
                    self._log_hyperparams()
                from surge.engine import loops

                anomaly = stage == "fit" and self.config.detect_anomaly
                with torch.autograd.set_detect_anomaly(True) if anomaly else contextlib.nullcontext():
                    result = loops.run_stage(self, stage)
                state.status = "finished"
            except (Interrupted, KeyboardInterrupt):
                state.status, state.interrupted = "interrupted", True
                logger.warning(
                    "interrupted by Ctrl-C: {} stopped at a step boundary (epoch {}, global step {}){}",
                    stage,
                    state.current_epoch,
                    state.global_step,
                    self._how_to_resume() if stage == "fit" else "",
                )
                if bus.keyboard_interrupt:
                    with contextlib.suppress(Exception):  # handler errors are logged by the bus
                        bus.keyboard_interrupt(ev.KeyboardInterrupt_(self.view, stage))  # type: ignore[arg-type]
            except BaseException as exc:
                state.status, failure = "failed", exc
                if bus.exception:
                    with contextlib.suppress(Exception):
                        bus.exception(ev.Exception_(self.view, exc, stage))  # type: ignore[arg-type]
                raise
            finally:
                if stage == "fit":
                    self._last_fit = (state.status, model)
                self._teardown(stage, failure)
                self._drop_checkpoint_requests()
        return result

    def _how_to_resume(self) -> str:
        """After Ctrl-C in fit: how to go on, in this process and in a new one."""
        here = "; fit() again on this Trainer with the same model continues from there"
        if self.event_order("checkpoint_path"):  # a plugin answers ckpt_path="last" (the checkpoint plugin)
            return f"{here}, and in a new process fit(..., ckpt_path='last') resumes from the newest checkpoint"
        return f"{here}; a new process resumes only from a checkpoint, and no active plugin writes one"

    def _continuation(self, model: Module) -> dict[str, Any] | None:
        """A second ``fit`` on this Trainer without ``ckpt_path``: after an interrupted or failed fit of the same
        model it continues exactly where that one stopped (as from a checkpoint saved then); after a finished
        fit, or with another model, it is refused, since the Trainer's counters and limits belong to that run."""
        if self._last_fit is None:
            return None
        status, fitted = self._last_fit
        state = self.state
        where = f"epoch {state.current_epoch}, global step {state.global_step}"
        if model is not fitted:
            raise SurgeError(
                f"this Trainer already ran fit() on {type(fitted).__name__} (it {status} at {where}); its counters "
                "belong to that run. Build a new Trainer for another model, or pass the same model to continue"
            )
        if status == "finished":
            why = state.stop_reason or "its max_epochs/max_steps were reached"
            raise SurgeError(
                f"this Trainer's fit() already finished at {where} ({why}); a Trainer's limits are fixed when it is "
                "built, so a second fit() has nothing to do. To train further, save a checkpoint "
                "(trainer.save_checkpoint(path)), build a Trainer with higher max_epochs/max_steps and call "
                "fit(model, ckpt_path=path)"
            )
        logger.info("fit() continues the {} fit of this Trainer at {}", status, where)
        try:
            return checkpointing.dump(self, weights_only=False, fire=False)
        except CheckpointSaveError as exc:
            raise SurgeError(f"fit() cannot continue the {status} fit of this Trainer exactly: {exc}") from exc

    def _check_inputs(
        self, stage: str, model: Module | None, datamodule: DataModule | None, loaders: dict[str, Any]
    ) -> Module:
        if model is None:
            if self.module is None:
                raise SurgeError(f"trainer.{stage}() needs a model: pass the surge.Module to train or evaluate")
            model = self.module
        if not isinstance(model, Module):
            raise SurgeError(
                f"trainer.{stage}(model=...) got {type(model).__name__}; it must subclass surge.Module "
                "(an nn.Module with training_step and configure_optimizers)"
            )
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise SurgeError(
                f"trainer.{stage}(datamodule=...) got {type(datamodule).__name__}; subclass surge.DataModule"
            )
        if datamodule is not None and any(v is not None for v in loaders.values()):
            raise SurgeError(f"trainer.{stage}(): pass either dataloaders or a datamodule, not both")
        needed = {"fit": "training_step", "validate": "validation_step", "test": "test_step"}.get(stage)
        if needed and not overrides(model, Module, needed):
            raise SurgeError(f"trainer.{stage}() needs {type(model).__name__}.{needed}(self, batch, batch_idx)")
        if stage == "fit" and not overrides(model, Module, "configure_optimizers"):
            raise SurgeError(f"trainer.fit() needs {type(model).__name__}.configure_optimizers(self)")
        if (
            stage == "fit"
            and not model.automatic_optimization
            and self.config.accumulate_grad_batches not in (1, {0: 1})
        ):
            raise ConfigError(
                [("trainer.accumulate_grad_batches", "must be 1 with manual optimization; accumulate in training_step")]
            )
        check_step_signatures(model, datamodule, stage)
        if stage == "fit" and overrides(model, Module, "backward") and not _takes_backward_fn(self.precision_plugin):
            raise SurgeError(
                _old_precision_backward(self.precision_plugin, f"{type(model).__name__} overrides backward")
            )
        if stage != "predict":  # hyper-parameters a checkpoint or a logger cannot hold: refused before the run dir
            check_hparams(
                {
                    "hparams": recorded_hparams(model, warn=True),
                    "datamodule.hparams": getattr(datamodule, "hparams", {}),
                }
            )
        return model

    def _setup(self, stage: str, loaders: dict[str, Any]) -> None:
        self.strategy.setup_environment()  # the run directory is made by its first user (run_dir)
        rank_zero_only.rank = self.global_rank  # Lightning's @rank_zero_only follows the running Trainer
        dm = self.datamodule
        # the DataModule's, then the Module's when it has one (also with a DataModule), as Lightning calls them
        if dm is not None and self._should_prepare_data():
            dm.prepare_data()
        if overrides(self.module, Module, "prepare_data") and self._should_prepare_data():
            self.module.prepare_data()  # type: ignore[attr-defined,operator]
        self.module = self.strategy.setup_module(self.precision_plugin.convert_module(self.module))  # type: ignore[assignment]
        if dm is not None:
            dm.setup(stage)
        if self._bus.setup:
            self._bus.setup(ev.Setup(self.view, stage))  # type: ignore[arg-type]
        self._load_dataloaders(stage, loaders)
        if stage == "fit":
            manual = not self.module.automatic_optimization
            self.optimizers, self.lr_scheduler_configs = _parse_optimizers(self.module.configure_optimizers(), manual)
            if self.module.automatic_optimization and len(self.optimizers) > 1:
                raise SurgeError(
                    f"{type(self.module).__name__}.configure_optimizers returned {len(self.optimizers)} optimizers; "
                    "automatic optimization uses one. Set `automatic_optimization = False` and step them yourself"
                )

    def _teardown(self, stage: str, failure: BaseException | None) -> None:
        bus = self._bus
        try:
            try:
                if bus.teardown:
                    bus.teardown(ev.Teardown(self.view, stage))  # type: ignore[arg-type]
            finally:  # a failing teardown handler must not skip the DataModule's or the strategy's
                try:
                    if self.datamodule is not None:
                        self.datamodule.teardown(stage)
                finally:
                    self.strategy.teardown()
        except Exception as exc:
            if failure is None:
                self.state.status = "failed"
                raise
            failure.add_note(f"surge: teardown also failed: {type(exc).__name__}: {exc}")
        finally:
            self._metrics.context = None
            self.state.stage = None

    def _should_prepare_data(self) -> bool:
        return self.local_rank == 0 if self.config.prepare_data_per_node else self.is_global_zero

    def _apply_reproducibility(self) -> None:
        deterministic = self.config.deterministic
        if deterministic is not None:
            if deterministic:
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
        benchmark = self.config.benchmark
        if benchmark is None and deterministic:
            benchmark = False
        if benchmark is not None:
            torch.backends.cudnn.benchmark = benchmark

    @contextlib.contextmanager
    def _sigint_handler(self) -> Iterator[None]:
        """First Ctrl-C: stop at the next step boundary. Second: the usual immediate KeyboardInterrupt."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self._sigint_count = 0

        def handle(signum: int, frame: Any) -> None:
            self._sigint_count += 1
            if self._sigint_count > 1:
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt
            # Not `should_stop`: that one also skips a batch whose train_batch_start already fired, while a
            # Ctrl-C lets the batch in flight finish (its train_batch_end fires) and stops after it.
            self.state.interrupted = True

        previous = signal.signal(signal.SIGINT, handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    # -- data -----------------------------------------------------------------------------------------
    def _load_dataloaders(self, stage: str, passed: dict[str, Any]) -> None:
        def source(kind: str, method: str) -> Any:
            if passed.get(kind) is not None:
                return passed[kind]
            for owner in (self.datamodule, self.module):
                fn = getattr(owner, method, None)
                if fn is None or (isinstance(owner, DataModule) and not overrides(owner, DataModule, method)):
                    continue
                return fn()
            return None

        strategy = self.strategy
        if stage == "fit":
            train = source("train", "train_dataloader")
            if train is None:
                raise SurgeError(
                    "trainer.fit() found no training data: pass train_dataloaders=, a datamodule, or define "
                    "train_dataloader() on the module"
                )
            self._train_source = lambda: source("train", "train_dataloader")
            self._set_train_loader(train)
        if stage in ("fit", "validate"):
            self._val_source = lambda: source("val", "val_dataloader")
            if stage == "fit" and not overrides(self.module, Module, "validation_step"):
                self._val_source = lambda: None  # nothing to validate with: skip validation, as Lightning does
                given = _val_data_given(passed.get("val"), self.datamodule, self.module)
                if given:  # told without calling val_dataloader(), as Lightning does
                    logger.warning(
                        "fit() has validation data ({}) but {} defines no validation_step; validation is "
                        "skipped. Define validation_step(self, batch, batch_idx) to validate",
                        given,
                        type(self.module).__name__,
                    )
            self._set_val_loaders(self._val_source())
        if stage == "test":
            tests = _data.as_list(source("test", "test_dataloader"))
            if not tests:
                raise SurgeError(
                    "trainer.test() found no test data: pass dataloaders=, a datamodule, or define test_dataloader()"
                )
            self._test_loaders = [strategy.process_dataloader(t, "test") for t in tests]
        if stage == "predict":
            preds = _data.as_list(source("predict", "predict_dataloader"))
            if not preds:
                raise SurgeError(
                    "trainer.predict() found no data: pass dataloaders=, a datamodule, or define predict_dataloader()"
                )
            self._predict_loaders = [strategy.process_dataloader(p, "predict") for p in preds]
        if stage == "validate" and not self._val_loaders:
            raise SurgeError(
                "trainer.validate() found no validation data: pass dataloaders=, a datamodule, or define val_dataloader()"
            )

    def _set_train_loader(self, train: Any) -> None:
        if isinstance(train, (list, tuple, Mapping)):
            items = train.items() if isinstance(train, Mapping) else enumerate(train)
            processed = {k: self._prepare_train(v) for k, v in items}
            train = processed if isinstance(train, Mapping) else [processed[i] for i in range(len(processed))]
        else:
            train = self._prepare_train(train)
        self.train_dataloader = _data.combine(train, self.config.multiple_trainloader_mode)
        self.num_training_batches = _data.num_batches(
            _data.loader_len(self.train_dataloader), self._loop.limit_train, "limit_train_batches"
        )

    def _prepare_train(self, loader: Any) -> Any:
        if self._loop.overfit:
            loader = _data.sequential(loader)
        return self.strategy.process_dataloader(loader, "fit")

    def _set_val_loaders(self, loaders: Any) -> None:
        loop = self._loop
        self._val_loaders = [self.strategy.process_dataloader(v, "validate") for v in _data.as_list(loaders)]
        self.num_val_batches = [
            _data.num_batches(_data.loader_len(v), loop.limit_val, "limit_val_batches") for v in self._val_loaders
        ]
        sanity = loop.num_sanity_val_steps
        self.num_sanity_val_batches = [n if sanity == -1 else min(n, sanity) for n in self.num_val_batches]
        self._metrics.eval_steps.clear()  # new loaders: Lightning counts their per-batch log steps from 0

    def reload_dataloaders(self) -> None:
        """Ask the data source for fresh training and validation loaders (``reload_dataloaders_every_n_epochs``)."""
        self._set_train_loader(self._train_source())
        self._set_val_loaders(self._val_source())

    # -- backward and optimizer steps (used by the loops and by manual optimization) ---------------------
    def _backward(self, loss: torch.Tensor) -> None:
        bus = self._bus
        if bus.before_backward:
            bus.before_backward(ev.BeforeBackward(self.view, loss))
        self.precision_plugin.backward(loss)
        if bus.after_backward:
            bus.after_backward(ev.AfterBackward(self.view, loss))

    def _backward_through_module(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """:meth:`_backward` calling the Module's ``backward(loss, *args, **kwargs)`` on the loss the precision
        plugin scaled: for a Module that overrides it, and for ``manual_backward(loss, *args, **kwargs)``."""
        bus, module, precision = self._bus, self.module, self.precision_plugin
        if not _takes_backward_fn(precision):
            raise SurgeError(_old_precision_backward(precision, "the Module's backward is to be called"))
        if bus.before_backward:
            bus.before_backward(ev.BeforeBackward(self.view, loss))
        precision.backward(loss, lambda scaled: module.backward(scaled, *args, **kwargs))
        if bus.after_backward:
            bus.after_backward(ev.AfterBackward(self.view, loss))

    # -- checkpoints --------------------------------------------------------------------------------
    def plugin_set(self) -> list[dict[str, Any]]:
        """The active plugins: name, distribution, version, tier, the file its module was imported from
        (``origin``; ``None`` for an object passed in) and the lab profile of the run (``lab``; ``None``: none)."""
        records = self.catalog.records
        return [
            {
                "name": s.name,
                "distribution": s.distribution,
                "version": s.version,
                "tier": s.tier.name.lower(),
                "origin": _origin(records.get(s.name.split(".")[0]), s),
                "lab": self.catalog.lab,
            }
            for s in self._plugin_subscribers
        ]

    def dump_checkpoint(self, weights_only: bool = False) -> dict[str, Any]:
        """Everything needed to resume exactly, as plain tensors and containers (``weights_only`` loadable);
        fires ``before_checkpoint_save``. Callable from any handler: mid-epoch it records the position."""
        return checkpointing.dump(self, weights_only)

    def save_checkpoint(self, path: str, weights_only: bool = False) -> str:
        """Write a checkpoint to ``path`` (local path or fsspec URL) crash-safely through the strategy (one file
        written by global rank zero with :func:`surge.checkpoint.save`, or every process's shards and a commit
        file); returns ``path``. Callable from a handler mid-epoch (for example in ``train_batch_end``):
        ``fit(ckpt_path=path)`` then continues exactly from there."""
        checkpoint = self.dump_checkpoint(weights_only)
        self.strategy.save_checkpoint(checkpoint, path)
        self.strategy.barrier("save_checkpoint")
        if self._bus.after_checkpoint_save:
            self._bus.after_checkpoint_save(ev.AfterCheckpointSave(self.view, checkpoint))
        return path

    def restore_checkpoint(self, path: str, *, trusted: bool = False) -> None:
        """Load ``path`` with :func:`surge.checkpoint.load` and restore weights; in ``fit`` also optimizers,
        schedulers, loop and data position, RNG and plugin states."""
        checkpoint = self.strategy.load_checkpoint(path, self.module, self.optimizers, trusted=trusted)
        checkpointing.restore(self, checkpoint, path)

    def _serve_checkpoint_requests(self) -> None:
        requests, self._checkpoint_requests = self._checkpoint_requests, []
        for save, reason in requests:
            logger.info("saving the requested checkpoint ({})", reason)
            save(self.view)

    def _drop_checkpoint_requests(self) -> None:
        if self._checkpoint_requests:
            reasons = "; ".join(reason for _, reason in self._checkpoint_requests)
            logger.warning("checkpoint request(s) not served, the run ended first: {}", reasons)
        self._checkpoint_requests = []


def _unwrap(obj: object) -> object:
    """The object the user passed: a foreign callback or logger rather than the adapter standing for it."""
    return getattr(obj, "__wrapped__", obj)


def _origin(record: Any, subscriber: Subscriber) -> str | None:
    """The file a subscriber's plugin module was imported from: only for a subscriber its plugin built (an object
    passed in under a plugin's name is not that plugin's and has no origin)."""
    if record is None or subscriber.distribution is None or subscriber.distribution != record.distribution:
        return None
    return getattr(record, "origin", "") or None


def _val_data_given(passed: Any, datamodule: DataModule | None, module: Module) -> str:
    """Where ``fit``'s validation data would come from, told without building it ('' when nowhere)."""
    if passed is not None:
        return "val_dataloaders"
    if datamodule is not None and overrides(datamodule, DataModule, "val_dataloader"):
        return f"{type(datamodule).__name__}.val_dataloader()"
    if callable(getattr(module, "val_dataloader", None)):
        return f"{type(module).__name__}.val_dataloader()"
    return ""


def _results_table(results: list[dict[str, Any]], stage: str) -> str:
    """Lightning's table of ``validate``/``test`` results: a row per metric, a column per dataloader."""
    names = sorted({name.split("/dataloader_idx_")[0] for result in results for name in result})
    rows = [[f"{stage.capitalize()} metric", *(f"DataLoader {i}" for i in range(len(results)))]]
    for name in names:
        cells = [name]
        for i, result in enumerate(results):
            value = result.get(name, result.get(f"{name}/dataloader_idx_{i}"))
            cells.append(" " if value is None else str(value))
        rows.append(cells)
    width = max(25, *(len(cell) for row in rows for cell in row))
    bar = "─" * (width * len(rows[0]))
    lines = ["".join(cell.center(width) for cell in row).rstrip() for row in rows]
    return "\n".join([bar, lines[0], bar, *lines[1:], bar])


def _datamodule_in_loaders(stage: str, datamodule: DataModule | None, loaders: dict[str, Any]) -> DataModule | None:
    """A DataModule passed where loaders go (``fit(model, dm)``, ``test(model, dm)``) is the datamodule, as
    Lightning takes it; it is taken out of ``loaders``."""
    for kind, value in loaders.items():
        if isinstance(value, DataModule):
            if datamodule is not None:
                raise SurgeError(
                    f"trainer.{stage}() got a DataModule in the dataloaders' place ({type(value).__name__}) and "
                    f"datamodule={type(datamodule).__name__}; pass one of them"
                )
            datamodule, loaders[kind] = value, None
    return datamodule


def _takes_backward_fn(precision: Precision) -> bool:
    """Whether ``precision.backward`` takes the ``backward_fn`` that calls the Module's ``backward`` (a precision
    plugin written before it existed takes the loss only)."""
    return _backward_takes_fn(getattr(type(precision), "backward", None))


@functools.cache
def _backward_takes_fn(backward: Any) -> bool:
    try:
        inspect.signature(backward).bind(None, None, None)  # self, loss, backward_fn
    except TypeError:
        return False
    except ValueError:  # no signature to read
        return True
    return True


def _old_precision_backward(precision: Precision, why: str) -> str:
    cls = type(precision)
    return (
        f"{why}, but the precision plugin {cls.__module__}.{cls.__qualname__} defines backward(loss) without the "
        "backward_fn parameter (surge.Precision.backward(loss, backward_fn=None)) through which the loss it scaled "
        "reaches the Module's backward; update the plugin, or remove the Module's backward override"
    )


def _parse_optimizers(result: Any, manual: bool = False) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    """Accept every form ``configure_optimizers`` may return (see :meth:`surge.Module.configure_optimizers`).
    In manual optimization the user steps the schedulers, so a ``ReduceLROnPlateau`` needs no ``monitor``."""

    def scheduler_config(item: Any, monitor: str | None = None) -> LRSchedulerConfig:
        # ``monitor`` may also sit next to the optimizer: {"optimizer", "lr_scheduler", "monitor"}
        if isinstance(item, Mapping):
            unknown = set(item) - {"scheduler", "interval", "frequency", "monitor", "strict", "name"}
            if "scheduler" not in item or unknown:
                raise SurgeError(
                    f"configure_optimizers: an lr_scheduler dict needs 'scheduler' and may have interval, "
                    f"frequency, monitor, strict, name; got keys {sorted(item)}"
                )
            config = LRSchedulerConfig(**item)
            if config.monitor is None:
                config.monitor = monitor
        else:
            config = LRSchedulerConfig(item, monitor=monitor)
        if config.interval not in ("epoch", "step"):
            raise SurgeError(
                f"configure_optimizers: lr_scheduler interval must be 'epoch' or 'step', got {config.interval!r}"
            )
        plateau = isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        if plateau and config.monitor is None and not manual:
            raise SurgeError(
                "configure_optimizers: ReduceLROnPlateau needs a metric; return "
                "{'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'monitor': 'val_loss'}} (or step it "
                "yourself with automatic_optimization = False)"
            )
        return config

    optimizers: list[torch.optim.Optimizer] = []
    schedulers: list[LRSchedulerConfig] = []
    if isinstance(result, torch.optim.Optimizer):
        return [result], []
    if isinstance(result, Mapping):
        result = [result]
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], (list, tuple)):
        optimizers = list(result[0])
        second = result[1]
        schedulers = [scheduler_config(s) for s in (second if isinstance(second, (list, tuple)) else [second])]
    elif isinstance(result, (list, tuple)):
        for item in result:
            if isinstance(item, Mapping):
                if "optimizer" not in item:
                    raise SurgeError(
                        f"configure_optimizers: a dict needs an 'optimizer' entry; got keys {sorted(item)}"
                    )
                optimizers.append(item["optimizer"])
                if item.get("lr_scheduler") is not None:
                    schedulers.append(scheduler_config(item["lr_scheduler"], item.get("monitor")))
            else:
                optimizers.append(item)
    else:
        raise SurgeError(
            f"configure_optimizers returned {type(result).__name__}; return an optimizer, a list of them, "
            "(optimizers, schedulers), or {'optimizer': ..., 'lr_scheduler': ...}"
        )
    bad = [type(o).__name__ for o in optimizers if not isinstance(o, torch.optim.Optimizer)]
    if bad or not optimizers:
        raise SurgeError(f"configure_optimizers must return torch optimizers; got {bad or 'none'}")
    return optimizers, schedulers
