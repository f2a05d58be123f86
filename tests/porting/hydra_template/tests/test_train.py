import os
from pathlib import Path

import pytest
from hydra import compose, initialize
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict
from src.train import train


def test_train_fast_dev_run(cfg_train: DictConfig) -> None:
    """One batch of training, validation and test."""
    HydraConfig().set_config(cfg_train)
    with open_dict(cfg_train):
        cfg_train.trainer.fast_dev_run = True
        cfg_train.trainer.accelerator = "cpu"
    train(cfg_train)


def test_train_debug_overfit(tmp_path: Path) -> None:
    """The `debug=overfit` config: three batches learnt by heart, no callbacks, no logger."""
    with initialize(version_base="1.3", config_path="../configs"):
        cfg = compose(config_name="train.yaml", return_hydra_config=True, overrides=["debug=overfit", "seed=7"])
    with open_dict(cfg):
        cfg.paths.root_dir = str(Path(__file__).resolve().parents[1])
        cfg.paths.output_dir = cfg.paths.log_dir = str(tmp_path)
        cfg.paths.data_dir = str(tmp_path / "data")
        cfg.trainer.max_epochs = 10
        cfg.test = False
    HydraConfig().set_config(cfg)
    metric_dict, objects = train(cfg)
    assert objects["trainer"].global_step == 10 * 3
    assert metric_dict["train/acc"] > 0.5  # three batches of 128, ten epochs


@pytest.mark.slow
def test_train_epoch_double_val_loop(cfg_train: DictConfig) -> None:
    """One epoch, validated twice."""
    HydraConfig().set_config(cfg_train)
    with open_dict(cfg_train):
        cfg_train.trainer.max_epochs = 1
        cfg_train.trainer.val_check_interval = 0.5
    train(cfg_train)


@pytest.mark.slow
def test_train_resume(tmp_path: Path, cfg_train: DictConfig) -> None:
    """One epoch; then resume from `last.ckpt` for another."""
    with open_dict(cfg_train):
        cfg_train.trainer.max_epochs = 1
        cfg_train.trainer.limit_train_batches = 1.0
    HydraConfig().set_config(cfg_train)
    metric_dict_1, _ = train(cfg_train)

    files = os.listdir(tmp_path / "checkpoints")
    assert "last.ckpt" in files
    assert "epoch_000.ckpt" in files

    with open_dict(cfg_train):
        cfg_train.ckpt_path = str(tmp_path / "checkpoints" / "last.ckpt")
        cfg_train.trainer.max_epochs = 2
    metric_dict_2, _ = train(cfg_train)

    files = os.listdir(tmp_path / "checkpoints")
    assert "epoch_001.ckpt" in files
    assert "epoch_002.ckpt" not in files
    assert metric_dict_1["train/acc"] < metric_dict_2["train/acc"]
    assert metric_dict_1["val/acc"] < metric_dict_2["val/acc"]
