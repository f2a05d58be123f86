"""A plugin of your own, in three ways: an object passed in ``plugins=[...]``, an entry in a run config's
``plugins:`` section by class path, or (published) a ``surge.Plugin`` declaration in an entry point.

Python API, from the repository root::

    python examples/custom_plugin.py

Run config (``examples/custom_plugin.yaml`` names ``examples.custom_plugin.SlowestBatch``)::

    surge fit --config examples/custom_plugin.yaml
"""

from __future__ import annotations

import time
from typing import Any

import surge
from pydantic import BaseModel, ConfigDict, Field


class SlowestBatch:
    """Reports each epoch's slowest training batch and logs its time as ``slowest_batch_s``.

    An observer (it runs after the user's Module, like a logger) with a name of its own, so ordering
    constraints and ``surge plugins order`` can refer to it.
    """

    surge_name = "slowest_batch"
    surge_kind = "observer"

    def __init__(self, top: int = 1, log: bool = True) -> None:
        self.top, self.log = top, log
        self._started = 0.0
        self._times: list[tuple[float, int]] = []

    @surge.hookimpl
    def train_epoch_start(self, event: Any) -> None:
        self._times = []

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self._started = time.perf_counter()

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self._times.append((time.perf_counter() - self._started, event.batch_idx))

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        slowest = sorted(self._times, reverse=True)[: self.top]
        if not slowest:
            return
        listed = ", ".join(f"batch {i}: {s * 1000:.1f} ms" for s, i in slowest)
        print(f"epoch {event.epoch}: slowest {listed}")
        if self.log:
            event.trainer.log_metrics({"slowest_batch_s": slowest[0][0]}, source=self.surge_name)


class SlowestBatchConfig(BaseModel):
    """The settings of the published form; ``extra="forbid"`` makes a misspelt setting an error."""

    model_config = ConfigDict(extra="forbid")

    top: int = Field(1, ge=1)
    """How many of the slowest batches to print each epoch."""
    log: bool = True
    """Log the slowest time as the metric ``slowest_batch_s``."""


# Published in a distribution, this declaration behind an entry point
#     [project.entry-points."surge.plugins"]
#     slowest_batch = "my_package:plugin"
# makes `plugins: {slowest_batch: {top: 3}}` work in any run config, validated by SlowestBatchConfig.
plugin = surge.Plugin(
    name="slowest_batch",
    kind="observer",
    factory=SlowestBatch,
    config=SlowestBatchConfig,
    description="each epoch's slowest training batches",
)


if __name__ == "__main__":
    from surge.examples.digits import DigitsClassifier, DigitsDataModule

    surge.seed_everything(0)
    trainer = surge.Trainer(max_epochs=2, plugins=[SlowestBatch(top=3)])
    trainer.fit(DigitsClassifier(max_epochs=2), datamodule=DigitsDataModule())
    print(f"run directory (metrics.csv has slowest_batch_s): {trainer.run_dir}")
