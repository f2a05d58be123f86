"""``lightning.pytorch.loggers.wandb``: ``WandbLogger``, surge-wandb's (``surge_wandb.lightning``)."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_wandb.lightning import WandbLogger

__all__ = ["WandbLogger"]

__getattr__, __dir__ = served(__name__, {"WandbLogger": "surge_wandb.lightning"})
