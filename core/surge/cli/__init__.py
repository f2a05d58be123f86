"""The ``surge`` command. Each command group registers itself: ``fit``, ``validate``, ``test``, ``predict``,
``tune`` and ``completion`` in :mod:`surge.cli.run`, ``plugins`` in :mod:`surge.cli.plugins`.

Exit status: 0 done, 1 a problem the message explains (a lab mismatch, a plugin error), 2 a usage or config
error (argparse's, or a :class:`surge.ConfigError`: every problem of the run config at once), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from surge._logging import configure_logging
from surge.cli import new as _cli_new
from surge.cli import plot as _cli_plot
from surge.cli import plugins as _cli_plugins
from surge.cli import run as _cli_run

__all__ = ["main", "build_parser"]


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
    _cli_new.register(commands)
    _cli_plot.register(commands)
    _cli_run.register_completion(commands, parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if extra and not getattr(args, "overrides_allowed", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra  # --trainer.max_epochs=3 and friends, for the run commands
    configure_logging()  # the application's choice (SURGE_LOG_LEVEL); a Trainer leaves logging alone
    from surge.errors import ConfigError, SurgeError

    try:
        with _lab(args.lab), _plugin_flags(getattr(args, "plugin_flags", [])):
            return int(args.run(args))
    except ConfigError as exc:  # every problem of the config at once; a traceback would not help
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except SurgeError as exc:  # a problem the user can fix: the message says how
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 1


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
