"""``lightning.pytorch.callbacks.stochastic_weight_avg``: ``StochasticWeightAveraging``, surge-swa's."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_swa import StochasticWeightAveraging

__all__ = ["StochasticWeightAveraging"]

__getattr__, __dir__ = served(__name__, {"StochasticWeightAveraging": "surge_swa"})
