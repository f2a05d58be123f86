"""Lightning's names for Surge's objects, for porting: ``import surge.compat as L`` (or ``as pl``) in place of
``import lightning as L`` / ``import pytorch_lightning as pl``. Re-exports only; see docs/porting.md."""

from surge import DataModule as LightningDataModule
from surge import Module as LightningModule
from surge import Trainer, seed_everything

__all__ = ["LightningDataModule", "LightningModule", "Trainer", "seed_everything"]
