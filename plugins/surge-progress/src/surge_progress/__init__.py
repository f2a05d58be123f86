"""surge-progress: what a run shows while it trains.

Three plugins, one distribution:

* ``progress`` (on by default, ``Trainer(enable_progress_bar=False)`` switches it off): a rich progress
  display in a terminal, plain text lines elsewhere (pipes, files, CI);
* ``model_summary`` (on by default, ``Trainer(enable_model_summary=False)``): the model's layers and
  parameter counts when ``fit`` starts; :func:`summarize` returns the same as data;
* ``lr_monitor`` (on request, ``Trainer(plugins=["lr_monitor"])``): the learning rates, written to the
  loggers.

Importing this package imports neither rich nor anything else Surge has not loaded already: Surge imports it
whenever a Trainer discovers its plugins. Written against Surge's public API only.
"""

from __future__ import annotations

import surge

from surge_progress._bar import ProgressBar, ProgressConfig
from surge_progress._lr_monitor import LearningRateMonitor, LRMonitorConfig
from surge_progress._summary import LayerSummary, ModelSummary, Summary, SummaryConfig, summarize

__all__ = [
    "LRMonitorConfig",
    "LayerSummary",
    "LearningRateMonitor",
    "ModelSummary",
    "ProgressBar",
    "ProgressConfig",
    "Summary",
    "SummaryConfig",
    "lr_monitor_plugin",
    "model_summary_plugin",
    "progress_plugin",
    "summarize",
]

progress_plugin = surge.Plugin(
    name="progress",
    kind="observer",
    factory=ProgressBar,
    default=True,
    role="progress",
    description="progress bar: rich in a terminal, plain periodic lines elsewhere; global rank zero only",
)

model_summary_plugin = surge.Plugin(
    name="model_summary",
    kind="observer",
    factory=ModelSummary,
    default=True,
    role="model_summary",
    description="prints the model's layers, parameter counts and size when fit starts",
)

lr_monitor_plugin = surge.Plugin(
    name="lr_monitor",
    kind="observer",
    factory=LearningRateMonitor,
    default=False,
    description="LearningRateMonitor: learning rates (momentum, weight decay) of every optimizer, to the loggers",
)
