"""``seed_everything``: one seed for python, numpy, torch (every device) and loader workers."""

from __future__ import annotations

import os
import random

import torch

from surge._logging import logger

SEED_ENV = "SURGE_GLOBAL_SEED"
_MAX = 2**32 - 1


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed every generator a run draws from and return the seed.

    ``seed=None`` takes ``SURGE_GLOBAL_SEED`` or 0. ``workers=True`` also makes every DataLoader worker
    derive a distinct, reproducible seed (``SURGE_SEED_WORKERS=1``).
    """
    if seed is None:
        seed = int(os.environ.get(SEED_ENV, 0))
    if not 0 <= seed <= _MAX:
        raise ValueError(f"seed_everything({seed}): the seed must be in [0, {_MAX}]")
    os.environ[SEED_ENV] = str(seed)
    os.environ["SURGE_SEED_WORKERS"] = str(int(workers))
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is optional
        pass
    torch.manual_seed(seed)  # seeds every CUDA device too
    logger.info("seed set to {}", seed)
    return seed
