"""``lightning.pytorch.loggers.wandb``: ``WandbLogger``, surge-wandb's (``surge_wandb.lightning``)."""

from surge_lightning._lazy import served

__all__ = ["WandbLogger"]

__getattr__, __dir__ = served(__name__, {"WandbLogger": "surge_wandb.lightning"})
