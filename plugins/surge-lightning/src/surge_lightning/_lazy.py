"""Names a module of this package serves from another module, imported on first use: a class of another plugin
distribution (``ModelCheckpoint`` from surge-checkpoint), or a submodule of this package (``callbacks``).

Importing ``surge_lightning.pytorch.callbacks`` imports no other plugin; reading ``ModelCheckpoint`` from it imports
``surge_checkpoint``, or raises an ``ImportError`` naming the distribution to install when it is missing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from surge_lightning import inventory


def served(owner: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module ``owner``: each of ``names`` (name -> the module holding it;
    a name that is that module's own last part, ``"loggers": "surge_lightning.pytorch.loggers"``, is the module
    itself) is imported when first read, then kept in ``owner``'s namespace. Any other name is
    :func:`not_served`'s error."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise not_served(owner, name)
        module = _import(owner, name, where)
        value = module if where.rpartition(".")[2] == name and not hasattr(module, name) else getattr(module, name)
        setattr(sys.modules[owner], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[owner]), *names})

    return __getattr__, __dir__


def not_served(owner: str, name: str) -> Exception:
    """What reading ``name`` from the module ``owner`` raises when the module does not have it: the inventory's
    refusal (a :class:`surge_lightning.inventory.Refused`, an ``ImportError`` that ``from owner import name`` shows as
    it is) when Lightning has the name and Surge refuses or spells it otherwise, else an ``AttributeError`` listing
    what the module serves."""
    # a private name is in no inventory: Python's own probes (__path__, __wrapped__, ...) and the check that
    # `from package import _submodule` makes first stay plain misses, without reading the inventory
    if not name.startswith("_"):
        refused = inventory.refused_name(owner, name) or inventory.refused_submodule(owner, name)
        if refused is not None:
            return refused
    served = ", ".join(getattr(sys.modules[owner], "__all__", ())) or "none"
    return AttributeError(
        f"module {owner!r} has no attribute {name!r}, and Lightning's has none either; the names Surge serves here: "
        f"{served} (docs/porting.md, 'The inventory')"
    )


def refusing(owner: str) -> Callable[[str], Any]:
    """``__getattr__`` for a module of this package that defines what it serves itself: every other name is
    :func:`not_served`'s error."""

    def __getattr__(name: str) -> Any:
        raise not_served(owner, name)

    return __getattr__


def _import(owner: str, name: str, where: str) -> Any:
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        package = where.split(".")[0]
        if exc.name != package or package == "surge_lightning":
            raise  # the distribution is there and something it imports is not: that error says what
        distribution = package.replace("_", "-")
        raise ImportError(
            f"{owner}.{name} is {distribution}'s, which is not installed: `pip install {distribution}`"
        ) from exc
