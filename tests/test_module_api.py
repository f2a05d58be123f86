"""Module API pieces Lightning users reach for: ``save_hyperparameters`` by name, ``load_from_checkpoint``,
and ``Trainer(callbacks=...)`` as Lightning's name for plugin objects."""

from __future__ import annotations

from pathlib import Path

import pytest
import surge
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule, quiet_trainer_args

QUIET = quiet_trainer_args(enable_checkpointing=True)


class Sized(TinyModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05, note: str = "x") -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters("hidden", "lr")


def test_save_hyperparameters_keeps_the_names_given() -> None:
    class Named(surge.Module):
        def __init__(self, hidden: int = 16, lr: float = 0.05, note: str = "x") -> None:
            super().__init__()
            self.save_hyperparameters("hidden", "lr")

    assert dict(Named(hidden=4).hparams) == {"hidden": 4, "lr": 0.05}
    # a base class's save_hyperparameters (TinyModule saves its three by name) stays, as in Lightning; the
    # subclass's names add to it
    assert dict(Sized(hidden=4).hparams) == {"in_features": 8, "hidden": 4, "lr": 0.05}

    class Wrong(TinyModule):
        def __init__(self, hidden: int = 16) -> None:
            super().__init__(hidden=hidden)
            self.save_hyperparameters("hiden")

    with pytest.raises(surge.SurgeError, match=r"\['hiden'\] are not arguments of __init__"):
        Wrong()


def test_load_from_checkpoint_rebuilds_from_hparams_with_the_weights(tmp_path: Path) -> None:
    model = Sized(hidden=4)
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **quiet_trainer_args())
    trainer.fit(model, datamodule=TinyDataModule())
    path = trainer.save_checkpoint(str(tmp_path / "model.ckpt"))
    loaded = Sized.load_from_checkpoint(path)
    assert loaded.hparams == model.hparams and loaded.net[0].out_features == 4
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )
    assert Sized.load_from_checkpoint(path, lr=0.5).hparams["lr"] == 0.5
    with pytest.raises(RuntimeError, match="size mismatch"):
        Sized.load_from_checkpoint(path, hidden=8)


def test_callbacks_are_plugin_objects(tmp_path: Path) -> None:
    recorder = EventRecorder()
    trainer = surge.Trainer(max_epochs=1, callbacks=[recorder], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert "train_batch_end" in recorder.names()
    with pytest.raises(surge.ConfigError, match=r"trainer.callbacks\[0\]: got 'early_stopping'.*plugins="):
        surge.Trainer(callbacks=["early_stopping"])
