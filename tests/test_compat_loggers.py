"""Lightning's ``Logger`` under Surge (``surge_lightning.pytorch.loggers``): a logger object passed in ``Trainer(logger=...)``
is called as Lightning's Trainer calls it, several of one class are each called, a plugin's measurement reaches it
as Lightning's callbacks write theirs, its errors name it, and the names not ported are refused with the way out.
The call sequences themselves are compared with Lightning's in ``tests/test_porting.py`` (``custom_logger.py``)."""

from __future__ import annotations

import enum
import importlib.abc
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import surge
import surge_lightning.pytorch.loggers
import torch
import yaml
from surge.testing import TinyDataModule, TinyModule
from surge_lightning.file_loggers import next_version
from surge_lightning.pytorch.core.saving import save_hparams_to_yaml
from surge_lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
from surge_lightning.pytorch.utilities import rank_zero_only

QUIET = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class Recorder(Logger):
    def __init__(self, label: str = "recorder") -> None:
        self.label = label
        self.calls: list[tuple[Any, ...]] = []
        self.experiments = 0

    @property
    def name(self) -> str:
        return self.label

    @property
    def version(self) -> int:
        return 0

    @property
    @rank_zero_experiment
    def experiment(self) -> list[tuple[Any, ...]]:
        self.experiments += 1
        return self.calls

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self.calls.append(("log_metrics", dict(metrics), step))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("log_hyperparams", dict(params)))

    def save(self) -> None:
        self.calls.append(("save",))

    def finalize(self, status: str) -> None:
        self.calls.append(("finalize", status))


class NotInstalled(importlib.abc.MetaPathFinder):
    """Importing ``package`` fails as it does where its distribution is not installed."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == self.package:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class Measure:
    """A plugin that measures something itself and writes it through ``trainer.log_metrics``."""

    surge_name = "measure"

    @surge.hookimpl
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        event.trainer.log_metrics({"measured": 1.5}, source="measure")


def test_several_loggers_of_one_class_each_get_every_write(tmp_path: Path) -> None:
    first, second = Recorder("a"), Recorder("b")
    trainer = surge.Trainer(max_epochs=1, logger=[first, second], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule(n_train=32, n_val=16, batch_size=8))
    assert trainer.loggers == [first, second] and trainer.logger is first
    assert first.calls == second.calls and first.calls[-1] == ("finalize", "success")
    assert first.calls[0] == ("log_hyperparams", {"in_features": 8, "hidden": 16, "lr": 0.05})
    assert first.experiments == 1  # touched once at setup, as Lightning makes it before the run
    writes = [c for c in first.calls if c[0] == "log_metrics"]
    assert [sorted(m) for _, m, _ in writes] == [["epoch", "val_loss"]]  # log_every_n_steps=50: no step row
    assert first in trainer.callbacks  # the object passed, not the bus's adapter


def test_a_plugins_measurement_is_written_without_epoch_or_save(tmp_path: Path) -> None:
    recorder = Recorder()
    trainer = surge.Trainer(
        max_epochs=1,
        logger=[recorder],
        plugins=[Measure()],
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        **QUIET,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule(n_train=32, n_val=16, batch_size=8))
    index = recorder.calls.index(("log_metrics", {"measured": 1.5}, 4))
    assert recorder.calls[index + 1] != ("save",)  # as Lightning's LearningRateMonitor writes to its loggers


def test_an_error_in_a_logger_names_it_and_the_run_fails(tmp_path: Path) -> None:
    class Broken(Recorder):
        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            raise ValueError("disk full")

    broken = Broken()
    trainer = surge.Trainer(max_epochs=1, logger=broken, default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="disk full") as caught:
        trainer.fit(TinyModule(), datamodule=TinyDataModule(n_train=32, n_val=16, batch_size=8))
    assert any("test_compat_loggers" in note and "Broken" in note for note in caught.value.__notes__)
    assert broken.calls[-1] == ("finalize", "failed")


def test_experiment_on_other_ranks_does_nothing() -> None:
    recorder = Recorder()
    rank = rank_zero_only.rank
    rank_zero_only.rank = 1
    try:
        experiment = recorder.experiment
        assert experiment.add_scalar("x", 1.0) is None and experiment[0].anything() is None
    finally:
        rank_zero_only.rank = rank
    assert recorder.experiment is recorder.calls and recorder.experiments == 1


def test_a_logger_must_implement_lightnings_abstract_methods() -> None:
    class Incomplete(Logger):
        def log_metrics(self, metrics: Any, step: int | None = None) -> None: ...

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_names_not_ported_or_not_installed_are_refused_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    loggers = surge_lightning.pytorch.loggers
    served = "CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger"
    with pytest.raises(AttributeError, match=f"no attribute 'CometLogger'; the names Surge serves here: {served}"):
        loggers.CometLogger  # noqa: B018
    assert loggers.TensorBoardLogger is loggers.tensorboard.TensorBoardLogger
    assert loggers.Logger is Logger
    from surge_lightning.pytorch.loggers import WandbLogger

    assert WandbLogger is loggers.wandb.WandbLogger and WandbLogger.__module__ == "surge_wandb.lightning"
    for name in [name for name in sys.modules if name.split(".")[0] == "surge_wandb"]:
        monkeypatch.delitem(sys.modules, name)
    for module in (loggers, loggers.wandb):  # read once, kept: forget it, as in a process without surge-wandb
        monkeypatch.delattr(module, "WandbLogger")
    monkeypatch.setattr(sys, "meta_path", [NotInstalled("surge_wandb"), *sys.meta_path])
    with pytest.raises(
        ImportError, match=r"WandbLogger is surge-wandb's, which is not installed: `pip install surge-w"
    ):
        from surge_lightning.pytorch.loggers import WandbLogger


class Color(enum.Enum):
    RED = "red"


def test_hparams_yaml_holds_what_lightning_writes(tmp_path: Path) -> None:
    path = tmp_path / "hparams.yaml"
    params = {"lr": np.float64(0.5), "layers": (2, 3), "color": Color.RED, "w": torch.tensor(1.5), "f": print}
    save_hparams_to_yaml(path, params)
    assert yaml.safe_load(path.read_text()) == {
        "lr": 0.5, "layers": [2, 3], "color": "RED", "w": 1.5, "f": repr(print)
    }  # fmt: skip


def test_next_version_follows_the_version_directories(tmp_path: Path) -> None:
    assert next_version(tmp_path / "missing") == 0
    for name in ("version_0", "version_3", "version_x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "version_7").write_text("a file, not a version")
    assert next_version(tmp_path) == 4
