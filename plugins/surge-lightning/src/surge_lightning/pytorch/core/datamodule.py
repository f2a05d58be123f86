"""``lightning.pytorch.core.datamodule``: :class:`LightningDataModule`."""

from __future__ import annotations

import surge

__all__ = ["LightningDataModule"]


class LightningDataModule(surge.DataModule):
    """Lightning's ``LightningDataModule``: a :class:`surge.DataModule`, where behaviour that only Lightning's API
    has goes."""
