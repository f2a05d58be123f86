"""Checkpoints that Lightning 2.x writes, in this test run, read by Surge: ``load_from_checkpoint`` and
``fit(ckpt_path=...)`` (surge-lightning's checkpoint format, ``surge_lightning.checkpoint``). One module class is
written for both, on Lightning's ``LightningModule`` and on ``surge_lightning.pytorch``'s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import surge
import surge_lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import EarlyStopping as PLEarlyStopping
from lightning.pytorch.callbacks import ModelCheckpoint as PLModelCheckpoint
from loguru import logger
from surge.errors import CheckpointError
from surge.testing import quiet_trainer_args
from surge_callbacks import EarlyStopping
from surge_checkpoint import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

MAX_EPOCHS = 4


def _net(base: type) -> Any:
    class Net(base):  # type: ignore[misc,valid-type]
        def __init__(self, lr: float = 0.1, hidden: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}

    return Net


PLNet, SurgeNet = _net(pl.LightningModule), _net(L.LightningModule)


def _loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g))
    return DataLoader(data, batch_size=16, shuffle=True), DataLoader(data, batch_size=32)


def _lightning_fit(directory: Path, ckpt_path: str | None = None, max_epochs: int = 2, **callbacks: Any) -> Any:
    """A Lightning fit; returns its module and trainer."""
    pl.seed_everything(7)
    model = PLNet(lr=0.2, hidden=6)
    settings = {"filename": "{epoch}", "monitor": "val_loss", **callbacks}
    checkpoint = PLModelCheckpoint(dirpath=directory, save_top_k=-1, **settings)
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        callbacks=[checkpoint, PLEarlyStopping("val_loss", patience=5)],
        **quiet_trainer_args(enable_checkpointing=True),
    )
    pl.seed_everything(11)  # the data order: drawn from here on, in both
    trainer.fit(model, *_loaders(), ckpt_path=ckpt_path)
    return model, trainer


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("lightning") / "ckpts"
    _lightning_fit(directory)  # writes epoch=0.ckpt, epoch=1.ckpt
    return directory


def _warnings() -> tuple[list[str], int]:
    seen: list[str] = []
    return seen, logger.add(lambda m: seen.append(str(m)), level="WARNING", format="{message}")


def test_load_from_checkpoint_gives_lightnings_weights_and_hparams(lightning_run: Path) -> None:
    path = str(lightning_run / "epoch=1.ckpt")
    saved = torch.load(path, weights_only=True)
    model = SurgeNet.load_from_checkpoint(path)
    assert dict(model.hparams) == saved["hyper_parameters"] == {"lr": 0.2, "hidden": 6}
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["state_dict"][name]), name


def test_fit_resumes_where_lightning_resumes(lightning_run: Path, tmp_path: Path) -> None:
    path = str(lightning_run / "epoch=0.ckpt")
    theirs, pl_trainer = _lightning_fit(tmp_path / "pl", ckpt_path=path, max_epochs=MAX_EPOCHS)

    ours = SurgeNet(lr=0.2, hidden=6)
    checkpoint = ModelCheckpoint(dirpath=str(lightning_run), monitor="val_loss", save_top_k=-1, filename="{epoch}")
    stopping = EarlyStopping(monitor="val_loss", patience=5)
    restored: dict[str, Any] = {}

    class Probe(L.Callback):  # type: ignore[misc]
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            restored.update(score=checkpoint.best_model_score, wait=stopping.wait_count, best=stopping.best_score)

    trainer = surge.Trainer(
        max_epochs=MAX_EPOCHS, plugins=[checkpoint, stopping], callbacks=[Probe()], **quiet_trainer_args()
    )
    surge.seed_everything(11)
    seen, sink = _warnings()
    try:
        trainer.fit(ours, *_loaders(), ckpt_path=path)
    finally:
        logger.remove(sink)

    # the same epochs ran and the same steps, to the same weights
    assert (trainer.current_epoch, trainer.global_step) == (pl_trainer.current_epoch, pl_trainer.global_step)
    assert trainer.global_step == MAX_EPOCHS * 4
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, theirs.state_dict()[name]), name
    # the callback states Lightning saved, in the Surge plugins
    saved = torch.load(path, weights_only=True)["callbacks"]
    (pl_checkpoint,) = [state for key, state in saved.items() if key.startswith("ModelCheckpoint")]
    (pl_stopping,) = [state for key, state in saved.items() if key.startswith("EarlyStopping")]
    assert float(restored["score"]) == float(pl_checkpoint["best_model_score"])
    assert restored["wait"] == pl_stopping["wait_count"] and restored["best"] == float(pl_stopping["best_score"])
    # what did not carry over is named, in one warning
    (warning,) = [w for w in seen if "a Lightning 2.6" in w]
    assert "not carried over" in warning and "RNG states" in warning


def test_warning_names_callback_states_no_plugin_takes(lightning_run: Path) -> None:
    trainer = surge.Trainer(max_epochs=2, **quiet_trainer_args())
    seen, sink = _warnings()
    try:
        trainer.fit(SurgeNet(lr=0.2, hidden=6), *_loaders(), ckpt_path=str(lightning_run / "epoch=0.ckpt"))
    finally:
        logger.remove(sink)
    (warning,) = [w for w in seen if "Lightning" in w]
    assert "the callback state \"ModelCheckpoint{'monitor': 'val_loss'" in warning
    assert "the callback state \"EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}\"" in warning
    assert trainer.global_step == 8  # epoch 0's 4 steps, then epoch 1


def test_mid_epoch_checkpoint_continues_after_its_batches(tmp_path: Path) -> None:
    _lightning_fit(tmp_path, max_epochs=1, every_n_train_steps=2, filename="{step}", monitor=None)
    path = str(tmp_path / "step=2.ckpt")  # after 2 of epoch 0's 4 batches
    trainer = surge.Trainer(max_epochs=2, **quiet_trainer_args())
    seen, sink = _warnings()
    try:
        trainer.fit(SurgeNet(lr=0.2, hidden=6), *_loaders(), ckpt_path=path)
    finally:
        logger.remove(sink)
    assert trainer.global_step == 8
    (warning,) = [w for w in seen if "Lightning" in w]
    assert "the data position inside epoch 0" in warning


def test_lightning_checkpoint_needing_unpickling_is_refused(tmp_path: Path, lightning_run: Path) -> None:
    saved = torch.load(lightning_run / "epoch=0.ckpt", weights_only=True)
    saved["hyper_parameters"]["where"] = Path("/data")  # pickled as a class instance
    path = tmp_path / "pickled.ckpt"
    torch.save(saved, path)
    with pytest.raises(CheckpointError, match="holds pickled code .*pathlib.*trusted=True"):
        SurgeNet.load_from_checkpoint(str(path))
    loaded = surge.checkpoint.load(str(path), trusted=True)
    assert loaded["hparams"]["where"] == Path("/data")


def test_file_without_marker_that_is_not_lightnings_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.ckpt"
    torch.save({"state_dict": SurgeNet().state_dict(), "epoch": 0, "global_step": 0}, path)
    with pytest.raises(CheckpointError, match="has no commit marker"):
        surge.checkpoint.load(str(path))
    assert not os.path.exists(str(path) + ".sha256")
