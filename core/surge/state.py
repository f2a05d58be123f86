"""Where a run stands: one mutable object owned by the Trainer, read by everyone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    """Training batches seen across all epochs."""
    sanity_checking: bool = False
    should_stop: bool = False
    stop_reason: str | None = None
    interrupted: bool = False


class Interrupted(Exception):
    """Raised by the loops at the step boundary after Ctrl-C; the Trainer turns it into the
    ``keyboard_interrupt`` event and returns to the caller."""
