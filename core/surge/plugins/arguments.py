"""Trainer arguments of another API, translated by the plugin that declares them before the Trainer validates its
arguments (``surge.Plugin(translates=..., translate=...)``; docs/plugins.md, "Adapting another API").

A distribution names each argument its plugins translate in the ``surge.arguments`` entry-point group, so that an
argument finds its translator from metadata, without importing any other plugin::

    [project.entry-points."surge.arguments"]
    gpus = "my_translator:plugin"

The translator is loaded only when the arguments hold one it names, and not when ``SURGE_DISABLE_PLUGINS``, a
``SURGE_PLUGINS`` allow-list or a lab profile blocks its plugin (an argument set is a request, as for switches, so
``SURGE_DISABLE_PLUGIN_AUTOLOAD`` does not). An argument of Lightning 1.x that no loaded plugin translates is
refused naming its modern spelling and the distribution that would translate it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from surge import plugins as _plugins
from surge.config import TrainerConfig
from surge.errors import ConfigError, PluginError
from surge.plugins import Plugin, PluginRecord, _blocked_reason, _dist_of, _pinned
from surge.plugins._first_party import LEGACY_ARGUMENTS, LIGHTNING
from surge.settings import SurgeSettings

if TYPE_CHECKING:
    from surge.plugins.lab import Lab

__all__ = ["ARGUMENTS_GROUP", "translate_arguments"]

ARGUMENTS_GROUP = "surge.arguments"
"""The entry-point group naming the Trainer arguments a distribution's plugins translate (module docstring)."""


def translate_arguments(options: Mapping[str, Any], settings: SurgeSettings, lab: Lab | None) -> dict[str, Any]:
    """``options`` as the plugins that translate some of them rewrite them (each plugin once, in name order); the
    rest as given. Raises :class:`ConfigError` for a Lightning 1.x argument no loaded plugin translates."""
    options = dict(options)
    held: dict[str, str] = {}  # argument -> why its translator did not run
    for record, names in _translators(options, settings, lab, held):
        plugin = record.plugin
        assert plugin is not None and plugin.translate is not None
        if not set(names) & set(plugin.translates):
            raise PluginError(
                f"{record.describe()} names {sorted(names)} in the {ARGUMENTS_GROUP} entry points, but its "
                f"surge.Plugin(translates=...) does not; its author must list them there"
            )
        translated = plugin.translate(options)
        if not isinstance(translated, Mapping):
            raise PluginError(
                f"{record.describe()}'s translate returned {type(translated).__name__}, not the arguments"
            )
        options = dict(translated)
    legacy = [arg for arg in options if arg in LEGACY_ARGUMENTS and arg not in TrainerConfig.model_fields]
    if legacy:
        raise ConfigError(
            [
                (
                    f"trainer.{arg}",
                    f"is a Lightning 1.x argument (Lightning 2 removed it); write {LEGACY_ARGUMENTS[arg]} instead, or "
                    + (held.get(arg) or f"`pip install {LIGHTNING}`, which translates it"),
                )
                for arg in legacy
            ],
            "Trainer arguments",
        )
    return options


def _translators(
    options: Mapping[str, Any], settings: SurgeSettings, lab: Lab | None, held: dict[str, str]
) -> list[tuple[PluginRecord, list[str]]]:
    """The loaded plugins whose distributions name, in :data:`ARGUMENTS_GROUP`, arguments ``options`` holds, with
    those arguments; ``held`` gets why a named translator is not loaded."""
    found: dict[str, tuple[PluginRecord, list[str]]] = {}
    for ep in _plugins.source.entry_points():
        names = [
            entry.name
            for entry in getattr(getattr(ep, "dist", None), "entry_points", ())
            if entry.group == ARGUMENTS_GROUP and entry.value == ep.value and entry.name in options
        ]
        if not names or ep.name in found:
            continue
        dist, version = _dist_of(ep)
        record = PluginRecord(ep.name, dist, version, ep.value, module=ep.value.split(":")[0].split(".")[0])
        reason = _blocked_reason(record, settings, {ep.name}, lab)
        if not reason:
            _pinned.guard(lab.homes() if lab is not None else (), lab.source if lab is not None else "")
            try:
                plugin = ep.load()
            except Exception as exc:  # discovery reports it with the other failures; here the argument is unserved
                plugin, reason = None, f"failed to load: {type(exc).__name__}: {exc}"
            if isinstance(plugin, Plugin) and plugin.translate is not None:
                record.plugin = plugin
                found[ep.name] = (record, names)
                continue
            reason = reason or "declares no translate"
        for name in names:
            held.setdefault(name, f"{record.describe()} translates it but is not loaded: {reason}")
    return [found[name] for name in sorted(found)]
