"""The ``surge`` command: ``surge fit`` (the embedded digits example by default) and ``surge plugins``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from surge.hooks import hookimpl

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surge", description="Surge: a PyTorch training engine built of plugins.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    fit = commands.add_parser("fit", help="train a model (with no arguments: the embedded digits example)")
    fit.add_argument("--max-epochs", type=int, default=10, help="epochs to train (default 10)")
    fit.add_argument("--seed", type=int, default=0, help="seed for everything (default 0)")
    fit.add_argument("--root", default=None, help="default_root_dir: where surge_runs/version_N is created")
    fit.add_argument("--accelerator", default="auto", help="cpu, cuda, mps or auto (default)")

    plugins = commands.add_parser("plugins", help="list installed plugins with their status and hooks")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from surge.errors import SurgeError

    try:
        return _fit(args) if args.command == "fit" else _plugins(args)
    except SurgeError as exc:  # a problem the user can fix: the message says how, a traceback would not help
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 1


class _ConsoleReport:
    """Prints one line per epoch and the final validation figures (an observer, like any logger)."""

    surge_name = "cli_report"
    surge_kind = "observer"

    def __init__(self) -> None:
        self._started = time.perf_counter()

    def _line(self, trainer: Any) -> str:
        shown = {k: v for k, v in trainer.callback_metrics.items() if not k.endswith(("_step", "_epoch"))}
        figures = "  ".join(f"{k}={float(v):.4f}" for k, v in sorted(shown.items()))
        return figures

    @hookimpl
    def train_start(self, event: Any) -> None:
        self._started = time.perf_counter()

    @hookimpl
    def train_epoch_end(self, event: Any) -> None:
        t = event.trainer
        elapsed = time.perf_counter() - self._started
        print(f"epoch {event.epoch + 1}/{t.max_epochs}  {self._line(t)}  [{elapsed:.2f}s]", flush=True)


def _fit(args: argparse.Namespace) -> int:
    import surge
    from surge.examples.digits import DigitsClassifier, DigitsDataModule

    surge.seed_everything(args.seed)
    report = _ConsoleReport()
    trainer = surge.Trainer(
        max_epochs=args.max_epochs,
        accelerator=args.accelerator,
        default_root_dir=args.root,
        plugins=[report],
    )
    print(
        f"surge fit: digits example (scikit-learn's 8x8 images), {args.max_epochs} epochs on {trainer.strategy.root_device}"
    )
    model = DigitsClassifier(max_epochs=args.max_epochs)
    data = DigitsDataModule(seed=args.seed)
    trainer.fit(model, datamodule=data)
    if trainer.interrupted:
        print("interrupted; stopped at a step boundary", file=sys.stderr)
        return 130
    accuracy = float(trainer.callback_metrics["val_acc"])
    print(f"final validation accuracy: {accuracy:.4f}")
    print(f"run directory: {trainer.run_dir}")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    from surge.plugins import discover
    from surge.settings import load_settings

    catalog = discover(load_settings())
    rows: list[dict[str, Any]] = []
    for record in catalog.records.values():
        plugin = record.plugin
        status = record.status
        if plugin is not None and status == "available" and plugin.kind != "provider" and plugin.default:
            status = "active"
        rows.append(
            {
                "name": record.name,
                "distribution": record.distribution,
                "version": record.version,
                "kind": record.kind,
                "status": status,
                "reason": record.reason,
                "provides": {slot: sorted(names) for slot, names in plugin.provides.items()} if plugin else {},
                "hooks": _hooks_of(plugin) if plugin else [],
            }
        )
    if args.json:
        print(json.dumps({"plugins": rows}, indent=2))
        return 0
    if not rows:
        print("no surge plugins installed (entry-point group 'surge.plugins')")
        return 0
    header = ("name", "distribution", "version", "kind", "status", "provides / hooks")
    table = [header] + [
        (
            r["name"],
            r["distribution"] or "?",
            r["version"] or "?",
            r["kind"],
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
    return 0


def _hooks_of(plugin: Any) -> list[str]:
    from surge.events import EVENTS

    factory = plugin.factory
    if not isinstance(factory, type):
        return []
    return [name for name in EVENTS if hasattr(getattr(factory, name, None), "surge_impl")]


if __name__ == "__main__":
    sys.exit(main())
