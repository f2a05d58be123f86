"""surge-mlflow: log Surge runs to MLflow.

The ``mlflow`` plugin is off by default. ``Trainer(logger="mlflow")`` (or ``logger=["csv", "mlflow"]``)
switches it on; ``plugins={"mlflow": {...}}`` configures it. Without a ``tracking_uri`` it writes to an
embedded SQLite store in ``<default_root_dir>/mlflow.db``, so it needs no server.

Importing this package does not import MLflow (that happens when a run starts on global rank zero):
plugin discovery imports it in every ``Trainer()``.
"""

from __future__ import annotations

import surge

from surge_mlflow._logger import MLflowConfig, MLflowLogger, TrackingStoreError

__all__ = ["MLflowConfig", "MLflowLogger", "TrackingStoreError", "plugin"]

plugin = surge.Plugin(
    name="mlflow",
    kind="observer",
    factory=MLflowLogger,
    default=False,
    role="logger",
    description="MLflow: params, metrics, run status and checkpoints (embedded SQLite store by default)",
)
