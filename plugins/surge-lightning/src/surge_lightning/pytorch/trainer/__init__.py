"""``lightning.pytorch.trainer``."""

from surge import seed_everything

from surge_lightning.pytorch.trainer.trainer import Trainer

__all__ = ["Trainer", "seed_everything"]
