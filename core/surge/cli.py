"""The ``surge`` command. Each command group registers itself: ``fit`` here, ``plugins`` in
:mod:`surge._cli_plugins`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from surge import _cli_new, _cli_plot, _cli_plugins
from surge.hooks import hookimpl

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surge", description="Surge: a PyTorch training engine built of plugins.")
    parser.add_argument(
        "--lab",
        metavar="PATH",
        default=None,
        help="lab profile (path or fsspec URL) every command is checked against; overrides SURGE_LAB",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    fit = commands.add_parser("fit", help="train a model (with no arguments: the embedded digits example)")
    fit.add_argument("--max-epochs", type=int, default=10, help="epochs to train (default 10)")
    fit.add_argument("--seed", type=int, default=0, help="seed for everything (default 0)")
    fit.add_argument("--root", default=None, help="default_root_dir: where surge_runs/version_N is created")
    fit.add_argument("--accelerator", default="auto", help="cpu, cuda, mps or auto (default)")

    _cli_plugins.add_lab_option(fit)
    fit.set_defaults(run=_fit)
    _cli_plugins.register(commands)
    _cli_new.register(commands)
    _cli_plot.register(commands)

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from surge.errors import SurgeError

    try:
        with _lab(args.lab):
            return int(args.run(args))
    except SurgeError as exc:  # a problem the user can fix: the message says how, a traceback would not help
        print(f"surge {args.command}: error: {exc}", file=sys.stderr)
        return 1


@contextlib.contextmanager
def _lab(location: str | None) -> Iterator[None]:
    """``--lab PATH`` is ``SURGE_LAB=PATH`` for the command (so every Trainer it builds sees it)."""
    if location is None:
        yield
        return
    previous = os.environ.get("SURGE_LAB")
    os.environ["SURGE_LAB"] = location
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("SURGE_LAB", None)
        else:
            os.environ["SURGE_LAB"] = previous


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
        log_every_n_steps=5,  # 23 steps an epoch: a few points per epoch in metrics.csv
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
    if trainer.run_dir and any(s["name"] == "csv" for s in trainer.plugin_set()):
        print(f"plot its metrics: surge plot {trainer.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
