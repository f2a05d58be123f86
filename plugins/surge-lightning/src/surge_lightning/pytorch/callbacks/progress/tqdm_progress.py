"""``lightning.pytorch.callbacks.progress.tqdm_progress``: :class:`TQDMProgressBar`, surge-progress's bar with
Lightning's arguments (no tqdm: the same bar, the same metrics)."""

from __future__ import annotations

from surge_progress import ProgressBar

__all__ = ["TQDMProgressBar"]


class TQDMProgressBar(ProgressBar):
    """Lightning's ``TQDMProgressBar(refresh_rate=1, process_position=0, leave=False)``: ``refresh_rate`` batches
    between refreshes (``0`` switches it off), ``leave`` keeps each finished epoch's bar. ``process_position``
    stacked tqdm bars of several processes; the bar runs on global rank zero only, so it has nothing to do."""

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self.process_position = process_position
