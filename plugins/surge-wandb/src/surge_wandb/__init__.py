"""surge-wandb: log Surge runs to Weights & Biases.

The ``wandb`` plugin is off by default. ``Trainer(logger="wandb")`` (or ``logger=["csv", "wandb"]``) switches
it on; ``plugins={"wandb": {...}}`` configures it. Its files go into the run directory (``<run_dir>/wandb``);
``mode="offline"`` (or ``WANDB_MODE=offline``) keeps everything there for a later ``wandb sync``.

Importing this package does not import wandb (that happens when a run opens on global rank zero): plugin
discovery imports it in every ``Trainer()``.
"""

from __future__ import annotations

import surge

from surge_wandb._logger import WandbConfig, WandbError, WandbLogger

__all__ = ["WandbConfig", "WandbError", "WandbLogger", "plugin"]

plugin = surge.Plugin(
    name="wandb",
    kind="observer",
    factory=WandbLogger,
    config=WandbConfig,
    default=False,
    role="logger",
    description="Weights & Biases: config, metrics, run status and checkpoints (online, offline or disabled)",
)
