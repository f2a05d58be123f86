import hydra
from lightning import Callback
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig

from src.utils import pylogger

log = pylogger.RankedLogger(__name__, rank_zero_only=True)


def instantiate_callbacks(callbacks_cfg: DictConfig) -> list[Callback]:
    """The callbacks of the config's ``callbacks`` group (each entry with a ``_target_``)."""
    callbacks: list[Callback] = []
    if not callbacks_cfg:
        log.warning("No callbacks in the config")
        return callbacks
    if not isinstance(callbacks_cfg, DictConfig):
        raise TypeError(f"the callbacks config must be a DictConfig, not {type(callbacks_cfg).__name__}")
    for _, cb_conf in callbacks_cfg.items():
        if isinstance(cb_conf, DictConfig) and "_target_" in cb_conf:
            log.info(f"Callback {cb_conf._target_}")
            callbacks.append(hydra.utils.instantiate(cb_conf))
    return callbacks


def instantiate_loggers(logger_cfg: DictConfig) -> list[Logger]:
    """The loggers of the config's ``logger`` group (each entry with a ``_target_``)."""
    logger: list[Logger] = []
    if not logger_cfg:
        log.warning("No loggers in the config")
        return logger
    if not isinstance(logger_cfg, DictConfig):
        raise TypeError(f"the logger config must be a DictConfig, not {type(logger_cfg).__name__}")
    for _, lg_conf in logger_cfg.items():
        if isinstance(lg_conf, DictConfig) and "_target_" in lg_conf:
            log.info(f"Logger {lg_conf._target_}")
            logger.append(hydra.utils.instantiate(lg_conf))
    return logger
