"""Process-wide ``SURGE_*`` environment settings (plugin blocking, strictness, logging, lab profile)."""

from __future__ import annotations

from typing import Annotated

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["LOG_LEVELS", "SurgeSettings", "load_settings"]

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
"""The names ``SURGE_LOG_LEVEL`` takes (loguru's levels, any case)."""


class SurgeSettings(BaseSettings):
    """Read from the environment each time a Trainer or a CLI command starts.

    Lists are comma-separated: ``SURGE_DISABLE_PLUGINS=swa,ema``.
    """

    model_config = SettingsConfigDict(env_prefix="SURGE_", extra="ignore")

    plugins: Annotated[list[str] | None, NoDecode] = None
    """Allow-list: only these entry points are imported."""
    disable_plugins: Annotated[list[str], NoDecode] = []
    """Block-list: these entry points are never imported. ``<distribution>:<name>`` blocks only that
    distribution's entry point of that name (so the other of two claiming one name loads)."""
    load_plugins: Annotated[list[str], NoDecode] = []
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
