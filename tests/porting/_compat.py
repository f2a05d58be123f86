"""Lightning's names for Surge's objects, re-exports only: what a ``surge.compat`` module would hold.

``tests/test_porting.py`` maps ``import lightning as L`` and ``import pytorch_lightning as pl`` to this
module (docs/porting.md shows the same lines for a project to copy). Nothing here wraps or changes
behaviour.
"""

from surge import DataModule as LightningDataModule
from surge import Module as LightningModule
from surge import Trainer, seed_everything

__all__ = ["LightningDataModule", "LightningModule", "Trainer", "seed_everything"]
