"""Rank-zero helpers: run a function, log or warn on the process of global rank zero only, so that a message or a
file is written once per job, not once per process. Public: plugins use
them, and the Trainer sets :data:`rank_zero_only`'s ``rank`` to its global rank when a run starts."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from loguru import logger

__all__ = ["rank_zero_debug", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

F = TypeVar("F", bound=Callable[..., Any])


def _launcher_rank() -> int:
    """The rank a launcher gave this process (torchrun's RANK, LOCAL_RANK, SLURM's, LSF's), 0 without one."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if os.environ.get(key, "").strip().isdigit():
            return int(os.environ[key])
    return 0


class _RankZeroOnly:
    """``@rank_zero_only``: the function runs on global rank zero only; elsewhere a call returns ``default``.

    The rank is :attr:`rank`: the launcher's (``RANK``, ``LOCAL_RANK``, ``SLURM_PROCID``) at import, then the
    Trainer's ``global_rank`` once a run has set up its strategy."""

    def __init__(self) -> None:
        self.rank = _launcher_rank()

    def __call__(self, fn: F, default: Any = None) -> F:
        @functools.wraps(fn)
        def on_rank_zero(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs) if self.rank == 0 else default

        return on_rank_zero  # type: ignore[return-value]


rank_zero_only = _RankZeroOnly()


def rank_zero_info(message: Any, *args: Any, **kwargs: Any) -> None:
    """Log ``message`` at INFO on global rank zero (through Surge's logger, loguru)."""
    if rank_zero_only.rank == 0:
        logger.opt(depth=1).info(str(message), *args, **kwargs)


def rank_zero_debug(message: Any, *args: Any, **kwargs: Any) -> None:
    """Log ``message`` at DEBUG on global rank zero."""
    if rank_zero_only.rank == 0:
        logger.opt(depth=1).debug(str(message), *args, **kwargs)


def rank_zero_warn(message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` on global rank zero, attributed to the caller (as Lightning's)."""
    if rank_zero_only.rank == 0:
        warnings.warn(message, category, stacklevel=stacklevel)
