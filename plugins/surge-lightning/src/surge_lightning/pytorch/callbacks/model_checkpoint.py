"""``lightning.pytorch.callbacks.model_checkpoint``: ``ModelCheckpoint``, surge-checkpoint's."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_checkpoint import ModelCheckpoint

__all__ = ["ModelCheckpoint"]

__getattr__, __dir__ = served(__name__, {"ModelCheckpoint": "surge_checkpoint"})
