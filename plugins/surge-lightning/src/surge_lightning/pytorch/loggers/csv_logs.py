"""``lightning.pytorch.loggers.csv_logs``: ``CSVLogger``, surge-csv's (``surge_csv.lightning``)."""

from surge_lightning._lazy import served

__all__ = ["CSVLogger"]

__getattr__, __dir__ = served(__name__, {"CSVLogger": "surge_csv.lightning"})
