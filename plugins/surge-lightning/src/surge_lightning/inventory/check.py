"""The classification file against the installed Lightning and this repository: what is unclassified, stale, or
names a test that does not exist. Imports Lightning (through :mod:`.surface`) only when given no surface."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from surge_lightning.inventory import CLASS_SECTIONS, Inventory

if TYPE_CHECKING:
    from surge_lightning.inventory.surface import Surface


def unclassified(surface: Surface, inventory: Inventory) -> list[tuple[str, str]]:
    """(section, name) for each name Lightning has that the file does not classify; ``name`` is ``""`` for a module
    neither refused nor given a section."""
    missing: list[tuple[str, str]] = []
    for module in surface.modules:
        if inventory.refused_module(module) is None and module not in inventory.sections:
            missing.append((module, ""))
    for section, name in surface.keys():
        if section not in CLASS_SECTIONS and inventory.refused_module(section) is not None:
            continue
        if inventory.entry(section, name) is None:
            missing.append((section, name))
    return missing


def stale(surface: Surface, inventory: Inventory) -> list[str]:
    """What the file classifies that Lightning no longer has, or classifies twice over (a name of a module that the
    file refuses whole)."""
    found: list[str] = []
    modules = set(surface.modules)
    for module in inventory.modules:
        if module not in modules:
            found.append(f"[modules] {module}: Lightning {surface.version} has no such module")
    for section, names in inventory.sections.items():
        if section not in surface.names:
            found.append(f"[{section}]: Lightning {surface.version} has no such module or class")
            continue
        if section not in CLASS_SECTIONS and inventory.refused_module(section) is not None:
            found.append(f"[{section}]: the module is refused in [modules]; its names need no lines")
        for name in names:
            if name not in surface.names[section]:
                found.append(f"[{section}] {name}: Lightning {surface.version} has no such name")
    return found


def hook_flags(surface: Surface, inventory: Inventory) -> list[str]:
    """Refused or mapped members whose ``hook = true`` disagrees with the hooks read from Lightning's loops: the flag
    is what makes Surge refuse a user's override, so it must be on every such hook and on nothing else."""
    found: list[str] = []
    for section in CLASS_SECTIONS:
        hooks = surface.hooks.get(section, set())
        for name, entry in inventory.not_served(section).items():
            if entry.hook != (name in hooks):
                said = "Lightning's loops call it: add hook = true" if name in hooks else "not a hook: drop hook = true"
                found.append(f"[{section}] {name}: {said}")
    return found


def missing_tests(inventory: Inventory, root: Path) -> list[str]:
    """The test node ids of implemented entries that do not exist under ``root`` (the repository): the file, and the
    test function (``test_x``, ``TestX::test_x``; a parametrized id ``test_x[case]`` needs ``test_x``)."""
    found: list[str] = []
    names_in: dict[str, set[str] | None] = {}  # a test file's test names; None: no such file
    for entry in inventory.entries():
        for node_id in entry.tests:
            path, _, rest = node_id.partition("::")
            if path not in names_in:
                file = root / path
                names_in[path] = set(_test_names(file)) if file.is_file() else None
            names, test = names_in[path], rest.split("[")[0]
            if names is None:
                found.append(f"[{entry.section}] {entry.name}: {node_id}: no file {path}")
            elif test and test not in names:
                found.append(f"[{entry.section}] {entry.name}: {node_id}: {path} has no test {test}")
    return found


def _test_names(file: Path) -> Iterator[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}::{item.name}"


def lines_for(missing: list[tuple[str, str]]) -> str:
    """TOML lines to paste for unclassified names, each to be decided (they are written refused, with the reason
    and alternative left for you to say)."""
    out: list[str] = []
    current = None
    for section, name in missing:
        if not name:
            out.append(f'[modules] "{section}" = {{refused = "TODO why", use = "TODO what instead"}}  # or a section')
            continue
        if section != current:
            out.append(f'\n["{section}"]')
            current = section
        out.append(f'{name} = {{refused = "TODO why", use = "TODO what instead"}}')
    return "\n".join(out).strip() + "\n"
