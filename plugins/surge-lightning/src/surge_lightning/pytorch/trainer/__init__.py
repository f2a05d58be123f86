"""``lightning.pytorch.trainer``."""

from surge import seed_everything

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.trainer.trainer import Trainer

__all__ = ["Trainer", "seed_everything"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why
