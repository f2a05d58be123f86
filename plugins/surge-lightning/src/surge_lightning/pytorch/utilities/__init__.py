"""``lightning.pytorch.utilities``."""

from surge_lightning.pytorch.utilities.grads import grad_norm
from surge_lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["grad_norm", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]
