"""``lightning.pytorch.core``."""

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.core.datamodule import LightningDataModule
from surge_lightning.pytorch.core.module import LightningModule

__all__ = ["LightningDataModule", "LightningModule"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why
