"""A Trainer and a Module made by Hydra (issue 25, item 6), as the common Lightning + Hydra project template
makes them: configs composed with Hydra's compose API from files (written here, in ``tmp_path``; nothing is
fetched), callbacks and loggers instantiated one by one, then
``hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)``, which hands the Trainer
omegaconf ``ListConfig`` objects, and a Module whose ``__init__`` gets ``ListConfig``/``DictConfig`` arguments
and calls ``save_hyperparameters()``.

The same configs, with Lightning's class paths, run Lightning 2.6 (installed by the test set-up) beside it:
the callbacks and the logger take part, ``hparams.yaml`` holds plain values, the checkpoint's hyper-parameters
are plain containers (``torch.load(weights_only=True)`` reads them) and ``load_from_checkpoint`` gets them back.
"""

from __future__ import annotations

from collections import UserList
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
import yaml
from surge.errors import ConfigError
from surge.testing import quiet_trainer_args
from torch.utils.data import DataLoader, TensorDataset

hydra: Any = pytest.importorskip("hydra")  # the test extra has hydra-core and omegaconf
omegaconf: Any = pytest.importorskip("omegaconf")
pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra); _hydra_targets uses it
import _hydra_targets  # noqa: E402

TARGETS = {
    "surge": {
        "trainer": "surge.Trainer",
        "model": "_hydra_targets.SurgeNet",
        "counter": "_hydra_targets.SurgeEpochCounter",
        "early_stopping": "surge_callbacks.EarlyStopping",
        "csv": "surge_csv.lightning.CSVLogger",
    },
    "lightning": {
        "trainer": "lightning.Trainer",
        "model": "_hydra_targets.LightningNet",
        "counter": "_hydra_targets.LightningEpochCounter",
        "early_stopping": "lightning.pytorch.callbacks.EarlyStopping",
        "csv": "lightning.pytorch.loggers.CSVLogger",
    },
}
HPARAMS = {"hidden": [8, 6], "optim": {"lr": 0.05, "betas": [0.9, 0.99]}, "tags": ["a", "b"]}


def write_configs(configs: Path, root: Path, framework: str) -> None:
    """A template-shaped config tree: ``train.yaml`` composing the trainer, model, callbacks and logger groups."""
    target = TARGETS[framework]
    files = {
        "train.yaml": {
            "defaults": [
                "_self_",
                {"trainer": "default"},
                {"model": "net"},
                {"callbacks": "default"},
                {"logger": "csv"},
            ],
            "root": str(root),
        },
        "trainer/default.yaml": {
            "_target_": target["trainer"],
            "default_root_dir": "${root}",
            "max_epochs": 2,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "enable_checkpointing": False,
        },
        "model/net.yaml": {"_target_": target["model"], **HPARAMS},
        "callbacks/default.yaml": {
            "counter": {"_target_": target["counter"], "tag": "epochs"},
            "early_stopping": {"_target_": target["early_stopping"], "monitor": "val_loss", "patience": 5},
        },
        "logger/csv.yaml": {"csv": {"_target_": target["csv"], "save_dir": "${root}", "name": "hydra"}},
    }
    for name, content in files.items():
        path = configs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(content, sort_keys=False))


def data() -> tuple[DataLoader, DataLoader]:
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(48, 4, generator=generator)
    dataset = TensorDataset(x, x.sum(1, keepdim=True))
    return DataLoader(dataset, batch_size=8), DataLoader(dataset, batch_size=16)


def run(tmp_path: Path, framework: str) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    root = tmp_path / framework
    write_configs(root / "configs", root, framework)
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="train")
    # as the template's train.py: each callback and logger made from its group, then the Trainer around them
    callbacks = [hydra.utils.instantiate(node) for node in cfg.callbacks.values()]
    loggers = [hydra.utils.instantiate(node) for node in cfg.logger.values()]
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    surge.seed_everything(0)
    model = hydra.utils.instantiate(cfg.model)
    assert isinstance(model.hparams["hidden"], omegaconf.ListConfig)  # what the Module was given
    trainer.fit(model, *data())
    checkpoint = root / "net.ckpt"
    trainer.save_checkpoint(str(checkpoint))
    (csv_logger,) = trainer.loggers
    # Lightning pickles the omegaconf objects into its checkpoint: only an unsafe load reads them back
    unsafe = {"weights_only": False} if framework == "lightning" else {}
    loaded = type(model).load_from_checkpoint(str(checkpoint), **unsafe)
    return {
        "epochs counted": callbacks[0].epochs,
        "early stopping": type(trainer.early_stopping_callback).__name__,
        "rows": (Path(csv_logger.log_dir) / "metrics.csv").read_text().count("\n"),
        "hparams.yaml": yaml.safe_load((Path(csv_logger.log_dir) / "hparams.yaml").read_text()),
        "loaded": omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.create(dict(loaded.hparams))),
        "loaded types": {name: type(value) for name, value in loaded.hparams.items()},
        "weights": model.state_dict(),
        "checkpoint": checkpoint,
    }


def test_a_trainer_and_module_made_by_hydra_run_as_under_lightning(tmp_path: Path) -> None:
    ours, theirs = run(tmp_path, "surge"), run(tmp_path, "lightning")
    assert ours["epochs counted"] == theirs["epochs counted"] == 2  # the callback in the ListConfig ran
    assert ours["early stopping"] == theirs["early stopping"] == "EarlyStopping"
    assert ours["rows"] == theirs["rows"] > 1  # the logger in the ListConfig wrote the same rows
    assert ours["hparams.yaml"] == theirs["hparams.yaml"] == HPARAMS
    assert ours["loaded"] == theirs["loaded"] == HPARAMS
    assert ours["loaded types"] == {"hidden": list, "optim": dict, "tags": list}  # plain containers
    for name, value in theirs["weights"].items():
        assert torch.equal(ours["weights"][name], value), name
    saved = torch.load(ours["checkpoint"], weights_only=True)["hparams"]  # no omegaconf object pickled
    assert saved == HPARAMS and type(saved["optim"]["betas"]) is list


class Seen:
    """A Surge plugin object that records that it ran."""

    def __init__(self) -> None:
        self.epochs = 0

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        self.epochs += 1


@pytest.mark.parametrize("kind", [UserList, tuple, omegaconf.ListConfig])
def test_list_likes_are_lists_of_callbacks_plugins_and_loggers(tmp_path: Path, kind: type) -> None:
    plugin, callback = Seen(), _hydra_targets.SurgeEpochCounter("x")

    def make(items: list[Any]) -> Any:
        return (
            omegaconf.ListConfig(items, flags={"allow_objects": True}) if kind is omegaconf.ListConfig else kind(items)
        )

    trainer = surge.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=1,
        plugins=make([plugin]),
        callbacks=make([callback]),
        **quiet_trainer_args(logger=make(["csv"])),
    )
    train, val = data()
    trainer.fit(_hydra_targets.SurgeNet(hidden=[2], optim={"lr": 0.1}), train, val)
    assert plugin.epochs == callback.epochs == 1
    assert (Path(trainer.log_dir) / "metrics.csv").exists()
    # an empty one is no logger at all, as in Lightning (a falsy `logger`)
    quiet = surge.Trainer(default_root_dir=str(tmp_path / "quiet"), **quiet_trainer_args(logger=make([])))
    assert quiet.loggers == []


def test_a_list_like_of_wrong_entries_is_reported_entry_by_entry(tmp_path: Path) -> None:
    entries = omegaconf.ListConfig([1, "early_stopping"])
    with pytest.raises(
        ConfigError, match=r"trainer.callbacks\[0\]: got 1.*\n.*trainer.callbacks\[1\]: got 'early_stopping'"
    ):
        surge.Trainer(default_root_dir=str(tmp_path), callbacks=entries)


def test_omegaconf_hyperparameters_are_saved_as_plain_values(tmp_path: Path) -> None:
    """Nested ``DictConfig``/``ListConfig`` values, interpolations resolved: plain lists and dicts in the
    checkpoint, in ``hparams.yaml`` and in what ``load_from_checkpoint`` passes to ``__init__``."""
    cfg = omegaconf.OmegaConf.create(
        {"width": 3, "hidden": [4, "${width}"], "optim": {"lr": 0.1, "steps": [{"at": 1, "lr": "${optim.lr}"}]}}
    )
    model = _hydra_targets.SurgeNet(hidden=cfg.hidden, optim=cfg.optim, tags=omegaconf.ListConfig([]))
    trainer = surge.Trainer(default_root_dir=str(tmp_path), max_epochs=1, **quiet_trainer_args(logger=True))
    trainer.fit(model, *data())
    trainer.save_checkpoint(str(tmp_path / "net.ckpt"))
    plain = {"hidden": [4, 3], "optim": {"lr": 0.1, "steps": [{"at": 1, "lr": 0.1}]}, "tags": []}
    assert torch.load(tmp_path / "net.ckpt", weights_only=True)["hparams"] == plain
    assert yaml.safe_load((Path(trainer.run_dir) / "hparams.yaml").read_text()) == plain  # type: ignore[arg-type]
    loaded = _hydra_targets.SurgeNet.load_from_checkpoint(str(tmp_path / "net.ckpt"))
    assert loaded.hparams == plain and type(loaded.hparams["optim"]["steps"][0]) is dict
    assert isinstance(model.hparams["hidden"], omegaconf.ListConfig)  # the Module keeps what it was given
