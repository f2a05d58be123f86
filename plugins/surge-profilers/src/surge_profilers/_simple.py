"""``simple``: wall time per action and per plugin handler, as a table and as JSON."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

import surge
from pydantic import Field

from surge_profilers._base import CUSTOM, EventProfiler, ProfilerConfig, validated

__all__ = ["SimpleProfiler", "SimpleProfilerConfig", "Stat"]


class SimpleProfilerConfig(ProfilerConfig):
    """Settings of :class:`SimpleProfiler`."""

    sort_by: Literal["total", "mean", "calls", "name"] = "total"
    """Order of the rows in both tables."""
    min_total_ms: float = Field(0.0, ge=0)
    """Leave out of the printed table rows whose total is below this (the files keep every row)."""


@dataclass(slots=True)
class Stat:
    """Calls and seconds of one action or one handler."""

    calls: int = 0
    total: float = 0.0
    max: float = 0.0

    def add(self, seconds: float) -> None:
        self.calls += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    @property
    def mean(self) -> float:
        return self.total / self.calls if self.calls else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "total_s": self.total, "mean_s": self.mean, "max_s": self.max}


class SimpleProfiler(EventProfiler):
    """Wall time of every span (the loop's actions: ``data_fetch``, ``forward``, ``backward``,
    ``optimizer_step``, ``zero_grad``, ``validation``, ``checkpoint_save``, and every ``<scope>`` of the event
    grammar), of logging (``log_metrics``: its handlers' time), and of every plugin's handler per event.

    A span runs from the end of its start event's dispatch (after every handler of it) to the start of its
    end event's dispatch, so a handler's own time is never counted in a span: it is in the handler table.
    Handler times come from the bus (``handler_timer``): a Trainer with this profiler times every handler.
    The time spent in the profiler's own handlers and timer is measured and reported as ``overhead``.
    """

    kind = "simple"

    def __init__(self, **settings: Any) -> None:
        config = validated(SimpleProfilerConfig, settings)
        super().__init__(config)
        self.config: SimpleProfilerConfig = config
        self.min_total = config.min_total_ms / 1e3
        self.actions: dict[str, Stat] = {}
        self.handlers: dict[tuple[str, str], Stat] = {}
        """(plugin, event) -> calls and seconds of that handler."""
        self.overhead = 0.0
        """Seconds spent in this profiler's handlers and its ``handler_timer`` in the current run."""
        self.run_seconds = 0.0
        self._starts: list[float] = []  # parallel to self.spans.stack
        self._unsettled: list[int] = []  # indexes of spans opened by the last event: they start when it ends
        self._last_end = 0.0  # when the last handler call of any dispatch returned
        self._own = False  # the next timed call is this profiler's own handler
        self._recording = False  # from setup to the report at teardown
        self._run_start = time.perf_counter()
        self._entered = 0.0

    # -- the bus's instrumentation point ----------------------------------------------------------------
    def handler_timer(self, event: str, plugin: str, start: float, end: float) -> None:
        """Called by the bus after every handler call, with ``perf_counter`` before and after it."""
        own, self._own = self._own, False
        self._last_end = end
        if not self._recording:  # between runs (after the report, ``teardown``'s other handlers run)
            return
        if own:
            self.overhead += end - start
        else:
            stat = self.handlers.get((plugin, event))
            if stat is None:
                stat = self.handlers[(plugin, event)] = Stat()
            stat.add(end - start)
            if event == "log_metrics":  # logging: the time of log_metrics' handlers, counted per dispatch
                logging = self.actions.setdefault("log_metrics", Stat())
                logging.total += end - start
                logging.max = max(logging.max, end - start)
        self.overhead += time.perf_counter() - end

    # -- spans ------------------------------------------------------------------------------------------
    def _enter(self, now: float) -> None:
        self._entered = now
        if self._unsettled:  # the previous event's handlers have all returned by now
            for i in self._unsettled:
                if i < len(self._starts):
                    self._starts[i] = max(self._starts[i], self._last_end)
            self._unsettled.clear()

    def _leave(self) -> None:
        self._own = True  # the bus times this handler call next: that time is the profiler's own

    def _setup(self, trainer: surge.Trainer) -> None:
        self.actions, self.handlers, self.overhead = {}, {}, 0.0
        self._run_start = self._entered
        self._recording = True

    def _open(self, span: str, event: str, now: float) -> None:
        if event != CUSTOM:  # an action of the user's starts now, not when an event's handlers have returned
            self._unsettled.append(len(self._starts))
        self._starts.append(now)

    def _close(self, span: str, event: str, now: float) -> None:
        start = self._starts.pop()
        if span == "data_fetch":
            if event != "train_batch_start":
                return  # the epoch ended: no batch was fetched
            start = max(start, self._last_end)  # a validation or a save in between is not fetching data
        stat = self.actions.get(span)
        if stat is None:
            stat = self.actions[span] = Stat()
        stat.add(now - start)

    def event(self, name: str, payload: Any = None) -> None:
        if name == "log_metrics":
            self.actions.setdefault("log_metrics", Stat()).calls += 1
        super().event(name, payload)

    # -- report -------------------------------------------------------------------------------------------
    def _report(self, trainer: surge.Trainer, stage: str) -> str:
        self.run_seconds = self._entered - self._run_start
        self._recording = False
        data = self.as_dict(stage)
        self._write(trainer, self._file_name(stage, ".json"), json.dumps(data, indent=2))
        text = self.table(stage)
        self._write(trainer, self._file_name(stage, ".txt"), text)
        return text

    def as_dict(self, stage: str = "fit") -> dict[str, Any]:
        """The report as plain data (what ``profile-simple.json`` holds)."""
        return {
            "profiler": "simple",
            "stage": stage,
            "run_s": self.run_seconds,
            "overhead_s": self.overhead,
            "actions": {name: stat.as_dict() for name, stat in self._sorted(self.actions.items())},
            "handlers": [
                {"plugin": plugin, "event": event, **stat.as_dict()}
                for (plugin, event), stat in self._sorted(self.handlers.items())
            ],
        }

    def table(self, stage: str = "fit") -> str:
        """The report as the text table printed when a run ends."""
        run = self.run_seconds or 1e-12
        lines = [
            f"Simple profiler: {stage}, {self.run_seconds:.3f} s; its own bookkeeping {1e3 * self.overhead:.2f} ms "
            f"({100 * self.overhead / run:.2f}% of the run)",
            "",
        ]
        rows = [(name, stat) for name, stat in self._sorted(self.actions.items()) if stat.total >= self.min_total]
        lines += _rows(["action"], [([name], stat) for name, stat in rows], run)
        lines.append("")
        handler_rows = [
            ([plugin, event], stat)
            for (plugin, event), stat in self._sorted(self.handlers.items())
            if stat.total >= self.min_total
        ]
        lines += _rows(["plugin", "event"], handler_rows, run)
        return "\n".join(lines) + "\n"

    def _sorted(self, items: Any) -> list[Any]:
        key = {
            "total": lambda kv: -kv[1].total,
            "mean": lambda kv: -kv[1].mean,
            "calls": lambda kv: -kv[1].calls,
            "name": lambda kv: kv[0],
        }[self.config.sort_by]
        return sorted(items, key=key)


def _rows(heads: list[str], rows: list[tuple[list[str], Stat]], run: float) -> list[str]:
    header = [*heads, "calls", "total s", "mean ms", "max ms", "% of run"]
    body = [
        [
            *names,
            str(s.calls),
            f"{s.total:.4f}",
            f"{1e3 * s.mean:.3f}",
            f"{1e3 * s.max:.3f}",
            f"{100 * s.total / run:.1f}",
        ]
        for names, s in rows
    ]
    if not body:
        return [f"({' x '.join(heads)}: nothing recorded)"]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    n = len(heads)

    def line(row: list[str]) -> str:
        cells = [cell.ljust(w) if i < n else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(cells).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *(line(row) for row in body)]
