"""Logging through loguru; the stdlib ``logging`` records of torch and plugins are routed into it.

Surge and its plugins log through :data:`logger` (``surge.logger``), loguru's logger with Surge's level:

* **In library use** (a ``Trainer`` in a script, a notebook or a test; nothing configured) a record below
  ``SURGE_LOG_LEVEL`` (when the environment sets it, else INFO) is dropped where it is made, before any sink
  sees it; the rest goes to whatever sinks the host has (loguru's default one prints to stderr). So
  ``SURGE_LOG_LEVEL=WARNING`` gives warnings only, as in the CLI, and no sink of the host's is touched: a
  ``Trainer`` changes neither loguru's sinks nor the stdlib loggers, and its warnings (a resume that is not
  exact, a plugin that failed to load) are never silent unless asked for (``logger.disable("surge")`` mutes
  Surge's records altogether).
* **Configured** (the ``surge`` command does at its start, a script with :func:`surge.configure_logging`):
  Surge's own stderr sink replaces loguru's default one and drops Surge's records below its level
  (``SURGE_LOG_LEVEL``, else WARNING: quiet by default; INFO or DEBUG says more).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from loguru import logger as _loguru

from surge.settings import LOG_LEVELS, load_settings

if TYPE_CHECKING:
    from loguru import Record

__all__ = ["configure_logging", "level_number", "logger", "route_stdlib"]

_state: dict[str, int | str | None] = {"handler": None, "level": None}
_routed: set[str] = set()
_OWN_VERBOSITY = ("torch",)
"""Routed, but never below WARNING: torch's INFO and DEBUG lines (printed by its own handlers, in its own
format, on its child loggers) are turned on by ``TORCH_LOGS``, not by ``SURGE_LOG_LEVEL``."""


class _InterceptHandler(logging.Handler):
    """Forwards stdlib records to loguru with their level and origin."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = _loguru.level(record.levelname).name
        except ValueError:
            level = record.levelno
        _loguru.opt(depth=6, exception=record.exc_info).bind(stdlib=record.name).log(level, record.getMessage())


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
    number = _loguru.level(level).no
    return max(logging.DEBUG, min(number, logging.CRITICAL))


def configure_logging(level: str | None = None) -> None:
    """Install Surge's stderr sink at ``level`` (default: ``SURGE_LOG_LEVEL``, else WARNING) in place of
    loguru's default one, and route torch's and the loaded plugins' stdlib records into it: records from
    Surge and plugins below ``level`` are dropped (torch's below WARNING: its own ``TORCH_LOGS`` says more),
    others pass as loguru's default would. For applications (the ``surge`` command calls it); idempotent, a
    new level replaces the old sink."""
    source = "configure_logging(level)" if level else "SURGE_LOG_LEVEL"
    level = (level or load_settings().log_level).upper()
    floor = level_number(level, source)
    _loguru.enable("surge")
    if _state["level"] == level:
        return
    if _state["handler"] is None:
        try:
            _loguru.remove(0)  # loguru's own default sink; ours passes non-Surge records the same way
        except ValueError:
            pass
    else:
        _loguru.remove(_state["handler"])  # type: ignore[arg-type]

    def keep(record: Record) -> bool:
        if record["extra"].get("surge_trace"):
            return True
        ours = record["name"] and (record["name"].startswith("surge") or "stdlib" in record["extra"])
        return record["level"].no >= floor if ours else True

    _state["handler"] = _loguru.add(
        sys.stderr, level=0, filter=keep, format="<level>{level: <8}</level> {message}", diagnose=False
    )
    _state["level"] = level
    route_stdlib("torch", *_routed)


# -- Surge's level, applied where a record is made --------------------------------------------------------

_LIBRARY_DEFAULT = "INFO"
_numbers: dict[str, int] = {}


def level_number(level: str, source: str = "SURGE_LOG_LEVEL") -> int:
    """The number of a log level name (any case); an unknown name is a ``ValueError`` naming ``source``."""
    key = level.strip().upper()
    number = _numbers.get(key)
    if number is None:
        try:
            number = _numbers[key] = _loguru.level(key).no
        except ValueError:
            raise ValueError(f"{source}={level!r} is not a log level; use one of {', '.join(LOG_LEVELS)}") from None
    return number


def threshold() -> int:
    """The level below which Surge's records are dropped where they are made: in library use
    ``SURGE_LOG_LEVEL``, else INFO; none once logging is configured, where Surge's own sink filters (so a
    sink the application adds still gets every record, as loguru's sinks do)."""
    if _state["level"] is not None:
        return 0
    asked = os.environ.get("SURGE_LOG_LEVEL", "").strip()
    if asked:
        try:
            return level_number(asked)
        except ValueError:  # reported where settings are read (a Trainer, a command), not at every record
            pass
    return level_number(_LIBRARY_DEFAULT)


class _Logger:
    """loguru's logger for Surge's own records (and its plugins'), which drops a record below :func:`threshold`
    before loguru sees it. ``opt``, ``bind`` and the level methods are loguru's; anything else (``add``,
    ``remove``, ``level``, ...) is loguru's logger itself. Records bound with ``surge_trace`` (the event trace
    that ``SURGE_TRACE_PLUGINS=1`` asks for) always pass."""

    __slots__ = ("_extra", "_options", "_target")

    def __init__(self, target: Any, options: dict[str, Any], extra: dict[str, Any]) -> None:
        self._target, self._options, self._extra = target, options, extra

    def opt(self, **options: Any) -> _Logger:
        return _Logger(self._target, options, self._extra)  # as loguru's: options replace, bound values stay

    def bind(self, **extra: Any) -> _Logger:
        return _Logger(self._target.bind(**extra), self._options, {**self._extra, **extra})

    def log(self, level: str | int, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit(level, message, args, kwargs)

    def trace(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("TRACE", message, args, kwargs)

    def debug(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("DEBUG", message, args, kwargs)

    def info(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("INFO", message, args, kwargs)

    def success(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("SUCCESS", message, args, kwargs)

    def warning(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("WARNING", message, args, kwargs)

    def error(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("ERROR", message, args, kwargs)

    def critical(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("CRITICAL", message, args, kwargs)

    def exception(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._emit("ERROR", message, args, kwargs, exception=True)

    def _emit(self, level: str | int, message: Any, args: Any, kwargs: Any, **more: Any) -> None:
        number = level if isinstance(level, int) else level_number(level, "the level")
        if number < threshold() and not self._extra.get("surge_trace"):
            return
        options = {**self._options, **more}
        options["depth"] = options.get("depth", 0) + 2  # the caller of info(), not _emit or info itself
        self._target.opt(**options).log(level, message, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(_loguru, name)


logger = _Logger(_loguru, {}, {})
"""Surge's logger: loguru's, less the records below Surge's level (see the module's docstring). The core and
the first-party plugins log through it (``from surge import logger``); a third-party plugin that does gets the
same level."""
