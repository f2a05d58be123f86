"""The ``surge`` command. Each core command group registers itself: ``fit``, ``validate``, ``test``, ``predict``,
``tune`` and ``completion`` in :mod:`surge.cli.run`, ``plugins`` in :mod:`surge.cli.plugins`. Every other
command comes from an installed distribution through the ``surge.commands`` entry-point group
(:mod:`surge.plugins.commands`): ``plot`` from a first-party plugin, ``new-plugin`` from the core with its
``template`` extra (:data:`PROVIDED_BY`). A command that is not installed, or is refused, still parses and says why and what to install.

Exit status: 0 done, 1 a problem the message explains (a lab mismatch, a plugin error), 2 a usage or config
error (argparse's, or a :class:`surge.ConfigError`: every problem of the run config at once), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from surge._logging import configure_logging
from surge.cli import plugins as _cli_plugins
from surge.cli import run as _cli_run
from surge.errors import LabError, SurgeError
from surge.plugins._first_party import COMMANDS
from surge.plugins.commands import CommandRecord, discover_commands

__all__ = ["main", "build_parser", "options_reference", "CORE_COMMANDS", "PROVIDED_BY"]

options_reference = _cli_run.options_reference
"""The Trainer arguments' reference, as ``surge fit --help`` prints it (a command-line front end shows it too)."""

CORE_COMMANDS = (*_cli_run.COMMANDS, "completion", "plugins")
"""The commands of the core's own command list; a plugin command of one of these names is refused."""

PROVIDED_BY = COMMANDS
"""Commands first-party distributions contribute, and what to install for each when it is missing."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="surge",
        description="Surge: a PyTorch training engine built of plugins. `surge fit --help` lists every "
        "Trainer and plugin option of a run.",
    )
    parser.add_argument(
        "--lab",
        metavar="PATH",
        default=None,
        help="lab profile (path or fsspec URL) every command is checked against; overrides SURGE_LAB",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _cli_run.register(commands)
    _cli_plugins.register(commands)
    for record in plugin_commands().values():
        _add_plugin_command(commands, record)
    for name, requirement in PROVIDED_BY.items():
        if name not in commands.choices:
            missing = CommandRecord(name, None, None, "", "unavailable", "")
            missing.reason = (
                f"it is provided by {requirement}, which is not installed: `pip install {pip(requirement)}`"
            )
            _add_plugin_command(commands, missing)
    _cli_run.register_completion(commands, parser)
    return parser


def pip(requirement: str) -> str:
    """A requirement as a shell word (``'surge[template]'``: brackets are glob characters)."""
    return f"'{requirement}'" if "[" in requirement else requirement


def plugin_commands() -> dict[str, CommandRecord]:
    """The ``surge.commands`` entry points under the active lab profile (``SURGE_LAB``, ``pyproject.toml``).
    A lab profile that cannot be read refuses every plugin command with its error; the core's commands
    report it themselves."""
    from surge.plugins.lab import find
    from surge.settings import load_settings

    try:
        lab, _ = find(load_settings())
    except SurgeError as exc:
        records = discover_commands(CORE_COMMANDS, lab=None, load=False)
        for record in records.values():
            record.status, record.reason = "blocked", f"the lab profile cannot be read: {exc}"
        return records
    return discover_commands(CORE_COMMANDS, lab=lab)


def _add_plugin_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], record: CommandRecord) -> None:
    command = record.command
    origin = f"[{record.distribution or '?'} {record.version or '?'}]" if record.distribution else ""
    if record.status == "available" and command is not None:
        sub = commands.add_parser(
            record.name, help=f"{command.help} {origin}", description=command.description or command.help
        )
        _cli_plugins.add_lab_option(sub)  # every command runs under the lab profile it names
        command.register(sub)
        sub.set_defaults(run=_checked(record), command_record=record)
        return
    if record.status == "failed" and record.name in CORE_COMMANDS:
        return  # the core's command runs; `surge plugins` lists the refused one
    what = "not installed" if record.distribution is None else record.status
    sub = commands.add_parser(record.name, help=f"({what}: {record.reason}) {origin}".strip(), add_help=False)
    sub.set_defaults(run=_refuse(record), overrides_allowed=True)  # whatever follows: the refusal says why


def _refuse(record: CommandRecord) -> Any:
    def refuse(args: argparse.Namespace) -> int:
        if record.distribution is None:
            raise SurgeError(f"surge {record.name} is not installed: {record.reason}")
        raise (LabError if record.status == "blocked" else SurgeError)(record.refusal())

    return refuse


def _checked(record: CommandRecord) -> Any:
    """Run a plugin's command after the lab check every ``surge fit`` makes (the environment matches the profile)."""

    def run(args: argparse.Namespace) -> int:
        from surge.plugins.lab import resolve
        from surge.settings import load_settings

        assert record.command is not None
        lab = resolve(load_settings())
        if lab is not None:
            lab.verify()
        return int(record.command.run(args))

    return run


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    configure_logging()  # the application's choice (SURGE_LOG_LEVEL); a Trainer leaves logging alone
    with _lab(_lab_option(argv)):  # plugin commands are read under the lab the command runs under
        parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if extra and not getattr(args, "overrides_allowed", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra  # --trainer.max_epochs=3 and friends, for the run commands
    from surge.errors import ConfigError

    try:
        with _lab(args.lab), _plugin_flags(getattr(args, "plugin_flags", [])):
            return int(args.run(args))
    except ConfigError as exc:  # every problem of the config at once; a traceback would not help
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except SurgeError as exc:  # a problem the user can fix: the message says how
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 1


def _lab_option(argv: list[str]) -> str | None:
    """``--lab PATH`` wherever it is written (``surge --lab X plot``, ``surge plugins check --lab X``), read
    before the parser exists, since the plugin commands it lists depend on it; a malformed one is left to it."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    pre.add_argument("--lab")
    try:
        return pre.parse_known_args(argv)[0].lab
    except argparse.ArgumentError:
        return None


@contextlib.contextmanager
def _lab(location: str | None) -> Iterator[None]:
    """``--lab PATH`` is ``SURGE_LAB=PATH`` for the command (so every Trainer it builds sees it)."""
    with _environ({} if location is None else {"SURGE_LAB": location}):
        yield


@contextlib.contextmanager
def _plugin_flags(flags: list[str]) -> Iterator[None]:
    """``-p NAME`` / ``-p no:NAME`` are ``SURGE_LOAD_PLUGINS`` / ``SURGE_DISABLE_PLUGINS`` entries for the command
    (so discovery, every Trainer and a relaunched process see them)."""
    with _environ(_cli_plugins.plugin_environment(flags, os.environ) if flags else {}):
        yield


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


if __name__ == "__main__":
    sys.exit(main())
