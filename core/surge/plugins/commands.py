"""Commands of plugins: ``surge NAME`` sub-commands that installed distributions contribute.

A distribution declares each command with an entry point in the ``surge.commands`` group, named after the
command, whose object is a :class:`Command`::

    [project.entry-points."surge.commands"]
    plot = "surge_csv.plot:command"

``surge`` reads the group when it builds its parser (``surge --help`` lists each command with its
distribution; ``surge plugins`` lists them too). A command is refused, never run, when

* its name is a core command's (``fit``, ``plugins``, ...): the core's runs, the other is reported;
* two distributions claim its name: neither runs (as for plugins);
* a lab profile with ``autoload = false`` does not list its distribution (it is not even imported), or the
  environment does not match the profile when it is run (``Lab.verify``, as for ``surge fit``);
* its module fails to import, or its object is not a :class:`Command`;
* a module it ``requires`` is not installed (the message names the ``pip install`` that adds it).

A broken or refused command never breaks the other commands: running it says why, naming its distribution.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from packaging.utils import canonicalize_name

from surge.errors import LabError, PluginError
from surge.plugins import _pinned

if TYPE_CHECKING:
    from surge.plugins.lab import Lab

__all__ = ["COMMANDS_GROUP", "Command", "CommandRecord", "discover_commands"]

COMMANDS_GROUP = "surge.commands"
"""The entry-point group of plugin commands: ``NAME = "package.module:command"``, a :class:`Command`."""

CORE_DISTRIBUTION = "surge"
"""The core's own commands (``new-plugin``) come through the same group; the core is never blocked by a lab."""

_NAME = re.compile(r"^[a-z][a-z0-9\-]*$")
_VALUE = re.compile(r"^[\w.]+\s*:\s*[\w.]+\s*$")
Status = Literal["available", "unavailable", "blocked", "failed"]


@dataclass(frozen=True)
class Command:
    """What a ``surge.commands`` entry point points to: one ``surge NAME`` sub-command.

    ``register(parser)`` adds the command's arguments to its own ``argparse`` parser; ``run(args)`` runs it
    with the parsed namespace and returns the exit status (0 done, 1 a problem it explains). Raising
    :class:`surge.SurgeError` prints ``surge NAME: error: <message>`` and exits 1, :class:`surge.ConfigError` 2.
    ``requires`` maps each module the command needs but its distribution does not require to the pip
    requirement that installs it (``{"copier": "surge[template]"}``): while one is missing the command is
    listed as unavailable and running it says what to install. ``description`` is the text of
    ``surge NAME --help`` (``help`` when empty), ``help`` the one line of ``surge --help``.
    """

    name: str
    help: str
    register: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    requires: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            problems.append(f"name {self.name!r} must be lower-case letters, digits or '-', starting with a letter")
        if not isinstance(self.help, str) or not self.help.strip():
            problems.append("`help` must be one line saying what the command does")
        for attribute in ("register", "run"):
            if not callable(getattr(self, attribute)):
                problems.append(f"`{attribute}` must be a function; got {getattr(self, attribute)!r}")
        if not isinstance(self.requires, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.requires.items()
        ):
            problems.append(f"`requires` must map module names to pip requirements; got {self.requires!r}")
        if problems:
            raise PluginError(f"invalid surge.Command declaration {self.name!r}: " + "; ".join(problems))

    def missing(self) -> list[str]:
        """The ``pip install`` requirements of the required modules that are not installed (none imported)."""
        return [requirement for module, requirement in self.requires.items() if not _installed(module)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class CommandRecord:
    """One ``surge.commands`` entry point and what became of it."""

    name: str
    distribution: str | None
    version: str | None
    value: str
    status: Status = "available"
    reason: str = ""
    command: Command | None = None

    def describe(self) -> str:
        return f"command '{self.name}' (distribution {self.distribution or '?'} {self.version or '?'})"

    def refusal(self) -> str:
        """Why running it is refused, and what to do (for a command that is not available)."""
        return f"surge {self.name} is not available: {self.describe()} {self.status}: {self.reason}"


class _Source:
    """Where the entry points come from (a test may swap it, as ``surge.plugins.source``)."""

    def entry_points(self) -> Iterable[metadata.EntryPoint]:
        return metadata.entry_points(group=COMMANDS_GROUP)


source = _Source()


def discover_commands(reserved: Collection[str], lab: Lab | None, *, load: bool = True) -> dict[str, CommandRecord]:
    """Read, check and import the ``surge.commands`` entry points; every one gets a record, sorted by name.

    ``reserved`` are the core's command names. Under ``lab`` a distribution it does not allow is not imported,
    and the distributions it pins are imported under its import guard (their own files only). With ``load``
    false nothing is imported (the records stay ``available`` with no command)."""
    claims: dict[str, dict[tuple[str | None, str], tuple[metadata.EntryPoint, CommandRecord]]] = {}
    for ep in source.entry_points():
        dist = getattr(ep, "dist", None)
        name, version = (dist.metadata["Name"], dist.version) if dist is not None else (None, None)
        record = CommandRecord(ep.name, name, version, ep.value)
        claims.setdefault(ep.name, {}).setdefault((name, ep.value), (ep, record))  # seen twice on sys.path: once
    if not load:
        return {name: next(iter(claims[name].values()))[1] for name in sorted(claims)}
    if lab is not None and claims:
        _pinned.guard(lab.homes(), lab.source)
    records: dict[str, CommandRecord] = {}
    for name in sorted(claims):
        candidates = list(claims[name].values())
        kept = [(ep, r) for ep, r in candidates if not _blocked(r, lab)]
        ep, record = kept[0] if kept else candidates[0]
        records[name] = record
        if name in reserved:
            record.status, record.reason = (
                "failed",
                (
                    f"'{name}' is a core command, which runs instead; the distribution's author must rename it "
                    f"(or `pip uninstall {record.distribution or '?'}`)"
                ),
            )
        elif not kept:
            record.status, record.reason = "blocked", _blocked(record, lab)
        elif len(kept) > 1:
            who = " and ".join(f"{r.distribution or '?'} {r.version or '?'} ({r.value})" for _, r in kept)
            record.status, record.reason = (
                "failed",
                (f"two distributions claim the command '{name}': {who}, so neither runs; uninstall one"),
            )
        else:
            with _pinned.holding():  # a command module's import code cannot replace the guard
                _load(ep, record)
            tampered = _pinned.intact()
            if tampered is not None:  # as for a plugin: nothing imported after it is trusted, so it is refused
                record.status, record.command = "blocked", None
                record.reason = (
                    f"importing {ep.value.split(':')[0]} {tampered}, which a command under a lab must not do"
                )
                _pinned.guard(lab.homes() if lab is not None else (), lab.source if lab is not None else "")
    return records


def _blocked(record: CommandRecord, lab: Lab | None) -> str:
    dist = record.distribution
    if lab is None or lab.profile.autoload or lab.pins(dist):
        return ""
    if dist is not None and canonicalize_name(dist) == CORE_DISTRIBUTION:
        return ""
    return (
        f"its distribution {dist or '?'} is not in the lab profile {lab.source} (autoload = false), so it is not "
        f"imported; ask the lab's admin to pin it, or run outside the lab"
    )


def _load(ep: metadata.EntryPoint, record: CommandRecord) -> None:
    try:
        if not _VALUE.match(ep.value):
            raise PluginError(f"entry point value {ep.value!r} is not of the form 'package.module:attribute'")
        obj = ep.load()
        if not isinstance(obj, Command):
            raise PluginError(
                f"entry point {ep.value!r} must point to a surge.Command, got {type(obj).__name__}; declare "
                "`command = surge.Command(name=..., help=..., register=..., run=...)` and point the entry point at it"
            )
        if obj.name != ep.name:
            raise PluginError(f"entry point is named {ep.name!r} but its surge.Command is named {obj.name!r}")
    except LabError as exc:  # the import guard refused a module that is not the pinned distribution's
        record.status, record.reason = "blocked", str(exc)
        return
    except Exception as exc:  # a broken command must not break the others
        record.status, record.reason = "failed", f"it fails to load: {type(exc).__name__}: {exc}"
        return
    record.command = obj
    missing = obj.missing()
    if missing:
        needs = ", ".join(m for m, r in obj.requires.items() if r in missing)
        install = " ".join(f"'{r}'" if "[" in r else r for r in dict.fromkeys(missing))  # brackets: shell globs
        record.status, record.reason = "unavailable", f"needs {needs}: pip install {install}"
