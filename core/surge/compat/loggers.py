"""Deprecated (kept for one release): ``surge_lightning.pytorch.loggers``, with a ``DeprecationWarning``."""

import importlib
from typing import Any

from surge.compat import forward

_target = forward(__name__, "surge_lightning.pytorch.loggers")
_PLACES = (
    "surge_lightning.pytorch.loggers.logger",
    "surge_lightning.pytorch.core.saving",
    "surge_lightning.file_loggers",
)


def __getattr__(name: str) -> Any:
    if name in _target.__all__:
        return getattr(_target, name)
    for place in _PLACES:
        module = importlib.import_module(place)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(
        f"module 'surge.compat.loggers' has no attribute {name!r} (it is surge_lightning.pytorch.loggers now)"
    )
