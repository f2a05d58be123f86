"""``lightning.pytorch.callbacks``: :class:`Callback`, the base class of a Lightning callback, and the callbacks of the
first-party plugin distributions under Lightning's names, each read from its distribution when first used (an
``ImportError`` naming it when it is missing)."""

from surge_lightning._lazy import served
from surge_lightning.pytorch.callbacks.callback import Callback
from surge_lightning.pytorch.callbacks.prediction_writer import BasePredictionWriter

_MODULES = {
    "BaseFinetuning": "finetuning",
    "BackboneFinetuning": "finetuning",
    "EarlyStopping": "early_stopping",
    "ModelCheckpoint": "model_checkpoint",
    "LearningRateMonitor": "lr_monitor",
    "StochasticWeightAveraging": "stochastic_weight_avg",
    "Timer": "timer",
    "GradientAccumulationScheduler": "gradient_accumulation_scheduler",
    "DeviceStatsMonitor": "device_stats_monitor",
    "ModelSummary": "model_summary",
    "RichModelSummary": "rich_model_summary",
    "TQDMProgressBar": "progress",
    "RichProgressBar": "progress",
    "ProgressBar": "progress",
}
"""Each callback of a plugin distribution -> the module of this package (Lightning's) that serves it."""

__all__ = ["BasePredictionWriter", "Callback", *sorted(_MODULES)]

__getattr__, __dir__ = served(
    __name__,
    {
        **{name: f"{__name__}.{module}" for name, module in _MODULES.items()},
        **{module: f"{__name__}.{module}" for module in ("callback", *_MODULES.values())},
    },
)
