"""The batch-size finder: trial fits of a few steps at growing batch sizes until one runs out of memory."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Literal

import surge
import torch
from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["fits", "fits_all", "too_large", "out_of_memory"]
"""A trial's outcome: ``fits_all``: one batch already holds the whole training set, a larger size changes
nothing; ``too_large``: the loader yields no batch at that size (``drop_last`` with a small data set)."""

# What an allocation failure says where it is not a torch.OutOfMemoryError (older CUDA paths, cuBLAS and
# cuDNN failing to get their workspace, the CPU allocator, MPS).
_OOM_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_SUPPORTED", "can't allocate memory")


class ScaleBatchSizeSettings(BaseModel):
    """The arguments of :meth:`surge_tuner.Tuner.scale_batch_size`."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["power", "binsearch"] = "power"
    steps_per_trial: int = Field(3, ge=1)
    init_val: int = Field(2, ge=1)
    max_trials: int = Field(25, ge=1)
    batch_arg_name: str = Field("batch_size", min_length=1)


def is_oom_error(error: BaseException) -> bool:
    """Whether ``error`` says the device (or host) ran out of memory."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _OOM_MESSAGES)


def free_memory() -> None:
    """Drop what the failed trial left (its tensors are unreachable once its frames are gone)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def search(try_size: Callable[[int], Outcome], mode: str, init_val: int, max_trials: int) -> int:
    """The largest batch size ``try_size`` accepts, in at most ``max_trials`` trials.

    Both modes double from ``init_val`` while trials fit (and halve while even ``init_val`` fails).
    ``power`` stops at the first failure above a success: the result is ``init_val`` times a power of two.
    ``binsearch`` then bisects between the largest size that fit and the smallest that failed.
    """
    largest_fit, smallest_fail, size = 0, None, init_val
    for _ in range(max_trials):
        outcome = try_size(size)
        if outcome == "fits_all":
            return size
        if outcome == "fits":
            largest_fit = size
        else:
            smallest_fail = size
        if largest_fit == 0:
            assert smallest_fail is not None
            if smallest_fail == 1:
                break
            size = smallest_fail // 2
        elif smallest_fail is None:
            size = largest_fit * 2
        elif mode == "power" or smallest_fail - largest_fit <= 1:
            break
        else:
            size = (largest_fit + smallest_fail) // 2
    if largest_fit == 0:
        raise surge.SurgeError(
            f"Tuner.scale_batch_size: no batch size fits, down to {smallest_fail} "
            f"(from init_val={init_val}, in {max_trials} trials); the model does not fit in memory at all, "
            "or its loader yields no batch (drop_last with a small data set)"
        )
    return largest_fit
