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


def served(owner: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module ``owner``: each of ``names`` (name -> the module holding it;
    a name that is that module's own last part, ``"loggers": "surge_lightning.pytorch.loggers"``, is the module
    itself) is imported when first read, then kept in ``owner``'s namespace."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            served = ", ".join(getattr(sys.modules[owner], "__all__", ()))
            raise AttributeError(
                f"module {owner!r} has no attribute {name!r}; the names Surge serves here: {served} "
                "(docs/porting.md, 'The imports')"
            )
        module = _import(owner, name, where)
        value = module if where.rpartition(".")[2] == name and not hasattr(module, name) else getattr(module, name)
        setattr(sys.modules[owner], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[owner]), *names})

    return __getattr__, __dir__


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
