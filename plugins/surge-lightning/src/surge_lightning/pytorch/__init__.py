"""``lightning.pytorch`` (and ``pytorch_lightning``) on Surge: ``import surge_lightning.pytorch as pl``.

The porting rule is mechanical: ``lightning`` -> ``surge_lightning``, ``lightning.pytorch`` and
``pytorch_lightning`` -> ``surge_lightning.pytorch``, every submodule path the same
(``surge_lightning.pytorch.callbacks.ModelCheckpoint``). Each module of this package is Lightning's module of the
same path and holds the names Lightning defines there that Surge serves (docs/porting.md); a name that lives in
another plugin distribution is read from it when first used.
"""

from surge import seed_everything
from surge.rank_zero import rank_zero_only

from surge_lightning._lazy import served
from surge_lightning.pytorch.callbacks import Callback
from surge_lightning.pytorch.core import LightningDataModule, LightningModule
from surge_lightning.pytorch.trainer import Trainer

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "cli_lightning_logo", "seed_everything"]

_SUBMODULES = ("callbacks", "cli", "core", "loggers", "profilers", "trainer", "tuner", "utilities")

__getattr__, __dir__ = served(__name__, {name: f"{__name__}.{name}" for name in _SUBMODULES})


@rank_zero_only
def cli_lightning_logo() -> None:
    """What Lightning's examples print before their CLI runs; here a one-line Surge banner (rank zero only)."""
    print("Surge: a PyTorch training engine (running a Lightning program through surge_lightning)")
