"""``lightning.pytorch.loggers.tensorboard``: ``TensorBoardLogger``, surge-tensorboard's (``surge_tensorboard.lightning``)."""

from surge_lightning._lazy import served

__all__ = ["TensorBoardLogger"]

__getattr__, __dir__ = served(__name__, {"TensorBoardLogger": "surge_tensorboard.lightning"})
