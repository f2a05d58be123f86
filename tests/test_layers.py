"""The core's layers (docs/guide.md, "Layout"; contracts in pyproject.toml's ``[tool.importlinter]``), checked with
import-linter on every test run: a lower layer importing an upper one, type-only imports included, fails here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", script, str(config), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_core_keeps_its_layers() -> None:
    done = _lint_imports(ROOT / "pyproject.toml", ROOT / "core")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    # the same contracts on a copy of the core with one upward, type-only import added: the check must fail
    # and name it (so the test above cannot pass by checking nothing)
    copy = tmp_path / "core"
    copy.mkdir()
    subprocess.run(["cp", "-r", str(ROOT / "core" / "surge"), str(copy)], check=True)
    events = copy / "surge" / "events" / "__init__.py"
    events.write_text(
        events.read_text()
        + textwrap.dedent(
            """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from surge.engine.trainer import Trainer
            """
        )
    )
    done = _lint_imports(ROOT / "pyproject.toml", copy)
    assert done.returncode != 0
    assert "surge.events is not allowed to import surge.engine" in done.stdout
    assert "surge.events -> surge.engine.trainer" in done.stdout


def test_every_core_event_is_built_by_its_class_in_the_engine() -> None:
    """Each core event's payload class is named where the engine fires it (no name assembled from strings),
    so reading or grepping the loops finds every event, and mypy checks every payload."""
    import ast

    from surge.events import EVENTS

    named: set[str] = set()
    for path in (ROOT / "core" / "surge" / "engine").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ev":
                named.add(node.attr)
    missing = sorted(name for name, cls in EVENTS.items() if cls.__name__ not in named)
    assert not missing, f"events the engine fires without naming their class: {missing}"


def test_the_core_holds_no_lightning_module() -> None:
    """Lightning's names, adapters, 1.x arguments and hooks, CLI and checkpoint import are surge-lightning's (a plugin
    distribution); the core keeps only the deprecated ``surge.compat`` shim, and its loops call no Lightning hook."""
    core = ROOT / "core" / "surge"
    modules = {p.relative_to(core).as_posix() for p in core.rglob("*.py") if "_plugin_template" not in p.parts}
    assert not [m for m in modules if "lightning" in m], "a Lightning module in the core"
    assert {m for m in modules if m.startswith("compat/")} == {"compat/__init__.py", "compat/loggers.py"}
    shim = sum(len((core / m).read_text().splitlines()) for m in ("compat/__init__.py", "compat/loggers.py"))
    assert shim < 80, "surge.compat is a shim: it warns and forwards"
    loops = (core / "engine" / "loops.py").read_text()
    for adapter in ("training_epoch_end", "step_outputs", "epoch_end_outputs", 'f"{stage}_epoch_end"'):
        assert adapter not in loops, f"engine/loops.py carries a Lightning adapter: {adapter}"
