"""``lightning.pytorch.callbacks.timer``: ``Timer``, surge-callbacks'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_callbacks import Timer

__all__ = ["Timer"]

__getattr__, __dir__ = served(__name__, {"Timer": "surge_callbacks"})
