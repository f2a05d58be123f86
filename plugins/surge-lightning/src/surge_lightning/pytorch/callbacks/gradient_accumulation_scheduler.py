"""``lightning.pytorch.callbacks.gradient_accumulation_scheduler``: ``GradientAccumulationScheduler``, surge-callbacks'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_callbacks import GradientAccumulationScheduler

__all__ = ["GradientAccumulationScheduler"]

__getattr__, __dir__ = served(__name__, {"GradientAccumulationScheduler": "surge_callbacks"})
