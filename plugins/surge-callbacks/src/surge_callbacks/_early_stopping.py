"""``EarlyStopping``: stop a fit when a monitored metric stops improving (or leaves a sane range)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import surge
from loguru import logger
from pydantic import Field
from surge.events import Event

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["EarlyStopping", "EarlyStoppingCheck", "EarlyStoppingConfig", "EarlyStoppingReason"]


@dataclass(frozen=True, slots=True)
class EarlyStoppingCheck(Event):
    """An :class:`EarlyStopping` checked its metric: after each validation run of a fit (not the sanity check),
    or at the end of each training epoch when it checks there (``check_on_train_epoch_end``). Fires on every
    rank, after the check updated the state and, when it decided to stop, after ``trainer.request_stop``. A
    check that finds no ``monitor`` metric (``strict=False``) emits nothing.

    ``monitor``: the metric; ``value``: its value at this check; ``best`` and ``best_epoch``: the best value so
    far and its epoch (``inf``/``-inf`` and ``-1`` before a finite one); ``improved``: whether this check set
    a new best; ``wait_count``: checks in a row without an improvement of ``min_delta``, out of ``patience``;
    ``stop_reason``: the reason given to ``request_stop`` when this check stops the fit, else ``None``;
    ``epoch``: the epoch checked.

    May change: nothing (a handler that wants the fit to stop calls ``trainer.request_stop``)."""

    name: ClassVar[str] = "early_stopping_check"
    monitor: str
    value: float
    best: float
    best_epoch: int
    improved: bool
    wait_count: int
    patience: int
    stop_reason: str | None
    epoch: int


class EarlyStoppingReason(Enum):
    """Why :class:`EarlyStopping` stopped the fit (``stopping_reason``); Lightning's names and values."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping:
    """Requests a stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` checks, or when
    it is not finite, reached ``stopping_threshold`` or passed ``divergence_threshold``.

    The stop goes through ``trainer.request_stop(reason)``; the reason says why (for example ``val_loss did
    not improve by 0.001 for 3 checks; best 0.412 at epoch 4``) and is kept in ``trainer.state.stop_reason``.
    The fit then ends after the current epoch, or once ``min_epochs``/``min_steps`` are reached.

    The wait count, the best score and its epoch, and the stopped epoch are checkpointed, so a resumed fit
    stops where the uninterrupted one would have.

    Args:
        monitor: The metric to watch, as logged with ``self.log`` (read from ``trainer.callback_metrics``).
        min_delta: An improvement smaller than this does not count.
        patience: Checks without improvement after which the fit stops (``0``: the first check without one).
        verbose: Log every check's outcome (otherwise only the stop).
        mode: ``"min"``: lower is better; ``"max"``: higher is better.
        strict: A check that finds no ``monitor`` metric is an error (``False``: a warning, once).
        check_finite: Stop when the metric is NaN or infinite.
        stopping_threshold: Stop as soon as the metric is at least this good.
        divergence_threshold: Stop as soon as the metric is worse than this.
        check_on_train_epoch_end: Check at the end of each training epoch (``True``) or after each validation
            run (``False``). ``None``: after validation when the fit has validation data, else at the
            training epoch's end.
    """

    surge_callback_role = "early_stopping"
    """``trainer.early_stopping_callback(s)`` returns the instances marked so."""

    @surge.validated
    def __init__(
        self,
        monitor: str = "val_loss",
        mode: Literal["min", "max"] = "min",
        min_delta: Annotated[float, Field(ge=0)] = 0.0,
        patience: Annotated[int, Field(ge=0)] = 3,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        strict: bool = True,
        verbose: bool = False,
    ) -> None:
        self.monitor = monitor
        self.mode = mode
        self.min_delta = min_delta
        self.patience = patience
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.strict = strict
        self.verbose = verbose
        # checkpointed state
        self.wait_count = 0
        self.best_score = math.inf if self.mode == "min" else -math.inf
        self.best_epoch = -1
        self.stopped_epoch = -1
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        """Why this callback stopped the fit, as Lightning's :class:`EarlyStoppingReason`."""
        self.stopping_reason_message: str | None = None
        """The same in words (what ``trainer.state.stop_reason`` holds); ``None`` while not stopped."""
        # per run
        self._at_train_epoch_end = bool(self.check_on_train_epoch_end)
        self._warned_missing = False
        self._publishes = False  # whether early_stopping_check is emitted (set at train_start)

    @property
    def state_key(self) -> str:
        """Where the state lives in a checkpoint: instances watching different metrics keep separate entries."""
        return f"early_stopping[monitor={self.monitor},mode={self.mode}]"

    @property
    def state_key_aliases(self) -> tuple[str]:
        """The key Lightning's EarlyStopping with this monitor and mode keeps its (same-shaped) state under
        (``state_key_aliases``, docs/plugins.md): a ``fit(ckpt_path=...)`` of a converted Lightning checkpoint
        restores this instance from it."""
        return (f"EarlyStopping{ {'monitor': self.monitor, 'mode': self.mode}!r}",)

    @property
    def surge_name(self) -> str:
        """The bus name of an instance passed in ``plugins=[...]`` (the by-name plugin is ``early_stopping``)."""
        return self.state_key

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        if self.check_on_train_epoch_end is True:
            return frozenset({"validation_end"})
        if self.check_on_train_epoch_end is False:
            return frozenset({"train_epoch_end"})
        return frozenset()  # decided when training starts: whether the fit validates

    # -- checkpoint ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "stopped_epoch": self.stopped_epoch,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count = int(state["wait_count"])
        self.best_score = float(state["best_score"])
        self.best_epoch = int(state.get("best_epoch", -1))
        self.stopped_epoch = int(state["stopped_epoch"])
        self.stopping_reason = EarlyStoppingReason(state.get("stopping_reason", 0))
        self.stopping_reason_message = state.get("stopping_reason_message")

    # -- events ----------------------------------------------------------------------------------------
    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        trainer = event.trainer
        # The event is this run's when the `early_stopping` plugin is active, not for an instance passed in
        # plugins=[...] alone (no active plugin declares it then).
        self._publishes = EarlyStoppingCheck.name in trainer.event_names
        if self.check_on_train_epoch_end is None:
            validates = bool(trainer.val_dataloaders) and any(trainer.num_val_batches)
            self._at_train_epoch_end = not validates
        else:
            self._at_train_epoch_end = self.check_on_train_epoch_end

    @surge.hookimpl
    def validation_end(self, event: ev.ValidationEnd) -> None:
        trainer = event.trainer
        if self._at_train_epoch_end or trainer.sanity_checking or trainer.state.stage != "fit":
            return
        self._check(trainer)

    @surge.hookimpl
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        if self._at_train_epoch_end:
            self._check(event.trainer)

    def _check(self, trainer: surge.Trainer) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            logged = sorted(trainer.callback_metrics) or "none"
            message = (
                f"early_stopping: the monitored metric '{self.monitor}' was not logged by epoch "
                f"{trainer.current_epoch}; logged metrics: {logged}. Log it with self.log('{self.monitor}', ...), "
                "set monitor= to one of those"
            )
            if self.strict:
                raise surge.SurgeError(message + ", or pass strict=False to skip checks that lack it")
            if not self._warned_missing:
                logger.warning("{}; the check is skipped (strict=False)", message)
                self._warned_missing = True
            return
        current, best, epoch = float(value), self.best_score, trainer.current_epoch  # one host copy per check
        found = self._evaluate(current, epoch)
        reason = None
        if found is not None and not trainer.should_stop:
            self.stopping_reason, reason = found
            self.stopped_epoch, self.stopping_reason_message = epoch, reason
            trainer.request_stop(reason)
        if self._publishes:
            improved = self.best_score != best
            trainer.emit(
                EarlyStoppingCheck(
                    trainer,
                    self.monitor,
                    current,
                    self.best_score,
                    self.best_epoch,
                    improved,
                    self.wait_count,
                    self.patience,
                    reason,
                    epoch,
                )
            )

    def _evaluate(self, current: float, epoch: int) -> tuple[EarlyStoppingReason, str] | None:
        """Update the state with this check's value; why to stop (the reason and its words), or ``None``."""
        name, better, why = self.monitor, self._better, EarlyStoppingReason
        if self.check_finite and not math.isfinite(current):
            return why.NON_FINITE_METRIC, f"{name} = {current} is not finite; {self._best_text()}"
        if self.stopping_threshold is not None and better(current, self.stopping_threshold, 0.0, inclusive=True):
            threshold = _fmt(self.stopping_threshold)
            return why.STOPPING_THRESHOLD, f"{name} = {_fmt(current)} reached the stopping threshold {threshold}"
        if self.divergence_threshold is not None and better(self.divergence_threshold, current, 0.0):
            return why.DIVERGENCE_THRESHOLD, (
                f"{name} = {_fmt(current)} is worse than the divergence threshold "
                f"{_fmt(self.divergence_threshold)}; {self._best_text()}"
            )
        if better(current, self.best_score, self.min_delta):
            if self.verbose:
                logger.info("early_stopping: {} improved to {} at epoch {}", name, _fmt(current), epoch)
            self.best_score, self.best_epoch, self.wait_count = current, epoch, 0
            return None
        self.wait_count += 1
        if self.verbose:
            logger.info(
                "early_stopping: {} = {} did not improve ({}/{} checks)",
                name,
                _fmt(current),
                self.wait_count,
                self.patience,
            )
        if self.wait_count >= self.patience:
            checks = "check" if self.wait_count == 1 else "checks"
            return why.PATIENCE_EXHAUSTED, (
                f"{name} did not improve by {_fmt(self.min_delta)} for {self.wait_count} {checks}; {self._best_text()}"
            )
        return None

    def _better(self, a: float, b: float, delta: float, inclusive: bool = False) -> bool:
        """Whether ``a`` is better than ``b`` by more than ``delta`` (by at least it when ``inclusive``)."""
        margin = (b - a) if self.mode == "min" else (a - b)
        return margin >= delta if inclusive else margin > delta

    def _best_text(self) -> str:
        if self.best_epoch < 0:
            return "no finite best value yet"
        return f"best {_fmt(self.best_score)} at epoch {self.best_epoch}"


def _fmt(value: float) -> str:
    return f"{value:.6g}"


EarlyStoppingConfig = surge.settings_model(EarlyStopping)
"""The ``early_stopping`` plugin's settings, derived from :class:`EarlyStopping`'s signature."""
