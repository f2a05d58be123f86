"""Where a run stands: one mutable object owned by the Trainer, read by everyone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["initializing", "running", "finished", "interrupted", "failed"]


@dataclass
class TrainerState:
    stage: str | None = None
    """'fit', 'validate', 'test' or 'predict' while a run is active."""
    status: Status = "initializing"
    current_epoch: int = 0
    global_step: int = 0
    """Optimizer steps taken (what ``max_steps`` counts)."""
    batch_idx: int = 0
    """Index of the current training batch within its epoch."""
    total_batches: int = 0
    """Training batches done across all epochs (counted before the batch's ``train_batch_end``)."""
    epoch_start_batches: int = 0
    """``total_batches`` when the current epoch began: the batches done in it are the difference."""
    validated_at: int = -1
    """``total_batches`` when validation during ``fit`` last ran, so a resume knows whether it still has to."""
    epoch_loop_done: bool = False
    """The current epoch's batches are done; only its end (``train_epoch_end``, epoch schedulers) remains."""
    epoch_rng: dict[str, Any] | None = field(default=None, repr=False)
    """The RNG states the train loader drew this epoch's order from (taken once per epoch, for checkpoints)."""
    sanity_checking: bool = False
    should_stop: bool = False
    stop_reason: str | None = None
    interrupted: bool = False


class Interrupted(Exception):
    """Raised by the loops at the step boundary after Ctrl-C; the Trainer turns it into the
    ``keyboard_interrupt`` event and returns to the caller."""
