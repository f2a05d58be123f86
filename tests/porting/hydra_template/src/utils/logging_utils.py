from typing import Any

from lightning_utilities.core.rank_zero import rank_zero_only
from omegaconf import OmegaConf

from src.utils import pylogger

log = pylogger.RankedLogger(__name__, rank_zero_only=True)


@rank_zero_only
def log_hyperparameters(object_dict: dict[str, Any]) -> None:
    """Send the parts of the config worth keeping, and the model's parameter counts, to every logger."""
    cfg = OmegaConf.to_container(object_dict["cfg"])
    model = object_dict["model"]
    trainer = object_dict["trainer"]
    if not trainer.logger:
        log.warning("No logger: the hyper-parameters are not logged")
        return

    hparams: dict[str, Any] = {"model": cfg["model"]}
    hparams["model/params/total"] = sum(p.numel() for p in model.parameters())
    hparams["model/params/trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    hparams["model/params/non_trainable"] = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    hparams["data"] = cfg["data"]
    hparams["trainer"] = cfg["trainer"]
    for key in ("callbacks", "extras", "task_name", "tags", "ckpt_path", "seed"):
        hparams[key] = cfg.get(key)

    for logger in trainer.loggers:
        logger.log_hyperparams(hparams)
