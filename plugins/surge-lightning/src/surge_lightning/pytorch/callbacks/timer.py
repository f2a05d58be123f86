"""``lightning.pytorch.callbacks.timer``: ``Timer``, surge-callbacks'."""

from surge_lightning._lazy import served

__all__ = ["Timer"]

__getattr__, __dir__ = served(__name__, {"Timer": "surge_callbacks"})
