"""Lightning's API on Surge, in the plugin distribution surge-lightning: ``import surge_lightning as L`` for
``import lightning as L``, ``import surge_lightning.pytorch as pl`` for ``import lightning.pytorch as pl`` or
``import pytorch_lightning as pl``; every submodule path is Lightning's (docs/porting.md, "The imports").

Besides Lightning's names it brings the adapters that put Lightning's objects on Surge's bus (callbacks, loggers),
the Lightning 1.x Trainer arguments and ``*_epoch_end(outputs)`` hooks, ``LightningCLI``, and the import of
checkpoints Lightning wrote (``surge.checkpoint.load`` reads them). Its plugins are declared in
:mod:`surge_lightning.surge_plugins`; README.md lists what it provides.

Importing this package imports none of Lightning's API: every ``surge.Trainer()`` imports
:mod:`surge_lightning.surge_plugins` (plugin discovery), which is a submodule of this package, so the API
(:mod:`surge_lightning.pytorch`) is imported on the first read of one of its names here, or by importing it.
It does set ``lightning_utilities``' ``rank_zero_only.rank``, as ``import lightning`` does (a post-import hook
would be cheaper, but a plugin under a lab may not touch ``sys.meta_path``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from surge_lightning._lazy import served
from surge_lightning._rank import follow_rank

if TYPE_CHECKING:  # what __getattr__ serves, for type checkers
    from surge_lightning import pytorch
    from surge_lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "pytorch", "seed_everything"]

_API = "surge_lightning.pytorch"

__getattr__, __dir__ = served(__name__, dict.fromkeys(__all__, _API))
"""``L.Trainer`` (and the rest of ``__all__``) from :mod:`surge_lightning.pytorch`, imported then; every other name
Lightning has here and Surge does not serve raises the inventory's reason."""

follow_rank()  # lightning_utilities' rank_zero_only.rank, as `import lightning` sets it
