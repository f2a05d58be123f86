"""``lightning.pytorch.core.datamodule``: :class:`LightningDataModule`."""

from __future__ import annotations

import surge

from surge_lightning import inventory
from surge_lightning._lazy import refusing

__all__ = ["LightningDataModule"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class LightningDataModule(surge.DataModule):
    """Lightning's ``LightningDataModule``: a :class:`surge.DataModule`, where behaviour that only Lightning's API
    has goes; reading or assigning a member Lightning's has and Surge's does not (``from_datasets``,
    ``self.prepare_data_per_node = False``) raises an ``AttributeError`` saying why and what to use."""


inventory.refuse_members(LightningDataModule, "lightning.pytorch.LightningDataModule")
