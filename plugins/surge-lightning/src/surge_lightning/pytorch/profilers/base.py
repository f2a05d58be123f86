"""``lightning.pytorch.profilers.base``: ``PassThroughProfiler``, surge-profilers'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_profilers import PassThroughProfiler

__all__ = ["PassThroughProfiler"]

__getattr__, __dir__ = served(__name__, {"PassThroughProfiler": "surge_profilers"})
