"""Lightning's names for Surge's objects, for porting: ``import surge.compat as L`` (or ``as pl``) in place of
``import lightning as L`` / ``import pytorch_lightning as pl``. Mostly re-exports, plus Lightning-shaped adapters (``Callback``,
``LightningCLI``, ``grad_norm``, the loggers of :mod:`surge.compat.loggers`); see docs/porting.md."""

import importlib
from typing import Any

from surge import DataModule as LightningDataModule
from surge import Module as LightningModule
from surge import Trainer, seed_everything
from surge._rank_zero import rank_zero_debug, rank_zero_info, rank_zero_only, rank_zero_warn
from surge.cli.lightning import LightningArgumentParser, LightningCLI, SaveConfigCallback
from surge.compat._utils import cli_lightning_logo, grad_norm
from surge.engine._lightning_callbacks import Callback

__all__ = [
    "Callback",
    "LightningArgumentParser",
    "LightningCLI",
    "LightningDataModule",
    "LightningModule",
    "SaveConfigCallback",
    "Trainer",
    "cli_lightning_logo",
    "grad_norm",
    "rank_zero_debug",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "seed_everything",
]

_FROM_PLUGINS = {
    "Tuner": "surge-tuner",
    "SimpleProfiler": "surge-profilers",
    "AdvancedProfiler": "surge-profilers",
    "PyTorchProfiler": "surge-profilers",
    "PassThroughProfiler": "surge-profilers",
    "EarlyStoppingReason": "surge-callbacks",
}
"""Names that live in a plugin distribution (its import name is the distribution's, ``surge_tuner``): read
from it when first asked for, so that the core imports no plugin and a missing one is named."""


_LOGGERS = frozenset({"Logger", "TensorBoardLogger", "CSVLogger", "MLFlowLogger", "WandbLogger"})
"""Lightning's logger classes, from :mod:`surge.compat.loggers` (``lightning.pytorch.loggers``)."""


def __getattr__(name: str) -> Any:
    if name in _LOGGERS or name == "loggers":
        loggers = importlib.import_module("surge.compat.loggers")
        return loggers if name == "loggers" else getattr(loggers, name)
    distribution = _FROM_PLUGINS.get(name)
    if distribution is None:
        raise AttributeError(
            f"module 'surge.compat' has no attribute {name!r}; docs/porting.md lists Lightning's names"
        )
    try:
        module = importlib.import_module(distribution.replace("-", "_"))
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"surge.compat.{name} comes from the plugin distribution {distribution}, which is not installed: "
            f"`pip install {distribution}`"
        ) from exc
    return getattr(module, name)
