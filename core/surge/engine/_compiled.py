"""``trainer.fit(torch.compile(model))``, which Lightning accepts: the Trainer runs ``model`` itself (its
parameters, state dict keys and hooks are those of the user's Module, with no ``_orig_mod.`` prefix) and the
plugin in the ``compiler`` role (a plugin declaring ``role="compiler"``; the error without one says what to install) compiles
``model.forward`` with the wrapper's own settings, through its ``adopt(wrapper)``
(:class:`surge.events.protocols.Compiler`).

The core imports no plugin nor ``torch._dynamo``: a wrapper can only exist once torch imported
``torch._dynamo.eval_frame``, so that module is looked up, not imported."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

from surge.errors import PluginError, SurgeError
from surge.events.bus import Subscriber, Tier
from surge.events.protocols import Compiler, missing_members
from surge.plugins._first_party import install_hint

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer

ROLE = "compiler"


def unwrap_compiled(trainer: Trainer, stage: str, model: Any) -> tuple[Any, list[Subscriber]]:
    """``(model, [])`` for anything but a ``torch.compile`` wrapper (``OptimizedModule``). For a wrapper: the
    module inside it, and the subscribers this run adds: the ``compiler`` plugin when this Trainer has none
    active (the only one installed). Its ``adopt(wrapper)`` then makes the run compile with the wrapper's
    settings. Without a compiler, or with several to choose from, a :class:`SurgeError` before anything runs."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None or not isinstance(model, eval_frame.OptimizedModule):
        return model, []
    inner = model._orig_mod
    what = f"trainer.{stage}() got torch.compile({type(inner).__name__})"
    records = trainer.catalog.records
    role_of = {name: r.plugin.role for name, r in records.items() if r.plugin is not None}
    active = [
        s
        for s in trainer._plugin_subscribers
        if role_of.get(s.name) == ROLE or getattr(s.obj, "surge_callback_role", None) == ROLE
    ]
    added: list[Subscriber] = []
    if not active:
        candidates = [r for r in trainer.catalog.loaded() if role_of[r.name] == ROLE]
        if len(candidates) != 1:
            raise SurgeError(f"{what}; Surge runs the module itself and {_why_not(candidates)}")
        record = candidates[0]
        assert record.plugin is not None
        sub = Subscriber(record.name, record.plugin.build(), Tier.PARTICIPANT, record.distribution, record.version)
        record.status = "active"
        active = added = [sub]
    if len(active) > 1:
        raise SurgeError(
            f"{what}; several compilers are active ({', '.join(s.name for s in active)}): keep one in plugins="
        )
    compiler = active[0]
    missing = missing_members(compiler.obj, Compiler)
    if missing:
        raise PluginError(
            f"{compiler.describe()} fills the '{ROLE}' role but lacks {', '.join(missing)} "
            "(surge.events.protocols.Compiler), so it cannot take the torch.compile wrapper"
        )
    cast(Compiler, compiler.obj).adopt(model)
    return inner, added


def _why_not(candidates: list[Any]) -> str:
    if candidates:
        names = ", ".join(r.describe() for r in candidates)
        return f"compiles its forward with the '{ROLE}' plugin; several are installed ({names}): choose one with plugins=['<name>']"
    return (
        f"compiles its forward with a plugin in the '{ROLE}' role (surge.Plugin(role='{ROLE}')), and none is "
        f"loaded (`surge plugins` shows what is installed, and why a plugin is not loaded).{install_hint('compile')} "
        "Or pass the module without torch.compile"
    )
