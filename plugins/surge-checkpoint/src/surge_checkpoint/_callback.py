"""``ModelCheckpoint``: when to save, what to name it, which files to keep, and where ``"last"``/``"best"`` are.

The files themselves are written and read by ``surge.checkpoint`` (crash-safe writes, content hashes,
object-store commit markers); this module decides.
"""

from __future__ import annotations

import datetime
import math
import os
import signal
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal

import surge
from loguru import logger
from pydantic import AfterValidator, BeforeValidator, Field
from surge import checkpoint as store
from surge.checkpoint import snapshot

from surge_checkpoint import _files
from surge_checkpoint._events import CheckpointKind, CheckpointRemoved, CheckpointSaved
from surge_checkpoint._preemption import DEFAULT_SIGNALS, Preempted, PreemptionWatch, resolve_signal
from surge_checkpoint._writer import AsyncWriter, WriteError

if TYPE_CHECKING:
    from surge import events as ev
    from surge.events.protocols import CheckpointIO

__all__ = ["CheckpointConfig", "ModelCheckpoint"]

PLUGIN_NAME = "checkpoint"


def _path(value: object) -> object:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _signals(value: Sequence[str | int]) -> list[str | int]:
    return [resolve_signal(v).name for v in value]


def _interval(value: datetime.timedelta | None) -> datetime.timedelta | None:
    if value is not None and value.total_seconds() <= 0:
        raise ValueError("must be a positive duration")
    return value


def _consistent(settings: Any) -> None:
    if settings.monitor is None and settings.save_top_k not in (-1, 0, 1):
        raise ValueError(
            f"save_top_k={settings.save_top_k} needs a monitor to rank checkpoints by; pass monitor='val_loss' "
            "(or the metric you log), or save_top_k=-1 to keep every checkpoint"
        )
    triggers = {
        "every_n_train_steps": bool(settings.every_n_train_steps),
        "every_n_epochs": bool(settings.every_n_epochs),
        "train_time_interval": settings.train_time_interval is not None,
    }
    if sum(triggers.values()) > 1:
        raise ValueError(
            f"{[k for k, v in triggers.items() if v]} are all set; choose one of every_n_train_steps, "
            "every_n_epochs and train_time_interval (use two ModelCheckpoint instances for two schedules)"
        )


class ModelCheckpoint:
    """Saves checkpoints during ``fit``: on a schedule, keeping the best ``save_top_k`` by ``monitor``.

    The ``checkpoint`` plugin builds one from its settings in every run (switch it off with
    ``Trainer(enable_checkpointing=False)``); pass instances in ``Trainer(callbacks=[ModelCheckpoint(...)])``
    for other schedules, and the default one stands aside (they fill its role, ``surge_callback_role``). The
    arguments, Lightning's, are also the plugin's settings (``Trainer(plugins={"checkpoint": {...}})``).

    * **When**: after validation (or at the end of the training epoch when no validation runs) every
      ``every_n_epochs``, or every ``every_n_train_steps`` optimizer steps, or when ``train_time_interval``
      has passed. Mid-epoch saves happen only on an optimizer-step boundary, never inside a gradient
      accumulation window, so a resume is exact.
    * **What is kept**: without ``monitor``, the newest (``save_top_k=1``) or all (``-1``); with it, the
      ``save_top_k`` best. A file leaves the top k only after the file replacing it has been committed.
    * **Preemption**: SIGTERM/SIGUSR1 (``preemption_signals``) save ``last.ckpt`` at the next step boundary
      and raise :class:`Preempted`; ``fit(ckpt_path="last")`` continues.
    * **Resume**: ``surge_checkpoint_path("last" | "best")`` answers the Trainer's ``ckpt_path`` aliases.

    Args:
        dirpath: Directory (local path or fsspec URL). Default: ``<trainer.run_dir>/checkpoints``.
        filename: Template with metric fields, e.g. ``"{epoch}-{step}-{val_loss:.3f}"``. Default
            ``"{epoch}-{step}"``.
        monitor: Logged metric that ranks checkpoints; ``None`` keeps the newest.
        save_last: Also write ``last.ckpt`` at every save point.
        save_top_k: How many to keep: ``-1`` all, ``0`` none (with ``save_last``: only ``last.ckpt``).
        save_on_train_epoch_end: Save at the end of the training epoch instead of after validation. Default:
            when no validation runs once per epoch.
        async_save: Hand a CPU snapshot to a background writer and keep training.
        preemption_signals: Signals that save a checkpoint at the next step boundary and stop the run
            (``Preempted``).
        on_save_error: A save that fails for a storage reason (disk full, permission denied, connection
            dropped): ``"raise"`` stops the run with ``surge.checkpoint.CheckpointSaveError`` (``WriteError``
            when asynchronous); ``"warn"`` logs a warning naming the file and training goes on (the failed
            checkpoint is not counted; the next due save tries again).
    """

    FILE_EXTENSION = _files.EXTENSION
    CHECKPOINT_NAME_LAST = _files.LAST

    @surge.validated(check=_consistent)
    def __init__(
        self,
        dirpath: Annotated[str | os.PathLike[str] | None, BeforeValidator(_path)] = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool = False,
        save_top_k: Annotated[int, Field(ge=-1)] = 1,
        save_weights_only: bool = False,
        mode: Literal["min", "max"] = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: Annotated[int | None, Field(ge=0)] = None,
        train_time_interval: Annotated[datetime.timedelta | None, AfterValidator(_interval)] = None,
        every_n_epochs: Annotated[int | None, Field(ge=0)] = None,
        save_on_train_epoch_end: bool | None = None,
        async_save: bool = False,
        preemption_signals: Annotated[Sequence[str | int], AfterValidator(_signals)] = DEFAULT_SIGNALS,
        on_save_error: Literal["raise", "warn"] = "raise",
    ) -> None:
        self.dirpath: str | None = _normalize_dir(os.fspath(dirpath)) if dirpath else None
        self._dirpath_given = dirpath is not None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.async_save = async_save
        self.every_n_train_steps = every_n_train_steps or 0
        self.train_time_interval = train_time_interval
        scheduled = self.every_n_train_steps or self.train_time_interval is not None
        self.every_n_epochs = every_n_epochs if every_n_epochs is not None else (0 if scheduled else 1)
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.preemption_signals = [resolve_signal(s) for s in preemption_signals]
        self.on_save_error = on_save_error

        # Checkpointed state (state_dict): what is on disk and how good it is.
        worst = math.inf if self.mode == "min" else -math.inf
        self.best_k_models: dict[str, float] = {}
        self.kth_best_model_path = ""
        self.kth_value: float = worst
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.current_score: float | None = None
        self.last_model_path = ""
        self._last_global_step_saved = 0  # no save before the first optimizer step
        self._removing: list[str] = []  # evicted by the newest save: removed once it is committed
        self._before_save: dict[str, Any] = {}  # the bookkeeping before the newest save (on_save_error="warn")

        # Per run.
        self._plugin_key: str | None = None  # set by the `checkpoint` plugin's factory
        self._trainer: weakref.ReferenceType[surge.Trainer] | None = None
        self._writer = AsyncWriter()
        self._outcome: _Outcome | None = None  # of the save in the background writer, reported once collected
        self._publishes = False  # whether checkpoint_saved/checkpoint_removed are emitted (set at setup)
        self._watch: PreemptionWatch | None = None
        self._failed = False
        self._per_step = False  # whether train_batch_end has anything to decide (set at setup)
        self._last_time = time.monotonic()

    # -- identity ---------------------------------------------------------------------------------------
    @property
    def state_key(self) -> str:
        """Where this instance's state lives in a checkpoint (``checkpoint["plugins"][state_key]``): the
        plugin's name for the default one, else derived from the settings that make instances differ."""
        if self._plugin_key is not None:
            return self._plugin_key
        key: dict[str, Any] = {
            "monitor": self.monitor,
            "mode": self.mode,
            "every_n_train_steps": self.every_n_train_steps,
            "every_n_epochs": self.every_n_epochs,
            "train_time_interval": self.train_time_interval,
        }
        if self._dirpath_given:
            key["dirpath"] = self.dirpath
        if self.filename is not None:
            key["filename"] = self.filename
        return f"{type(self).__qualname__}{key!r}"

    @property
    def state_key_aliases(self) -> tuple[str]:
        """The key Lightning's ModelCheckpoint with these settings keeps its state under (``state_key_aliases``,
        docs/plugins.md): a ``fit(ckpt_path=...)`` of a converted Lightning checkpoint restores this instance from
        it (best_model_path and score, top-k)."""
        key = {
            "monitor": self.monitor,
            "mode": self.mode,
            "every_n_train_steps": self.every_n_train_steps,
            "every_n_epochs": self.every_n_epochs,
            "train_time_interval": self.train_time_interval,
        }
        return (f"ModelCheckpoint{key!r}",)

    @property
    def surge_name(self) -> str:
        """The bus name of an instance passed in ``plugins=[...]`` (distinct settings give distinct names)."""
        return self.state_key

    surge_callback_role = "checkpoint"
    """The role it fills (``surge.events.protocols.CallbackRole``): ``trainer.checkpoint_callbacks`` lists it, and an
    instance passed in ``callbacks=``/``plugins=`` makes the default ``checkpoint`` plugin stand aside, unless
    the run names it (``plugins=["checkpoint"]``, or with settings)."""

    def __repr__(self) -> str:
        return self.state_key

    # -- events -----------------------------------------------------------------------------------------
    @surge.hookimpl
    def init_start(self, event: ev.InitStart) -> None:
        self._trainer = weakref.ref(event.trainer)

    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        trainer = event.trainer
        self._per_step = False
        # The events are this run's when the `checkpoint` plugin is active (an instance passed in plugins=[...]
        # beside enable_checkpointing=False has no plugin declaring them); rank zero commits and removes files.
        self._publishes = trainer.is_global_zero and CheckpointSaved.name in trainer.event_names
        if not self._dirpath_given:
            self.dirpath = _files.join(trainer.run_dir, "checkpoints") if trainer.run_dir else None
        if event.stage != "fit":
            return
        if trainer.is_global_zero and self.dirpath:
            store.sweep(self.dirpath)  # temp files of a save that a crash cut short
            if not self._dirpath_given:
                self._declare_experiment(trainer)
        if self.preemption_signals and self._leads_preemption(trainer):
            # One process: the handler asks the Trainer for a checkpoint at its next step boundary. Several:
            # the ranks agree on the step first (train_batch_end), so that they all save at the same one.
            request = partial(self._request_preemption_save, trainer) if trainer.world_size == 1 else None
            self._watch = PreemptionWatch(self.preemption_signals, request)
            if not self._watch.install():
                logger.debug("preemption signals are not handled: fit() runs outside the main thread")
                self._watch = None
        # Per step there is only something to decide for a step schedule, or for ranks agreeing on preemption.
        agree = self._watch is not None and trainer.world_size > 1
        self._per_step = bool(self.every_n_train_steps or self.train_time_interval is not None or agree)

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        """The bus reads this when a run starts: without a step schedule, asynchronous saves or ranks that
        must agree on a preemption step, ``train_batch_end`` has nothing to do, so it is not dispatched."""
        trainer = self._trainer() if self._trainer else None
        agree = bool(self.preemption_signals) and trainer is not None and trainer.world_size > 1
        if self.every_n_train_steps or self.train_time_interval is not None or self.async_save or agree:
            return frozenset()
        return frozenset({"train_batch_end"})

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        self._last_time = time.monotonic()

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        if self._writer.pending:
            self._collect(wait=False)  # a failed background save raises here, at the next step
        if not self._per_step:
            return
        trainer = event.trainer
        if self._watch is not None and trainer.world_size > 1:
            self._agree_on_preemption(trainer)
        if self._skip(trainer):
            return
        step = trainer.global_step
        # Not @surge.hookimpl(every_n_steps=...): that passes once per multiple, but a step whose save wrote
        # nothing (not in the top k) is retried at the next batch of that step (gradient accumulation).
        due = bool(self.every_n_train_steps) and step % self.every_n_train_steps == 0
        if not due and self.train_time_interval is not None:
            due = time.monotonic() - self._last_time >= self.train_time_interval.total_seconds()
            if trainer.world_size > 1:
                due = bool(trainer.strategy.broadcast(due))  # rank zero's clock decides for all
            if due:
                self._last_time = time.monotonic()
        if due:
            self._save(trainer)

    @surge.hookimpl
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        trainer = event.trainer
        if self._on_train_epoch_end(trainer) and not self._skip(trainer):
            self._save(trainer, topk=self._epoch_due(trainer))

    @surge.hookimpl
    def validation_end(self, event: ev.ValidationEnd) -> None:
        trainer = event.trainer
        if not self._on_train_epoch_end(trainer) and not self._skip(trainer):
            self._save(trainer, topk=self._epoch_due(trainer))

    @surge.hookimpl
    def exception(self, event: ev.Exception_) -> None:
        self._failed = True
        try:
            self._writer.wait()  # the save in flight still completes: it may be the one to resume from
        except WriteError as exc:
            logger.error("{}", exc)
        self._report_background()

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        failed, self._failed = self._failed, False
        watch, self._watch = self._watch, None
        try:
            if watch is not None:
                watch.restore()
                if watch.received is not None and event.trainer.state.status == "finished":
                    logger.warning("received {} after the last step; the run had finished", watch.received.name)
            self._collect(wait=True)
        except WriteError:
            if not failed:
                raise

    # -- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "mode": self.mode,
            "dirpath": self.dirpath,
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "current_score": self.current_score,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "last_global_step_saved": self._last_global_step_saved,
            "removing": list(self._removing),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved_dir = state.get("dirpath")
        if saved_dir == self.dirpath or self.dirpath is None:
            self.best_k_models = {str(k): float(v) for k, v in dict(state.get("best_k_models", {})).items()}
            self.kth_best_model_path = state.get("kth_best_model_path", "")
            self.kth_value = float(state.get("kth_value", self.kth_value))
            self.best_model_score = state.get("best_model_score")
            self.current_score = state.get("current_score")
            self.last_model_path = state.get("last_model_path", "")
            self._last_global_step_saved = int(state.get("last_global_step_saved", 0))
            self._finish_removals(state.get("removing", []))
        else:
            log = logger.warning if self._dirpath_given else logger.info
            log(
                "{}: the checkpoint was written to {}, this run writes to {}; its top-k and last checkpoints "
                "are not carried over, only best_model_path",
                self.state_key,
                saved_dir,
                self.dirpath,
            )
        self.best_model_path = state.get("best_model_path", "")

    # -- the Trainer's ckpt_path aliases -----------------------------------------------------------------
    @surge.hookimpl
    def checkpoint_path(self, event: surge.events.CheckpointPath) -> str | None:
        """The core's question for ``ckpt_path="last"``/``"best"``: answered by :meth:`surge_checkpoint_path`."""
        return self.surge_checkpoint_path(event.alias)

    def surge_checkpoint_path(self, alias: str) -> str | None:
        """``"last"``: the newest checkpoint that loads, in ``dirpath`` (with the default ``dirpath``: in
        every run directory beside this one) or known from this run; when a newer one is corrupt it says
        so and falls back. ``"best"``: the best by ``monitor`` of this run, or of the run that wrote the
        newest checkpoint. ``None``: nothing to offer.

        Both are scoped to the experiment: the Module's class and hyper-parameters, and the DataModule's
        (:func:`surge.checkpoint.experiment_identity`), so runs of different experiments can share a
        ``default_root_dir``:

        * Default ``dirpath``: each run writes its experiment to ``experiment.json`` in its checkpoint
          directory at the start of ``fit``; run directories of other experiments are passed over with a
          WARNING naming their newer checkpoints, how they differ and the path that resumes one anyway.
          With nothing of this experiment, ``"last"`` in ``fit`` starts from scratch (with that warning).
          A directory without ``experiment.json`` (a run of an older version) is judged by the
          ``"experiment"`` entry of its checkpoint (read memory-mapped when local); a checkpoint without one
          cannot be checked and is used as before, with a warning.
        * A ``dirpath`` of the user's: its newest valid checkpoint is judged by its ``"experiment"`` entry;
          when it is clearly another experiment's (a Module class that neither subclasses the run's nor is a
          base of it, or a hyper-parameter both set, to different values), this is a ``SurgeError`` naming
          both (give each experiment its own ``dirpath``, or pass the path to resume). A variant (a subclass,
          hyper-parameters added or dropped) is used; restoring it warns with the difference.
        * Without a Module (before any run) nothing is filtered."""
        trainer = self._trainer() if self._trainer else None
        if alias == "last":
            return self._find_last(trainer)
        if alias == "best":
            if self.best_model_path:
                return self.best_model_path
            last = self._find_last(trainer)
            if last is None:
                return None
            state = store.load(last).get("plugins", {}).get(self.state_key, {})
            return state.get("best_model_path") or None
        return None

    def _find_last(self, trainer: surge.Trainer | None) -> str | None:
        candidates: dict[str, tuple[float, bool]] = {}
        for directory in self._search_dirs(trainer):
            candidates.update(_files.list_checkpoints(directory))
        for known in (self.last_model_path, self.best_model_path, *self.best_k_models):
            if known and known not in candidates and (found := _files.age(known)) is not None:
                candidates[known] = found
        # Newest first; at equal times (object stores count seconds) an uncommitted file counts as the newer.
        order = sorted(candidates, key=lambda u: (candidates[u][0], not candidates[u][1], u), reverse=True)
        mine = _experiment(trainer)
        declared: dict[str, Mapping[str, Any] | None] = {}  # run checkpoint directory -> its experiment
        several: set[str] = set()  # run checkpoint directories of several experiments: judged file by file
        foreign: dict[str, list[str]] = {}  # newer checkpoints of other experiments, passed over -> how they differ
        skipped: list[str] = []
        for url in order:
            theirs: Mapping[str, Any] | None = None
            if mine is not None and not self._dirpath_given:  # a run directory says whose its checkpoints are
                directory = _files.parent(url)
                if directory not in declared:
                    declared[directory] = _declared_experiment(directory, several)
                theirs = declared[directory]
                if theirs is not None and (diff := store.experiment_diff(theirs, mine)):
                    foreign[url] = diff
                    continue
            if not candidates[url][1]:
                skipped.append(f"{url}: no commit marker {url}{store.MARKER_SUFFIX}, its save did not finish")
                continue
            try:
                store.verify(url)  # content hash against the marker, without unpickling
            except surge.SurgeError as exc:
                skipped.append(f"{url}: {exc}")
                continue
            if mine is not None and theirs is None:  # the checkpoint itself says (one memory-mapped read)
                entry = _files.peek(url, "experiment")
                if not self._dirpath_given and _files.parent(url) not in several and isinstance(entry, Mapping):
                    declared[_files.parent(url)] = entry  # a run directory of an older version: one experiment
                if isinstance(entry, Mapping) and (diff := store.experiment_diff(entry, mine)):
                    if not self._dirpath_given:
                        foreign[url] = diff
                        continue
                    if store.experiment_diff(entry, mine, conflicts=True):
                        raise surge.SurgeError(self._refusal(url, entry, mine, diff))
                    # A variant of this experiment (subclass, hyper-parameters added or dropped) in the user's
                    # own directory: used; restoring it warns with the difference.
                if not isinstance(entry, Mapping):
                    logger.warning(
                        "ckpt_path='last': {} records no experiment (written by an older version), so whether it "
                        "is this experiment's ({}) cannot be checked; using it",
                        url,
                        _describe(mine),
                    )
            if skipped:
                logger.warning(
                    "ckpt_path='last': the newest checkpoint cannot be used, so the run resumes from {}, the newest "
                    "valid one. Skipped:\n{}",
                    url,
                    "\n".join(f"  {line}" for line in skipped),
                )
            if foreign and mine is not None:
                _warn_foreign(foreign, mine, url)
            return url
        if foreign and mine is not None:
            _warn_foreign(foreign, mine, None)
        own = [committed for url, (_, committed) in candidates.items() if url not in foreign]
        if skipped and not any(own):
            # Only saves that never finished (the first one was cut short): there is nothing to resume from.
            logger.warning("ckpt_path='last': no committed checkpoint, only unfinished saves:\n{}", "\n".join(skipped))
            return None
        if skipped:
            raise surge.SurgeError(
                f"ckpt_path='last': no checkpoint in {self._search_dirs(trainer)} can be loaded:\n"
                + "\n".join(f"  {line}" for line in skipped)
            )
        return None

    def _refusal(self, url: str, theirs: Mapping[str, Any], mine: Mapping[str, Any], diff: list[str]) -> str:
        return (
            f"ckpt_path='last': the newest checkpoint in ModelCheckpoint(dirpath={self.dirpath!r}), {url}, belongs "
            f"to another experiment:\n  checkpoint: {_describe(theirs)}\n  this run:   {_describe(mine)}\n"
            + "".join(f"  ~ {line}\n" for line in diff)
            + "Several experiments share this dirpath. Give each its own ModelCheckpoint(dirpath=...) (or leave it "
            f"unset: each run then has its own directory), or pass the checkpoint to resume explicitly: "
            f"ckpt_path={url!r} resumes that one anyway"
        )

    def _declare_experiment(self, trainer: surge.Trainer) -> None:
        """Write this run's experiment beside its checkpoints (default dirpath, rank zero, start of fit):
        ``"last"`` of a later run tells from it whether they are its experiment's without reading them. A
        Trainer that fits another experiment into the same run directory marks it as holding several."""
        mine = _experiment(trainer)
        if mine is None or not self.dirpath:
            return
        url = _files.join(self.dirpath, _files.EXPERIMENT)
        try:
            before = _files.read_json(url)
            if before is not None and before != mine:
                mine = {"several": True}  # checkpoints of this directory are judged one by one
            if before != mine:
                _files.write_json(url, mine)
        except Exception as exc:  # the run's checkpoints are still judged by their own "experiment" entry
            logger.warning("could not write {}: {}: {}", url, type(exc).__name__, exc)

    def _search_dirs(self, trainer: surge.Trainer | None) -> list[str]:
        if self._dirpath_given:
            return [self.dirpath] if self.dirpath else []
        if trainer is None:
            return [self.dirpath] if self.dirpath else []
        runs = (
            _files.parent(trainer.run_dir) if trainer.run_dir else _files.join(trainer.default_root_dir, "surge_runs")
        )
        dirs = _files.run_checkpoint_dirs(runs)
        return dirs + ([self.dirpath] if self.dirpath and self.dirpath not in dirs else [])

    # -- deciding ---------------------------------------------------------------------------------------
    def _leads_preemption(self, trainer: surge.Trainer) -> bool:
        """One instance per run handles the signals: the first of the run's checkpoint callbacks that has any."""
        for other in trainer.checkpoint_callbacks:
            if getattr(other, "preemption_signals", None):
                return other is self
        return False

    def _skip(self, trainer: surge.Trainer) -> bool:
        return (
            bool(trainer.fast_dev_run)
            or trainer.sanity_checking
            or trainer.state.stage != "fit"
            or self._last_global_step_saved == trainer.global_step
        )

    def _on_train_epoch_end(self, trainer: surge.Trainer) -> bool:
        """Lightning's rule: after validation when it runs once per epoch, else at the training epoch end."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.config.check_val_every_n_epoch != 1:
            return False
        if not sum(trainer.num_val_batches):
            return True
        interval = trainer.config.val_check_interval
        return interval is None or (isinstance(interval, float) and interval == 1.0)

    def _epoch_due(self, trainer: surge.Trainer) -> bool:
        return bool(self.every_n_epochs) and (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _request_preemption_save(self, trainer: surge.Trainer, sig: signal.Signals | None) -> None:
        """Called from the signal handler: only records the request; the Trainer serves it at its next
        step boundary (after the batch and its validation), on the training thread."""
        name = sig.name if sig is not None else "a preemption signal on another rank"
        trainer.request_checkpoint(partial(self._save_and_stop, signal_name=name), f"preempted by {name}")

    def _agree_on_preemption(self, trainer: surge.Trainer) -> None:
        """Several processes: stop all of them at the same step, whichever got the signal."""
        assert self._watch is not None
        if self._watch.requested:
            return
        if trainer.strategy.reduce_boolean_decision(self._watch.received is not None, all=False):
            self._watch.requested = True
            self._request_preemption_save(trainer, self._watch.received)

    # -- saving -----------------------------------------------------------------------------------------
    def _save(self, trainer: surge.Trainer, topk: bool = True) -> None:
        """Save the top-k checkpoint (when ``topk`` and it ranks) and ``last.ckpt`` (with ``save_last``)."""
        if not (topk and self.save_top_k) and not self.save_last:
            return
        self._collect(wait=True)  # the previous save commits (or fails, raising here) before this one is planned
        self._before_save = self._bookkeeping()
        metrics = _candidates(trainer)  # metric values leave the device only now, when a save is due
        writes: list[str] = []
        removals: list[str] = []
        kinds: dict[str, CheckpointKind] = {}
        score = None
        if topk and self.save_top_k:
            self._plan_topk(trainer, metrics, writes, removals)
            kinds = dict.fromkeys(writes, "top_k" if self.monitor is not None else "periodic")
            score = self.current_score if self.monitor is not None else None  # read by _plan_topk just now
        if self.save_last:
            self.last_model_path = self._path(f"{_files.LAST}{_files.EXTENSION}")
            writes.append(self.last_model_path)
            kinds[self.last_model_path] = "last"
        if not writes:
            return
        self._last_global_step_saved = trainer.global_step
        try:
            self._write(trainer, writes, removals, kinds, score)
        except store.CheckpointSaveError as exc:
            self._save_failed(exc)

    def _collect(self, wait: bool) -> None:
        """The outcome of the background save: nothing, or its error (raised, or with ``on_save_error="warn"``
        logged when it is a storage failure). ``wait=False`` collects only a finished save."""
        try:
            self._writer.wait() if wait else self._writer.check()
        except WriteError as exc:
            self._report_background()  # the files it committed (and removed) before it failed
            if not isinstance(exc.__cause__, store.CheckpointSaveError):
                raise
            self._save_failed(exc)
        else:
            self._report_background()

    def _report_background(self) -> None:
        """Report what the background save did, once it is over (nothing while it still runs)."""
        if self._outcome is not None and not self._writer.pending:
            outcome, self._outcome = self._outcome, None
            self._report(outcome)

    def _report(self, outcome: _Outcome) -> None:
        """``checkpoint_saved`` for each file the save committed, then ``checkpoint_removed`` for each it removed."""
        if not self._publishes:
            return
        for path in outcome.committed:
            if path in outcome.saved:  # not the guard files of an overwrite (see _guard)
                outcome.trainer.emit(outcome.saved[path])
        for path in outcome.removed:
            if path in outcome.evicted:
                outcome.trainer.emit(CheckpointRemoved(outcome.trainer, path, outcome.step, outcome.epoch))

    def _save_failed(self, exc: surge.SurgeError) -> None:
        """A save failed for a storage reason: raise, or warn and forget it (``on_save_error``)."""
        if self.on_save_error == "raise":
            raise exc
        logger.warning(
            "{}: {}; training goes on (on_save_error='warn'), the checkpoints committed before are kept and the "
            "next due save tries again",
            self.state_key,
            exc,
        )
        self._restore_bookkeeping(self._before_save)

    def _bookkeeping(self) -> dict[str, Any]:
        return {
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "current_score": self.current_score,
            "last_model_path": self.last_model_path,
            "_last_global_step_saved": self._last_global_step_saved,
            "_removing": list(self._removing),
        }

    def _restore_bookkeeping(self, state: Mapping[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def _plan_topk(
        self, trainer: surge.Trainer, metrics: dict[str, Any], writes: list[str], removals: list[str]
    ) -> None:
        if self.monitor is None:
            previous = self.best_model_path
            path = self._new_path(trainer, metrics, keep=previous if self.save_top_k == 1 else "")
            self.best_model_path = path
            writes.append(path)
            if self.save_top_k == 1 and previous and previous != path and self._owns(previous):
                removals.append(previous)
            return
        if self.monitor not in metrics:
            logged = sorted(k for k in metrics if k not in ("epoch", "step"))
            raise surge.SurgeError(
                f"ModelCheckpoint(monitor={self.monitor!r}) found no metric {self.monitor!r} at epoch "
                f"{trainer.current_epoch}, step {trainer.global_step}; logged metrics: {logged or 'none'}. Log it "
                f"with self.log({self.monitor!r}, value) before the checkpoint is saved (validation metrics exist "
                "only after validation; see save_on_train_epoch_end)"
            )
        current = float(_files.as_number(metrics[self.monitor]))
        if math.isnan(current):
            current = math.inf if self.mode == "min" else -math.inf  # NaN ranks last
        self.current_score = current
        if not self._ranks(current):
            if self.verbose:
                logger.info(
                    "{}: {}={:.5g} is not in the top {}", self.state_key, self.monitor, current, self.save_top_k
                )
            return
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        evicted = ""
        if len(self.best_k_models) == k:
            evicted = self.kth_best_model_path
            self.best_k_models.pop(evicted, None)
        path = self._new_path(trainer, metrics, keep=evicted)
        self.best_k_models[path] = current
        worst, best = (max, min) if self.mode == "min" else (min, max)
        if len(self.best_k_models) == k:
            self.kth_best_model_path = worst(self.best_k_models, key=self.best_k_models.__getitem__)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        self.best_model_path = best(self.best_k_models, key=self.best_k_models.__getitem__)
        self.best_model_score = self.best_k_models[self.best_model_path]
        writes.append(path)
        if evicted and evicted != path and self._owns(evicted):
            removals.append(evicted)

    def _ranks(self, current: float) -> bool:
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        return current < self.kth_value if self.mode == "min" else current > self.kth_value

    def _owns(self, path: str) -> bool:
        """Only files in this instance's own directory are ever removed (not a previous run's)."""
        return bool(self.dirpath) and _files.parent(path) == self.dirpath

    def _path(self, name: str) -> str:
        return _files.join(self.dirpath, name) if self.dirpath else name

    def _new_path(self, trainer: surge.Trainer, metrics: Mapping[str, Any], keep: str) -> str:
        """The formatted file name, with ``-vN`` added while the name is taken (other than by ``keep``,
        the file it replaces)."""
        name = _files.format_name(self.filename or _files.DEFAULT_FILENAME, metrics, self.auto_insert_metric_name)
        taken = set(self.best_k_models) | {self.last_model_path}
        path, version = self._path(name + _files.EXTENSION), 1
        while path != keep and (path in taken or (trainer.is_global_zero and _files.exists(path))):
            path, version = self._path(f"{name}-v{version}{_files.EXTENSION}"), version + 1
        return path

    def _write(
        self,
        trainer: surge.Trainer,
        writes: list[str],
        removals: list[str],
        kinds: Mapping[str, CheckpointKind],
        score: float | None = None,
        *,
        preempted: bool = False,
    ) -> None:
        """Write one checkpoint to every path of ``writes`` (the same step, each of the kind ``kinds`` names),
        then remove ``removals``; report both (``checkpoint_saved``, ``checkpoint_removed``) once done."""
        self._removing = removals  # in the checkpoint's state: a resume finishes them if a crash did not
        step, epoch = trainer.global_step, trainer.current_epoch
        saved = {p: CheckpointSaved(trainer, p, kinds[p], self.monitor, score, step, epoch) for p in writes}
        outcome = _Outcome(trainer, saved, frozenset(removals), step, epoch)
        writes, guards = self._guard(trainer, writes)
        removals = [*removals, *guards]
        if self.verbose:
            logger.info("{}: saving {} at step {}", self.state_key, writes, trainer.global_step)
        weights_only = self.save_weights_only and not preempted  # the preemption checkpoint resumes the run
        if not self.async_save or preempted or not trainer.strategy.async_checkpoint_save:  # sharded: every rank
            try:
                for path in writes:
                    trainer.save_checkpoint(path, weights_only=weights_only)
                    outcome.committed.append(path)
                if trainer.is_global_zero:
                    _remove(trainer.strategy.checkpoint_io, removals, outcome.removed)
            finally:  # a failing save still reports the files committed before it
                self._report(outcome)
            return
        checkpoint = trainer.dump_checkpoint(weights_only=weights_only)  # every rank: dumping may be collective
        if trainer.is_global_zero:
            io = trainer.strategy.checkpoint_io
            job = partial(_write_files, io, snapshot(checkpoint), writes, removals, outcome)
            self._writer.submit(job, ", ".join(writes))
            self._outcome = outcome

    def _guard(self, trainer: surge.Trainer, writes: list[str]) -> tuple[list[str], list[str]]:
        """Order the writes so that an overwrite in place never comes first; returns them and the guard
        files to remove once they are committed.

        On a local disk ``surge.checkpoint.save`` overwrites in place crash-safely, so nothing is needed.
        On an object store, overwriting a checkpoint (``last.ckpt``, a constant ``filename``) uploads its data
        and then its commit marker; a crash between the two leaves that object invalid. So there a save whose
        every target exists first commits the same checkpoint under a fresh name (``<name>.new.ckpt``),
        removed once the overwrites are committed: at every instant the newest step has a valid checkpoint.
        """
        guards: list[str] = []
        if trainer.is_global_zero:
            fresh = [path for path in writes if not _files.exists(path)]
            overwrites = [path for path in writes if path not in fresh]
            if overwrites and not fresh and not _files.is_local(overwrites[0]):
                stem = overwrites[0].removesuffix(_files.EXTENSION)
                version = 0
                while True:  # a guard left by a crash may be what the run resumed from: never overwrite one
                    guard = f"{stem}.new{f'-v{version}' if version else ''}{_files.EXTENSION}"
                    guards.append(guard)
                    if not _files.exists(guard):
                        break
                    version += 1
                writes = [guard, *overwrites]
            else:
                writes = [*fresh, *overwrites]
        if trainer.world_size > 1:  # every rank makes the same number of save_checkpoint calls
            writes, guards = trainer.strategy.broadcast((writes, guards))
        return writes, guards

    def _save_and_stop(self, trainer: surge.Trainer, signal_name: str) -> None:
        """Served by the Trainer at a step boundary after a preemption signal: save ``last.ckpt``, stop."""
        self._collect(wait=True)
        path = self.last_model_path = self._path(f"{_files.LAST}{_files.EXTENSION}")
        self._last_global_step_saved = trainer.global_step
        self._write(trainer, [path], [], {path: "preemption"}, preempted=True)
        raise Preempted(
            f"preempted by {signal_name}: saved {path} at epoch {trainer.current_epoch}, step {trainer.global_step}, "
            "and stopped. Resume with trainer.fit(..., ckpt_path='last')",
            signal=signal_name,
            checkpoint=path,
        )

    def _finish_removals(self, paths: Sequence[str]) -> None:
        trainer = self._trainer() if self._trainer else None
        if trainer is None or not trainer.is_global_zero:
            return
        kept = {*self.best_k_models, self.best_model_path, self.last_model_path}
        io = trainer.strategy.checkpoint_io
        _remove(io, [p for p in paths if p not in kept and self._owns(p) and _files.exists(p)])


def _experiment(trainer: surge.Trainer | None) -> dict[str, Any] | None:
    """The run's experiment identity; ``None`` before a Module is given (nothing to compare with)."""
    module = getattr(trainer, "module", None)
    if module is None:
        return None
    return store.experiment_identity(module, getattr(trainer, "datamodule", None))


def _declared_experiment(directory: str, several: set[str]) -> Mapping[str, Any] | None:
    """A run checkpoint directory's ``experiment.json``; ``None`` when it has none, or when it says that
    the directory holds several experiments (or is unreadable), which adds the directory to ``several``."""
    declared = _files.read_json(_files.join(directory, _files.EXPERIMENT))
    if isinstance(declared, Mapping) and "module" in declared:
        return declared
    if declared is not None or _files.exists_file(_files.join(directory, _files.EXPERIMENT)):
        several.add(directory)
    return None


def _describe(identity: Mapping[str, Any]) -> str:
    """``pkg.Net(lr=0.1, ...)`` (with ``pkg.Data(...)``)."""

    def call(name: str, kind: str) -> str:
        hparams = identity.get(f"{kind}hparams") or {}
        return f"{identity.get(name)}({', '.join(f'{k}={v}' for k, v in dict(hparams).items())})"

    text = call("module", "")
    return f"{text} with {call('datamodule', 'datamodule_')}" if identity.get("datamodule") else text


def _warn_foreign(foreign: Mapping[str, list[str]], mine: Mapping[str, Any], found: str | None) -> None:
    """A WARNING naming the newer checkpoints of other experiments that ``"last"`` passed over (the newest
    of each directory), why, and how to resume one anyway."""
    shown: dict[str, str] = {}
    for url in foreign:  # newest first
        shown.setdefault(_files.parent(url), url)
    lines = [
        f"  {url}: {'; '.join(foreign[url])}; resume it with ckpt_path={url!r}" for url in list(shown.values())[:5]
    ]
    if len(shown) > 5:
        lines.append(f"  ... and {len(shown) - 5} more directories")
    logger.warning(
        "ckpt_path='last': passed over {} {}checkpoint(s) of other experiments (the checkpoint's -> this "
        "run's):\n{}\n{} ({})",
        len(foreign),
        "newer " if found else "",
        "\n".join(lines),
        f"resuming from {found}, the newest of this experiment" if found else "nothing of this experiment to resume",
        _describe(mine),
    )


def _candidates(trainer: surge.Trainer) -> dict[str, Any]:
    metrics: dict[str, Any] = dict(trainer.callback_metrics)
    metrics.setdefault("epoch", trainer.current_epoch)
    metrics["step"] = trainer.global_step
    return metrics


@dataclass
class _Outcome:
    """What one save did, filled in as its files are committed and removed (by the writer's thread for an
    asynchronous save), and reported as events on the training thread once the save is over."""

    trainer: surge.Trainer
    saved: dict[str, CheckpointSaved]  # path -> its event, emitted once the path is committed
    evicted: frozenset[str]  # the checkpoints this save replaces (not its guard files)
    step: int
    epoch: int
    committed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _write_files(
    io: CheckpointIO, checkpoint: dict[str, Any], writes: list[str], removals: list[str], outcome: _Outcome
) -> None:
    """The background writer's job: commit every file through the run's checkpoint IO, then remove what they
    replace."""
    for path in writes:
        try:
            io.save_checkpoint(checkpoint, path)
        except Exception as exc:
            raise WriteError(f"the asynchronous checkpoint save to {path} failed: {type(exc).__name__}: {exc}") from exc
        outcome.committed.append(path)
    _remove(io, removals, outcome.removed)


def _remove(io: CheckpointIO, paths: Sequence[str], removed: list[str] | None = None) -> None:
    """Remove each checkpoint through the run's checkpoint IO (``surge.checkpoint.FileCheckpointIO``: marker, then
    data); those that are gone afterwards are added to ``removed``."""
    for path in paths:
        try:
            io.remove_checkpoint(path)
        except FileNotFoundError:
            pass
        except Exception as exc:  # a leftover file wastes space; it must not stop training
            logger.warning("could not remove the old checkpoint {}: {}: {}", path, type(exc).__name__, exc)
            continue
        if removed is not None:
            removed.append(path)


def _normalize_dir(dirpath: str) -> str:
    if "://" in dirpath:
        return dirpath.rstrip("/")
    return os.path.abspath(os.path.expanduser(dirpath))


def build(**settings: Any) -> ModelCheckpoint:
    """The ``checkpoint`` plugin's factory: one ModelCheckpoint per run, its state under ``"checkpoint"``."""
    callback = ModelCheckpoint(**settings)
    callback._plugin_key = PLUGIN_NAME
    return callback


CheckpointConfig = surge.settings_model(ModelCheckpoint)
"""The ``checkpoint`` plugin's settings, derived from :class:`ModelCheckpoint`'s signature."""
