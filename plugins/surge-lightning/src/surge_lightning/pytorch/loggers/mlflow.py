"""``lightning.pytorch.loggers.mlflow``: ``MLFlowLogger``, surge-mlflow's (``surge_mlflow.lightning``)."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_mlflow.lightning import MLFlowLogger

__all__ = ["MLFlowLogger"]

__getattr__, __dir__ = served(__name__, {"MLFlowLogger": "surge_mlflow.lightning"})
