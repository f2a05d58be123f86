"""``lightning.pytorch.profilers.base``: ``PassThroughProfiler``, surge-profilers'."""

from surge_lightning._lazy import served

__all__ = ["PassThroughProfiler"]

__getattr__, __dir__ = served(__name__, {"PassThroughProfiler": "surge_profilers"})
