"""The optional members a plugin object may have beyond its handlers, as typed protocols, checked when it joins
a run: a member that is present but malformed is refused then, naming the plugin and the member, where it
would otherwise fail (or be ignored) in the middle of a run.

========================  ==========================================================================================
``surge_name: str``       the plugin's name on the bus (ordering constraints, messages); default: the class name
``surge_kind: str``       ``"participant"`` (default) or ``"observer"`` (runs after the user's Module: loggers)
:class:`Stateful`         ``state_dict()`` and ``load_state_dict(state)`` together; checkpointed under ``state_key``
:class:`UnusedHooks`      ``surge_unused_hooks``: event names whose handlers this run does not need (no dispatch)
:class:`HandlerTimer`     a profiler's ``handler_timer(event, name, start, end)``: every handler call is timed
:class:`Configurable`     a provider's ``configure(settings)``: its plugin's validated settings (``config=``)
========================  ==========================================================================================
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable
from typing import Any, Protocol, runtime_checkable

__all__ = ["Configurable", "HandlerTimer", "Stateful", "UnusedHooks", "problems"]


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
