"""Plugin declarations and discovery through the ``surge.plugins`` entry-point group.

A distribution declares each plugin with an entry point whose object is a :class:`Plugin`::

    [project.entry-points."surge.plugins"]
    devices = "surge_devices:plugin"

Discovery is lazy (a Trainer or a CLI command asks for it, never ``import surge``), sorted by name,
de-duplicated; a name two distributions claim loads neither and says why. Blocking (``SURGE_PLUGINS``,
``SURGE_DISABLE_PLUGINS``, ``SURGE_DISABLE_PLUGIN_AUTOLOAD``, and a lab profile's rules, see
:mod:`surge.plugins.lab`) happens before anything is imported.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import canonicalize_name
from pydantic import BaseModel

from surge._logging import logger, route_stdlib
from surge.errors import LabError, PluginConflictError, PluginError
from surge.events import Event, event_problems
from surge.events.protocols import ROLES, CheckpointIO, Compiler, Tuner, missing_members
from surge.plugins import _pinned
from surge.plugins.signature import settings_model
from surge.settings import SurgeSettings

if TYPE_CHECKING:
    from surge.plugins.lab import Lab

__all__ = ["Plugin", "PluginRecord", "Catalog", "discover", "ENTRY_POINT_GROUP", "ROLES", "PROVIDER_SLOTS"]

ENTRY_POINT_GROUP = "surge.plugins"
Kind = Literal["provider", "participant", "observer"]
Status = Literal["active", "available", "blocked", "failed"]

PROVIDER_SLOTS = ("accelerator", "strategy", "precision", "checkpoint_io", "profiler", "tuner")
"""The kinds of provider: ``accelerator=``, ``strategy=``, ``precision=``, ``checkpoint_io=`` and ``profiler=`` choose
one by name; ``Trainer.tune`` uses the ``tuner`` (the one its plugin's switches or ``plugins=`` asked for)."""

SLOT_PROTOCOLS: Mapping[str, type] = {"checkpoint_io": CheckpointIO, "tuner": Tuner}
"""The protocol (:mod:`surge.events.protocols`) the objects of a slot follow; the others subclass the base classes
of :mod:`surge.plugins.backends` or, for profilers, only handle events."""

ROLE_PROTOCOLS: Mapping[str, type] = {"compiler": Compiler}
"""The protocol the object of a plugin in a role follows, where the core calls it."""

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")
_VALUE = re.compile(r"^[\w.]+\s*(:\s*[\w.]+\s*)?(\[.*\]\s*)?$")  # importlib.metadata's entry point syntax


@dataclass(frozen=True)
class Plugin:
    """What a ``surge.plugins`` entry point points to.

    * A **provider** offers named implementations chosen by a Trainer argument:
      ``provides={"accelerator": {"cpu": CPUAccelerator}}`` makes ``Trainer(accelerator="cpu")`` work.
    * A **participant** (or an **observer**, which runs after the user's Module: loggers, progress)
      subscribes to events. ``factory(**settings)`` builds the object whose ``@surge.hookimpl`` methods
      are registered; ``config`` (a pydantic model) validates those settings first. Left out, it is derived from
      the factory's signature (:func:`surge.settings_model`): the settings are declared once, as the
      constructor's typed, documented parameters (docs/plugins.md, "Settings"). ``default=True``
      makes it active unless switched off; otherwise it is active on request
      (``Trainer(plugins=["name"])`` or ``plugins={"name": {...settings}}``).
    * ``role`` is the part it plays (:data:`surge.events.protocols.ROLES`): the Trainer's switches act on
      ``logger``, ``progress``, ``checkpoint`` and ``model_summary``; an object passed in with that
      ``surge_callback_role`` replaces a default plugin of the role; the core calls the ``compiler``.
    * ``switches`` claims Trainer arguments: ``{"max_time": lambda value: {"duration": value} if value else
      None}`` maps the argument's value to this plugin's settings (``None``: the value asks for nothing), and a
      run whose argument asks switches the plugin on with them. The distribution also names each argument in
      the ``surge.switches`` entry-point group, so that the argument requests the plugin without importing others.
    * ``events`` declares the events it publishes (``trainer.emit(...)``), :class:`surge.events.Event`
      subclasses that other plugins subscribe to by name, like the core's (docs/events.md, "Events of plugins").
    * ``adapter(obj)`` stands on the bus for objects of another framework passed in ``callbacks=``/``plugins=``/
      ``logger=`` that have no ``@surge.hookimpl`` handler and no ``__surge_subscriber__()``: it returns the
      subscriber standing for ``obj`` (an object with handlers whose ``__wrapped__`` is ``obj``), ``None`` for an
      object it does not take, or raises :class:`surge.PluginError` for one it takes but cannot run. Installed
      (loaded) is enough: the plugin need not be active.
    * ``translates`` names Trainer arguments of another API (an older version's ``gpus=``) that ``translate(options)``
      rewrites, before the arguments are validated, into the Trainer's own (it returns the new arguments; it may
      pass values to its plugin's settings through ``plugins={name: {...}}``, or raise :class:`surge.ConfigError`).
      The distribution also names each in the ``surge.arguments`` entry-point group, so that the argument finds
      its translator without importing other plugins.
    * ``module_hooks`` claims methods of the user's Module that the core does not call (an older API's hooks):
      ``{"training_epoch_end": {"training": True}}``. A run whose Module defines one of them builds this plugin for
      that run only, with the settings of every claimed method the Module defines (merged, under those given in
      ``plugins=``); a Module defining a method no installed plugin claims is refused when the core knows the
      method (docs/plugins.md, "Adapting another API"). Such a plugin is never active otherwise.
    """

    name: str
    kind: Kind
    provides: Mapping[str, Mapping[str, Callable[..., Any]]] = field(default_factory=dict)
    factory: Callable[..., object] | None = None
    config: type[BaseModel] | None = None
    default: bool = False
    role: str | None = None
    description: str = ""
    events: Sequence[type[Event]] = ()
    switches: Mapping[str, Callable[[Any], Mapping[str, Any] | None]] = field(default_factory=dict)
    adapter: Callable[[object], object | None] | None = None
    translates: Collection[str] = ()
    translate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    module_hooks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            problems.append(f"name {self.name!r} must be lower-case letters, digits, '_' or '-'")
        if self.kind not in ("provider", "participant", "observer"):
            problems.append(f"kind {self.kind!r} must be 'provider', 'participant' or 'observer'")
        if self.kind == "provider":
            unknown = sorted(set(self.provides) - set(PROVIDER_SLOTS))
            if not self.provides:
                problems.append("a provider must fill `provides`, e.g. {'accelerator': {'cpu': CPUAccelerator}}")
            if "logger" in unknown:
                problems.append(
                    "'logger' is not a provider slot: a logger is an observer plugin with role='logger' "
                    "(kind='observer', factory=...), which Trainer(logger=...) chooses by name"
                )
                unknown.remove("logger")
            if unknown:
                problems.append(f"`provides` has unknown slots {unknown}; slots are {list(PROVIDER_SLOTS)}")
            for slot, protocol in SLOT_PROTOCOLS.items():
                for name, factory in dict(self.provides.get(slot) or {}).items():
                    if isinstance(factory, type) and (missing := missing_members(factory, protocol)):
                        problems.append(
                            f"{slot} '{name}': {factory.__qualname__} lacks {', '.join(missing)} "
                            f"(surge.events.protocols.{protocol.__name__})"
                        )
        elif self.factory is None:
            problems.append(f"a {self.kind} needs a `factory` that builds its hook-implementing object")
        if self.role is not None and self.role not in ROLES:
            problems.append(f"role {self.role!r} must be one of {list(ROLES)}")
        role_protocol = ROLE_PROTOCOLS.get(self.role or "")
        if role_protocol is not None and isinstance(self.factory, type):
            if missing := missing_members(self.factory, role_protocol):
                problems.append(
                    f"role {self.role!r}: {self.factory.__qualname__} lacks {', '.join(missing)} "
                    f"(surge.events.protocols.{role_protocol.__name__})"
                )
        from surge.config import TrainerConfig

        if not isinstance(self.switches, Mapping):
            problems.append(f"`switches` must map Trainer arguments to functions; got {self.switches!r}")
        else:
            unknown = sorted(str(a) for a in self.switches if a not in TrainerConfig.model_fields)
            if unknown:
                problems.append(f"`switches` names {unknown}, which are not Trainer arguments")
            uncallable = sorted(str(a) for a, fn in self.switches.items() if not callable(fn))
            if uncallable:
                problems.append(f"`switches` maps {uncallable} to something that is not a function of the value")
        problems += self._adapting_problems()
        if isinstance(self.events, (str, bytes)) or not isinstance(self.events, Sequence):
            problems.append(f"`events` must be a list of surge.events.Event subclasses; got {self.events!r}")
        else:
            problems += event_problems(self.events)
        if self.config is None and self.factory is not None and self.kind != "provider" and not problems:
            try:
                object.__setattr__(self, "config", settings_model(self.factory))
            except PluginError as exc:
                problems.append(str(exc))
        if problems:
            raise PluginError(f"invalid surge.Plugin declaration {self.name!r}: " + "; ".join(problems))

    def _adapting_problems(self) -> list[str]:
        """What is wrong with ``adapter``, ``translates``/``translate`` and ``module_hooks``."""
        problems = []
        if self.adapter is not None and not callable(self.adapter):
            problems.append(f"`adapter` must be a function of the object passed in; got {self.adapter!r}")
        if isinstance(self.translates, (str, bytes)) or not all(isinstance(a, str) for a in self.translates):
            problems.append(f"`translates` must be a list of Trainer argument names; got {self.translates!r}")
        elif self.translates and not callable(self.translate):
            problems.append("`translates` names arguments but `translate` is not a function of the arguments")
        elif self.translate is not None and not self.translates:
            problems.append("`translate` is given but `translates` names no argument it takes")
        if not isinstance(self.module_hooks, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Mapping) for k, v in self.module_hooks.items()
        ):
            problems.append(f"`module_hooks` must map Module method names to settings; got {self.module_hooks!r}")
        elif self.module_hooks and (self.kind == "provider" or self.default):
            problems.append("a plugin with `module_hooks` is a participant or observer with default=False")
        return problems

    def build(self, settings: Mapping[str, Any] | None = None) -> object:
        """Validate ``settings`` with ``config`` and build the participant's subscriber object."""
        assert self.factory is not None
        settings = dict(settings or {})
        if self.config is not None:
            settings = dict(self.config.model_validate(settings))
        return self.factory(**settings)


@dataclass
class PluginRecord:
    """One discovered entry point and what became of it."""

    name: str
    distribution: str | None
    version: str | None
    value: str
    status: Status = "available"
    reason: str = ""
    plugin: Plugin | None = None
    module: str = ""
    origin: str = ""
    """The file the entry point's module was imported from (empty until loaded, or for an in-memory module)."""

    @property
    def kind(self) -> str:
        return self.plugin.kind if self.plugin else "?"

    def describe(self) -> str:
        return f"plugin '{self.name}' (distribution {self.distribution or '?'} {self.version or '?'})"


_HEADLINE_NAMES = 8
"""Active plugins named in the start-up line; more are counted."""


class _Source:
    """Where entry points come from; ``surge.testing`` swaps it for an in-memory one."""

    def entry_points(self) -> Iterable[metadata.EntryPoint]:
        return metadata.entry_points(group=ENTRY_POINT_GROUP)


source = _Source()


def _dist_of(ep: metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


@dataclass
class Catalog:
    """Every discovered plugin, sorted by name, with its status."""

    records: dict[str, PluginRecord]
    lab: str | None = None
    """The lab profile discovery ran under (its source), or ``None``."""
    lab_note: str = ""
    """What the start-up line adds about the lab profile (one it replaced)."""
    provider_clashes: Mapping[str, Mapping[str, tuple[str, list[PluginRecord]]]] = field(default_factory=dict)
    """Provider names two plugins claim (slot -> name -> (the problem and its fix, the claimants)): failed names,
    left out of :meth:`providers`; a run that asks for one is refused with the problem."""

    def loaded(self) -> list[PluginRecord]:
        return [r for r in self.records.values() if r.plugin is not None]

    def headline(self, active: Iterable[str]) -> str:
        """The start-up line every Trainer logs at INFO: the lab profile, how many plugins are active (and
        which: ``active``, the names of the run's plugins), how many are installed, and where the rest is."""
        names = list(dict.fromkeys(active))
        shown = ", ".join(names[:_HEADLINE_NAMES]) + (
            f", +{len(names) - _HEADLINE_NAMES}" if len(names) > _HEADLINE_NAMES else ""
        )
        failed = sum(r.status == "failed" for r in self.records.values())
        line = f"{len(names)} plugin{'s' if len(names) != 1 else ''} active ({shown or 'none'}) of {len(self.records)} installed"
        line += f", {failed} failed to load" if failed else ""
        lab = f"lab profile {self.lab}{self.lab_note}" if self.lab else "no lab profile"
        return f"{line}; {lab}; `surge plugins` lists them (SURGE_LOG_LEVEL=DEBUG logs their files)"

    def summary(self) -> str:
        """One line: the lab profile, and every loaded plugin with its distribution and file (logged at DEBUG
        when a Trainer starts; ``surge plugins`` shows the same as a table)."""
        loaded = "; ".join(
            f"{r.name} ({r.distribution or '?'} {r.version or '?'}, {r.origin or 'in memory'})" for r in self.loaded()
        )
        lab = f"the lab profile {self.lab}" if self.lab else "no lab profile"
        return f"plugins loaded under {lab}{self.lab_note}: {loaded or 'none'}"

    def providers(self, slot: str) -> dict[str, tuple[Callable[..., Any], PluginRecord]]:
        """Provider name -> (factory, record) for one slot; a name two plugins claim is left out (see
        :meth:`clash`)."""
        failed = self.provider_clashes.get(slot, {})
        found: dict[str, tuple[Callable[..., Any], PluginRecord]] = {}
        for record in self.loaded():
            assert record.plugin is not None
            for provider_name, factory in record.plugin.provides.get(slot, {}).items():
                if provider_name not in failed:
                    found.setdefault(provider_name, (factory, record))
        return found

    def clash(self, slot: str, name: str) -> None:
        """Raise :class:`PluginConflictError` when two plugins claim ``name`` in ``slot`` (the run asks for it)."""
        failed = self.provider_clashes.get(slot, {}).get(name)
        if failed is not None:
            raise PluginConflictError(f"trainer.{slot}: {failed[0]}")


def discover(
    settings: SurgeSettings, requested: Iterable[str] = (), lab: Lab | None = None, *, fatal: bool = True
) -> Catalog:
    """Find, filter and import the ``surge.plugins`` entry points.

    ``requested`` names plugins the caller asked for by name; they load even under
    ``SURGE_DISABLE_PLUGIN_AUTOLOAD=1``, but never when ``SURGE_DISABLE_PLUGINS`` blocks them or a
    ``SURGE_PLUGINS`` allow-list leaves them out. ``lab`` (by default the profile :func:`surge.plugins.lab.resolve`
    finds) goes over all of these: it blocks what it switches off or does not list under ``autoload = false``,
    lets through what it forces on, holds imports of pinned distributions to their own files
    (:mod:`surge.plugins._pinned`), and makes a pinned distribution's import failure fatal.

    A name two distributions claim loads neither: its record is ``failed`` and says so, unless all but one
    are blocked (``SURGE_DISABLE_PLUGINS=<distribution>:<name>``). A failure is reported and skipped, or
    raised when the lab pins the distribution or ``SURGE_STRICT_PLUGINS=1``, after every plugin was tried;
    with ``fatal=False`` (the diagnostic commands) failures are only recorded.
    """
    if lab is None:
        from surge.plugins.lab import resolve

        lab = resolve(settings)
    _pinned.guard(lab.homes() if lab is not None else (), lab.source if lab is not None else "")
    requested = set(requested)
    claims: dict[str, dict[tuple[str | None, str], tuple[metadata.EntryPoint, PluginRecord]]] = {}
    for ep in source.entry_points():
        dist, version = _dist_of(ep)
        record = PluginRecord(ep.name, dist, version, ep.value, module=ep.value.split(":")[0].split(".")[0])
        claims.setdefault(ep.name, {}).setdefault((dist, ep.value), (ep, record))  # seen twice on sys.path: once

    records: dict[str, PluginRecord] = {}
    fatal_problems: list[str] = []
    clashes: set[str] = set()
    with _pinned.holding():  # a plugin's import code cannot replace the guard
        _load_all(claims, records, settings, requested, lab, clashes, fatal_problems, fatal)
    provider_clashes = _provider_clashes(records)
    for names in provider_clashes.values():
        for provider, (message, owners) in names.items():
            pins = [
                f"the lab profile {lab.source} pins {r.distribution}"
                for r in owners
                if lab and lab.pins(r.distribution)
            ]
            why = pins[0] if pins else "SURGE_STRICT_PLUGINS=1" if settings.strict_plugins else ""
            if why:
                fatal_problems.append(f"{message} (fatal because {why})")
                clashes.add(provider)
            elif fatal:
                logger.warning("{}; a run that does not ask for it is not affected", message)
    if fatal and fatal_problems:
        raise (PluginConflictError if clashes else PluginError)("\n".join(fatal_problems))
    note = f" (named by SURGE_LAB or --lab, over the project's own {lab.replaces})" if lab and lab.replaces else ""
    return Catalog(records, lab.source if lab is not None else None, note, provider_clashes)


def _load_all(
    claims: dict[str, dict[tuple[str | None, str], tuple[metadata.EntryPoint, PluginRecord]]],
    records: dict[str, PluginRecord],
    settings: SurgeSettings,
    requested: set[str],
    lab: Lab | None,
    clashes: set[str],
    fatal_problems: list[str],
    fatal: bool,
) -> None:
    for name in sorted(claims):
        candidates = list(claims[name].values())
        reasons = [_blocked_reason(record, settings, requested, lab) for _, record in candidates]
        kept = [candidate for candidate, reason in zip(candidates, reasons, strict=True) if not reason]
        ep, record = kept[0] if kept else candidates[0]
        records[name] = record
        if not kept:
            record.status, record.reason = "blocked", reasons[0]
            continue
        if len(kept) > 1:
            record.status, record.reason = "failed", _clash([r for _, r in kept])
            clashes.add(name)
        else:
            _load(ep, record)
            tampered = _pinned.intact()
            if tampered is not None:  # an import that switched the guard off may already have let anything in
                raise LabError(
                    f"the lab profile {lab.source if lab else '?'} refuses {record.describe()}: importing its module "
                    f"{record.module} {tampered}, which a plugin under a lab must not do. Remove the plugin from the "
                    "lab, or fix it"
                )
        if record.status != "failed":
            continue
        pins = [
            f"the lab profile {lab.source} pins {r.distribution}" for _, r in kept if lab and lab.pins(r.distribution)
        ]
        why = pins[0] + ("" if name in clashes else "; fix or reinstall it") if pins else ""
        why = why or ("SURGE_STRICT_PLUGINS=1" if settings.strict_plugins else "")
        if why:
            fatal_problems.append(f"{record.describe()} failed to load: {record.reason} (fatal because {why})")
        elif fatal:
            logger.warning("{} failed to load and is skipped: {}", record.describe(), record.reason)


def _provider_clashes(records: Mapping[str, PluginRecord]) -> dict[str, dict[str, tuple[str, list[PluginRecord]]]]:
    """Provider names (a precision's aliases included) two loaded plugins claim in one slot, or that a plugin claims
    over the core's ``32-true`` precision: slot -> name -> (what is wrong and the fix, the claimants). Such a name
    is failed: a run that asks for it is refused with this message, the others run."""
    claims: dict[str, dict[str, list[tuple[PluginRecord | None, Any]]]] = {}
    for record in records.values():
        if record.plugin is None:
            continue
        for slot, provided in record.plugin.provides.items():
            for provider, factory in provided.items():
                names = [provider, *getattr(factory, "aliases", ())] if slot == "precision" else [provider]
                for alias in dict.fromkeys(names):
                    claimants = claims.setdefault(slot, {}).setdefault(alias, [])
                    if all(f is not factory for _, f in claimants):
                        claimants.append((record, factory))
    from surge.plugins.backends import Precision

    for alias in Precision.aliases:  # the core's own precision names
        taken = claims.get("precision", {}).get(alias)
        if taken:
            taken.insert(0, (None, Precision))
    clashes: dict[str, dict[str, tuple[str, list[PluginRecord]]]] = {}
    for slot, by_name in claims.items():
        for alias, claimants in by_name.items():
            if len(claimants) < 2:
                continue
            owners = [r for r, _ in claimants if r is not None]
            who = " and ".join(r.describe() if r is not None else "the core's 32-true precision" for r, _ in claimants)
            blocks = " or ".join(f"SURGE_DISABLE_PLUGINS={r.name}" for r in owners)
            message = (
                f"{slot} '{alias}' is claimed by {who}, so a run cannot choose it. Uninstall one, or block one with "
                f"{blocks}"
            )
            clashes.setdefault(slot, {})[alias] = (message, owners)
    return clashes


def _clash(records: list[PluginRecord]) -> str:
    """Why a name claimed by two entry points loads neither, and how to choose one."""
    name, dist = records[0].name, records[0].distribution
    if all(r.distribution == dist for r in records):
        values = " and ".join(r.value for r in records)
        return f"distribution {dist} declares the plugin name '{name}' twice ({values}); its author must rename one"
    claims = " and ".join(f"{r.distribution or '?'} {r.version or '?'} ({r.value})" for r in records)
    blocks = " or ".join(f"SURGE_DISABLE_PLUGINS={r.distribution}:{name}" for r in records if r.distribution)
    return (
        f"two distributions claim the plugin name '{name}': {claims}, so neither is loaded. Uninstall one, or "
        f"block one with {blocks} (for one run: surge fit -p no:DISTRIBUTION:{name})"
    )


def _blocked_reason(record: PluginRecord, settings: SurgeSettings, requested: set[str], lab: Lab | None) -> str:
    name = record.name
    if lab is not None:  # the lab's rules are over the environment's
        reason = lab.blocked_reason(name, record.distribution)
        if reason or lab.forces_on(name):
            return reason
    for entry in settings.disable_plugins:  # <distribution>:<name> blocks one distribution's claim only
        dist, _, plugin = entry.rpartition(":")
        if dist and plugin == name and canonicalize_name(dist) == canonicalize_name(record.distribution or "?"):
            return f"blocked by SURGE_DISABLE_PLUGINS={entry}"
    if name in settings.load_plugins:  # SURGE_LOAD_PLUGINS (`surge fit -p NAME`) is over the lists below
        return ""
    if name in settings.disable_plugins:
        return "blocked by SURGE_DISABLE_PLUGINS"
    if settings.plugins is not None and name not in settings.plugins:
        return "not in the SURGE_PLUGINS allow-list"  # an allow-list binds requests by name too
    if settings.disable_plugin_autoload and name not in (settings.plugins or []) and name not in requested:
        return "SURGE_DISABLE_PLUGIN_AUTOLOAD=1 and not requested by name"
    return ""


def _load(ep: metadata.EntryPoint, record: PluginRecord) -> None:
    try:
        if not _VALUE.match(ep.value):  # else importlib fails with "'NoneType' object has no attribute 'group'"
            raise PluginError(f"entry point value {ep.value!r} is not of the form 'package.module:attribute'")
        obj = ep.load()
        if not isinstance(obj, Plugin):
            raise PluginError(
                f"entry point {ep.value!r} must point to a surge.Plugin, got {type(obj).__name__}; "
                "declare `plugin = surge.Plugin(name=..., kind=...)` and point the entry point at it"
            )
        if obj.name != ep.name:
            raise PluginError(
                f"entry point is named {ep.name!r} but its surge.Plugin is named {obj.name!r}; make them equal"
            )
    except LabError:
        raise  # the import guard refused a module that is not the pinned distribution's: no run, no listing
    except Exception as exc:  # a broken plugin must not break the run unless asked to (see discover)
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
        return
    record.plugin = obj
    record.origin = getattr(sys.modules.get(ep.value.split(":")[0].strip()), "__file__", None) or ""
    route_stdlib(record.module)  # the plugin's stdlib `logging` records go through Surge's sink
