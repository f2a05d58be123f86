"""The optional members a plugin object may have beyond its handlers, as typed protocols, checked when it joins
a run: a member that is present but malformed is refused then, naming the plugin and the member, where it
would otherwise fail (or be ignored) in the middle of a run.

========================  ==========================================================================================
``surge_name: str``       the plugin's name on the bus (ordering constraints, messages); default: the class name
``surge_kind: str``       ``"participant"`` (default) or ``"observer"`` (runs after the user's Module: loggers)
:class:`CallbackRole`     ``surge_callback_role``: the role an object passed in fills (one of :data:`ROLES`)
:class:`Stateful`         ``state_dict()`` and ``load_state_dict(state)`` together; checkpointed under ``state_key``
``state_key_aliases``     other keys its state may sit under in a converted checkpoint (a tuple of strings)
``__surge_subscriber__``  an object passed in names what joins the bus for it (its adapter; docs/plugins.md)
:class:`UnusedHooks`      ``surge_unused_hooks``: event names whose handlers this run does not need (no dispatch)
:class:`HandlerTimer`     a profiler's ``handler_timer(event, name, start, end)``: every handler call is timed
:class:`Configurable`     a provider's ``configure(settings)``: its plugin's validated settings (``config=``)
========================  ==========================================================================================

What the core calls on the objects of some roles and provider slots, checked when the plugin is declared (a class
given as the factory) and again when its object is built, naming the missing member:

========================  ==========================================================================================
:class:`CheckpointIO`     the ``checkpoint_io`` slot: ``save_checkpoint``, ``load_checkpoint``, ``remove_checkpoint``
:class:`Tuner`            the ``tuner`` slot: ``tune(trainer, model, ...)``, what ``Trainer.tune`` returns
:class:`Compiler`         the ``compiler`` role: ``adopt(wrapper)`` for ``trainer.fit(torch.compile(model))``
========================  ==========================================================================================
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ROLES",
    "CallbackRole",
    "CheckpointIO",
    "Compiler",
    "Configurable",
    "HandlerTimer",
    "Stateful",
    "Tuner",
    "UnusedHooks",
    "missing_members",
    "problems",
    "role_problem",
]

ROLES = ("logger", "progress", "checkpoint", "model_summary", "early_stopping", "compiler")
"""The parts a plugin can play (``surge.Plugin(role=...)``, an object's ``surge_callback_role``). The Trainer's
switches act on the first four (``logger=``, ``enable_progress_bar``, ``enable_checkpointing``,
``enable_model_summary``); ``trainer.checkpoint_callbacks`` and ``trainer.early_stopping_callbacks`` list the
objects in theirs; the core hands ``trainer.fit(torch.compile(model))``'s wrapper to the ``compiler``. An object
passed in ``callbacks=``/``plugins=`` that fills a role replaces the default plugins of that role for the run."""


@runtime_checkable
class Stateful(Protocol):
    """A plugin whose state is checkpointed: ``state_dict()`` is saved under the plugin's ``state_key`` (its
    name unless it sets one) and handed back to ``load_state_dict`` when a run resumes."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class UnusedHooks(Protocol):
    """``surge_unused_hooks``, read once when a run's bus is built: handlers of these events are left out of
    the run (their settings make them pointless), so the event costs the plugin nothing."""

    surge_unused_hooks: Collection[str]


class HandlerTimer(Protocol):
    """A profiler's timer, called after every handler call of a run with ``time.perf_counter()`` taken just
    before and after it."""

    def handler_timer(self, event: str, name: str, start: float, end: float) -> None: ...


class Configurable(Protocol):
    """A provider object (accelerator, strategy, precision) of a plugin that declares a settings model
    (``surge.Plugin(config=...)``): it gets the validated settings, defaults included, right after it is built,
    from ``plugins={name: {...}}`` in any of its layers (run config, ``SURGE_TRAINER_PLUGINS``, command line)."""

    def configure(self, settings: Any) -> None: ...


class CallbackRole(Protocol):
    """An object passed in ``callbacks=``/``plugins=`` that fills a role (one of :data:`ROLES`): the default
    plugins of that role (``surge.Plugin(role=..., default=True)``) stand aside for the run, unless the run names
    them (``plugins=["checkpoint"]``), and the Trainer's accessor of the role lists it
    (``trainer.checkpoint_callbacks`` for ``"checkpoint"``). Several objects may fill one role: all of them run."""

    surge_callback_role: str


class CheckpointIO(Protocol):
    """The ``checkpoint_io`` provider: how checkpoint files reach storage and come back, Lightning's
    ``CheckpointIO`` shape. The strategy calls it (``save_checkpoint`` and ``remove_checkpoint`` on global rank
    zero, ``load_checkpoint`` on every process), so do the checkpoint plugin's background writer and its top-k
    removals. ``surge.checkpoint.FileCheckpointIO`` (crash-safe files with a commit marker, any fsspec URL) is
    the default. ``trusted``: the caller allows unpickling code (``fit(..., trusted=True)``); without it a
    reader must refuse anything ``torch.load(weights_only=True)`` refuses."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None: ...

    def load_checkpoint(self, path: str, *, trusted: bool = False) -> dict[str, Any]: ...

    def remove_checkpoint(self, path: str) -> None: ...


class Tuner(Protocol):
    """The ``tuner`` provider: ``Trainer.tune(model, ...)`` is ``tuner.tune(trainer, model, train_dataloaders=...,
    val_dataloaders=..., datamodule=..., **options)``, ``options`` being ``Trainer.tune``'s other keyword
    arguments (Lightning's ``lr_find_kwargs``, ``scale_batch_size_kwargs``); what it returns is what
    ``Trainer.tune`` returns. The tuner owns its settings (its plugin's ``config`` and ``switches``)."""

    def tune(
        self,
        trainer: Any,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        **options: Any,
    ) -> dict[str, Any]: ...


class Compiler(Protocol):
    """The object of the plugin with ``role="compiler"``: for ``trainer.fit(torch.compile(model))`` the core runs
    ``model`` itself and calls ``adopt(wrapper)`` with the ``torch.compile`` wrapper before the run, so that the
    run compiles with the wrapper's settings."""

    def adopt(self, compiled: Any) -> None: ...


_MEMBERS: Mapping[type, Mapping[str, tuple[tuple[Any, ...], dict[str, Any], str]]] = {
    CheckpointIO: {
        "save_checkpoint": (({}, "path"), {}, "save_checkpoint(checkpoint, path, storage_options=None)"),
        "load_checkpoint": (("path",), {"trusted": False}, "load_checkpoint(path, *, trusted=False)"),
        "remove_checkpoint": (("path",), {}, "remove_checkpoint(path)"),
    },
    Tuner: {
        "tune": (
            ("trainer", "model"),
            {"train_dataloaders": None, "val_dataloaders": None, "datamodule": None},
            "tune(trainer, model, train_dataloaders=None, val_dataloaders=None, datamodule=None, **options)",
        )
    },
    Compiler: {"adopt": (("wrapper",), {}, "adopt(compiled)")},
}
"""Per protocol, each method with the arguments the core passes it and the signature to name in errors."""


def missing_members(obj: object, protocol: type) -> list[str]:
    """The methods of ``protocol`` (:class:`CheckpointIO`, :class:`Tuner`, :class:`Compiler`) that ``obj`` (an
    object, or a class: its methods unbound) lacks or cannot be called the way the core calls them, each as
    ``name(signature)``."""
    missing = []
    for name, (args, kwargs, signature) in _MEMBERS[protocol].items():
        member = getattr(obj, name, None)
        if isinstance(obj, type) and inspect.isfunction(member):
            args = (None, *args)  # a class's plain method: called on an instance
        if not callable(member) or not _binds(member, args, kwargs):
            missing.append(signature)
    return missing


def role_problem(obj: object, what: str) -> str | None:
    """What is wrong with ``obj``'s ``surge_callback_role`` (:class:`CallbackRole`), naming ``what``; ``None``
    when it has none or a valid one."""
    role = getattr(obj, "surge_callback_role", None)
    if role is None or (isinstance(role, str) and role in ROLES):
        return None
    close = difflib.get_close_matches(str(role), ROLES, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"{what}: surge_callback_role must be one of {list(ROLES)} (surge.events.protocols.CallbackRole); got "
        f"{role!r}. {hint}Leave it out (or None) for an object that fills no role"
    )


_KINDS = ("participant", "observer")


def problems(obj: object, what: str, events: Iterable[str]) -> list[str]:
    """What is malformed in ``obj``'s optional members, each naming ``what`` (the plugin) and the member."""
    found: list[str] = []
    name = getattr(obj, "surge_name", None)
    if name is not None and (not isinstance(name, str) or not name):
        found.append(f"{what}: surge_name must be a non-empty string; got {name!r}")
    kind = getattr(obj, "surge_kind", None)
    if kind is not None and kind not in _KINDS:
        found.append(f"{what}: surge_kind must be one of {list(_KINDS)}; got {kind!r}")
    saves, loads = callable(getattr(obj, "state_dict", None)), callable(getattr(obj, "load_state_dict", None))
    if saves != loads:
        missing = "load_state_dict(state)" if saves else "state_dict()"
        found.append(
            f"{what}: has {'state_dict' if saves else 'load_state_dict'} but not {missing}; a stateful plugin needs "
            "both (surge.events.protocols.Stateful), or its state is saved and never restored"
        )
    role = role_problem(obj, what)
    if role is not None:
        found.append(role)
    key = getattr(obj, "state_key", None)
    if key is not None and (not isinstance(key, str) or not key):
        found.append(f"{what}: state_key must be a non-empty string; got {key!r}")
    unused = getattr(obj, "surge_unused_hooks", None)
    if unused is not None:
        if isinstance(unused, (str, bytes)) or not isinstance(unused, Iterable):
            found.append(f"{what}: surge_unused_hooks must be a collection of event names; got {unused!r}")
        else:
            # a name that is no event of this run is fine for a handler the object has (an optional handler of
            # an event whose plugin is not installed); anything else is a typo
            known = set(events)
            unknown = sorted(str(n) for n in unused if n not in known and not callable(getattr(obj, str(n), None)))
            if unknown:
                found.append(
                    f"{what}: surge_unused_hooks names {unknown}, which are neither events of this run nor handlers "
                    "it has"
                )
    timer = getattr(obj, "handler_timer", None)
    if timer is not None and not _takes(timer, 4):
        found.append(
            f"{what}: handler_timer must be a method taking (event, name, start, end) "
            f"(surge.events.protocols.HandlerTimer); got {timer!r}"
        )
    return found


def _takes(fn: object, count: int) -> bool:
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(*range(count))
    except (TypeError, ValueError):
        return False
    return True


def _binds(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): trust it
        return True
    return True
