"""``ProgressBar``: what the ``progress`` plugin shows, and when it spends time on it.

The per-batch handlers only compare the batch count with the next refresh point. A refresh (rich) or a
check for a plain line comes once ``refresh_rate`` batches and, at the rate measured at the previous
refresh, about ``refresh_interval`` seconds have passed: the gap in batches is set at each refresh, so no
clock is read between refreshes. Everything else (reading ``trainer.progress_bar_metrics``, which copies
logged values to the host, drawing, writing) happens only there, or at the start and end of an epoch or
evaluation run.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TextIO

import surge
from pydantic import Field

if TYPE_CHECKING:
    from surge import events as ev

    from surge_progress._rich import RichDisplay

__all__ = ["ProgressBar", "ProgressConfig"]

_NEVER = sys.maxsize  # a refresh point no batch count reaches: the bar is idle or silent
_HOOKS = frozenset(
    {
        "setup",
        "train_epoch_start",
        "train_batch_end",
        "train_epoch_end",
        "validation_start",
        "validation_batch_end",
        "validation_end",
        "test_start",
        "test_batch_end",
        "test_end",
        "predict_start",
        "predict_batch_end",
        "predict_end",
        "teardown",
    }
)


class _Bar:
    """One bar: a training epoch or an evaluation run. Its rate leaves out pauses (validation runs inside a
    training epoch)."""

    __slots__ = ("description", "gap", "key", "label", "last_n", "last_t", "n0", "paused", "printed_t", "t0", "total")

    def __init__(self, key: str, label: str, description: str, n0: int, total: float, gap: int) -> None:
        self.key, self.label, self.description = key, label, description
        self.n0 = n0  # batches already done when the bar opened (a fit resumed mid-epoch)
        self.total = total  # math.inf: unknown
        self.t0 = self.last_t = self.printed_t = time.perf_counter()
        self.last_n = n0
        self.paused = 0.0
        self.gap = gap  # batches between refreshes, as last measured

    def rate(self, n: int, now: float) -> float | None:
        elapsed = self.elapsed(now)
        return (n - self.n0) / elapsed if elapsed > 0 and n > self.n0 else None

    def elapsed(self, now: float) -> float:
        return now - self.t0 - self.paused


class ProgressBar:
    """A progress bar for ``fit``, ``validate``, ``test`` and ``predict``, on global rank zero only.

    In a terminal, a rich display: the training bar (epoch, batches done and total, rate, ETA, the metrics
    logged with ``prog_bar=True``) and, below it, a bar for each validation run (the sanity check included)
    or test/predict run. Elsewhere (a pipe, a file, CI), plain lines without control characters, every
    ``plain_interval`` seconds or ``plain_every_n_batches`` batches and at the end of each epoch or run::

        epoch 0  50/200  1234 it/s  eta 0:00:03  loss=0.5123

    With an ``EarlyStopping`` of surge-callbacks, the metrics end with its patience after its latest check:
    the checks in a row without improvement, out of ``patience`` (``patience/val_loss=1/3``), from its
    ``early_stopping_check`` event.

    The ``progress`` plugin builds one with its settings in every run; ``Trainer(enable_progress_bar=False)``
    switches it off.

    Args:
        refresh_rate: At least this many batches between two refreshes; ``0`` switches the bar off.
        refresh_interval: At least this many seconds between two refreshes (``0``: every ``refresh_rate``
            batches).
        leave: Terminal: print each finished epoch's bar above the display, where it stays (``False``: one
            training bar, reused each epoch).
        mode: ``auto``: a rich display when the stream is a terminal, plain text lines otherwise.
        stream: Where the bar goes. stderr keeps stdout for the program's own output, as tqdm does.
        plain_interval: Plain mode: a line every this many seconds (``None``: no timed lines).
        plain_every_n_batches: Plain mode: also a line every this many batches of a bar (``0``: none).
    """

    surge_name = "progress"
    surge_callback_role = "progress"  # passed in callbacks=, it replaces the default plugin
    surge_kind = "observer"

    @surge.validated
    def __init__(
        self,
        refresh_rate: Annotated[int, Field(ge=0)] = 1,
        refresh_interval: Annotated[float, Field(ge=0)] = 0.1,
        leave: bool = False,
        mode: Literal["auto", "rich", "plain"] = "auto",
        stream: Literal["stderr", "stdout"] = "stderr",
        plain_interval: Annotated[float | None, Field(gt=0)] = 5.0,
        plain_every_n_batches: Annotated[int, Field(ge=0)] = 0,
    ) -> None:
        self.refresh_rate = refresh_rate
        self.refresh_interval = refresh_interval
        self.leave = leave
        self.mode = mode
        self.stream = stream
        self.plain_interval = plain_interval
        self.plain_every_n_batches = plain_every_n_batches
        # Per run, set at `setup`.
        self._on = False
        self._out: TextIO | None = None
        self._rich = False
        self._display: RichDisplay | None = None
        self._drawn_at = -math.inf
        self._stale: tuple[_Bar, int, bool] | None = None  # a bar updated without a redraw: (bar, n, final)
        self._dirty = False  # the display changed since it was last drawn
        self._gaps: dict[str, int] = {}  # the last gap of each kind of bar, the next one's first
        self._train: _Bar | None = None
        self._train_due = _NEVER  # the training batch index at which the next refresh is due
        self._eval: _Bar | None = None
        self._eval_n = 0
        self._eval_due = _NEVER  # the evaluation batch count at which the next refresh is due
        self._paused_at: float | None = None
        self._patience: dict[str, str] = {}  # EarlyStopping's monitor -> "checks without improvement/patience"

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        return _HOOKS if self.refresh_rate == 0 else frozenset()

    # -- the run ------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        self._reset()
        self._on = event.trainer.is_global_zero  # the rank is known from `setup` on
        if self._on:
            self._out = sys.stdout if self.stream == "stdout" else sys.stderr  # as redirected at this moment
            self._rich = self.mode == "rich" or (self.mode == "auto" and _is_terminal(self._out))

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        if self._stale is not None:  # the last drawing shows the end of the run
            bar, n, final = self._stale
            self._draw(event.trainer, bar, n, time.perf_counter(), final=final, force=True)
        elif self._dirty and self._display is not None:
            self._display.redraw()
        self._reset()

    def _reset(self) -> None:
        if self._display is not None:
            display, self._display = self._display, None
            display.stop()
        self._on = False
        self._drawn_at, self._stale, self._dirty, self._gaps = -math.inf, None, False, {}
        self._train = self._eval = self._paused_at = None
        self._train_due = self._eval_due = _NEVER
        self._patience = {}

    @surge.hookimpl(optional=True)
    def early_stopping_check(self, event: _PatienceCheck) -> None:
        """surge-callbacks' EarlyStopping checked its metric (before this bar's own handler of the same
        validation or epoch end, participants running first): the metrics shown next carry its patience."""
        if self._on:  # off with refresh_rate=0 (not in surge_unused_hooks: the bus refuses a name it may not know)
            self._patience[event.monitor] = f"{event.wait_count}/{event.patience}"

    # -- training -----------------------------------------------------------------------------------
    @surge.hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        if not self._on:
            return
        trainer = event.trainer
        n0 = _epoch_batches_done(trainer)
        max_epochs = trainer.max_epochs
        description = f"Epoch {event.epoch}/{max_epochs - 1}" if max_epochs > 0 else f"Epoch {event.epoch}"
        gap = self._gaps.get("train", self.refresh_rate)
        bar = self._train = _Bar("train", f"epoch {event.epoch}", description, n0, _train_total(trainer, n0), gap)
        self._train_due = self._due(n0, gap) - 1
        if self._rich:
            self._draw(trainer, bar, n0, bar.t0, read_metrics=False)

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        # The whole per-batch cost: one comparison. Refreshes happen in _train_refresh. Not a hookimpl filter:
        # the refresh point counts the epoch's batches (not optimizer steps) and moves with the measured rate.
        if event.batch_idx >= self._train_due:
            self._train_refresh(event.trainer, event.batch_idx + 1)

    def _train_refresh(self, trainer: surge.Trainer, n: int) -> None:
        bar = self._train
        if bar is None:
            self._train_due = _NEVER
            return
        now = time.perf_counter()
        if self._rich:
            self._draw(trainer, bar, n, now, force=True)
        elif self._plain_line_due(bar, n, now):
            self._print(trainer, bar, n, now)
        self._train_due = self._next_refresh("train", bar, n, now) - 1

    @surge.hookimpl
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        bar = self._train
        if not self._on or bar is None:
            return
        n = _epoch_batches_done(event.trainer)
        now = time.perf_counter()
        if not self._rich:
            self._print(event.trainer, bar, n, now, final=True)
        elif self.leave:  # the finished bar goes above the live region, with the epoch's final metrics
            self._draw(event.trainer, bar, n, now, final=True, force=True)
            assert self._display is not None
            self._display.keep(bar.key)
            self._dirty = True
        else:
            self._draw(event.trainer, bar, n, now, final=True)
        self._train_due = _NEVER

    # -- validation, test, predict ----------------------------------------------------------------------
    @surge.hookimpl
    def validation_start(self, event: ev.ValidationStart) -> None:
        self._eval_start(event.trainer, "validation")

    @surge.hookimpl
    def test_start(self, event: ev.TestStart) -> None:
        self._eval_start(event.trainer, "test")

    @surge.hookimpl
    def predict_start(self, event: ev.PredictStart) -> None:
        self._eval_start(event.trainer, "predict")

    @surge.hookimpl
    def validation_batch_end(self, event: ev.ValidationBatchEnd) -> None:
        self._eval_n += 1
        if self._eval_n >= self._eval_due:
            self._eval_refresh(event.trainer)

    @surge.hookimpl
    def test_batch_end(self, event: ev.TestBatchEnd) -> None:
        self._eval_n += 1
        if self._eval_n >= self._eval_due:
            self._eval_refresh(event.trainer)

    @surge.hookimpl
    def predict_batch_end(self, event: ev.PredictBatchEnd) -> None:
        self._eval_n += 1
        if self._eval_n >= self._eval_due:
            self._eval_refresh(event.trainer)

    @surge.hookimpl
    def validation_end(self, event: ev.ValidationEnd) -> None:
        self._eval_end(event.trainer)

    @surge.hookimpl
    def test_end(self, event: ev.TestEnd) -> None:
        self._eval_end(event.trainer)

    @surge.hookimpl
    def predict_end(self, event: ev.PredictEnd) -> None:
        self._eval_end(event.trainer)

    def _eval_start(self, trainer: surge.Trainer, stage: str) -> None:
        if not self._on:
            return
        if trainer.sanity_checking:
            label, description, total = "sanity check", "Sanity Checking", _sum(trainer.num_sanity_val_batches)
        elif stage == "validation":
            label, description, total = "validation", "Validation", _sum(trainer.num_val_batches)
        else:
            label, description = stage, "Testing" if stage == "test" else "Predicting"
            total = _eval_total(trainer, stage)
        gap = self._gaps.get(label, self.refresh_rate)
        bar = self._eval = _Bar("eval", label, description, 0, total, gap)
        self._eval_n = 0
        self._eval_due = self._due(0, gap)
        train = self._train
        if label == "validation" and train is not None:
            self._paused_at = bar.t0  # validation inside a training epoch: its time is not training time
            if self._rich:  # bring the training bar up to date while validation runs
                self._draw(trainer, train, _epoch_batches_done(trainer), bar.t0)
        if self._rich:
            self._draw(trainer, bar, 0, bar.t0, read_metrics=False)

    def _eval_refresh(self, trainer: surge.Trainer) -> None:
        bar, n = self._eval, self._eval_n
        if bar is None:
            self._eval_due = _NEVER
            return
        now = time.perf_counter()
        if self._rich:  # metrics go on the training bar, or on this one when its run ends
            self._draw(trainer, bar, n, now, read_metrics=False, force=True)
        elif self._plain_line_due(bar, n, now):
            self._print(trainer, bar, n, now, metrics={})
        self._eval_due = self._next_refresh(bar.label, bar, n, now)

    def _eval_end(self, trainer: surge.Trainer) -> None:
        bar = self._eval
        if not self._on or bar is None:
            return
        now = time.perf_counter()
        train = self._train
        if self._paused_at is not None and train is not None:
            pause = now - self._paused_at
            train.paused += pause
            train.last_t += pause
        self._paused_at = None
        self._eval, self._eval_due = None, _NEVER
        sanity = trainer.sanity_checking
        if not self._rich:
            self._print(trainer, bar, self._eval_n, now, final=True, metrics={} if sanity else None)
        elif trainer.state.stage == "fit":
            if self._display is not None:
                self._display.remove(bar.key)  # the training bar stays, the validation bar goes
                self._dirty = True
            if self._stale is not None and self._stale[0] is bar:
                self._stale = None
            if train is not None and not sanity:  # the training bar shows the new validation metrics
                self._draw(trainer, train, _epoch_batches_done(trainer), now)
        else:
            self._draw(trainer, bar, self._eval_n, now, final=True, force=True)

    # -- refresh points -------------------------------------------------------------------------------
    def _next_refresh(self, kind: str, bar: _Bar, n: int, now: float) -> int:
        """The batch count of the next refresh: ``refresh_rate`` batches on, or as many as the measured rate
        fits into the time to wait (growing at most fourfold per refresh). A drawn bar waits ``refresh_interval``;
        plain lines draw nothing in between, so they wait half the time until the next timed line is due (a
        refresh ahead of it whatever the rate does, the line at most ``refresh_interval`` late)."""
        gap = self.refresh_rate
        seconds, batches = now - bar.last_t, n - bar.last_n
        wait = self.refresh_interval if self._rich else self._plain_wait(bar, now)
        if wait > 0 and seconds > 0 and batches > 0:
            gap = max(gap, int(min(batches * wait / seconds, 4 * bar.gap)))
        bar.gap, bar.last_t, bar.last_n = gap, now, n
        self._gaps[kind] = gap
        return self._due(n, gap)

    def _due(self, n: int, gap: int) -> int:
        """``gap`` batches after ``n``, or the next multiple of ``plain_every_n_batches`` if that is sooner."""
        every = self.plain_every_n_batches
        if every and not self._rich:
            return min(n + gap, (n // every + 1) * every)
        return n + gap

    def _plain_wait(self, bar: _Bar, now: float) -> float:
        """Plain mode: half the seconds until a timed line is due, at least ``refresh_interval`` (``inf``
        without timed lines)."""
        if self.plain_interval is None:
            return math.inf
        return max((self.plain_interval - (now - bar.printed_t)) / 2, self.refresh_interval)

    def _plain_line_due(self, bar: _Bar, n: int, now: float) -> bool:
        if n >= bar.total:
            return False  # the bar's last batch: its final line follows
        every = self.plain_every_n_batches
        if every and n % every == 0:
            return True
        return self.plain_interval is not None and now - bar.printed_t >= self.plain_interval

    # -- output ---------------------------------------------------------------------------------------
    def _draw(
        self,
        trainer: surge.Trainer,
        bar: _Bar,
        n: int,
        now: float,
        *,
        final: bool = False,
        read_metrics: bool = True,
        force: bool = False,
    ) -> None:
        """Update ``bar`` and redraw, with the metrics read now (``read_metrics``) or as the bar shows them.
        Unless ``force``d (a scheduled refresh, the end of a run), a redraw within ``refresh_interval`` of the
        last one is put off: the bar is updated but not drawn, and its metrics not read, until the next redraw
        or the end of the run."""
        if self._display is None:
            from surge_progress._rich import RichDisplay  # rich is imported only when a bar is drawn

            assert self._out is not None
            self._display = RichDisplay(self._out, force_terminal=self.mode == "rich")
        redraw = force or now - self._drawn_at >= self.refresh_interval
        if redraw:
            self._drawn_at, self._stale, self._dirty = now, None, False
        else:
            self._stale, self._dirty = (bar, n, final), True
        total = bar.total if math.isfinite(bar.total) else None
        self._display.show(
            bar.key,
            bar.description,
            completed=n,
            total=max(total, n) if total is not None else None,
            count=_count(n, bar.total),
            timing=_timing(bar, n, now, final, sep=" • "),
            metrics=self._metrics_text(trainer.progress_bar_metrics) if redraw and read_metrics else None,
            redraw=redraw,
        )

    def _print(
        self,
        trainer: surge.Trainer,
        bar: _Bar,
        n: int,
        now: float,
        *,
        final: bool = False,
        metrics: dict[str, float] | None = None,
    ) -> None:
        parts = [bar.label, _count(n, bar.total), _timing(bar, n, now, final, sep="  ")]
        text = self._metrics_text(trainer.progress_bar_metrics) if metrics is None else _metrics(metrics)
        if text:
            parts.append(text)
        assert self._out is not None
        self._out.write("  ".join(p for p in parts if p) + "\n")
        self._out.flush()
        bar.printed_t = now

    def _metrics_text(self, values: dict[str, float]) -> str:
        """The ``prog_bar`` metrics, then each EarlyStopping's patience."""
        patience = [f"patience/{monitor}={used}" for monitor, used in self._patience.items()]
        return "  ".join(part for part in (_metrics(values), *patience) if part)


class _PatienceCheck(Protocol):
    """What the bar reads of surge-callbacks' ``early_stopping_check`` event (surge_callbacks.EarlyStoppingCheck);
    that distribution need not be installed."""

    @property
    def monitor(self) -> str: ...

    @property
    def wait_count(self) -> int: ...

    @property
    def patience(self) -> int: ...


# -- helpers ------------------------------------------------------------------------------------------


def _is_terminal(stream: Any) -> bool:
    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return terminal and os.environ.get("TERM", "") != "dumb"


def _epoch_batches_done(trainer: surge.Trainer) -> int:
    state = trainer.state
    return state.total_batches - state.epoch_start_batches


def _sum(counts: list[float]) -> float:
    return float(sum(counts)) if counts else 0.0


def _train_total(trainer: surge.Trainer, done: int) -> float:
    """The epoch's batches: the loader's (after ``limit_train_batches``), fewer when ``max_steps`` ends the
    fit inside it."""
    total = float(trainer.num_training_batches)
    if trainer.max_steps != -1:
        left = max(trainer.max_steps - trainer.global_step, 0) * trainer.accumulate_grad_batches
        total = min(total, float(done + left))
    return total


def _eval_total(trainer: surge.Trainer, stage: str) -> float:
    """Batches of a test or predict run: the loaders' lengths after ``limit_*_batches`` (inf when one has no
    length). The Trainer keeps no count for these stages, so the bar works it out as the loop does."""
    config = trainer.config
    loaders = trainer.test_dataloaders if stage == "test" else trainer.predict_dataloaders
    limit: int | float | None = config.limit_test_batches if stage == "test" else config.limit_predict_batches
    if config.fast_dev_run:
        limit = 1 if config.fast_dev_run is True else int(config.fast_dev_run)
    total = 0.0
    for loader in loaders:
        try:
            length = len(loader)
        except TypeError:  # an iterable dataset: only a count limit bounds it
            if isinstance(limit, int) and not isinstance(limit, bool):
                total += limit
                continue
            return math.inf
        if limit is None:
            total += length
        elif isinstance(limit, int) and not isinstance(limit, bool):
            total += min(limit, length)
        else:
            total += int(length * limit)
    return total


def _count(n: int, total: float) -> str:
    return f"{n}/{int(total)}" if math.isfinite(total) else f"{n}/?"


def _timing(bar: _Bar, n: int, now: float, final: bool, sep: str) -> str:
    rate = bar.rate(n, now)
    parts = [_rate(rate)] if rate is not None else []
    if final:
        parts.append(f"elapsed {_clock(bar.elapsed(now))}")
    elif rate is not None and math.isfinite(bar.total):
        parts.append(f"eta {_clock(max(bar.total - n, 0) / rate)}")
    return sep.join(parts)


def _rate(rate: float) -> str:
    if rate >= 100:
        return f"{rate:.0f} it/s"
    if rate >= 1:
        return f"{rate:.2f} it/s"
    return f"{1 / rate:.2f} s/it"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _metrics(values: dict[str, float]) -> str:
    return "  ".join(f"{name}={_number(value)}" for name, value in values.items())


def _number(value: float) -> str:
    if value != value or value in (math.inf, -math.inf):  # nan, inf
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4f}"
    return f"{value:.3e}"


ProgressConfig = surge.settings_model(ProgressBar)
"""The ``progress`` plugin's settings, derived from :class:`ProgressBar`'s signature."""
