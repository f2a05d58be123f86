"""``lightning.pytorch.loggers.mlflow``: ``MLFlowLogger``, surge-mlflow's (``surge_mlflow.lightning``)."""

from surge_lightning._lazy import served

__all__ = ["MLFlowLogger"]

__getattr__, __dir__ = served(__name__, {"MLFlowLogger": "surge_mlflow.lightning"})
