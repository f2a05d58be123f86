"""Our run-config loader (``surge.cli.runconfig``) against one built on jsonargparse, on the same configs.

    python benchmarks/runconfig_compare.py [--repeat 5] [--markdown]

Both loaders get the same run configs (YAML files written to a temporary directory) and command-line
overrides: two good ones and ten bad ones. For each case and loader the table says whether the problem is
found (a good config: loads), whether the message names the file and the line of the offending key, whether
every problem of the case is in the one error, and the median load time of ``--repeat`` loads (the good cases:
merge, import, validate; both loaders check the same things, nothing is built). The jsonargparse loader is
what LightningCLI does: ``ArgumentParser`` with ``--config`` (``ActionConfigFile``), ``add_subclass_arguments``
for ``model``/``data`` (class_path + init_args against the class signature), the Trainer's arguments from
``surge.config.TrainerConfig`` (a pydantic model) and one typed entry per plugin setting model.

docs/cli.md ("Run configs: our loader and jsonargparse") records the numbers and the decision.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # class paths below: runconfig_compare.Classifier

import surge
import torch
from surge.examples.digits import DigitsClassifier


class Classifier(DigitsClassifier):
    """A Module with a required argument (``width``) and typed ones."""

    def __init__(self, width: int, lr: float = 0.003, hidden: int = 64) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.width = width


class WithActivation(DigitsClassifier):
    """A Module whose argument is itself an object given by class_path (a nested class_path in init_args)."""

    def __init__(self, activation: torch.nn.Module | None = None, lr: float = 0.003) -> None:
        super().__init__(lr=lr)
        self.activation = activation


@dataclass
class Case:
    name: str
    yaml: str
    overrides: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Dotted keys each of which the error must name (empty: a good config)."""
    line: int | None = None
    """The line of the (first) offending key in the file; None: not in a file (an override)."""
    built: Callable[[Any], bool] | None = None
    """For a good config: what the built model must be like."""


GOOD = """\
seed_everything: 0
model:
  class_path: runconfig_compare.Classifier
  init_args:
    width: 8
    lr: 0.01
data:
  class_path: surge.examples.digits.DigitsDataModule
  init_args:
    batch_size: 32
trainer:
  max_epochs: 2
  log_every_n_steps: 5
plugins:
  checkpoint:
    save_top_k: 2
    monitor: val_acc
"""


def _bad(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


CASES = [
    Case("good", GOOD),
    Case("good + overrides", GOOD, ["--trainer.max_epochs=3", "--model.init_args.lr=0.02"]),
    Case(
        "good: nested class_path in init_args",
        _bad("runconfig_compare.Classifier", "runconfig_compare.WithActivation").replace(
            "    width: 8", "    activation: {class_path: torch.nn.ReLU}"
        ),
        built=lambda model: isinstance(model.activation, torch.nn.ReLU),
    ),
    Case("unknown key", _bad("  max_epochs: 2", "  max_epoch: 2"), problems=["max_epoch"], line=12),
    Case("wrong type", _bad("  max_epochs: 2", "  max_epochs: ten"), problems=["max_epochs"], line=12),
    Case(
        "bad class_path",
        _bad("runconfig_compare.Classifier", "runconfig_compare.Clasifier"),
        problems=["class_path"],
        line=3,
    ),
    Case("missing required init arg", _bad("    width: 8\n", ""), problems=["width"], line=4),
    Case("unknown init arg", _bad("    lr: 0.01", "    lrr: 0.01"), problems=["lrr"], line=6),
    Case(
        "two problems at once",
        _bad("  max_epochs: 2", "  max_epoch: 2").replace("    lr: 0.01", "    lr: fast"),
        problems=["max_epoch", "lr"],
        line=12,
    ),
    Case("bad override", GOOD, ["--trainer.max_epochs=abc"], problems=["max_epochs"]),
    Case("YAML syntax error", _bad("  max_epochs: 2", "  max_epochs: [2"), problems=["yaml"], line=13),
    Case("plugin settings rule (validator)", _bad("    monitor: val_acc\n", ""), problems=["monitor"], line=15),
    Case("nested plugin setting wrong", _bad("save_top_k: 2", "save_top_k: two"), problems=["save_top_k"], line=16),
    Case(
        "three problems, three sections",
        _bad("    batch_size: 32", "    batch_size: big").replace("save_top_k: 2", "save_top_kk: 2")
        + "seed_everything_: 1\n",
        problems=["batch_size", "save_top_kk", "seed_everything_"],
        line=10,
    ),
]


# -- the two loaders -------------------------------------------------------------------------------------------


def load_ours(path: str, overrides: list[str]) -> Any:
    from surge.cli import runconfig

    config = runconfig.resolve([runconfig.load_file(path)], runconfig.parse_overrides(overrides), lab=False)
    return config.model.build()


def _jsonargparse_parser() -> Any:
    from jsonargparse import ActionConfigFile, ArgumentParser
    from surge.config import TrainerConfig
    from surge.plugins import discover
    from surge.settings import load_settings

    parser = ArgumentParser(prog="surge fit", exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("--seed_everything", type=int | None, default=None)
    parser.add_argument("--ckpt_path", type=str | None, default=None)
    parser.add_subclass_arguments(surge.Module, "model", required=True)
    parser.add_subclass_arguments(surge.DataModule, "data", required=False)
    parser.add_class_arguments(TrainerConfig, "trainer", skip={"plugins", "callbacks"})
    for record in discover(load_settings()).loaded():  # one typed entry per plugin: on/off or its settings
        config = record.plugin.config if record.plugin else None
        kind: Any = bool | config | None if config is not None else bool | dict | None
        parser.add_argument(f"--plugins.{record.name}", type=kind, default=None)
    return parser


_PARSER: Any = None


def load_jsonargparse(path: str, overrides: list[str]) -> Any:
    global _PARSER
    if _PARSER is None:
        _PARSER = _jsonargparse_parser()
    with contextlib.redirect_stderr(io.StringIO()):
        config = _PARSER.parse_args(["--config", path, *overrides])
    instantiate = getattr(_PARSER, "instantiate", None) or _PARSER.instantiate_classes  # renamed in 4.49
    return instantiate(config).model


LOADERS: dict[str, Callable[[str, list[str]], Any]] = {"ours": load_ours, "jsonargparse": load_jsonargparse}


# -- measuring -------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    found: bool
    file_and_line: bool | None
    all_at_once: bool | None
    seconds: float
    message: str


def measure(loader: Callable[[str, list[str]], Any], case: Case, path: str, repeat: int) -> Outcome:
    times, message, raised, result = [], "", False, None
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            result = loader(path, case.overrides)
            raised, message = False, ""
        except SystemExit as exc:  # argparse-style error handlers
            raised, message = True, str(exc)
        except Exception as exc:
            raised, message = True, f"{type(exc).__name__}: {exc}"
        times.append(time.perf_counter() - start)
    good = not case.problems
    found = (not raised and (case.built is None or case.built(result))) if good else raised
    named = [p for p in case.problems if p in message]
    where = None
    if not good and case.line is not None:
        where = Path(path).name in message and f"line {case.line}" in message
    return Outcome(found, where, None if good else len(named) == len(case.problems), statistics.median(times), message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="loads per case and loader (the median is shown)")
    parser.add_argument("--markdown", action="store_true", help="a markdown table (as in docs/cli.md)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every error message too")
    args = parser.parse_args(argv)
    os.environ.pop("SURGE_LAB", None)
    start = time.perf_counter()
    global _PARSER
    _PARSER = _jsonargparse_parser()
    built_ms = (time.perf_counter() - start) * 1e3
    with tempfile.TemporaryDirectory() as tmp:  # imports and first-load caches out of the timings
        warm = Path(tmp) / "warm.yaml"
        warm.write_text(GOOD)
        for loader in LOADERS.values():
            loader(str(warm), [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            path = Path(tmp) / "run.yaml"
            path.write_text(textwrap.dedent(case.yaml))
            outcomes = {name: measure(loader, case, str(path), args.repeat) for name, loader in LOADERS.items()}
            rows.append((case, outcomes))
            if args.verbose:
                for name, outcome in outcomes.items():
                    print(f"--- {case.name} / {name}:\n{outcome.message or '(loaded)'}\n")

    def mark(value: bool | None) -> str:
        return "-" if value is None else ("yes" if value else "NO")

    header = ["case"] + [f"{n}: {c}" for n in LOADERS for c in ("found", "file+line", "all", "ms")]
    lines = []
    for case, outcomes in rows:
        cells = [case.name]
        for outcome in outcomes.values():
            cells += [
                mark(outcome.found),
                mark(outcome.file_and_line),
                mark(outcome.all_at_once if len(case.problems) > 1 else None),
                f"{outcome.seconds * 1e3:.1f}",
            ]
        lines.append(cells)
    print(f"jsonargparse parser built once per process (Trainer, plugin models, subclass arguments): {built_ms:.0f} ms")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
        for cells in lines:
            print("| " + " | ".join(cells) + " |")
    else:
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        for cells in [header, *lines]:
            print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
