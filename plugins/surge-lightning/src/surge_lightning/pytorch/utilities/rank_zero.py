"""``lightning.pytorch.utilities.rank_zero``: run a function, log or warn on global rank zero only (Surge's
:mod:`surge.rank_zero`; ``rank_zero_only.rank`` is the running Trainer's global rank)."""

from surge.rank_zero import rank_zero_debug, rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["rank_zero_debug", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]
