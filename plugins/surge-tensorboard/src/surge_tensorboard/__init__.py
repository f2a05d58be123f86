"""surge-tensorboard: TensorBoard event files for Surge runs.

The ``tensorboard`` plugin is a logger, off until a run asks for it: ``Trainer(logger="tensorboard")``,
``logger=["csv", "tensorboard"]``, ``plugins=["tensorboard"]`` or ``plugins={"tensorboard": {...}}``.
It writes into the run directory, so ``tensorboard --logdir <default_root_dir>/surge_runs`` shows each
``version_N`` as a run.

Importing this package imports neither ``tensorboard`` nor ``torch.utils.tensorboard``: plugin discovery
imports it in every ``Trainer()``, and those load at the first write instead.

Written against Surge's public API only (``surge``, ``surge.events``, ``surge.hookimpl``), exactly as a
third-party plugin would be.
"""

from __future__ import annotations

import surge

from surge_tensorboard._logger import TensorBoardConfig, TensorBoardLogger

__all__ = ["TensorBoardConfig", "TensorBoardLogger", "plugin"]

plugin = surge.Plugin(
    name="tensorboard",
    kind="observer",
    factory=TensorBoardLogger,
    default=False,
    role="logger",
    description="TensorBoard event files in the run directory: scalars, hparams, graph, histograms",
)
