"""Plugin declarations and discovery through the ``surge.plugins`` entry-point group.

A distribution declares each plugin with an entry point whose object is a :class:`Plugin`::

    [project.entry-points."surge.plugins"]
    devices = "surge_devices:plugin"

Discovery is lazy (a Trainer or a CLI command asks for it, never ``import surge``), sorted by name,
de-duplicated, and loud when two distributions claim one name. Blocking (``SURGE_PLUGINS``,
``SURGE_DISABLE_PLUGINS``, ``SURGE_DISABLE_PLUGIN_AUTOLOAD``, and a lab profile's rules, see
:mod:`surge.lab`) happens before anything is imported.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger
from pydantic import BaseModel

from surge._logging import route_stdlib
from surge.errors import PluginConflictError, PluginError
from surge.settings import SurgeSettings

if TYPE_CHECKING:
    from surge.lab import Lab

__all__ = ["Plugin", "PluginRecord", "Catalog", "discover", "ENTRY_POINT_GROUP", "ROLES", "PROVIDER_SLOTS"]

ENTRY_POINT_GROUP = "surge.plugins"
Kind = Literal["provider", "participant", "observer"]
Status = Literal["active", "available", "blocked", "failed"]

ROLES = ("logger", "progress", "checkpoint", "model_summary")
"""Roles the Trainer's switches act on: ``logger=``, ``enable_progress_bar``, ``enable_checkpointing``,
``enable_model_summary``."""

PROVIDER_SLOTS = ("accelerator", "strategy", "precision", "checkpoint_io", "profiler", "tuner")
"""Trainer arguments whose string values name a provider."""

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")
_VALUE = re.compile(r"^[\w.]+\s*(:\s*[\w.]+\s*)?(\[.*\]\s*)?$")  # importlib.metadata's entry point syntax


@dataclass(frozen=True)
class Plugin:
    """What a ``surge.plugins`` entry point points to.

    * A **provider** offers named implementations chosen by a Trainer argument:
      ``provides={"accelerator": {"cpu": CPUAccelerator}}`` makes ``Trainer(accelerator="cpu")`` work.
    * A **participant** (or an **observer**, which runs after the user's Module: loggers, progress)
      subscribes to events. ``factory(**settings)`` builds the object whose ``@surge.hookimpl`` methods
      are registered; ``config`` (a pydantic model) validates those settings first. ``default=True``
      makes it active unless switched off; otherwise it is active on request
      (``Trainer(plugins=["name"])`` or ``plugins={"name": {...settings}}``).
    * ``role`` ties it to a Trainer switch: ``logger``, ``progress``, ``checkpoint``, ``model_summary``.
    """

    name: str
    kind: Kind
    provides: Mapping[str, Mapping[str, Callable[..., Any]]] = field(default_factory=dict)
    factory: Callable[..., object] | None = None
    config: type[BaseModel] | None = None
    default: bool = False
    role: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            problems.append(f"name {self.name!r} must be lower-case letters, digits, '_' or '-'")
        if self.kind not in ("provider", "participant", "observer"):
            problems.append(f"kind {self.kind!r} must be 'provider', 'participant' or 'observer'")
        if self.kind == "provider":
            unknown = sorted(set(self.provides) - set(PROVIDER_SLOTS) - {"logger"})
            if not self.provides:
                problems.append("a provider must fill `provides`, e.g. {'accelerator': {'cpu': CPUAccelerator}}")
            if unknown:
                problems.append(f"`provides` has unknown slots {unknown}; slots are {list(PROVIDER_SLOTS)}")
        elif self.factory is None:
            problems.append(f"a {self.kind} needs a `factory` that builds its hook-implementing object")
        if self.role is not None and self.role not in ROLES:
            problems.append(f"role {self.role!r} must be one of {list(ROLES)}")
        if problems:
            raise PluginError(f"invalid surge.Plugin declaration {self.name!r}: " + "; ".join(problems))

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

    @property
    def kind(self) -> str:
        return self.plugin.kind if self.plugin else "?"

    def describe(self) -> str:
        return f"plugin '{self.name}' (distribution {self.distribution or '?'} {self.version or '?'})"


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

    def loaded(self) -> list[PluginRecord]:
        return [r for r in self.records.values() if r.plugin is not None]

    def providers(self, slot: str) -> dict[str, tuple[Callable[..., Any], PluginRecord]]:
        """Provider name -> (factory, record) for one slot, with an error when two plugins claim a name."""
        found: dict[str, tuple[Callable[..., Any], PluginRecord]] = {}
        for record in self.loaded():
            assert record.plugin is not None
            for provider_name, factory in record.plugin.provides.get(slot, {}).items():
                if provider_name in found:
                    other = found[provider_name][1]
                    raise PluginConflictError(
                        f"two plugins provide {slot} '{provider_name}': {other.describe()} and "
                        f"{record.describe()}. Uninstall one, or block one with SURGE_DISABLE_PLUGINS="
                        f"{record.name}"
                    )
                found[provider_name] = (factory, record)
        return found


def discover(settings: SurgeSettings, requested: Iterable[str] = (), lab: Lab | None = None) -> Catalog:
    """Find, filter and import the ``surge.plugins`` entry points.

    ``requested`` names plugins the caller asked for by name; they load even under
    ``SURGE_DISABLE_PLUGIN_AUTOLOAD=1``, but never when ``SURGE_DISABLE_PLUGINS`` blocks them or a
    ``SURGE_PLUGINS`` allow-list leaves them out. ``lab`` (by default the profile :func:`surge.lab.resolve`
    finds) goes over all of these: it blocks what it switches off or does not list under ``autoload = false``,
    lets through what it forces on, and makes a pinned distribution's import failure fatal.
    """
    if lab is None:
        from surge.lab import resolve

        lab = resolve(settings)
    requested = set(requested)
    by_name: dict[str, tuple[metadata.EntryPoint, PluginRecord]] = {}
    for ep in source.entry_points():
        dist, version = _dist_of(ep)
        record = PluginRecord(ep.name, dist, version, ep.value, module=ep.value.split(":")[0].split(".")[0])
        if ep.name in by_name:
            previous = by_name[ep.name][1]
            if (previous.distribution, previous.value) == (dist, ep.value):
                continue  # the same distribution seen twice on sys.path
            if previous.distribution == dist:
                raise PluginConflictError(
                    f"distribution {dist} declares the plugin name '{ep.name}' twice ({previous.value} and "
                    f"{ep.value}) in its surge.plugins entry points; its author must rename one"
                )
            raise PluginConflictError(
                f"two distributions claim the plugin name '{ep.name}': {previous.describe()} -> "
                f"{previous.value} and {record.describe()} -> {ep.value}. Uninstall one of them."
            )
        by_name[ep.name] = (ep, record)

    records: dict[str, PluginRecord] = {}
    for name in sorted(by_name):
        ep, record = by_name[name]
        records[name] = record
        blocked = _blocked_reason(record, settings, requested, lab)
        if blocked:
            record.status, record.reason = "blocked", blocked
            continue
        _load(ep, record, settings, lab)
    return Catalog(records)


def _blocked_reason(record: PluginRecord, settings: SurgeSettings, requested: set[str], lab: Lab | None) -> str:
    name = record.name
    if lab is not None:  # the lab's rules are over the environment's
        reason = lab.blocked_reason(name, record.distribution)
        if reason or lab.forces_on(name):
            return reason
    if name in settings.disable_plugins:
        return "blocked by SURGE_DISABLE_PLUGINS"
    if settings.plugins is not None and name not in settings.plugins:
        return "not in the SURGE_PLUGINS allow-list"  # an allow-list binds requests by name too
    if settings.disable_plugin_autoload and name not in (settings.plugins or []) and name not in requested:
        return "SURGE_DISABLE_PLUGIN_AUTOLOAD=1 and not requested by name"
    return ""


def _load(ep: metadata.EntryPoint, record: PluginRecord, settings: SurgeSettings, lab: Lab | None) -> None:
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
    except Exception as exc:  # a broken plugin must not break the run unless asked to
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
        if lab is not None and lab.pins(record.distribution):
            raise PluginError(
                f"{record.describe()} failed to load: {record.reason} (fatal because the lab profile "
                f"{lab.source} pins {record.distribution}; fix or reinstall it)"
            ) from exc
        if settings.strict_plugins:
            raise PluginError(
                f"{record.describe()} failed to load: {record.reason} (fatal because SURGE_STRICT_PLUGINS=1)"
            ) from exc
        logger.warning("{} failed to load and is skipped: {}", record.describe(), record.reason)
        return
    record.plugin = obj
    route_stdlib(record.module)  # the plugin's stdlib `logging` records go through Surge's sink
