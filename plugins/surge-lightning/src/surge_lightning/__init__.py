"""Lightning's API on Surge, in the plugin distribution surge-lightning: ``import surge_lightning as L`` for
``import lightning as L``, ``import surge_lightning.pytorch as pl`` for ``import lightning.pytorch as pl`` or
``import pytorch_lightning as pl``; every submodule path is Lightning's (docs/porting.md, "The imports").

Besides Lightning's names it brings the adapters that put Lightning's objects on Surge's bus (callbacks, loggers),
the Lightning 1.x Trainer arguments and ``*_epoch_end(outputs)`` hooks, ``LightningCLI``, and the import of
checkpoints Lightning wrote (``surge.checkpoint.load`` reads them). Its plugins are declared in
:mod:`surge_lightning.surge_plugins`; README.md lists what it provides.
"""

from surge_lightning import pytorch
from surge_lightning._rank import follow_rank
from surge_lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "pytorch", "seed_everything"]

follow_rank()  # lightning_utilities' rank_zero_only.rank, as `import lightning` sets it
