"""``lightning.pytorch.callbacks.lr_monitor``: ``LearningRateMonitor``, surge-progress's."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_progress import LearningRateMonitor

__all__ = ["LearningRateMonitor"]

__getattr__, __dir__ = served(__name__, {"LearningRateMonitor": "surge_progress"})
