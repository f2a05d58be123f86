"""``lightning.pytorch.callbacks.gradient_accumulation_scheduler``: ``GradientAccumulationScheduler``, surge-callbacks'."""

from surge_lightning._lazy import served

__all__ = ["GradientAccumulationScheduler"]

__getattr__, __dir__ = served(__name__, {"GradientAccumulationScheduler": "surge_callbacks"})
