"""``lightning.pytorch.profilers.simple``: ``SimpleProfiler``, surge-profilers'."""

from surge_lightning._lazy import served

__all__ = ["SimpleProfiler"]

__getattr__, __dir__ = served(__name__, {"SimpleProfiler": "surge_profilers"})
