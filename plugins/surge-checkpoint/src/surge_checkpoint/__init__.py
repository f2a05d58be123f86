"""surge-checkpoint: crash-safe, asynchronous and preemption-aware checkpointing for Surge.

The ``checkpoint`` plugin is on by default: every ``fit`` saves into ``<run_dir>/checkpoints`` after each
epoch. ``Trainer(enable_checkpointing=False)`` (or ``plugins={"checkpoint": False}``) switches it off,
``plugins={"checkpoint": {...}}`` configures it, and ``plugins=[ModelCheckpoint(...), ...]`` replaces it
with one or more instances of your own.

It publishes the events ``checkpoint_saved`` (:class:`CheckpointSaved`) and ``checkpoint_removed``
(:class:`CheckpointRemoved`), to which loggers subscribe to log the committed checkpoints.

Written against Surge's public API only (``surge``, ``surge.events``, ``surge.hookimpl``,
``surge.checkpoint``), exactly as a third-party plugin would be.
"""

from __future__ import annotations

import surge
from surge.checkpoint import snapshot

from surge_checkpoint._callback import CheckpointConfig, ModelCheckpoint, build
from surge_checkpoint._events import CheckpointKind, CheckpointRemoved, CheckpointSaved
from surge_checkpoint._preemption import DEFAULT_SIGNALS, Preempted
from surge_checkpoint._writer import WriteError

__all__ = [
    "DEFAULT_SIGNALS",
    "CheckpointConfig",
    "CheckpointKind",
    "CheckpointRemoved",
    "CheckpointSaved",
    "ModelCheckpoint",
    "Preempted",
    "WriteError",
    "plugin",
    "snapshot",
]

plugin = surge.Plugin(
    name="checkpoint",
    kind="participant",
    factory=build,
    config=CheckpointConfig,
    default=True,
    role="checkpoint",
    events=[CheckpointSaved, CheckpointRemoved],
    description="ModelCheckpoint: top-k and last checkpoints, asynchronous saves, preemption (SIGTERM/SIGUSR1)",
)
