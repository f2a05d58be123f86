"""The configs every test starts from: the project's `train.yaml` and `eval.yaml` composed by Hydra, made small
(one CPU, a part of each epoch, no logger, no printing), with the test's temporary folder as the output."""

from pathlib import Path

import pytest
from hydra import compose, initialize
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="package")
def cfg_train_global() -> DictConfig:
    with initialize(version_base="1.3", config_path="../configs"):
        cfg = compose(config_name="train.yaml", return_hydra_config=True, overrides=[])
        with open_dict(cfg):
            cfg.paths.root_dir = str(ROOT)
            cfg.trainer.max_epochs = 1
            cfg.trainer.limit_train_batches = 0.3
            cfg.trainer.limit_val_batches = 0.5
            cfg.trainer.limit_test_batches = 0.5
            cfg.trainer.accelerator = "cpu"
            cfg.trainer.devices = 1
            cfg.data.num_workers = 0
            cfg.data.pin_memory = False
            cfg.extras.print_config = False
            cfg.extras.enforce_tags = False
            cfg.logger = None
    return cfg


@pytest.fixture(scope="package")
def cfg_eval_global() -> DictConfig:
    with initialize(version_base="1.3", config_path="../configs"):
        cfg = compose(config_name="eval.yaml", return_hydra_config=True, overrides=["ckpt_path=."])
        with open_dict(cfg):
            cfg.paths.root_dir = str(ROOT)
            cfg.trainer.max_epochs = 1
            cfg.trainer.limit_test_batches = 0.5
            cfg.trainer.accelerator = "cpu"
            cfg.trainer.devices = 1
            cfg.data.num_workers = 0
            cfg.data.pin_memory = False
            cfg.extras.print_config = False
            cfg.extras.enforce_tags = False
            cfg.logger = None
    return cfg


@pytest.fixture
def cfg_train(cfg_train_global: DictConfig, tmp_path: Path) -> DictConfig:
    cfg = cfg_train_global.copy()
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
        cfg.paths.log_dir = str(tmp_path)
        cfg.paths.data_dir = str(tmp_path / "data")
    yield cfg
    GlobalHydra.instance().clear()


@pytest.fixture
def cfg_eval(cfg_eval_global: DictConfig, tmp_path: Path) -> DictConfig:
    cfg = cfg_eval_global.copy()
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
        cfg.paths.log_dir = str(tmp_path)
        cfg.paths.data_dir = str(tmp_path / "data")
    yield cfg
    GlobalHydra.instance().clear()
