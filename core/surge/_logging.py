"""Logging through loguru; the stdlib ``logging`` records of torch and plugins are routed into it.

Only the application configures logging: the ``surge`` command does, at its start, and a script that wants
the same output calls :func:`surge.configure_logging`. A ``Trainer`` leaves the host's logging as it is:
loguru's handlers and the stdlib loggers untouched, Surge's records going to whatever handlers the host has
(loguru's default one prints them to stderr), so that its warnings (a resume that is not exact, a plugin that
failed to load) are never silent; ``logger.disable("surge")`` mutes them. Once configured, Surge is quiet by
default (warnings and errors); ``SURGE_LOG_LEVEL=INFO`` (or DEBUG) says more.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from loguru import logger

from surge.settings import load_settings

if TYPE_CHECKING:
    from loguru import Record

_state: dict[str, int | str | None] = {"handler": None, "level": None}
_routed: set[str] = set()
_OWN_VERBOSITY = ("torch",)
"""Routed, but never below WARNING: torch's INFO and DEBUG lines (printed by its own handlers, in its own
format, on its child loggers) are turned on by ``TORCH_LOGS``, not by ``SURGE_LOG_LEVEL``."""


class _InterceptHandler(logging.Handler):
    """Forwards stdlib records to loguru with their level and origin."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).bind(stdlib=record.name).log(level, record.getMessage())


def route_stdlib(*names: str) -> None:
    """Send the stdlib loggers ``names`` (and their children) into loguru once logging is configured (now,
    if it is); until then they are only remembered."""
    _routed.update(names)
    if _state["level"] is None:
        return
    for name in names:
        std = logging.getLogger(name)
        if not any(isinstance(h, _InterceptHandler) for h in std.handlers):
            std.addHandler(_InterceptHandler())
            std.propagate = False
        level = _stdlib_level(str(_state["level"]))
        std.setLevel(max(level, logging.WARNING) if name in _OWN_VERBOSITY else level)


def _stdlib_level(level: str) -> int:
    """The stdlib level matching a loguru level name (TRACE/SUCCESS map to their neighbours)."""
    number = logger.level(level).no
    return max(logging.DEBUG, min(number, logging.CRITICAL))


def configure_logging(level: str | None = None) -> None:
    """Install Surge's stderr sink at ``level`` (default: ``SURGE_LOG_LEVEL``, else WARNING) in place of
    loguru's default one, and route torch's and the loaded plugins' stdlib records into it: records from
    Surge and plugins below ``level`` are dropped (torch's below WARNING: its own ``TORCH_LOGS`` says more),
    others pass as loguru's default would. For applications (the ``surge`` command calls it); idempotent, a
    new level replaces the old sink."""
    level = (level or load_settings().log_level).upper()
    logger.enable("surge")
    if _state["level"] == level:
        return
    threshold = logger.level(level).no
    if _state["handler"] is None:
        try:
            logger.remove(0)  # loguru's own default sink; ours passes non-Surge records the same way
        except ValueError:
            pass
    else:
        logger.remove(_state["handler"])  # type: ignore[arg-type]

    def keep(record: Record) -> bool:
        if record["extra"].get("surge_trace"):
            return True
        ours = record["name"] and (record["name"].startswith("surge") or "stdlib" in record["extra"])
        return record["level"].no >= threshold if ours else True

    _state["handler"] = logger.add(
        sys.stderr, level=0, filter=keep, format="<level>{level: <8}</level> {message}", diagnose=False
    )
    _state["level"] = level
    route_stdlib("torch", *_routed)
