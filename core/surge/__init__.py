"""Surge: a small PyTorch training core whose features arrive as plugins on a typed event bus.

``import surge`` discovers no plugins; a :class:`Trainer` or a CLI command does.
"""

from __future__ import annotations

from surge import checkpoint, events
from surge._logging import configure_logging, logger
from surge.engine.module import DataModule, Module, default_hook, overrides
from surge.engine.trainer import Trainer
from surge.errors import ConfigError, PluginError, SurgeError
from surge.events.hooks import hookimpl
from surge.plugins import Plugin
from surge.plugins.backends import Accelerator, Precision, Strategy
from surge.plugins.commands import Command
from surge.plugins.distributed import ProcessGroupStrategy
from surge.plugins.signature import settings_model, validated
from surge.seed import seed_everything

__version__ = "0.1.0"

__all__ = [
    "Accelerator",
    "Command",
    "ConfigError",
    "DataModule",
    "Module",
    "Plugin",
    "PluginError",
    "Precision",
    "ProcessGroupStrategy",
    "Strategy",
    "SurgeError",
    "Trainer",
    "checkpoint",
    "configure_logging",
    "default_hook",
    "events",
    "hookimpl",
    "logger",
    "overrides",
    "seed_everything",
    "settings_model",
    "validated",
]
