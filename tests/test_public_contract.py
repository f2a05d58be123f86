"""Third-party parity (issue 18): the first-party plugins, their tests and ``surge.testing`` use only what a third
party can use, the public API. Checked on the source: no import of a private core module or name, and no
``_name`` attribute read from the objects a plugin gets from the core (the run, the Module, the Trainer)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = {
    "surge",
    "surge.checkpoint",
    "surge.cli",
    "surge.cli.runconfig",
    "surge.config",
    "surge.errors",
    "surge.events",
    "surge.events.protocols",
    "surge.events.run",
    "surge.plugins",
    "surge.plugins.backends",
    "surge.plugins.distributed",
    "surge.rank_zero",
    "surge.seed",
    "surge.settings",
    "surge.testing",
}
"""The core modules a plugin may import (their public names only)."""

CORE_OBJECTS = {"trainer", "model", "module", "pl_module", "run", "lightning_module", "strategy", "accelerator"}
"""Names under which plugin code holds the core's objects: a ``_name`` attribute read on one is a private use."""


def _sources() -> list[Path]:
    files = [ROOT / "core" / "surge" / "testing.py"]
    for plugin in sorted((ROOT / "plugins").glob("surge-*")):
        files += sorted(p for p in plugin.rglob("*.py") if "__pycache__" not in p.parts)
    return files


def problems_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "surge" and not node.level:
            if node.module not in PUBLIC_MODULES:
                found.append(f"{where}:{node.lineno}: imports from the private module {node.module}")
            found += [
                f"{where}:{node.lineno}: imports the private name {node.module}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{where}:{node.lineno}: imports the private module {a.name}"
                for a in node.names
                if a.name.split(".")[0] == "surge" and a.name not in PUBLIC_MODULES
            ]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            holder = node.value
            name = (
                holder.attr if isinstance(holder, ast.Attribute) else holder.id if isinstance(holder, ast.Name) else ""
            )
            if name in CORE_OBJECTS:
                found.append(f"{where}:{node.lineno}: reads the private attribute {name}.{node.attr}")
            if isinstance(holder, ast.Name) and holder.id == "surge":
                found.append(f"{where}:{node.lineno}: uses the private name surge.{node.attr}")
    return found


def test_plugins_and_the_test_kit_use_only_the_public_api() -> None:
    problems = [line for path in _sources() for line in problems_in(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from surge.engine.trainer import Trainer", "private module surge.engine.trainer"),
        ("from surge.events import _StageEvent", "private name surge.events._StageEvent"),
        ("import surge.engine.loops", "private module surge.engine.loops"),
        ("x = event.trainer._bus", "private attribute trainer._bus"),
        ("model._surge_trainer = None", "private attribute model._surge_trainer"),
        ("surge._logging.configure()", "private name surge._logging"),
    ],
)
def test_the_check_sees_each_kind_of_private_use(tmp_path: Path, source: str, expected: str) -> None:
    path = ROOT / "plugins" / "_probe.py"  # parsed only; relative to the root like the real sources
    try:
        path.write_text(source + "\n")
        assert any(expected in line for line in problems_in(path))
    finally:
        path.unlink()


def test_the_check_covers_the_lightning_adapters() -> None:
    # surge-lightning is written against the public contract too: its adapters, translator and CLI are checked
    covered = {str(p.relative_to(ROOT)) for p in _sources()}
    for module in ("_callbacks.py", "_v1.py", "_epoch_end.py", "checkpoint.py", "pytorch/cli.py"):
        assert f"plugins/surge-lightning/src/surge_lightning/{module}" in covered
