"""``lightning.pytorch.callbacks.model_checkpoint``: ``ModelCheckpoint``, surge-checkpoint's."""

from surge_lightning._lazy import served

__all__ = ["ModelCheckpoint"]

__getattr__, __dir__ = served(__name__, {"ModelCheckpoint": "surge_checkpoint"})
