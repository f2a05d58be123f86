"""``lightning.pytorch.profilers.advanced``: ``AdvancedProfiler``, surge-profilers'."""

from surge_lightning._lazy import served

__all__ = ["AdvancedProfiler"]

__getattr__, __dir__ = served(__name__, {"AdvancedProfiler": "surge_profilers"})
