"""``lightning.pytorch.core.datamodule``: :class:`LightningDataModule`."""

from __future__ import annotations

from typing import Any

import surge

from surge_lightning import inventory
from surge_lightning._lazy import refusing

__all__ = ["LightningDataModule"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class LightningDataModule(surge.DataModule):
    """Lightning's ``LightningDataModule``: a :class:`surge.DataModule`, where behaviour that only Lightning's API
    has goes; a member Lightning's has and Surge's does not (``self.trainer``, ``from_datasets``, ...) raises an
    ``AttributeError`` saying why and what to use."""

    def __getattr__(self, name: str) -> Any:  # called for missing names only
        error = inventory.refused_member("lightning.pytorch.LightningDataModule", name)
        if error is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise error
