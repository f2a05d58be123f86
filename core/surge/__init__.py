"""Surge: a small PyTorch training core whose features arrive as plugins on a typed event bus.

``import surge`` discovers no plugins; a :class:`Trainer` or a CLI command does.
"""

from __future__ import annotations

from loguru import logger as _logger

_logger.disable("surge")  # silent until a Trainer or the CLI configures logging (SURGE_LOG_LEVEL)

from surge import checkpoint, events  # noqa: E402
from surge.backends import Accelerator, Precision, Strategy  # noqa: E402
from surge.errors import ConfigError, PluginError, SurgeError  # noqa: E402
from surge.hooks import hookimpl  # noqa: E402
from surge.module import DataModule, Module  # noqa: E402
from surge.plugins import Plugin  # noqa: E402
from surge.seed import seed_everything  # noqa: E402
from surge.trainer import Trainer  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Accelerator",
    "ConfigError",
    "DataModule",
    "Module",
    "Plugin",
    "PluginError",
    "Precision",
    "Strategy",
    "SurgeError",
    "Trainer",
    "checkpoint",
    "events",
    "hookimpl",
    "seed_everything",
]
