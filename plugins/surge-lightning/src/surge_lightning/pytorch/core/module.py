"""``lightning.pytorch.core.module``: :class:`LightningModule`."""

from __future__ import annotations

import surge

__all__ = ["LightningModule"]


class LightningModule(surge.Module):
    """Lightning's ``LightningModule``: a :class:`surge.Module` (every ``isinstance(x, surge.Module)`` holds),
    where behaviour that only Lightning's API has goes. docs/porting.md lists what keeps its name and what
    differs."""
