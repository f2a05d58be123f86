"""surge-swa: averages of the weights, built on ``torch.optim.swa_utils``.

Two plugins, one distribution, both on request:

* ``swa`` (``Trainer(plugins=["swa"])`` or ``Trainer(stochastic_weight_avg=True)``): stochastic weight
  averaging with Lightning's ``StochasticWeightAveraging`` settings. From ``swa_epoch_start`` the ``SWALR``
  schedule sets the learning rate, the average is updated at the end of every training epoch, and when
  ``fit`` ends the averaged weights replace the Module's and batch-norm statistics are recomputed;
* ``ema`` (``Trainer(plugins=["ema"])``): an exponential moving average of the weights, updated after
  optimizer steps, used for validation and test by default.

Both keep their whole state in every checkpoint, so a resumed run averages exactly as an uninterrupted one.
Written against Surge's public API only.
"""

from __future__ import annotations

import surge

from surge_swa._ema import EMAConfig, ExponentialMovingAverage
from surge_swa._swa import StochasticWeightAveraging, SWAConfig

__all__ = [
    "EMAConfig",
    "ExponentialMovingAverage",
    "SWAConfig",
    "StochasticWeightAveraging",
    "ema_plugin",
    "swa_plugin",
]

swa_plugin = surge.Plugin(
    name="swa",
    kind="participant",
    factory=StochasticWeightAveraging,
    default=False,
    description="stochastic weight averaging: SWALR schedule, one average per epoch, averaged weights at fit end",
    switches={"stochastic_weight_avg": lambda value: {} if value else None},
)

ema_plugin = surge.Plugin(
    name="ema",
    kind="participant",
    factory=ExponentialMovingAverage,
    default=False,
    description="exponential moving average of the weights, updated after optimizer steps, used for validation",
)
