import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


def test_train_config(cfg_train: DictConfig) -> None:
    assert cfg_train and cfg_train.data and cfg_train.model and cfg_train.trainer
    HydraConfig().set_config(cfg_train)
    hydra.utils.instantiate(cfg_train.data)
    hydra.utils.instantiate(cfg_train.model)
    hydra.utils.instantiate(cfg_train.trainer)


def test_eval_config(cfg_eval: DictConfig) -> None:
    assert cfg_eval and cfg_eval.data and cfg_eval.model and cfg_eval.trainer
    HydraConfig().set_config(cfg_eval)
    hydra.utils.instantiate(cfg_eval.data)
    hydra.utils.instantiate(cfg_eval.model)
    hydra.utils.instantiate(cfg_eval.trainer)
