"""``lightning.pytorch.callbacks.lr_monitor``: ``LearningRateMonitor``, surge-progress's."""

from surge_lightning._lazy import served

__all__ = ["LearningRateMonitor"]

__getattr__, __dir__ = served(__name__, {"LearningRateMonitor": "surge_progress"})
