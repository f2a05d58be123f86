"""surge-tuner: ``Trainer.tune()`` for Surge - a learning-rate finder and a batch-size finder.

``Trainer(auto_lr_find=True, auto_scale_batch_size="binsearch").tune(model, datamodule=dm)`` finds through the
``tuner`` provider of this distribution (:class:`TrainerTuning`; the plugin serves those two Trainer arguments,
and takes them as settings too: ``plugins={"tuner": {"auto_lr_find": True}}``); ``Tuner(trainer).lr_find(...)`` / ``.scale_batch_size(...)`` are the
same finders called directly. Both run short trial fits in a separate Trainer and leave the model, its
optimizers and the user's Trainer as they were, but for the hyper-parameter they set.

Written against Surge's public API only (``surge``, ``surge.events``, ``surge.hookimpl``).
"""

from __future__ import annotations

import surge

from surge_tuner._batch_size import ScaleBatchSizeSettings, is_oom_error
from surge_tuner._lr_find import LRFinder, LRFindSettings
from surge_tuner._tune import SWITCHES, TrainerTuning, TuneConfig
from surge_tuner._tuner import Tuner

__all__ = [
    "LRFindSettings",
    "LRFinder",
    "ScaleBatchSizeSettings",
    "TrainerTuning",
    "TuneConfig",
    "Tuner",
    "is_oom_error",
    "plugin",
]

plugin = surge.Plugin(
    name="tuner",
    kind="provider",
    provides={"tuner": {"tuner": TrainerTuning}},
    config=TuneConfig,
    switches=SWITCHES,
    description="Trainer.tune(): learning-rate finder (auto_lr_find) and batch-size finder (auto_scale_batch_size)",
)
