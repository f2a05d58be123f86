"""``lightning.pytorch.profilers.pytorch``: ``PyTorchProfiler``, surge-profilers'."""

from surge_lightning._lazy import served

__all__ = ["PyTorchProfiler"]

__getattr__, __dir__ = served(__name__, {"PyTorchProfiler": "surge_profilers"})
