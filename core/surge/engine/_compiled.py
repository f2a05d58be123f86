"""``trainer.fit(torch.compile(model))``, which Lightning accepts: the Trainer runs ``model`` itself (its
parameters, state dict keys and hooks are those of the user's Module, with no ``_orig_mod.`` prefix) and the
``compile`` plugin (``pip install surge-compile``) compiles ``model.forward`` with the wrapper's own settings.

The core imports neither the plugin nor ``torch._dynamo``: a wrapper can only exist once torch imported
``torch._dynamo.eval_frame``, so that module is looked up, not imported."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from surge.errors import SurgeError
from surge.events.bus import Subscriber, Tier

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer

PLUGIN = "compile"


def unwrap_compiled(trainer: Trainer, stage: str, model: Any) -> tuple[Any, list[Subscriber]]:
    """``(model, [])`` for anything but a ``torch.compile`` wrapper (``OptimizedModule``). For a wrapper: the
    module inside it, and the subscribers this run adds, which are the ``compile`` plugin when this Trainer
    does not have it active; the plugin's ``adopt(wrapper)`` then makes the run compile with the wrapper's
    settings. Without the plugin, a :class:`SurgeError` before anything runs."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None or not isinstance(model, eval_frame.OptimizedModule):
        return model, []
    inner = model._orig_mod
    active = next((s for s in trainer._plugin_subscribers if s.name == PLUGIN), None)
    added: list[Subscriber] = []
    if active is None:
        record = trainer.catalog.records.get(PLUGIN)
        if record is None or record.plugin is None:
            why = f" ({record.describe()} is {record.status}: {record.reason})" if record is not None else ""
            raise SurgeError(
                f"trainer.{stage}() got torch.compile({type(inner).__name__}); Surge runs the module itself and "
                f"compiles its forward with the '{PLUGIN}' plugin, which is not available{why}. `pip install "
                f"surge-compile` adds it; or pass the module without torch.compile"
            )
        active = Subscriber(record.name, record.plugin.build(), Tier.PARTICIPANT, record.distribution, record.version)
        record.status = "active"
        added.append(active)
    active.obj.adopt(model)  # type: ignore[attr-defined]
    return inner, added
