"""The user's Module as a bus subscriber: its ``on_<event>`` methods become handlers."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from surge.engine.module import is_default_hook
from surge.errors import SurgeError
from surge.events import EVENTS, Event
from surge.events.hooks import hookimpl
from surge.events.run import RunView, trainer_of

# Lightning's names for events whose Surge name differs from "on_<event>".
_ALIASES = {
    "setup": ("setup",),
    "teardown": ("teardown",),
    "before_checkpoint_save": ("on_save_checkpoint",),
    "after_checkpoint_load": ("on_load_checkpoint",),
}
# The Module gets the Trainer itself (its own ``self.trainer``), not the view plugins get: as a parameter, and as
# the ``trainer`` of the event it takes whole.
_EXTRA_PARAMS: dict[str, Callable[[Event], Any]] = {
    "event": lambda e: e if type(e.trainer) is not RunView else dataclasses.replace(e, trainer=trainer_of(e.trainer)),
    "trainer": lambda e: trainer_of(e.trainer),
    "pl_module": lambda e: e.module,
    "module": lambda e: e.module,
}


class ModuleHooks:
    """Holds one handler per event the Module defines a method for."""

    surge_name = "module"

    def __init__(self, module: object) -> None:
        self.owner = type(module)
        fields: Mapping[tuple[str, str], Callable[[Event], Any]] = getattr(module, "_surge_event_fields", {})
        for event_name, event_cls in EVENTS.items():
            for method_name in (f"on_{event_name}", *_ALIASES.get(event_name, ())):
                method = getattr(module, method_name, None)
                if callable(method) and not is_default_hook(method):
                    adapted = _adapt(method, event_cls, type(module).__name__, fields)
                    handler = hookimpl(specname=event_name)(adapted)
                    setattr(self, f"_{event_name}", handler)
                    break


def _adapt(
    method: Callable[..., Any],
    event_cls: type[Event],
    owner: str,
    fields: Mapping[tuple[str, str], Callable[[Event], Any]],
) -> Callable[[Event], Any]:
    """A handler calling ``method`` with the event's fields its parameters name; ``fields`` replaces the getter of
    an ``(event, field)`` pair (the Module's class says what its API hands a hook, where Surge's event differs)."""
    field_names = {f.name for f in dataclasses.fields(event_cls)}
    getters: list[Callable[[Event], Any]] = []
    by_name: dict[str, Callable[[Event], Any]] = {}  # keyword-only, or after a parameter left to its default
    skipped = False
    for name, param in inspect.signature(method).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in _EXTRA_PARAMS:
            get = _EXTRA_PARAMS[name]
        elif name in field_names:
            get = fields.get((event_cls.name, name)) or _field_getter(name)
        elif param.default is not param.empty:
            skipped = True
            continue
        else:
            raise SurgeError(
                f"{owner}.{method.__name__} takes a parameter {name!r} that event '{event_cls.name}' does not "
                f"have; its fields are {sorted(field_names)} (or take `event` and read what you need)"
            )
        if skipped or param.kind is param.KEYWORD_ONLY:
            by_name[name] = get
        else:
            getters.append(get)
    if by_name:
        return lambda event: method(*[get(event) for get in getters], **{n: get(event) for n, get in by_name.items()})
    if not getters:
        return lambda event: method()
    if len(getters) == 1:
        get = getters[0]
        return lambda event: method(get(event))
    return lambda event: method(*[get(event) for get in getters])


def _field_getter(name: str) -> Callable[[Event], Any]:
    return lambda event: getattr(event, name)
