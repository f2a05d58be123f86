"""Lightning 1.x's argparse helpers on the Trainer (``Trainer.add_argparse_args``, ``from_argparse_args``,
``parse_argparser``), which Lightning 2 removed and 1.x programs still call: every Trainer argument (Surge's, and
Lightning 1.x's, which this distribution translates) becomes ``--name``, its value read as 1.x read it (``None``,
booleans, integers, floats, else the string), and the parsed namespace builds the Trainer."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from surge.config import TrainerConfig

from surge_lightning._v1 import DEFAULTS as V1_DEFAULTS

__all__ = ["add_argparse_args", "arguments_of", "parse_value"]


def parse_value(text: str) -> Any:
    """A command-line value as Lightning 1.x took it: ``None``, ``true``/``false``, an int, a float, else the text
    (``"0,1"`` stays a string: ``devices`` reads it as Lightning does)."""
    lowered = text.strip().lower()
    if lowered == "none":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _names() -> dict[str, Any]:
    """Every Trainer argument with its default: Surge's, then Lightning 1.x's."""
    names = {name: field.default for name, field in TrainerConfig.model_fields.items()}
    names.update({name: default for name, default in V1_DEFAULTS.items() if name not in names})
    return names


def add_argparse_args(parent_parser: argparse.ArgumentParser, use_argument_group: bool = True) -> Any:
    """Add ``--<argument>`` for every Trainer argument to ``parent_parser`` (in a ``pl.Trainer`` group, as 1.x did)
    and return it (1.x returned the group's parser: the same object here)."""
    target: Any = parent_parser.add_argument_group("pl.Trainer") if use_argument_group else parent_parser
    for name, default in _names().items():
        target.add_argument(f"--{name}", type=parse_value, default=default, dest=name, help=f"Trainer({name}=...)")
    return parent_parser


def arguments_of(
    args: argparse.Namespace | argparse.ArgumentParser | Mapping[str, Any], **overrides: Any
) -> dict[str, Any]:
    """The Trainer arguments a parsed namespace (or a parser, parsed now, or a dict) holds, less those at their
    default (so 1.x arguments left alone ask for nothing), with ``overrides`` on top."""
    if isinstance(args, argparse.ArgumentParser):
        args = args.parse_args()
    values = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args)
    names = _names()
    chosen = {k: v for k, v in values.items() if k in names and v != names[k]}
    return {**chosen, **overrides}
