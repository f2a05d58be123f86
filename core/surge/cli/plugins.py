"""``surge plugins``: what is installed, what a default run would activate, and in which order it runs.

``surge plugins [--json] [--event NAME]`` lists every discovered plugin; ``surge plugins order [--json]``
prints the resolved handler order of every event. Both build the Trainer a bare ``surge fit`` would build
(environment and lab rules included), so what they show is what a run does, and both refuse to run in an
environment that does not match the lab profile. The JSON form of the listing follows
``docs/plugins.schema.json``.

``surge plugins lock [-o FILE] [--hashes]`` writes a lab profile pinning the current environment (and warns
about every plugin a run under it would refuse); ``surge plugins check [--lab PATH]`` compares the environment
with a profile and prints the diff (see :mod:`surge.plugins.lab`), finding what a ``surge fit`` started here would find.

``-p NAME`` / ``-p no:NAME`` (on the run commands and these) load or block one plugin for the command, before
import, as pytest's ``-p`` does.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from surge.events import EVENTS

SCHEMA_VERSION = 1


def register(commands: Any) -> None:
    plugins = commands.add_parser("plugins", help="list installed plugins: status, kind, hooks, order")
    plugins.add_argument("--json", action="store_true", help="machine-readable output (docs/plugins.schema.json)")
    plugins.add_argument("--event", metavar="NAME", help="only the handlers of event NAME, in the order they run")
    plugins.add_argument(
        "-v", "--verbose", action="store_true", help="whole rows, not cut to the terminal's width (as --json)"
    )
    add_lab_option(plugins)
    add_plugin_option(plugins)
    plugins.set_defaults(run=list_plugins)
    actions = plugins.add_subparsers(dest="action", metavar="ACTION")
    order = actions.add_parser("order", help="the resolved handler order for every event")
    order.add_argument("--json", action="store_true", help="machine-readable output")
    add_lab_option(order)
    add_plugin_option(order)
    order.set_defaults(run=print_order)
    lock = actions.add_parser("lock", help="write a lab profile pinning the installed plugin distributions")
    lock.add_argument("-o", "--output", metavar="FILE", help="write to FILE (a path or fsspec URL), not stdout")
    lock.add_argument("--hashes", action="store_true", help="pin each distribution's files hash too")
    lock.set_defaults(run=lock_profile)
    check = actions.add_parser("check", help="compare the environment with a lab profile; exit 1 on a mismatch")
    add_lab_option(check)
    add_plugin_option(check)
    check.set_defaults(run=check_profile)


def add_lab_option(parser: argparse.ArgumentParser) -> None:
    """``--lab PATH`` on a command; it stands in for ``SURGE_LAB`` while the command runs (see ``surge.cli``)."""
    parser.add_argument(
        "--lab",
        metavar="PATH",
        default=argparse.SUPPRESS,  # so `surge --lab X plugins` keeps the top-level value
        help="lab profile (path or fsspec URL) to check against; overrides SURGE_LAB and pyproject.toml",
    )


def add_plugin_option(parser: argparse.ArgumentParser) -> None:
    """``-p NAME`` / ``-p no:NAME``: load or block one plugin before import, for this command (see ``surge.cli``)."""
    parser.add_argument(
        "-p",
        dest="plugin_flags",
        action="append",
        metavar="NAME|no:NAME",
        type=_plugin_flag,
        default=argparse.SUPPRESS,
        help="load plugin NAME for this command even where SURGE_DISABLE_PLUGINS, SURGE_PLUGINS or "
        "SURGE_DISABLE_PLUGIN_AUTOLOAD would not; no:NAME blocks it before import, no:DISTRIBUTION:NAME blocks only "
        "that distribution's claim on NAME. Repeatable; the lab profile's rules still apply",
    )


_FLAG = re.compile(r"^(no:([A-Za-z0-9][A-Za-z0-9._-]*:)?)?[a-z][a-z0-9_\-]*$")


def _plugin_flag(value: str) -> str:
    if not _FLAG.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not NAME, no:NAME or no:DISTRIBUTION:NAME (a plugin name as `surge plugins` lists it)"
        )
    return value


def plugin_environment(flags: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``SURGE_LOAD_PLUGINS`` and ``SURGE_DISABLE_PLUGINS`` as the ``-p`` flags leave them (a later flag over an
    earlier one and over the environment); a name no installed plugin has is an error with the close name."""
    from surge.errors import ConfigError
    from surge.plugins import _dist_of, source

    claims = {(ep.name, _canonical(_dist_of(ep)[0] or "")) for ep in source.entry_points()}
    names = sorted({name for name, _ in claims})
    load, block = _split(environ.get("SURGE_LOAD_PLUGINS", "")), _split(environ.get("SURGE_DISABLE_PLUGINS", ""))
    problems = []
    for flag in flags:
        entry = flag.removeprefix("no:")
        dist, _, name = entry.rpartition(":")
        if dist and (name, _canonical(dist)) not in claims:
            problems.append((f"-p {flag}", f"distribution {dist} has no plugin '{name}'; `surge plugins` lists them"))
        elif name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "`surge plugins` lists the installed ones"
            problems.append((f"-p {flag}", f"no installed plugin is named '{name}'; {hint}"))
        load, block = [n for n in load if n != entry], [n for n in block if n != entry]
        (block if flag.startswith("no:") else load).append(entry)
    if problems:
        raise ConfigError(problems, "the command line")
    return {"SURGE_LOAD_PLUGINS": ",".join(load), "SURGE_DISABLE_PLUGINS": ",".join(block)}


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def lock_profile(args: argparse.Namespace) -> int:
    from surge.plugins.lab import lock

    text = lock(hashes=args.hashes)
    for line in text.splitlines():  # what every run under the profile would refuse, said here too
        if line.startswith("# warning: "):
            print(f"surge plugins lock: {line.removeprefix('# ')}", file=sys.stderr)
    if args.output is None:
        print(text, end="")
        return 0
    import fsspec

    with fsspec.open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote the lab profile {args.output}; check an environment with `surge plugins check --lab {args.output}`")
    return 0


def check_profile(args: argparse.Namespace) -> int:
    from surge.cli.run import _cwd_importable
    from surge.errors import LabError
    from surge.plugins.lab import resolve
    from surge.settings import load_settings

    settings = load_settings()
    lab = resolve(settings)
    if lab is None:
        raise LabError(
            "no lab profile to check: pass --lab PATH, set SURGE_LAB, or add a [tool.surge.lab] table to "
            "pyproject.toml (`surge plugins lock -o lab.toml` writes one from this environment)"
        )
    with _cwd_importable():  # as `surge fit` started here sees the modules
        problems = lab.check(settings) + lab.planted()
    if problems:
        print(lab.report(problems))
        return 1
    profile = lab.profile
    print(
        f"the environment matches the lab profile {lab.source}: {len(profile.distributions)} distribution(s) "
        f"pinned, autoload = {str(profile.autoload).lower()}, {len(profile.plugins)} plugin(s) forced on or off"
    )
    return 0


def _default_trainer() -> tuple[Any, str | None]:
    """The Trainer a bare run would build, or ``None`` and why it cannot be built."""
    import surge
    from surge.errors import LabError, SurgeError

    try:
        return surge.Trainer(), None
    except LabError:
        raise  # a lab refuses the listing as it refuses a run: `surge plugins check` shows the diff
    except SurgeError as exc:
        return None, str(exc)


def collect() -> dict[str, Any]:
    """The listing as plain data (what ``--json`` prints)."""
    from surge.plugins import discover
    from surge.plugins.lab import find
    from surge.settings import load_settings

    settings = load_settings()
    lab, passed_over = find(settings)
    trainer, problem = _default_trainer()
    catalog = trainer.catalog if trainer is not None else discover(settings, lab=lab, fatal=False)
    handled: dict[str, list[str]] = {}
    if trainer is not None:
        for event in trainer.event_names:
            for name in trainer.event_order(event):
                handled.setdefault(name.split(".")[0], []).append(event)
    rows = []
    for record in catalog.records.values():
        plugin = record.plugin
        rows.append(
            {
                "name": record.name,
                "distribution": record.distribution,
                "version": record.version,
                "kind": record.kind if plugin else None,
                "status": record.status,
                "reason": record.reason,
                "default": plugin.default if plugin else None,
                "role": plugin.role if plugin else None,
                "provides": {slot: sorted(names) for slot, names in plugin.provides.items()} if plugin else {},
                "hooks": _hooks(handled.get(record.name, []), plugin),
                "publishes": [cls.name for cls in plugin.events] if plugin else [],
                "description": plugin.description if plugin else "",
                "origin": record.origin or None,
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "lab": lab.source if lab is not None else None,
        "lab_passed_over": passed_over,
        "plugins": rows,
        "trainer_error": problem,
        "commands": _commands(),
    }


def _commands() -> list[dict[str, Any]]:
    """The commands installed distributions add (entry-point group ``surge.commands``), with their status."""
    from surge.cli import plugin_commands

    return [
        {
            "name": r.name,
            "distribution": r.distribution,
            "version": r.version,
            "status": r.status,
            "reason": r.reason,
            "help": r.command.help if r.command is not None else "",
        }
        for r in plugin_commands().values()
    ]


def _hooks(handled: list[str], plugin: Any) -> list[str]:
    """The events a plugin handles: in a bare run's order where it is active, then those its classes' hook markers
    name (a plugin not built in this run; an event of another plugin that is not in this run), the core's events
    in their order and the others by name."""
    if plugin is None:
        return handled
    classes = [plugin.factory, *(f for names in plugin.provides.values() for f in names.values())]
    marked = {name for cls in classes if isinstance(cls, type) for name in _marked(cls)}
    order = {name: i for i, name in enumerate(EVENTS)}
    rest = sorted(marked - set(handled), key=lambda name: (order.get(name, len(order)), name))
    return [*handled, *rest]


def _marked(cls: type) -> list[str]:
    """The names of ``cls``'s methods marked ``@surge.hookimpl``: the events (its own or another plugin's) it
    handles."""
    return [name for name in dir(cls) if not name.startswith("_") and hasattr(getattr(cls, name, None), "surge_impl")]


def list_plugins(args: argparse.Namespace) -> int:
    if args.event:
        return _print_event(args.event, args.json)
    data = collect()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    rows = data["plugins"]
    print(f"lab profile: {data['lab'] or 'none'}")
    for sentence in data["lab_passed_over"]:
        print(f"  note: {sentence}")
    if not rows:
        print("no surge plugins installed (entry-point group 'surge.plugins')")
    else:
        header = ("name", "distribution", "version", "kind", "status", "provides / hooks")
        table = [header] + [
            (
                r["name"],
                r["distribution"] or "?",
                r["version"] or "?",
                r["kind"] or "?",
                r["status"] + (f" ({r['reason']})" if r["reason"] else ""),
                "; ".join(
                    part
                    for part in (
                        "; ".join(f"{slot}: {', '.join(names)}" for slot, names in r["provides"].items())
                        or ", ".join(r["hooks"]),
                        f"publishes: {', '.join(r['publishes'])}" if r["publishes"] else "",
                    )
                    if part
                )
                or "-",
            )
            for r in rows
        ]
        fitted = table if args.verbose else _fit(table, shutil.get_terminal_size().columns)
        widths = [max(len(str(row[i])) for row in fitted) for i in range(len(header))]
        for row in fitted:
            print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if fitted != table:
            print("(rows cut to the terminal's width: `surge plugins -v` or `--json` shows them whole)")
        loaded = [(r["name"], r["origin"]) for r in rows if r["origin"]]
        if loaded:
            width = max(len(name) for name, _ in loaded)
            print("\nloaded from:\n" + "\n".join(f"  {name.ljust(width)}  {origin}" for name, origin in loaded))
    if data["commands"]:
        print("\ncommands of distributions (entry-point group 'surge.commands'):")
        width = max(len(c["name"]) for c in data["commands"])
        for c in data["commands"]:
            state = c["status"] + (f" ({c['reason']})" if c["reason"] else "")
            print(f"  surge {c['name'].ljust(width)}  {c['distribution'] or '?'} {c['version'] or '?'}  {state}")
    if data["trainer_error"]:
        print(f"\nnote: a default Trainer cannot be built here, so nothing is active:\n{data['trainer_error']}")
    return 0


def _fit(table: list[tuple[str, ...]], columns: int) -> list[tuple[str, ...]]:
    """Cut the rows to ``columns`` characters: the provides/hooks lists first (whole names, then how many
    more), then the status reasons; never below a few characters of each."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    fixed = sum(widths[:4]) + 2 * (len(widths) - 1)
    last = max(len(table[0][-1]), columns - fixed - widths[4])
    status = max(len("unavailable ..."), min(widths[4], columns - fixed - last))
    return [table[0]] + [(*row[:4], _cut(row[4], status), _shorten_list(row[5], last)) for row in table[1:]]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _shorten_list(text: str, width: int) -> str:
    """``a, b, c, d`` as ``a, b ... +2`` in ``width`` characters."""
    items = text.split(", ")
    if len(text) <= width or len(items) == 1:
        return _cut(text, width)
    for kept in range(len(items) - 1, 0, -1):
        shown = f"{', '.join(items[:kept])} ... +{len(items) - kept}"
        if len(shown) <= width:
            return shown
    return _cut(text, width)


def _print_event(event: str, as_json: bool) -> int:
    from surge.errors import SurgeError

    trainer, problem = _default_trainer()
    if trainer is None:
        raise SurgeError(f"cannot resolve the handlers of '{event}': {problem}")
    handlers = trainer.event_order(event)  # a SurgeError naming the valid events for a typo
    said = _contract(trainer, event)
    if as_json:
        print(json.dumps({"event": event, "handlers": handlers, **said}, indent=2))
    else:
        print(f"{event}: " + (" -> ".join(handlers) if handlers else "(no handler: the event is not dispatched)"))
        print(f"  payload: {said['payload']}({', '.join(said['fields'])})")
        print(f"  when: {said['when']}\n  may change: {said['may_change']}")
    return 0


def _contract(trainer: Any, event: str) -> dict[str, Any]:
    """What the event's (or question's) class says of it: :func:`surge.events.contract`, as docs/events.md shows
    it."""
    from surge.events import QUERIES, contract
    from surge.plugins.selection import declared_events

    classes = {**EVENTS, **QUERIES, **{cls.name: cls for cls in declared_events(trainer.catalog)}}
    said = contract(classes[event])
    return {"payload": said.cls.__name__, "fields": list(said.fields), "when": said.when, "may_change": said.may_change}


def print_order(args: argparse.Namespace) -> int:
    from surge.errors import SurgeError

    trainer, problem = _default_trainer()
    if trainer is None:
        raise SurgeError(f"cannot resolve the handler order: {problem}")
    order = {event: trainer.event_order(event) for event in trainer.event_names}
    if args.json:
        print(json.dumps({"events": order}, indent=2))
        return 0
    width = max(map(len, order))
    for event, handlers in order.items():
        print(f"{event.ljust(width)}  {' -> '.join(handlers) if handlers else '-'}")
    return 0
