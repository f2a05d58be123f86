"""``lightning.pytorch.tuner``: ``Tuner``, surge-tuner's (read from it when first used)."""

from surge_lightning._lazy import served

__all__ = ["Tuner"]

__getattr__, __dir__ = served(
    __name__, {"Tuner": "surge_lightning.pytorch.tuner.tuning", "tuning": "surge_lightning.pytorch.tuner.tuning"}
)
