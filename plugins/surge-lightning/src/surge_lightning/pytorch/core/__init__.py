"""``lightning.pytorch.core``."""

from surge_lightning.pytorch.core.datamodule import LightningDataModule
from surge_lightning.pytorch.core.module import LightningModule

__all__ = ["LightningDataModule", "LightningModule"]
