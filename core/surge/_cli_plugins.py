"""``surge plugins``: what is installed, what a default run would activate, and in which order it runs.

``surge plugins [--json] [--event NAME]`` lists every discovered plugin; ``surge plugins order [--json]``
prints the resolved handler order of every event. Both build the Trainer a bare ``surge fit`` would build
(environment and lab rules included), so what they show is what a run does, and both refuse to run in an
environment that does not match the lab profile. The JSON form of the listing follows
``docs/plugins.schema.json``.

``surge plugins lock [-o FILE] [--hashes]`` writes a lab profile pinning the current environment;
``surge plugins check [--lab PATH]`` compares the environment with a profile and prints the diff (see
:mod:`surge.lab`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from surge.events import EVENTS

SCHEMA_VERSION = 1


def register(commands: Any) -> None:
    plugins = commands.add_parser("plugins", help="list installed plugins: status, kind, hooks, order")
    plugins.add_argument("--json", action="store_true", help="machine-readable output (docs/plugins.schema.json)")
    plugins.add_argument("--event", metavar="NAME", help="only the handlers of event NAME, in the order they run")
    add_lab_option(plugins)
    plugins.set_defaults(run=list_plugins)
    actions = plugins.add_subparsers(dest="action", metavar="ACTION")
    order = actions.add_parser("order", help="the resolved handler order for every event")
    order.add_argument("--json", action="store_true", help="machine-readable output")
    add_lab_option(order)
    order.set_defaults(run=print_order)
    lock = actions.add_parser("lock", help="write a lab profile pinning the installed plugin distributions")
    lock.add_argument("-o", "--output", metavar="FILE", help="write to FILE (a path or fsspec URL), not stdout")
    lock.add_argument("--hashes", action="store_true", help="pin each distribution's files hash too")
    lock.set_defaults(run=lock_profile)
    check = actions.add_parser("check", help="compare the environment with a lab profile; exit 1 on a mismatch")
    add_lab_option(check)
    check.set_defaults(run=check_profile)


def add_lab_option(parser: argparse.ArgumentParser) -> None:
    """``--lab PATH`` on a command; it stands in for ``SURGE_LAB`` while the command runs (see ``surge.cli``)."""
    parser.add_argument(
        "--lab",
        metavar="PATH",
        default=argparse.SUPPRESS,  # so `surge --lab X plugins` keeps the top-level value
        help="lab profile (path or fsspec URL) to check against; overrides SURGE_LAB and pyproject.toml",
    )


def lock_profile(args: argparse.Namespace) -> int:
    from surge.lab import lock

    text = lock(hashes=args.hashes)
    if args.output is None:
        print(text, end="")
        return 0
    import fsspec

    with fsspec.open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote the lab profile {args.output}; check an environment with `surge plugins check --lab {args.output}`")
    return 0


def check_profile(args: argparse.Namespace) -> int:
    from surge.errors import LabError
    from surge.lab import resolve
    from surge.settings import load_settings

    lab = resolve(load_settings())
    if lab is None:
        raise LabError(
            "no lab profile to check: pass --lab PATH, set SURGE_LAB, or add a [tool.surge.lab] table to "
            "pyproject.toml (`surge plugins lock -o lab.toml` writes one from this environment)"
        )
    problems = lab.check()
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
    from surge.settings import load_settings

    trainer, problem = _default_trainer()
    catalog = trainer.catalog if trainer is not None else discover(load_settings())
    handled: dict[str, list[str]] = {}
    if trainer is not None:
        for event in EVENTS:
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
                "hooks": handled.get(record.name) or (_declared_hooks(plugin.factory) if plugin else []),
                "description": plugin.description if plugin else "",
            }
        )
    return {"schema_version": SCHEMA_VERSION, "plugins": rows, "trainer_error": problem}


def _declared_hooks(factory: Any) -> list[str]:
    """Events a not-yet-built participant would handle, read from its class's hook markers."""
    if not isinstance(factory, type):
        return []
    return [name for name in EVENTS if hasattr(getattr(factory, name, None), "surge_impl")]


def list_plugins(args: argparse.Namespace) -> int:
    if args.event:
        return _print_event(args.event, args.json)
    data = collect()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    rows = data["plugins"]
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
                "; ".join(f"{slot}: {', '.join(names)}" for slot, names in r["provides"].items())
                or ", ".join(r["hooks"])
                or "-",
            )
            for r in rows
        ]
        widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
        for row in table:
            print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if data["trainer_error"]:
        print(f"\nnote: a default Trainer cannot be built here, so nothing is active:\n{data['trainer_error']}")
    return 0


def _print_event(event: str, as_json: bool) -> int:
    from surge.errors import SurgeError

    trainer, problem = _default_trainer()
    if trainer is None:
        raise SurgeError(f"cannot resolve the handlers of '{event}': {problem}")
    handlers = trainer.event_order(event)  # a SurgeError naming the valid events for a typo
    if as_json:
        print(json.dumps({"event": event, "handlers": handlers}, indent=2))
    else:
        print(f"{event}: " + (" -> ".join(handlers) if handlers else "(no handler: the event is not dispatched)"))
    return 0


def print_order(args: argparse.Namespace) -> int:
    from surge.errors import SurgeError

    trainer, problem = _default_trainer()
    if trainer is None:
        raise SurgeError(f"cannot resolve the handler order: {problem}")
    order = {event: trainer.event_order(event) for event in EVENTS}
    if args.json:
        print(json.dumps({"events": order}, indent=2))
        return 0
    width = max(map(len, order))
    for event, handlers in order.items():
        print(f"{event.ljust(width)}  {' -> '.join(handlers) if handlers else '-'}")
    return 0
