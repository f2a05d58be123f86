"""``lightning.pytorch.loggers``: :class:`Logger`, the base of a logger of one's own, and the Lightning-shaped
loggers of the first-party logger distributions, each read from its distribution when first used (an
``ImportError`` naming it when it is missing): ``CSVLogger`` (surge-csv), ``TensorBoardLogger`` (surge-tensorboard),
``MLFlowLogger`` (surge-mlflow), ``WandbLogger`` (surge-wandb)."""

from surge_lightning._lazy import served
from surge_lightning.pytorch.loggers.logger import Logger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]

__getattr__, __dir__ = served(
    __name__,
    {
        "CSVLogger": "surge_lightning.pytorch.loggers.csv_logs",
        "TensorBoardLogger": "surge_lightning.pytorch.loggers.tensorboard",
        "MLFlowLogger": "surge_lightning.pytorch.loggers.mlflow",
        "WandbLogger": "surge_lightning.pytorch.loggers.wandb",
        **{name: f"surge_lightning.pytorch.loggers.{name}" for name in ("csv_logs", "tensorboard", "mlflow", "wandb")},
    },
)
