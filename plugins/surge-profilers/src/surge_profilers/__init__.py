"""surge-profilers: where a run's time goes, as three providers of the ``profiler`` slot.

* ``Trainer(profiler="simple")``: wall time per action (data fetch, forward, backward, optimizer step,
  validation, checkpoint save, logging, every scope of the event grammar) and per plugin handler, printed
  as a table when a run ends and written as ``profile-simple.txt`` / ``profile-simple.json``;
* ``Trainer(profiler="advanced")``: cProfile per action, a pstats report and ``.prof`` files;
* ``Trainer(profiler="pytorch")``: ``torch.profiler`` on a schedule, with a range per span, written as
  Chrome (Perfetto) and TensorBoard traces.

Settings go to the classes: ``Trainer(profiler=AdvancedProfiler(top_n=10))``. Spans come from event names
alone (:class:`Spans`), so an event that follows the grammar is profiled with no code for it. Written
against Surge's public API only.
"""

from __future__ import annotations

import surge

from surge_profilers._advanced import AdvancedProfiler, AdvancedProfilerConfig
from surge_profilers._base import EventProfiler, PassThroughProfiler, ProfilerConfig, Spans
from surge_profilers._pytorch import PyTorchProfiler, PyTorchProfilerConfig
from surge_profilers._simple import SimpleProfiler, SimpleProfilerConfig, Stat

__all__ = [
    "AdvancedProfiler",
    "AdvancedProfilerConfig",
    "EventProfiler",
    "PassThroughProfiler",
    "ProfilerConfig",
    "PyTorchProfiler",
    "PyTorchProfilerConfig",
    "SimpleProfiler",
    "SimpleProfilerConfig",
    "Spans",
    "Stat",
    "plugin",
]

plugin = surge.Plugin(
    name="profilers",
    kind="provider",
    provides={"profiler": {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}},
    description="profilers: simple (wall time per action and plugin), advanced (cProfile), pytorch (torch.profiler)",
)
