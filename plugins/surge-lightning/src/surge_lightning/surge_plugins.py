"""The ``surge.Plugin`` declarations of surge-lightning (its ``surge.plugins`` entry points), built on the public
plugin contract only (docs/plugins.md, "Adapting another API"):

* ``lightning``: the adapter that puts an object with Lightning's callback hooks on the bus (a ``Callback``
  subclass or a ``Logger`` needs none: each names its subscriber with ``__surge_subscriber__``), the translator of
  Lightning 1.x Trainer arguments, and, when one of those asks for it, the object serving ``resume_from_checkpoint``
  and ``truncated_bptt_steps`` (:class:`~surge_lightning._v1.LightningV1`).
* ``epoch_end_outputs``: Lightning 1.x's ``*_epoch_end(outputs)`` Module hooks, in the runs whose Module defines
  one (:class:`~surge_lightning._epoch_end.EpochEndOutputs`).

Lightning checkpoint import is this distribution's ``surge.checkpoint_formats`` entry point
(:data:`surge_lightning.checkpoint.FORMAT`), which ``surge.checkpoint.load`` asks without a Trainer.
"""

from __future__ import annotations

import surge

from surge_lightning import _callbacks, _epoch_end, _v1

__all__ = ["epoch_end_outputs_plugin", "lightning_plugin"]

lightning_plugin = surge.Plugin(
    name="lightning",
    kind="participant",
    factory=_v1.LightningV1,
    description="Lightning's callbacks and loggers on the bus, Lightning 1.x Trainer arguments",
    adapter=_callbacks.adapt,
    translates=_v1.TRANSLATES,
    translate=_v1.translate,
)

epoch_end_outputs_plugin = surge.Plugin(
    name="epoch_end_outputs",
    kind="participant",
    factory=_epoch_end.EpochEndOutputs,
    description="Lightning 1.x's training_epoch_end/validation_epoch_end/test_epoch_end(outputs) Module hooks",
    module_hooks=_epoch_end.MODULE_HOOKS,
)
