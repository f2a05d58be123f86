"""``lightning.pytorch.tuner.tuning``: ``Tuner``, surge-tuner's."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_tuner import Tuner

__all__ = ["Tuner"]

__getattr__, __dir__ = served(__name__, {"Tuner": "surge_tuner"})
