"""``advanced``: one ``cProfile.Profile`` per action, a pstats report and the raw ``.prof`` files."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any, Literal

import surge
from loguru import logger
from pydantic import Field

from surge_profilers._base import EventProfiler, ProfilerConfig, validated

if TYPE_CHECKING:  # imported when a run profiles, not whenever discovery imports this plugin
    import cProfile
    import pstats

__all__ = ["AdvancedProfiler", "AdvancedProfilerConfig"]

SortKey = Literal["cumulative", "tottime", "calls", "ncalls", "pcalls", "time", "name", "filename"]


class AdvancedProfilerConfig(ProfilerConfig):
    """Settings of :class:`AdvancedProfiler`."""

    top_n: int = Field(20, ge=1)
    """Functions listed per action in the report."""
    sort_by: SortKey = "cumulative"
    """The pstats sort key of each action's listing."""
    actions: list[str] | None = None
    """Profile only these spans (e.g. ``["forward", "backward"]``); the others' time goes to the span
    around them. ``None``: every span."""


class AdvancedProfiler(EventProfiler):
    """cProfile per action: each span (``forward``, ``backward``, ``optimizer_step``, ``data_fetch``,
    ``validation``, ``train_batch``, ...) has its own ``cProfile.Profile``, enabled while the span is the
    innermost one open. Spans nest, and only one profile can run at a time, so an action's profile holds
    what ran in it outside the spans nested in it (``train_batch`` leaves out ``forward``, ``backward``...).

    When a run ends it writes ``profile-advanced.txt`` (per action, the ``top_n`` functions sorted by
    ``sort_by``) and ``profile-advanced-<action>.prof`` per action (``pstats.Stats(path)`` loads them), and
    prints where they are.
    """

    kind = "advanced"

    def __init__(self, **settings: Any) -> None:
        config = validated(AdvancedProfilerConfig, settings)
        super().__init__(config)
        self.config: AdvancedProfilerConfig = config
        self.only = set(config.actions) if config.actions is not None else None
        self.profiles: dict[str, cProfile.Profile] = {}
        self._running: list[cProfile.Profile | None] = []  # parallel to self.spans.stack
        self._refused = False

    def _setup(self, trainer: surge.Trainer) -> None:
        self.profiles = {}

    def _open(self, span: str, event: str, now: float) -> None:
        outer = self._running[-1] if self._running else None
        if self.only is not None and span not in self.only:
            self._running.append(outer)  # not profiled on its own: the enclosing action goes on
            return
        profile = self.profiles.get(span)
        if profile is None:
            import cProfile

            profile = self.profiles[span] = cProfile.Profile()
        if outer is not None:
            outer.disable()
        self._running.append(profile if self._enable(profile) else None)

    def _close(self, span: str, event: str, now: float) -> None:
        profile = self._running.pop()
        outer = self._running[-1] if self._running else None
        if profile is outer:
            return
        if profile is not None:
            profile.disable()
        if outer is not None:
            self._enable(outer)

    def _enable(self, profile: cProfile.Profile) -> bool:
        try:
            profile.enable()
        except ValueError as exc:  # another profiler holds the interpreter's profiling hook (Python >= 3.12)
            if not self._refused:
                logger.warning("advanced profiler: cProfile cannot start ({}); actions go unprofiled", exc)
                self._refused = True
            return False
        return True

    def stats(self, action: str) -> pstats.Stats:
        """The ``pstats.Stats`` of one action's profile."""
        import pstats

        return pstats.Stats(self.profiles[action])

    def _report(self, trainer: surge.Trainer, stage: str) -> str:
        import marshal
        import pstats

        report, index = io.StringIO(), []
        for action, profile in self._by_time():
            stats = pstats.Stats(profile, stream=report)
            if not stats.stats:  # type: ignore[attr-defined]
                continue
            name = self._file_name(stage, f"-{_slug(action)}.prof")
            self._write(trainer, name, marshal.dumps(stats.stats))  # type: ignore[attr-defined]
            total = stats.total_tt  # type: ignore[attr-defined]
            index.append(f"  {action:<24} {total:9.4f} s  {name}")
            report.write(f"Action: {action} ({total:.4f} s in functions profiled)\n")
            stats.sort_stats(self.config.sort_by).print_stats(self.config.top_n)
        text = report.getvalue()
        self._write(trainer, self._file_name(stage, ".txt"), text)
        where = trainer.run_dir or "(no run directory on this process)"
        head = f"Advanced profiler: {stage}; the top {self.config.top_n} functions per action in {where}/"
        return "\n".join([head + self._file_name(stage, ".txt"), *index])

    def _by_time(self) -> list[tuple[str, cProfile.Profile]]:
        totals = {}
        for action, profile in self.profiles.items():
            profile.create_stats()
            totals[action] = sum(entry[2] for entry in profile.stats.values())  # type: ignore[attr-defined]
        return sorted(self.profiles.items(), key=lambda kv: -totals[kv[0]])


def _slug(action: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", action)
