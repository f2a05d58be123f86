"""``lightning_utilities``' ``rank_zero_only.rank``, which ``import lightning`` sets and torchmetrics and many
projects' loggers read (``@rank_zero_only`` from ``lightning_utilities.core.rank_zero`` raises while it is unset).
``import surge_lightning`` sets it from the launcher's environment, as Lightning does, and each Lightning Trainer
to its global rank.

Every ``surge.Trainer()`` imports this package too (plugin discovery reads :mod:`surge_lightning.surge_plugins`),
so importing it must stay cheap: when ``lightning_utilities`` is not imported yet, :func:`follow_rank_on_import`
sets the rank the moment something imports it, instead of importing it (and ``packaging``) here."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["follow_rank", "follow_rank_on_import"]

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
"""Where a launcher puts the process's global rank, in Lightning's order of preference."""

_MODULE = "lightning_utilities.core.rank_zero"


def follow_rank(rank: int | None = None) -> None:
    """Set ``lightning_utilities``' ``rank_zero_only.rank`` to ``rank``, or, with ``None``, to the launcher's rank
    unless it is set already; nothing without lightning_utilities."""
    try:
        from lightning_utilities.core.rank_zero import rank_zero_only
    except ImportError:
        return
    if rank is None:
        if getattr(rank_zero_only, "rank", None) is not None:
            return
        rank = next((int(os.environ[name]) for name in _RANK_VARIABLES if os.environ.get(name, "").isdigit()), 0)
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


def follow_rank_on_import() -> None:
    """:func:`follow_rank` now if ``lightning_utilities``' rank module is imported, else as soon as it is."""
    if _MODULE in sys.modules:
        follow_rank()
    elif not any(isinstance(finder, _RankFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RankFinder())


class _RankFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for ``lightning_utilities.core.rank_zero`` it asks the other finders and wraps the
    loader so that the module, once executed, gets the launcher's rank; then it leaves ``sys.meta_path``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _FollowingLoader(spec.loader)
                return spec
        return None


class _FollowingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        follow_rank()
