"""The events the ``checkpoint`` plugin publishes: which checkpoint files exist, as they come and go.

Other plugins subscribe by name, ``@surge.hookimpl(optional=True)`` when this plugin may be absent or switched
off (docs/events.md, "Events of plugins"); they need not import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from surge.events import Event

__all__ = ["CheckpointKind", "CheckpointRemoved", "CheckpointSaved"]

CheckpointKind = Literal["top_k", "periodic", "last", "preemption"]
"""Why a checkpoint was written: ``top_k`` ranked by ``monitor``; ``periodic`` on the schedule without a
``monitor`` (the newest kept, or every one with ``save_top_k=-1``); ``last`` the ``last.ckpt`` of ``save_last``;
``preemption`` the ``last.ckpt`` saved after SIGTERM/SIGUSR1, before the run stops with ``Preempted``."""


@dataclass(frozen=True, slots=True)
class CheckpointSaved(Event):
    """A ``ModelCheckpoint`` committed a checkpoint: the data file and its commit marker (``<path>.sha256``) are
    written, so ``surge.checkpoint.load(path)`` verifies and loads it. Fires once per file on global rank zero,
    on the training thread: right after a synchronous save; for ``async_save=True`` when the background write
    is collected (at the next training step, the next save, or when the run ends or fails), before
    ``teardown``'s handlers of the loggers run. A save that fails emits nothing; overwriting ``last.ckpt`` fires
    again with the same ``path``.

    ``path``: the file, a local path or an fsspec URL. ``kind``: see :data:`CheckpointKind`. ``monitor``: the
    instance's ranking metric (``None`` without one). ``score``: its value at this save (a NaN as the worst
    value, ``inf`` for ``mode="min"``), ``None`` when it was not read for this save (no ``monitor``, or a
    ``last``/``preemption`` save at a step without a top-k save). ``global_step`` and ``epoch``: the run's
    position the checkpoint holds.

    May change: nothing (the file is on storage; a handler may read or upload it, not move it)."""

    name: ClassVar[str] = "checkpoint_saved"
    path: str
    kind: CheckpointKind
    monitor: str | None
    score: float | None
    global_step: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CheckpointRemoved(Event):
    """A ``ModelCheckpoint`` removed a checkpoint it had saved in this run, because it left the top k (or a newer
    one replaced it), after the file replacing it was committed and its ``checkpoint_saved`` fired. Fires on
    global rank zero, on the training thread, once the file and its commit marker are gone. Not for the files a
    resumed run finishes removing on behalf of the run it continues, nor for temp files.

    ``path``: the removed file, as its ``checkpoint_saved`` named it. ``global_step`` and ``epoch``: the run's
    position at the save that replaced it.

    May change: nothing."""

    name: ClassVar[str] = "checkpoint_removed"
    path: str
    global_step: int
    epoch: int
