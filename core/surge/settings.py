"""Process-wide ``SURGE_*`` environment settings (plugin blocking, strictness, logging, lab profile)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

__all__ = ["LOG_LEVELS", "PREFIX", "SurgeSettings", "load_settings"]

PREFIX = "SURGE_"
"""What each setting's variable starts with: ``SURGE_<FIELD>`` (``SURGE_LOG_LEVEL``)."""

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
"""The names ``SURGE_LOG_LEVEL`` takes (loguru's levels, any case)."""


class SurgeSettings(BaseModel):
    """Read from the environment each time a Trainer or a CLI command starts: ``SURGE_<FIELD>``, the name in any
    case; an argument given to the constructor wins over its variable. Other ``SURGE_*`` variables (a plugin's,
    the CLI's ``SURGE_TRAINER_*``) are not settings of this model and are left alone.

    Lists are comma-separated: ``SURGE_DISABLE_PLUGINS=swa,ema``.
    """

    model_config = ConfigDict(extra="ignore")

    plugins: list[str] | None = None
    """Allow-list: only these entry points are imported."""
    disable_plugins: list[str] = []
    """Block-list: these entry points are never imported. ``<distribution>:<name>`` blocks only that
    distribution's entry point of that name (so the other of two claiming one name loads)."""
    load_plugins: list[str] = []
    """Import these even where ``SURGE_DISABLE_PLUGINS``, ``SURGE_PLUGINS`` or ``SURGE_DISABLE_PLUGIN_AUTOLOAD``
    would not (a lab profile's rules still apply); ``surge fit -p NAME`` sets it for its run."""
    disable_plugin_autoload: bool = False
    """Import no entry point except those named in ``SURGE_PLUGINS`` or requested by name in the Trainer."""
    strict_plugins: bool = False
    """A plugin that fails to import is fatal instead of reported and skipped."""
    trace_plugins: bool = False
    """Log every event dispatch with the handlers called and their time."""
    log_level: str = "WARNING"
    """The level of Surge's log records: WARNING gives warnings and errors only, INFO (the default of a Trainer
    used as a library, where this is unset) adds the start-up line, stops, checkpoints; DEBUG adds the loaded
    plugins' files. The ``surge`` command's default is WARNING (:mod:`surge._logging`)."""
    lab: str | None = None
    """The lab profile every run is checked against: a path or an fsspec URL (``surge --lab`` sets it)."""

    @model_validator(mode="before")
    @classmethod
    def _environment(cls, data: Any) -> Any:
        """The settings' variables under the arguments given (a small reader of our own: the settings library
        this replaced cost every process about 0.2 s of imports)."""
        if not isinstance(data, dict):
            return data
        found = {}
        for key, value in os.environ.items():
            if key[: len(PREFIX)].upper() == PREFIX:
                name = key[len(PREFIX) :].lower()
                if name in cls.model_fields and name not in data:
                    found[name] = value
        return {**found, **data}

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        name = value.strip().upper()
        if name not in LOG_LEVELS:
            raise ValueError(f"SURGE_LOG_LEVEL={value!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
        return name

    @field_validator("plugins", "disable_plugins", "load_plugins", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


def load_settings() -> SurgeSettings:
    return SurgeSettings()
