"""Lightning's names for Surge's objects, for porting: ``import surge.compat as L`` (or ``as pl``) in place of
``import lightning as L`` / ``import pytorch_lightning as pl``. Mostly re-exports, plus Lightning-shaped adapters (``Callback``,
``LightningCLI``, ``grad_norm``); see docs/porting.md."""

import importlib
from typing import Any

from surge import DataModule as LightningDataModule
from surge import Module as LightningModule
from surge import Trainer, seed_everything
from surge._lightning_callbacks import Callback
from surge._lightning_cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from surge._lightning_utils import cli_lightning_logo, grad_norm
from surge._rank_zero import rank_zero_debug, rank_zero_info, rank_zero_only, rank_zero_warn

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


_NOT_PORTED = {
    name: (
        f"Lightning's logger objects ({name}(save_dir=...)) are not ported yet: choose loggers by name, "
        "Trainer(logger=['tensorboard', 'csv']), set them with plugins={'tensorboard': {...}}, and reach the "
        "SummaryWriter with self.logger.experiment (docs/porting.md, 'Loggers')"
    )
    for name in ("CSVLogger", "TensorBoardLogger", "MLFlowLogger", "WandbLogger", "Logger")
}


def __getattr__(name: str) -> Any:
    if name in _NOT_PORTED:
        raise ImportError(_NOT_PORTED[name])
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
