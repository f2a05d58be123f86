"""``lightning.pytorch.profilers.pytorch``: ``PyTorchProfiler``, surge-profilers'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_profilers import PyTorchProfiler

__all__ = ["PyTorchProfiler"]

__getattr__, __dir__ = served(__name__, {"PyTorchProfiler": "surge_profilers"})
