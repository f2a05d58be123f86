"""``lightning.pytorch.tuner.tuning``: ``Tuner``, surge-tuner's."""

from surge_lightning._lazy import served

__all__ = ["Tuner"]

__getattr__, __dir__ = served(__name__, {"Tuner": "surge_tuner"})
