"""``Timer``: stop a fit after a given wall time, counting the time of earlier runs it resumes."""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import surge
from pydantic import BeforeValidator
from surge import logger

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["Timer", "TimerConfig", "parse_duration"]

Stage = Literal["train", "validate", "test"]
_STAGES: tuple[Stage, ...] = ("train", "validate", "test")
_DDHHMMSS = re.compile(r"^(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2}(?:\.\d+)?)$")
_UNITS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")


def parse_duration(value: object) -> datetime.timedelta:
    """``"DD:HH:MM:SS"``, ``{"hours": 1, "minutes": 30}``, a number of seconds or a ``timedelta``."""
    if isinstance(value, datetime.timedelta):
        duration = value
    elif isinstance(value, bool):
        raise ValueError(f"got {value!r}: give a duration, e.g. '00:12:00:00', {{'hours': 12}} or 43200")
    elif isinstance(value, (int, float)):
        duration = datetime.timedelta(seconds=value)
    elif isinstance(value, str):
        match = _DDHHMMSS.match(value.strip())
        if match is None:
            raise ValueError(f"got {value!r}: a string duration is 'DD:HH:MM:SS', e.g. '00:12:00:00' for 12 hours")
        days, hours, minutes, seconds = match.groups()
        duration = datetime.timedelta(days=int(days), hours=int(hours), minutes=int(minutes), seconds=float(seconds))
    elif isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in _UNITS)
        if unknown:
            raise ValueError(f"unknown unit(s) {unknown}; a duration dict takes {list(_UNITS)}")
        bad = {k: v for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (int, float))}
        if bad:
            raise ValueError(f"{bad}: the amounts of a duration dict are numbers")
        duration = datetime.timedelta(**value)
    else:
        raise ValueError(f"got {type(value).__name__}: give 'DD:HH:MM:SS', a dict like {{'hours': 1}}, or seconds")
    if duration.total_seconds() <= 0:
        raise ValueError(f"got {value!r}: the duration must be positive")
    return duration


class Timer:
    """Requests a stop once training has run for ``duration``; measures each stage's time as Lightning's
    Timer does.

    * ``time_elapsed(stage)``, ``time_remaining(stage)``, ``start_time(stage)``, ``end_time(stage)`` for
      ``stage`` in ``"train"``, ``"validate"``, ``"test"`` (seconds from :attr:`clock`). ``"train"`` runs from
      ``train_start`` to ``train_end`` (validation inside the fit included) plus the time recorded in the
      checkpoint a fit resumed from; ``"validate"`` covers the latest validation run.
    * The check is one clock read per training batch (``interval="step"``) or per epoch: no host sync.
    * ``clock`` (a class attribute, or the constructor's ``clock=``) returns seconds; tests pass a fake one.

    Args:
        duration: The wall-time budget of training: ``"DD:HH:MM:SS"``, a dict like ``{"hours": 1}``, or
            seconds.
        interval: Check after every training batch (``"step"``) or at the end of every training epoch.
        verbose: Log when the time is up.
        clock: This instance's clock (seconds); ``None``: the class's ``clock``.
    """

    surge_name = "timer"
    clock = staticmethod(time.monotonic)
    """Seconds, monotonic; replace it on the class (or pass ``clock=``) to drive the timer in tests."""

    @surge.validated
    def __init__(
        self,
        duration: Annotated[str | Mapping[str, float] | float | datetime.timedelta, BeforeValidator(parse_duration)],
        interval: Literal["step", "epoch"] = "step",
        verbose: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.duration = parse_duration(duration).total_seconds()  # already a timedelta: validated
        self.interval = interval
        self.verbose = verbose
        self._clock = clock  # this instance's own clock, else the class's
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset = 0.0  # training time of the runs a resumed fit continues

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        return frozenset({"train_epoch_end"} if self.interval == "step" else {"train_batch_end"})

    # -- Lightning's accessors -------------------------------------------------------------------------
    def start_time(self, stage: Stage = "train") -> float | None:
        return self._start[_stage(stage)]

    def end_time(self, stage: Stage = "train") -> float | None:
        return self._end[_stage(stage)]

    def time_elapsed(self, stage: Stage = "train") -> float:
        """Seconds ``stage`` has run (until now while it runs); ``"train"`` includes resumed runs' time."""
        stage = _stage(stage)
        offset = self._offset if stage == "train" else 0.0
        start = self._start[stage]
        if start is None:
            return offset
        end = self._end[stage]
        return offset + ((end if end is not None else self._now()) - start)

    def time_remaining(self, stage: Stage = "train") -> float:
        return self.duration - self.time_elapsed(stage)

    # -- checkpoint ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._offset = float(state["time_elapsed"]["train"])

    # -- events ----------------------------------------------------------------------------------------
    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        self._begin("train")

    @surge.hookimpl
    def train_end(self, event: ev.TrainEnd) -> None:
        self._end["train"] = self._now()

    @surge.hookimpl
    def validation_start(self, event: ev.ValidationStart) -> None:
        self._begin("validate")

    @surge.hookimpl
    def validation_end(self, event: ev.ValidationEnd) -> None:
        self._end["validate"] = self._now()

    @surge.hookimpl
    def test_start(self, event: ev.TestStart) -> None:
        self._begin("test")

    @surge.hookimpl
    def test_end(self, event: ev.TestEnd) -> None:
        self._end["test"] = self._now()

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        self._check(event.trainer)

    @surge.hookimpl
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        self._check(event.trainer)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else self.clock()

    def _begin(self, stage: str) -> None:
        self._start[stage], self._end[stage] = self._now(), None

    def _check(self, trainer: surge.Trainer) -> None:
        elapsed = self.time_elapsed("train")
        if elapsed < self.duration or trainer.should_stop:
            return
        reason = (
            f"time limit reached: trained {datetime.timedelta(seconds=round(elapsed))} of the "
            f"{datetime.timedelta(seconds=round(self.duration))} allowed (max_time / timer duration)"
        )
        if self.verbose:
            logger.info("timer: {}", reason)
        trainer.request_stop(reason)


def _stage(stage: str) -> Stage:
    if stage not in _STAGES:
        raise surge.SurgeError(f"Timer: stage {stage!r} is not measured; use one of {list(_STAGES)}")
    return stage  # type: ignore[return-value]


TimerConfig = surge.settings_model(Timer)
"""The ``timer`` plugin's settings, derived from :class:`Timer`'s signature."""
