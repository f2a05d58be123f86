"""Deprecated (kept for one release): Lightning's names moved to the plugin distribution surge-lightning, which
mirrors ``lightning`` module for module. ``import surge.compat as L`` becomes ``import surge_lightning.pytorch as L``;
this module warns and forwards to it (docs/porting.md, "The imports")."""

import importlib
import warnings
from typing import Any

from surge.plugins._first_party import LIGHTNING


def forward(old: str, new: str) -> Any:
    """The module ``new`` for the deprecated module ``old``, with a ``DeprecationWarning`` naming the new import."""
    warnings.warn(f"{old} is deprecated: import {new} instead ({LIGHTNING})", DeprecationWarning, stacklevel=3)
    try:
        return importlib.import_module(new)
    except ModuleNotFoundError as exc:
        if not exc.name or not (new == exc.name or new.startswith(exc.name + ".")):
            raise  # surge-lightning is there, something it imports is not: that error says what
        raise ImportError(
            f"{old} moved to {new}, in {LIGHTNING}, which is not installed: `pip install {LIGHTNING}`"
        ) from exc


_target = forward(__name__, "surge_lightning.pytorch")
_PLACES = (
    "",
    ".cli",
    ".callbacks",
    ".callbacks.early_stopping",
    ".loggers",
    ".profilers",
    ".tuner",
    ".utilities.rank_zero",
    ".utilities",
)
"""Where ``surge.compat``'s flat names live now (``surge.compat.Tuner`` is ``surge_lightning.pytorch.tuner.Tuner``)."""


def __getattr__(name: str) -> Any:
    for place in _PLACES:
        module = importlib.import_module(f"surge_lightning.pytorch{place}")
        if name in getattr(module, "__all__", ()) or (not place and hasattr(module, name)):
            return getattr(module, name)
    raise AttributeError(f"module 'surge.compat' has no attribute {name!r} (it is surge_lightning.pytorch now)")
