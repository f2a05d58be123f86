"""``lightning.pytorch.loggers.csv_logs``: ``CSVLogger``, surge-csv's (``surge_csv.lightning``)."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_csv.lightning import CSVLogger

__all__ = ["CSVLogger"]

__getattr__, __dir__ = served(__name__, {"CSVLogger": "surge_csv.lightning"})
