"""The ``tuner`` provider behind ``Trainer.tune``: what ``auto_scale_batch_size`` and ``auto_lr_find`` ask for, and
the finders run in that order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import surge
from loguru import logger
from pydantic import BaseModel, ConfigDict, field_validator

from surge_tuner._tuner import Tuner


class TuneConfig(BaseModel):
    """The settings of the ``tuner`` plugin, which the Trainer arguments of the same names switch on
    (``Trainer(auto_lr_find=True)``), or ``plugins={"tuner": {...}}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    auto_scale_batch_size: bool | Literal["power", "binsearch"] = False
    """Find the largest batch size that fits (``True`` is ``"power"``) and set it on ``batch_size``."""
    auto_lr_find: bool | str = False
    """Run the learning-rate finder and set its suggestion on ``lr``/``learning_rate``, or on the attribute named."""

    @field_validator("auto_lr_find")
    @classmethod
    def _attribute(cls, value: bool | str) -> bool | str:
        if value == "":
            raise ValueError("use True, or the name of the attribute to set")
        return value


def _switch(argument: str) -> Any:
    """A Trainer argument's value as this plugin's settings (``False``: it asks for nothing)."""
    return lambda value: None if value is False else {argument: value}


SWITCHES = {name: _switch(name) for name in ("auto_scale_batch_size", "auto_lr_find")}


class TrainerTuning:
    """``Trainer.tune(model, ...)``: the batch-size finder (``auto_scale_batch_size``), then the learning-rate finder
    (``auto_lr_find``), each a :class:`Tuner` method; returns ``{"lr_find": the LRFinder or None,
    "scale_batch_size": the batch size or None}``."""

    def __init__(self) -> None:
        self.settings = TuneConfig()

    def configure(self, settings: TuneConfig) -> None:
        self.settings = settings

    def tune(
        self,
        trainer: surge.Trainer,
        model: surge.Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: surge.DataModule | None = None,
        *,
        lr_find_kwargs: Mapping[str, Any] | None = None,
        scale_batch_size_kwargs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        scale, find_lr = self.settings.auto_scale_batch_size, self.settings.auto_lr_find
        result: dict[str, Any] = {"lr_find": None, "scale_batch_size": None}
        if not (scale or find_lr):
            logger.warning("trainer.tune(): nothing to tune; pass auto_lr_find and/or auto_scale_batch_size to Trainer")
            return result
        tuner = Tuner(trainer)
        data = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders, "datamodule": datamodule}
        if scale:  # first: the best learning rate depends on the batch size
            options = {"mode": "power" if scale is True else scale, **(scale_batch_size_kwargs or {})}
            result["scale_batch_size"] = tuner.scale_batch_size(model, **data, **options)
        if find_lr:
            options = {"update_attr": True, **({"attr_name": find_lr} if isinstance(find_lr, str) else {})}
            result["lr_find"] = tuner.lr_find(model, **data, **{**options, **(lr_find_kwargs or {})})
        return result
