"""``lightning.pytorch.callbacks.early_stopping``: ``EarlyStopping`` and ``EarlyStoppingReason``, surge-callbacks'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_callbacks import EarlyStopping, EarlyStoppingReason

__all__ = ["EarlyStopping", "EarlyStoppingReason"]

__getattr__, __dir__ = served(__name__, {"EarlyStopping": "surge_callbacks", "EarlyStoppingReason": "surge_callbacks"})
