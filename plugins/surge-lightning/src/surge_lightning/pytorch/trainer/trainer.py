"""``lightning.pytorch.trainer.trainer``: :class:`Trainer`."""

from __future__ import annotations

from typing import Any

import surge

from surge_lightning import inventory
from surge_lightning._lazy import refusing

__all__ = ["Trainer"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class Trainer(surge.Trainer):
    """Lightning's ``Trainer``: a :class:`surge.Trainer` taking Lightning's arguments (and, with this distribution
    installed, Lightning 1.x's), where behaviour that only Lightning's API has goes.

    What Lightning's Trainer has and Surge's does not (``trainer.fit_loop``, ``trainer.model``, ...) raises an
    ``AttributeError`` saying why and what to use (the inventory, docs/porting.md); each run refuses, before it
    starts, a Module or DataModule overriding a Lightning hook Surge would never call (a :class:`surge.ConfigError`
    naming the hook, why, and what to use instead)."""

    def fit(self, model: Any, *args: Any, **kwargs: Any) -> None:
        _refuse_overrides("fit", (model, *args, *kwargs.values()))
        return super().fit(model, *args, **kwargs)

    def validate(self, *args: Any, **kwargs: Any) -> list[dict[str, float]]:
        _refuse_overrides("validate", (*args, *kwargs.values()))
        return super().validate(*args, **kwargs)

    def test(self, *args: Any, **kwargs: Any) -> list[dict[str, float]]:
        _refuse_overrides("test", (*args, *kwargs.values()))
        return super().test(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> list[Any]:
        _refuse_overrides("predict", (*args, *kwargs.values()))
        return super().predict(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # called for missing names only: free for every name Surge has
        error = inventory.refused_member("lightning.pytorch.Trainer", name)
        if error is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise error


def _refuse_overrides(stage: str, given: tuple[Any, ...]) -> None:
    """The Lightning hooks that a Module or DataModule given to a run overrides and Surge does not call."""
    from surge_lightning.pytorch.core.datamodule import LightningDataModule
    from surge_lightning.pytorch.core.module import LightningModule

    for obj in given:
        if isinstance(obj, surge.Module):
            base: type = LightningModule if isinstance(obj, LightningModule) else surge.Module
            inventory.check_overrides(type(obj), "lightning.pytorch.LightningModule", base, f"trainer.{stage}")
        elif isinstance(obj, surge.DataModule):
            base = LightningDataModule if isinstance(obj, LightningDataModule) else surge.DataModule
            inventory.check_overrides(type(obj), "lightning.pytorch.LightningDataModule", base, f"trainer.{stage}")
