"""``lightning.pytorch.utilities``."""

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.utilities.grads import grad_norm
from surge_lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["grad_norm", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why
