"""The hook specifications: Surge's public contract with plugins, derived from the event classes.

One hook per event, named after it and taking a single argument ``event``, an instance of its class from
:mod:`surge.events`; the class's docstring is the hook's (when it fires, then ``May change: ...``). Nothing is
written twice: :func:`specs_of` builds the specs of the core's events (:data:`CORE`) and of those a plugin
declares in its ``surge.Plugin(events=[...])`` alike. A hook's return value is ignored, except for the
questions (:data:`surge.events.QUERIES`): value-returning hooks (``firstresult``: the first answer that is not
``None`` is taken).

Implement a hook by defining a function or method of the same name marked with :func:`surge.hookimpl`::

    class Stopper:
        @surge.hookimpl
        def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
            if event.trainer.global_step >= 100:
                event.trainer.request_stop("enough")

Order of handlers: providers, then participants, then the user's Module, then observers (loggers,
progress); ``tryfirst``/``trylast`` move a handler within its tier; ``before=``/``after=`` name other
plugins (see :func:`surge.hookimpl`).

What else a plugin object may carry (``state_dict`` with ``load_state_dict`` and ``state_key``, ``surge_name``,
``surge_kind``, ``surge_unused_hooks``, a profiler's ``handler_timer``) is typed in :mod:`surge.events.protocols`
and checked when the object joins a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import pluggy

from surge.events import EVENTS, QUERIES, Event, Query

hookspec = pluggy.HookspecMarker("surge")


def spec(cls: type[Event]) -> Callable[[Event], Any]:
    """The pluggy hook spec of one event or question class: ``<name>(event)``, documented by the class."""

    def hook(event: Event) -> Any: ...

    hook.__name__ = hook.__qualname__ = cls.name
    hook.__module__ = __name__
    hook.__doc__ = cls.__doc__
    hook.__annotations__ = {"event": cls, "return": Any if issubclass(cls, Query) else None}
    return hookspec(firstresult=issubclass(cls, Query))(hook)


def specs_of(classes: Mapping[str, type[Event]]) -> ModuleType:
    """The specs of ``classes`` (hook name to class), as a namespace ``pluggy.PluginManager.add_hookspecs`` takes."""
    namespace = ModuleType(f"{__name__}.generated", "hook specs derived from event classes")
    for name, cls in classes.items():
        setattr(namespace, name, spec(cls))
    return namespace


CORE = specs_of({**EVENTS, **QUERIES})
"""The specs of the core's events and questions, one attribute each."""
