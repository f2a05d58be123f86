"""``lightning.pytorch.loggers.tensorboard``: ``TensorBoardLogger``, surge-tensorboard's (``surge_tensorboard.lightning``)."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_tensorboard.lightning import TensorBoardLogger

__all__ = ["TensorBoardLogger"]

__getattr__, __dir__ = served(__name__, {"TensorBoardLogger": "surge_tensorboard.lightning"})
