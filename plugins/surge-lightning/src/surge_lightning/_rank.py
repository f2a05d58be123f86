"""``lightning_utilities``' ``rank_zero_only.rank``, which ``import lightning`` sets and torchmetrics and many
projects' loggers read (``@rank_zero_only`` from ``lightning_utilities.core.rank_zero`` raises while it is unset).
``import surge_lightning`` sets it from the launcher's environment, as Lightning does, and each Lightning Trainer
to its global rank."""

from __future__ import annotations

import os

__all__ = ["follow_rank"]

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
"""Where a launcher puts the process's global rank, in Lightning's order of preference."""


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
