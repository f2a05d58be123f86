"""``lightning.pytorch.profilers.advanced``: ``AdvancedProfiler``, surge-profilers'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_profilers import AdvancedProfiler

__all__ = ["AdvancedProfiler"]

__getattr__, __dir__ = served(__name__, {"AdvancedProfiler": "surge_profilers"})
