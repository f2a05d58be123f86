"""The event bus: pluggy registers and validates, Surge orders and dispatches.

A Trainer builds its bus once: the plugins are registered and checked, and each event's order is resolved,
with a place named ``module`` where the Module's hooks will run. Ordering: tier (providers, participants, the
user's Module, observers), then ``tryfirst``/``trylast`` within the tier, then registration order, then the
named ``before=``/``after=`` constraints applied as a stable topological sort. Each run then binds its Module
(:meth:`Bus.bind`): every event gets either ``None`` (nobody subscribed: the loop builds no payload and makes
no call) or a dispatcher holding its handlers in that order.

Instrumentation: a bus built with a :class:`Timing` (``SURGE_TRACE_PLUGINS=1``, or a profiler with a
``handler_timer``) wraps every handler once, at start-up, in a timing call; without one, the dispatchers
are the plain ones and the hot path has no clock and no extra call.
"""

from __future__ import annotations

import difflib
import heapq
import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import pluggy

from surge._logging import logger
from surge.errors import PluginError, PluginOrderError, SurgeError
from surge.events import EVENTS, QUERIES, Event, Query, protocols, specs
from surge.events.hooks import PROJECT, Filter, Ordering


class Tier(IntEnum):
    """Where a subscriber's handlers run relative to others'."""

    PROVIDER = 0
    PARTICIPANT = 1
    MODULE = 2
    OBSERVER = 3


@dataclass(frozen=True)
class Subscriber:
    """One object registered on the bus, with what an error message needs to name it."""

    name: str
    obj: object
    tier: Tier
    distribution: str | None = None
    version: str | None = None
    api: frozenset[str] = frozenset()
    """Method names that are the object's API, not handlers (a provider's ``teardown``): never taken for an
    unmarked handler."""

    def describe(self) -> str:
        if self.tier is Tier.MODULE:
            owner = getattr(self.obj, "owner", type(self.obj))
            return f"the Module's hook ({owner.__module__}.{owner.__qualname__})"
        if self.distribution:
            return f"plugin '{self.name}' (distribution {self.distribution} {self.version or '?'})"
        # an adapter standing on the bus for the user's object (a Lightning callback) names it in __wrapped__
        cls = type(getattr(self.obj, "__wrapped__", self.obj))
        return f"plugin '{self.name}' ({cls.__module__}.{cls.__qualname__})"


class _ModuleSlot:
    """The Module's place in the order of a bus built before any Module is known."""

    owner = type("Module", (), {})  # named in messages about an unbound slot


_MODULE_SLOT = Subscriber("module", _ModuleSlot(), Tier.MODULE)

# Events whose every handler must run even when one of them raises.
_RUN_ALL = frozenset({"exception", "keyboard_interrupt", "teardown"})
_Call = Callable[[Event], Any]


def blame(exc: BaseException, subscriber: Subscriber, event_name: str) -> None:
    """Attach to ``exc`` a note naming the plugin, its distribution and version, and the event."""
    if getattr(exc, "__surge_blamed__", False):
        return
    exc.__surge_blamed__ = True  # type: ignore[attr-defined]
    exc.add_note(f"surge: raised by {subscriber.describe()} while handling event '{event_name}'")


class _Dispatch:
    __slots__ = ("event", "calls")

    def __init__(self, event: str, calls: Sequence[tuple[_Call, Subscriber]]) -> None:
        self.event = event
        self.calls = tuple(calls)

    def __call__(self, event: Event) -> None:
        for fn, subscriber in self.calls:
            try:
                fn(event)
            except Exception as exc:
                blame(exc, subscriber, self.event)
                raise


class _DispatchAll(_Dispatch):
    """Runs every handler; logs each failure and re-raises the first one at the end. ``failed(event)``, when
    given, runs right after a handler fails, before the next handler (the Trainer marks the run failed then, so
    loggers closing later in ``teardown`` record it)."""

    __slots__ = ("failed",)

    def __init__(
        self, event: str, calls: Sequence[tuple[_Call, Subscriber]], failed: Callable[[str], None] | None
    ) -> None:
        super().__init__(event, calls)
        self.failed = failed

    def __call__(self, event: Event) -> None:
        first: Exception | None = None
        for fn, subscriber in self.calls:
            try:
                fn(event)
            except Exception as exc:
                blame(exc, subscriber, self.event)
                logger.opt(exception=exc).error(
                    "{} failed while handling '{}'; the other handlers still run", subscriber.describe(), self.event
                )
                if self.failed is not None:
                    self.failed(self.event)
                first = first or exc
        if first is not None:
            raise first


HandlerTimer = Callable[[str, str, float, float], None]
"""``timer(event_name, subscriber_name, start, end)``: called after every handler call of a timed bus, with
``time.perf_counter()`` taken just before and just after the call (also when the handler raised)."""


@dataclass(frozen=True)
class Timing:
    """How a bus times its handlers: the one instrumentation point of the dispatch.

    ``log``: a trace line per dispatch with each handler and its time (``SURGE_TRACE_PLUGINS=1``);
    ``timer``: receives every handler call's times (a profiler's ``handler_timer``, see docs/plugins.md,
    "Profilers"). A bus built without a ``Timing`` has plain dispatchers: no wrapper, no clock, no branch.
    """

    log: bool = False
    timer: HandlerTimer | None = None


def timing(log: bool, timer: HandlerTimer | None) -> Timing | None:
    """The ``Timing`` for a trace flag and a profiler's timer; ``None`` when neither asks for one."""
    return Timing(log, timer) if log or timer is not None else None


class _TimedDispatch(_Dispatch):
    """Calls each handler through :func:`_timed`, wrapped once when the bus is built.

    ``calls`` keeps the handlers themselves (as a plain dispatcher holds them); ``inner`` is a plain
    dispatcher of the same kind (stop at the first error, or run all) over the wrapped ones.
    """

    __slots__ = ("inner", "log", "timings")

    def __init__(self, inner: _Dispatch, spec: Timing) -> None:
        super().__init__(inner.event, inner.calls)
        self.log = spec.log
        self.timings: list[str] = []
        timer = spec.timer
        if spec.log:
            timer = self._note if timer is None else _both(self._note, timer)
        assert timer is not None
        wrapped = [(_timed(fn, inner.event, subscriber.name, timer), subscriber) for fn, subscriber in inner.calls]
        self.inner = (
            _DispatchAll(inner.event, wrapped, inner.failed)
            if isinstance(inner, _DispatchAll)
            else _Dispatch(inner.event, wrapped)
        )

    def __call__(self, event: Event) -> None:
        if not self.log:
            self.inner(event)
            return
        mark = len(self.timings)  # a handler may dispatch this event again: each call logs its own handlers
        try:
            self.inner(event)
        finally:
            timings = self.timings[mark:]
            del self.timings[mark:]
        # bound as a trace record: shown whatever SURGE_LOG_LEVEL is, since tracing was asked for explicitly
        logger.bind(surge_trace=True).info("surge trace: {} -> {}", self.event, ", ".join(timings) or "(no handler)")

    def _note(self, event: str, name: str, start: float, end: float) -> None:
        self.timings.append(f"{name} {1e6 * (end - start):.1f}us")


def _both(first: HandlerTimer, second: HandlerTimer) -> HandlerTimer:
    def timer(event: str, name: str, start: float, end: float) -> None:
        first(event, name, start, end)
        second(event, name, start, end)

    return timer


def _timed(fn: _Call, event_name: str, name: str, timer: HandlerTimer) -> _Call:
    clock = time.perf_counter

    def call(event: Event) -> Any:
        start = clock()
        try:
            return fn(event)
        finally:
            timer(event_name, name, start, clock())

    return call


class Bus:
    """Holds one attribute per event: ``None`` or a callable taking the event payload."""

    __slots__ = (
        *EVENTS,
        "_subscribers",
        "_plan",
        "_order",
        "_manager",
        "_dispatchers",
        "_answerers",
        "_timing",
        "_failed",
    )
    if TYPE_CHECKING:  # one attribute per core event, set in bind(), typed for the loops (a test keeps it == EVENTS)
        init_start: _Dispatch | None
        init_end: _Dispatch | None
        setup: _Dispatch | None
        fit_start: _Dispatch | None
        sanity_check_start: _Dispatch | None
        sanity_check_end: _Dispatch | None
        train_start: _Dispatch | None
        train_epoch_start: _Dispatch | None
        train_batch_start: _Dispatch | None
        before_backward: _Dispatch | None
        after_backward: _Dispatch | None
        before_optimizer_step: _Dispatch | None
        after_optimizer_step: _Dispatch | None
        before_zero_grad: _Dispatch | None
        after_zero_grad: _Dispatch | None
        train_batch_end: _Dispatch | None
        train_epoch_end: _Dispatch | None
        train_end: _Dispatch | None
        validation_start: _Dispatch | None
        validation_epoch_start: _Dispatch | None
        validation_batch_start: _Dispatch | None
        validation_batch_end: _Dispatch | None
        validation_epoch_end: _Dispatch | None
        validation_end: _Dispatch | None
        test_start: _Dispatch | None
        test_epoch_start: _Dispatch | None
        test_batch_start: _Dispatch | None
        test_batch_end: _Dispatch | None
        test_epoch_end: _Dispatch | None
        test_end: _Dispatch | None
        predict_start: _Dispatch | None
        predict_epoch_start: _Dispatch | None
        predict_batch_start: _Dispatch | None
        predict_batch_end: _Dispatch | None
        predict_epoch_end: _Dispatch | None
        predict_end: _Dispatch | None
        before_checkpoint_save: _Dispatch | None
        after_checkpoint_save: _Dispatch | None
        before_checkpoint_load: _Dispatch | None
        after_checkpoint_load: _Dispatch | None
        log_hyperparams: _Dispatch | None
        log_metrics: _Dispatch | None
        fit_end: _Dispatch | None
        exception: _Dispatch | None
        keyboard_interrupt: _Dispatch | None
        teardown: _Dispatch | None

    def __init__(
        self,
        subscribers: Iterable[Subscriber],
        known_names: Iterable[str] = (),
        trace: bool | Timing | None = False,
        failed: Callable[[str], None] | None = None,
        events: Sequence[type[Event]] = (),
        module_slot: bool = False,
    ) -> None:
        """Register and check ``subscribers`` and resolve each event's order, once; then :meth:`bind`.

        ``trace``: ``True`` for ``SURGE_TRACE_PLUGINS`` (a log line per dispatch), or a :class:`Timing` (a
        profiler's handler timer, with or without the log line); falsy: plain dispatchers. ``failed(event)``:
        called when a handler of an event whose handlers all run (``teardown``, ``exception``) fails. ``events``:
        the events the run's plugins declare (``surge.Plugin(events=...)``), dispatched like the core's.
        ``module_slot``: the order holds a place named ``module`` (tier MODULE) in every core event, where the
        hooks of the Module a run binds are called; ``before=``/``after=`` constraints naming it are resolved now.
        """
        self._timing = Timing(log=True) if trace is True else trace if isinstance(trace, Timing) else None
        self._failed = failed
        self._subscribers = list(subscribers)
        declared = {**EVENTS, **{cls.name: cls for cls in events}}
        self._manager = _register(self._subscribers, declared)
        by_plugin = {id(s.obj): s for s in self._subscribers}
        position = {s.name: i for i, s in enumerate(self._subscribers)}
        slot = _MODULE_SLOT if module_slot else None
        known = set(known_names) | set(position) | ({slot.name} if slot else set())
        self._plan: dict[str, list[tuple[pluggy.HookImpl | None, Subscriber]]] = {}
        for name in [*declared, *QUERIES]:
            impls = getattr(self._manager.hook, name).get_hookimpls()
            entries: list[tuple[pluggy.HookImpl | None, Subscriber]] = [
                (impl, by_plugin[id(impl.plugin)]) for impl in impls
            ]
            if slot is not None and name in EVENTS:
                entries.append((None, slot))
            entries.sort(key=lambda e: (e[1].tier, _try_rank(e[0]), position.get(e[1].name, len(position))))
            self._plan[name] = _apply_constraints(name, entries, known)
        self._order: dict[str, list[str]] = {}
        self._dispatchers: dict[str, _Dispatch | None] = {}
        self._answerers: dict[str, list[tuple[_Call, Subscriber]]] = {}
        self.bind(None)

    def bind(self, module_hooks: object | None) -> None:
        """Build the dispatchers for a run whose Module's hooks are ``module_hooks`` (an object with a handler
        ``_<event>`` per event the Module defines; ``None``: no Module, as in ``Trainer(...)``).

        What a subscriber decides per run is read here: the handlers its ``surge_unused_hooks`` switches off,
        the n of its filters (whose counts start afresh). The order was resolved when the bus was built.
        """
        module = Subscriber(_MODULE_SLOT.name, module_hooks, Tier.MODULE) if module_hooks is not None else None
        # A subscriber may switch off, for this run, handlers its settings make pointless: the event then
        # costs it nothing at all.
        unused = {id(s.obj): frozenset(getattr(s.obj, "surge_unused_hooks", ())) for s in self._subscribers}
        for name, entries in self._plan.items():
            calls: list[tuple[_Call, Subscriber]] = []
            order: list[str] = []
            for impl, sub in entries:
                if impl is None:  # the Module's place: its hook, if it defines one
                    order.append(sub.name)
                    handler = getattr(module_hooks, f"_{name}", None)
                    if module is not None and handler is not None:
                        calls.append((handler, module))
                    continue
                call = None if name in unused[id(impl.plugin)] else _caller(impl, sub)
                if call is not None:
                    calls.append((call, sub))
                    order.append(sub.name)
            self._order[name] = order
            if name in QUERIES:
                self._answerers[name] = calls
                continue
            dispatch: _Dispatch | None = None
            if calls:
                dispatch = _DispatchAll(name, calls, self._failed) if name in _RUN_ALL else _Dispatch(name, calls)
                if self._timing is not None:
                    dispatch = _TimedDispatch(dispatch, self._timing)
            self._dispatchers[name] = dispatch
            if name in EVENTS:  # the core's events are attributes too: the loops read them without a lookup
                setattr(self, name, dispatch)

    @property
    def subscribers(self) -> list[Subscriber]:
        return list(self._subscribers)

    def order(self, event: str) -> list[str]:
        """The names of the plugins handling ``event``, in the order they are called."""
        if event not in self._order:
            raise SurgeError(f"no event named {event!r}; events are: {', '.join(self._order)}")
        return list(self._order[event])

    def emit(self, event: Event) -> None:
        """Dispatch ``event`` if anyone listens. The loops use the attributes directly to skip building
        payloads nobody reads; this is for code off the hot path."""
        try:
            dispatch = self._dispatchers[event.name]
        except KeyError:
            raise SurgeError(
                f"event {event.name!r} ({type(event).__qualname__}) is declared by no installed plugin; a plugin "
                "declares the events it publishes in surge.Plugin(events=[...])"
            ) from None
        if dispatch is not None:
            dispatch(event)

    def dispatcher(self, event: type[Event]) -> _Dispatch | None:
        """The dispatcher of ``event`` (a payload class), ``None`` when nobody listens: for loops that build the
        payload only when someone reads it, as they do with the core events' attributes."""
        return self._dispatchers[event.name]

    def ask(self, query: Query) -> tuple[Any, Subscriber | None]:
        """The first answer to ``query`` that is not ``None``, in bus order, with the subscriber that gave it;
        ``(None, None)`` when none answers."""
        for call, subscriber in self._answerers[query.name]:
            try:
                answer = call(query)
            except Exception as exc:
                blame(exc, subscriber, query.name)
                raise
            if answer is not None:
                return answer, subscriber
        return None, None

    def resumed_at(self, global_step: int) -> None:
        """The run continues from a checkpoint written at ``global_step``: step filters (``every_n_steps``) count
        from there, so a step handled before the checkpoint (inside an accumulation window) is not handled again."""
        for dispatch in self._dispatchers.values():
            for call, _ in getattr(dispatch, "calls", ()):
                if isinstance(call, _Filtered):
                    call.last_step = global_step

    def declares(self, name: str) -> bool:
        """Whether ``name`` is an event of this run: the core's, or one an installed plugin declares."""
        return name in self._dispatchers


def _register(subscribers: list[Subscriber], declared: Mapping[str, type[Event]] = EVENTS) -> pluggy.PluginManager:
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(specs.CORE)
    extra = {name: cls for name, cls in declared.items() if name not in EVENTS}
    if extra:  # the plugins' events: specs built as the core's are (surge.events.specs.specs_of)
        manager.add_hookspecs(specs.specs_of(extra))
    unmarked = [line for sub in subscribers for line in _unmarked_handlers(sub, declared)]
    unmarked += [
        line
        for sub in subscribers
        if sub.tier is not Tier.MODULE
        for line in protocols.problems(sub.obj, sub.describe(), declared)
    ]
    if unmarked:
        raise PluginError("; ".join(unmarked))
    seen: dict[str, Subscriber] = {}
    for sub in subscribers:
        if sub.name in seen:
            raise PluginError(
                f"two active plugins are both named '{sub.name}': {seen[sub.name].describe()} and "
                f"{sub.describe()}. Give one of them another name (an instance's `surge_name` attribute)."
            )
        seen[sub.name] = sub
        try:
            manager.register(sub.obj, name=sub.name)
            for impl in manager.get_hookcallers(sub.obj) or []:
                for hook_impl in impl.get_hookimpls():
                    if hook_impl.plugin is sub.obj and (hook_impl.hookwrapper or hook_impl.wrapper):
                        raise PluginError(
                            f"{sub.describe()}: hook '{impl.name}' is declared as a wrapper, which Surge does "
                            "not support; use a plain @surge.hookimpl handler (pair *_start/*_end events "
                            "to wrap a scope)"
                        )
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"{sub.describe()} has an invalid hook: {exc}") from exc
    by_obj = {id(s.obj): s for s in subscribers}
    unknown = [
        f"{by_obj[id(impl.plugin)].describe()} has an unknown hook '{name}'{_did_you_mean(name)}"
        for name, caller in vars(manager.hook).items()
        if not name.startswith("_") and not caller.has_spec()
        for impl in caller.get_hookimpls()
        if not impl.optionalhook  # @surge.hookimpl(optional=True): another plugin's event, if that one runs
    ]
    if unknown:
        raise PluginError(
            "; ".join(unknown) + ". Hook names must be Surge event names (see surge.events.EVENTS) or events an "
            "installed plugin declares; a handler of another plugin's event that may not be installed is marked "
            "@surge.hookimpl(optional=True)"
        )
    manager.check_pending()  # nothing is left for it to find; kept as pluggy's own guard
    return manager


def _did_you_mean(name: str) -> str:
    if name.startswith("on_") and name[3:] in EVENTS:  # the Module's naming, used in a plugin
        return f"; did you mean '{name[3:]}'? (a plugin's handler is named after the event, without 'on_')"
    close = difflib.get_close_matches(name, list(EVENTS), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _unmarked_handlers(sub: Subscriber, declared: Mapping[str, type[Event]]) -> list[str]:
    """A plugin's public methods named like an event, or like the Module's ``on_<event>``, without the marker
    (the Module's own methods need none; a backend's API methods that share a name, ``teardown``, are not
    handlers)."""
    if sub.tier is Tier.MODULE:
        return []
    problems = []
    for event in [*declared, *QUERIES]:
        for attr in (event, f"on_{event}"):
            method = None if attr in sub.api else getattr(sub.obj, attr, None)
            if inspect.isroutine(method) and getattr(method, f"{PROJECT}_impl", None) is None:
                fix = "mark it" if attr == event else f"name it '{event}' (the on_ prefix is the Module's) and mark it"
                problems.append(
                    f"{sub.describe()}: method '{attr}' is named after the event '{event}' but is not marked "
                    f"@surge.hookimpl, so it is never called; {fix} @surge.hookimpl, or, if it is a helper, rename "
                    f"it (e.g. '_{attr}')"
                )
    return problems


def _try_rank(impl: pluggy.HookImpl | None) -> int:
    return 1 if impl is None else 0 if impl.tryfirst else 2 if impl.trylast else 1


def _caller(impl: pluggy.HookImpl, sub: Subscriber) -> _Call | None:
    """What the dispatcher calls for ``impl``: the function itself, or behind its filter; ``None`` when a filter
    reads its n from a plugin attribute that switches the handler off for this run (``None`` or ``0``)."""
    function = impl.function
    call: _Call = function if impl.argnames else (lambda event: function())
    filter_: Filter | None = getattr(function, "surge_filter", None)
    if filter_ is None:
        return call
    steps, epochs = (
        _resolve_n(impl, sub, n, name)
        for name, n in [("every_n_steps", filter_.every_n_steps), ("every_n_epochs", filter_.every_n_epochs)]
    )
    if steps == 0 or epochs == 0:
        return None
    return _Filtered(call, replace(filter_, every_n_steps=steps, every_n_epochs=epochs))


def _resolve_n(impl: pluggy.HookImpl, sub: Subscriber, n: int | str | None, name: str) -> int | None:
    if not isinstance(n, str):
        return n
    where = f"{sub.describe()}, handler '{impl.function.__name__}': @surge.hookimpl({name}={n!r})"
    if not hasattr(impl.plugin, n):
        raise PluginError(
            f"{where} reads n from the plugin's attribute {n!r}, which it does not have; fix the name, or give the "
            "plugin that attribute (None or 0: the handler is off for the run)"
        )
    value = getattr(impl.plugin, n)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PluginError(
            f"{where} reads n from the plugin's attribute {n!r}, which is {value!r}; it must be an int >= 0 "
            "(0 or None: never)"
        )
    return value


class _Filtered:
    """A handler behind its filter's conditions. Its state (the last step it ran at, whether it ran once) is
    this dispatcher's, so it starts afresh with each run's bus; :meth:`Bus.resumed_at` sets the last step of a
    run that continues from a checkpoint, so a step it handled before the checkpoint is not handled again."""

    __slots__ = ("call", "steps", "epochs", "when", "once", "last_step", "done")

    def __init__(self, call: _Call, filter_: Filter) -> None:
        assert not isinstance(filter_.every_n_steps, str) and not isinstance(filter_.every_n_epochs, str)
        self.call, self.when, self.once = call, filter_.when, filter_.once
        self.steps, self.epochs = filter_.every_n_steps, filter_.every_n_epochs
        self.last_step, self.done = 0, False

    def __call__(self, event: Event) -> Any:
        if self.done:
            return None
        steps = self.steps
        if steps is not None:
            step = event.trainer.global_step
            if step <= self.last_step or step % steps:
                return None
            self.last_step = step
        epochs = self.epochs
        if epochs is not None:
            epoch = getattr(event, "epoch", None)
            if ((event.trainer.current_epoch if epoch is None else epoch) + 1) % epochs:
                return None
        if self.when is not None and not self.when(event):
            return None
        self.done = self.once
        return self.call(event)


_warned: set[tuple[str, str]] = set()  # (plugin, name): a bus is built per run, the warning is given once


def _not_installed(event: str, sub: Subscriber, edge: str, other: str, required: bool, known: set[str]) -> None:
    """A constraint naming no installed plugin: ignored (it orders against that plugin only if present), an
    error when it was written as required (``"name!"``), and a warning when an installed name is close."""
    close = difflib.get_close_matches(other, sorted(known), n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    if required:
        raise PluginOrderError(
            f"{sub.describe()} must handle '{event}' {edge} '{other}' (required with '!'), but no plugin of that "
            f"name is installed; {guess}known plugins: {', '.join(sorted(known))}. Install it, fix the name, or "
            f"drop the '!' in its @surge.hookimpl({edge}=...) to order against it only when it is installed."
        )
    if close and (sub.name, other) not in _warned:
        _warned.add((sub.name, other))
        logger.warning(
            "{} orders its '{}' handler {} '{}', which is not installed, so the constraint is ignored; {}fix the "
            "name in its @surge.hookimpl({}=...)",
            sub.describe(),
            event,
            edge,
            other,
            guess,
            edge,
        )


def _apply_constraints(
    event: str, entries: list[tuple[pluggy.HookImpl | None, Subscriber]], known: set[str]
) -> list[tuple[pluggy.HookImpl | None, Subscriber]]:
    successors: list[set[int]] = [set() for _ in entries]
    constrained = False
    for i, (impl, sub) in enumerate(entries):
        ordering: Ordering | None = getattr(impl.function, "surge_ordering", None) if impl is not None else None
        if ordering is None:
            continue
        for other, edge in [(n, "after") for n in ordering.after] + [(n, "before") for n in ordering.before]:
            if other not in known:
                _not_installed(event, sub, edge, other, other in ordering.required, known)
                continue
            # A provider plugin's subscribers are named "<plugin>.<slot>"; its plain name orders against all.
            others = [j for j, (_, s) in enumerate(entries) if s.name == other or s.name.startswith(f"{other}.")]
            for j in (j for j in others if j != i):  # none: installed but inactive, or not handling this event
                constrained = True
                if edge == "after":
                    successors[j].add(i)
                else:
                    successors[i].add(j)
    if not constrained:
        return entries
    indegree = [0] * len(entries)
    for succ in successors:
        for j in succ:
            indegree[j] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    result: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        result.append(i)
        for j in successors[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(result) < len(entries):
        # What is left lies on or after a cycle; dropping what leads nowhere leaves the cycle itself.
        left = {i for i, d in enumerate(indegree) if d > 0}
        while dead_ends := {i for i in left if not successors[i] & left}:
            left -= dead_ends
        cycle = sorted(entries[i][1].name for i in left)
        raise PluginOrderError(
            f"the before=/after= constraints on event '{event}' form a cycle among plugins {cycle}; "
            "remove one of the constraints"
        )
    return [entries[i] for i in result]
