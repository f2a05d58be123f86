"""``GradientAccumulationScheduler``: how many micro-batches make one optimizer step, per epoch."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

import surge
from pydantic import AfterValidator

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["AccumulationConfig", "GradientAccumulationScheduler"]


def _schedule(value: dict[int, int]) -> dict[int, int]:
    if not value:
        raise ValueError("the schedule needs at least one {epoch: batches} entry, e.g. {0: 1, 4: 2}")
    bad_epochs = sorted(e for e in value if e < 0)
    bad_counts = {e: k for e, k in value.items() if k < 1}
    if bad_epochs:
        raise ValueError(f"epochs {bad_epochs} are negative; epochs count from 0")
    if bad_counts:
        raise ValueError(f"{bad_counts}: the number of batches to accumulate must be >= 1")
    return dict(sorted(value.items()))


class GradientAccumulationScheduler:
    """Sets the accumulation factor (``trainer.set_accumulation``) when each training epoch starts, from ``scheduling``.

    ``{0: 1, 4: 2, 8: 4}``: one batch per step in epochs 0-3, two in 4-7, four from epoch 8 on. A schedule
    whose first key is above 0 accumulates 1 batch before it (as Lightning does): ``{2: 4}`` is
    ``{0: 1, 2: 4}``. The schedule depends on the epoch only, so it has no state to checkpoint: a resumed
    fit (mid-epoch included) gets the same value, because ``train_epoch_start`` fires for the resumed epoch.
    Automatic optimization only (in manual optimization, accumulate in ``training_step``).

    Args:
        scheduling: ``{epoch: k}``: from ``epoch`` on (counted from 0), accumulate ``k`` batches per optimizer
            step. Epochs before the first key accumulate 1.
    """

    surge_name = "gradient_accumulation_scheduler"

    @surge.validated
    def __init__(self, scheduling: Annotated[Mapping[int, int], AfterValidator(_schedule)]) -> None:
        self.scheduling = dict(scheduling)  # sorted by epoch: validated
        self._epochs = list(self.scheduling)
        self._counts = list(self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The number of batches accumulated per optimizer step in ``epoch``."""
        i = bisect.bisect_right(self._epochs, epoch) - 1
        return self._counts[i] if i >= 0 else 1

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        module = event.trainer.module
        if not module.automatic_optimization and max(self._counts) > 1:
            raise surge.SurgeError(
                f"gradient_accumulation_scheduler: {type(module).__name__} uses manual optimization, where the "
                f"loop does not accumulate; remove the schedule {self.scheduling} (or accumulate_grad_batches) "
                "and accumulate in training_step"
            )

    @surge.hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        # the loop reads the value right after this event
        event.trainer.set_accumulation(self.get_accumulate_grad_batches(event.epoch))


AccumulationConfig = surge.settings_model(GradientAccumulationScheduler)
"""The ``gradient_accumulation_scheduler`` plugin's settings, derived from :class:`GradientAccumulationScheduler`'s signature."""
