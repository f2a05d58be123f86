"""The porting rule is mechanical: ``surge_lightning`` mirrors ``lightning`` module for module. Every module of the
mirror is a module of Lightning 2.6 (the installed one, side by side), every name it serves is there in Lightning's,
and a class Lightning defines in a submodule is served from that submodule here too; every name resolves.
``Trainer``, ``LightningModule`` and ``LightningDataModule`` are Surge's own classes, subclassed, and an object of
either kind works wherever the other does."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_lightning
import surge_lightning.pytorch as pl
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args

QUIET = quiet_trainer_args()


def _mirror() -> list[str]:
    """``surge_lightning``, ``surge_lightning.pytorch`` and every module below it (the Surge-side modules of the
    distribution, ``_*``, ``checkpoint``, ``file_loggers``, ``surge_plugins``, are not Lightning's and not here)."""
    found = ["surge_lightning", "surge_lightning.pytorch"]
    found += [info.name for info in pkgutil.walk_packages(pl.__path__, "surge_lightning.pytorch.")]
    return found


def _lightning(name: str) -> Any:
    pytest.importorskip(
        "lightning", reason="Lightning is not installed (the `bench` extra, which `make test` installs)"
    )
    return importlib.import_module("lightning" + name.removeprefix("surge_lightning"))


def test_the_mirror_has_the_modules_porting_needs() -> None:
    expected = {
        "callbacks", "callbacks.callback", "callbacks.early_stopping", "callbacks.model_checkpoint",
        "callbacks.lr_monitor", "callbacks.stochastic_weight_avg", "callbacks.timer", "loggers", "loggers.logger",
        "loggers.csv_logs", "loggers.tensorboard", "loggers.mlflow", "loggers.wandb", "utilities",
        "utilities.rank_zero", "profilers", "profilers.simple", "profilers.advanced", "profilers.pytorch", "tuner",
        "tuner.tuning", "cli", "core", "core.module", "core.datamodule", "trainer", "trainer.trainer",
    }  # fmt: skip
    assert {f"surge_lightning.pytorch.{m}" for m in expected} <= set(_mirror())


@pytest.mark.parametrize("name", _mirror())
def test_each_module_serves_lightnings_names_where_lightning_has_them(name: str) -> None:
    ours, theirs = importlib.import_module(name), _lightning(name)
    assert ours.__all__, f"{name} serves nothing"
    assert [n for n in ours.__all__ if not hasattr(theirs, n)] == [], f"names {name} has that Lightning's lacks"
    for attr in ours.__all__:
        value, defined_in = getattr(ours, attr), getattr(getattr(theirs, attr), "__module__", "") or ""
        assert value is not None
        if defined_in.startswith("lightning.pytorch.") and isinstance(getattr(theirs, attr), type):
            home = importlib.import_module("surge_lightning" + defined_in.removeprefix("lightning"))
            assert getattr(home, attr) is value, f"{attr}: Lightning defines it in {defined_in}; serve it there too"


def test_top_level_names_are_lightnings() -> None:
    lightning = _lightning("surge_lightning")
    for attr in ("LightningModule", "LightningDataModule", "Trainer", "Callback", "seed_everything"):
        assert hasattr(lightning, attr) and getattr(surge_lightning, attr) is getattr(pl, attr)
    assert (
        surge_lightning.pytorch is pl and pl.callbacks.ModelCheckpoint is pl.callbacks.model_checkpoint.ModelCheckpoint
    )


def test_the_classes_are_surges_own_subclassed() -> None:
    for ours, base in (
        (pl.Trainer, surge.Trainer),
        (pl.LightningModule, surge.Module),
        (pl.LightningDataModule, surge.DataModule),
    ):
        assert issubclass(ours, base) and ours is not base


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(TinyDataModule, pl.LightningDataModule):
    pass


def test_either_kind_of_object_works_with_either_trainer(tmp_path: Path) -> None:
    for trainer_class, model, data in (
        (surge.Trainer, Net(), Data()),  # Lightning's Module and DataModule on Surge's Trainer
        (pl.Trainer, TinyModule(), TinyDataModule()),  # Surge's on Lightning's
        (pl.Trainer, Net(), Data()),
    ):
        trainer = trainer_class(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
        trainer.fit(model, datamodule=data)
        assert trainer.global_step == 8
        assert trainer.validate(model, datamodule=data, verbose=False)
        path = trainer.save_checkpoint(str(tmp_path / f"{type(model).__name__}.ckpt"))
        loaded = type(model).load_from_checkpoint(path)
        assert type(loaded) is type(model)
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_lightning_cli_builds_lightnings_trainer(tmp_path: Path) -> None:
    from surge_lightning.pytorch.cli import LightningCLI

    cli = LightningCLI(
        Net,
        Data,
        run=False,
        args={"trainer": {"max_epochs": 1, "default_root_dir": str(tmp_path), **QUIET}},
        save_config_callback=None,
    )
    assert type(cli.trainer) is pl.Trainer and isinstance(cli.model, Net) and isinstance(cli.datamodule, Data)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 8
