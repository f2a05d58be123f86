"""``lightning.pytorch.callbacks.stochastic_weight_avg``: ``StochasticWeightAveraging``, surge-swa's."""

from surge_lightning._lazy import served

__all__ = ["StochasticWeightAveraging"]

__getattr__, __dir__ = served(__name__, {"StochasticWeightAveraging": "surge_swa"})
