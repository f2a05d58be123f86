"""``lightning.pytorch.trainer.trainer``: :class:`Trainer`."""

from __future__ import annotations

import surge

__all__ = ["Trainer"]


class Trainer(surge.Trainer):
    """Lightning's ``Trainer``: a :class:`surge.Trainer` taking Lightning's arguments (and, with this distribution
    installed, Lightning 1.x's), where behaviour that only Lightning's API has goes."""
