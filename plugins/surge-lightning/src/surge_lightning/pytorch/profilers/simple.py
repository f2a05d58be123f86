"""``lightning.pytorch.profilers.simple``: ``SimpleProfiler``, surge-profilers'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_profilers import SimpleProfiler

__all__ = ["SimpleProfiler"]

__getattr__, __dir__ = served(__name__, {"SimpleProfiler": "surge_profilers"})
