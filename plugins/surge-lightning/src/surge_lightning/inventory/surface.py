"""Lightning's public surface, read from the installed ``lightning`` package (2.6): what the inventory classifies.

Three parts, each a set of names under a *section* (the TOML table of the classification file):

* **Modules and their names.** Every module of ``lightning.pytorch`` whose dotted path has no component starting
  with ``_`` (the package itself and every module ``pkgutil`` finds under it) is a section named by its path. Its
  names are its ``__all__`` when it defines one; otherwise the public names its own code binds at top level
  (``def``, ``class``, assignments, also inside top-level ``if``/``try``) plus the imports it marks as re-exports
  with ``# noqa: F401`` (Lightning's mark for "imported to be exported", as in ``utilities/rank_zero.py`` and
  ``tuner/__init__.py``). In both cases a name is public when it does not start with ``_``, only names the
  imported module really has count, and a module's plumbing does not: its logger (``log``), its warning cache
  (``warning_cache``) and its type variables (``T``). ``lightning``'s own top-level names count where they are ``lightning.pytorch``'s objects
  (``lightning.Trainer`` is ``lightning.pytorch.Trainer``; ``lightning.Fabric`` is not).
* **Class members.** For ``Trainer``, ``LightningModule``, ``LightningDataModule``, ``Callback`` and ``Logger``
  (sections ``lightning.pytorch.Trainer``, ...): every public name of the class (methods, properties, class
  attributes, inherited ones included, so ``ModelHooks``, ``DataHooks`` and ``CheckpointHooks`` are read through
  the classes that inherit them) and every public attribute an instance built with its defaults holds. Names
  ``torch.nn.Module`` defines are left out (those of the class and of an instance: ``to``, ``forward``,
  ``training``, ...): a Surge Module is an ``nn.Module``, so they keep working, and where Lightning overrides one
  (``to``, ``cuda``, ``half``, ... to track the device) it keeps ``nn.Module``'s contract.
* **Hooks.** The names Lightning's loops call on a Module, a DataModule or a Callback, read with :mod:`ast` from the
  calls to ``_call_lightning_module_hook``, ``_call_lightning_datamodule_hook``, ``_call_callback_hooks``, the
  ``_call_callbacks_*`` helpers and ``_call_strategy_hook`` in ``lightning/pytorch`` (a strategy hook reaches the
  Module when the Module has a method of that name: the strategy forwards ``training_step``, ``backward``, ... to
  it). They join the members of their class and are marked as hooks: a user overrides them to change a run.

This module imports ``lightning``; only the inventory's command and tests import it, never a run.
"""

from __future__ import annotations

import abc
import ast
import contextlib
import importlib
import logging
import os
import pkgutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

ROOT = "lightning.pytorch"

CLASSES = {
    "lightning.pytorch.Trainer": "Trainer",
    "lightning.pytorch.LightningModule": "LightningModule",
    "lightning.pytorch.LightningDataModule": "LightningDataModule",
    "lightning.pytorch.Callback": "Callback",
    "lightning.pytorch.loggers.Logger": "Logger",
}
"""The sections of class members: the class's public path -> its name."""

CALLERS = {
    "_call_lightning_module_hook": "lightning.pytorch.LightningModule",
    "_call_lightning_datamodule_hook": "lightning.pytorch.LightningDataModule",
    "_call_callback_hooks": "lightning.pytorch.Callback",
    "_call_strategy_hook": "strategy",
}
"""Lightning's functions that call a hook by name, and on whose class (``strategy``: see :func:`hooks`)."""

READ_BY_HAND = {
    "f'{stage.dataloader_prefix}_dataloader'": ("val_dataloader", "test_dataloader"),
}
"""Hook names built at run time, as Lightning's source spells them, with the names they take: the evaluation loop
(``loops/evaluation_loop.py``) runs for the validating, testing and sanity-checking stages, whose
``dataloader_prefix`` is ``val`` or ``test``. The walk fails on a built name missing here, and on one here that
Lightning no longer builds, so this table cannot go stale unnoticed."""


@dataclass
class Surface:
    """What Lightning exposes: ``names[section]`` is the set of names of a module or class section; ``hooks[section]``
    the names of a class section that Lightning's loops call; ``modules`` every public module's path."""

    version: str
    modules: list[str] = field(default_factory=list)
    names: dict[str, set[str]] = field(default_factory=dict)
    hooks: dict[str, set[str]] = field(default_factory=dict)

    def keys(self) -> Iterator[tuple[str, str]]:
        """Every (section, name), sorted."""
        for section in sorted(self.names):
            for name in sorted(self.names[section]):
                yield section, name


def read() -> Surface:
    """Lightning's surface as the installed ``lightning`` has it (see the module's docstring for the rules)."""
    with _quiet():
        import lightning
        import lightning.pytorch

        surface = Surface(version=lightning.__version__)
        for module in _public_modules(lightning.pytorch):
            surface.modules.append(module.__name__)
            surface.names[module.__name__] = exported(module)
        surface.modules.append("lightning")
        surface.names["lightning"] = {
            name
            for name in getattr(lightning, "__all__", ())
            if not name.startswith("_") and getattr(lightning.pytorch, name, None) is getattr(lightning, name)
        }
        for section, name in CLASSES.items():
            cls = getattr(importlib.import_module(section.rsplit(".", 1)[0]), name)
            surface.names[section] = members(cls)
        for section, names in hooks(Path(lightning.pytorch.__file__).parent, surface.names).items():
            surface.hooks[section] = names
            surface.names[section] |= names
    return surface


# -- modules ------------------------------------------------------------------------------------------------------------
def _public_modules(package: ModuleType) -> Iterator[ModuleType]:
    yield package

    def failed(name: str) -> None:
        raise ImportError(f"the inventory cannot import Lightning's module {name}; is `lightning` installed whole?")

    found = pkgutil.walk_packages(package.__path__, package.__name__ + ".", onerror=failed)
    for info in sorted(found, key=lambda info: info.name):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        yield importlib.import_module(info.name)


def exported(module: ModuleType) -> set[str]:
    """A module's exported public names: its ``__all__``, else what its own code binds at top level and the imports
    it marks ``# noqa: F401``, in both cases only names the module has."""
    declared = getattr(module, "__all__", None)
    if declared is None:
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        declared = list(_bound_at_top_level(ast.parse(source).body, source.splitlines()))
    return {
        name
        for name in declared
        if not name.startswith("_") and hasattr(module, name) and not _plumbing(getattr(module, name))
    }


def _plumbing(value: object) -> bool:
    """A module's logger, warning cache or type variable: its own plumbing, not API."""
    from lightning.fabric.utilities.rank_zero import WarningCache

    return isinstance(value, (logging.Logger, WarningCache, TypeVar))


def _bound_at_top_level(body: list[ast.stmt], lines: list[str]) -> Iterator[str]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        yield leaf.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            end = node.end_lineno or node.lineno
            if any("noqa: F401" in line for line in lines[node.lineno - 1 : end]):
                for alias in node.names:
                    yield alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.If):
            yield from _bound_at_top_level(node.body + node.orelse, lines)
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            yield from _bound_at_top_level(node.body + handlers + node.orelse + node.finalbody, lines)


# -- class members ------------------------------------------------------------------------------------------------------
def members(cls: type) -> set[str]:
    """The public names of ``cls`` and of an instance built with its defaults, less ``torch.nn.Module``'s."""
    import torch

    names = {name for name in dir(cls) if not name.startswith("_")}
    names |= {name for name in vars(_instance(cls)) if not name.startswith("_")}
    if issubclass(cls, torch.nn.Module):
        names -= set(dir(torch.nn.Module)) | set(vars(torch.nn.Module()))
    return names


def _instance(cls: type) -> Any:
    """An instance of ``cls`` built with its defaults (an abstract class through a subclass that fills its abstract
    methods with nothing); a ``Trainer`` in a temporary directory, so that it writes nothing here."""
    abstract: frozenset[str] = getattr(cls, "__abstractmethods__", frozenset())
    if abstract:
        filled = {name: (lambda self, *a, **k: None) for name in abstract}
        cls = abc.ABCMeta(f"Concrete{cls.__name__}", (cls,), filled)
    if cls.__name__ != "Trainer":
        return cls()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            return cls(default_root_dir=scratch)
        finally:
            os.chdir(here)


# -- hooks --------------------------------------------------------------------------------------------------------------
def hooks(source_root: Path, names: dict[str, set[str]]) -> dict[str, set[str]]:
    """The hooks Lightning's loops call, per class section, read from the source under ``source_root``
    (``lightning/pytorch``); ``names`` holds the class members, which decide whether a strategy hook reaches the
    Module."""
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(source_root.rglob("*.py"))}
    reader = _HookReader(sources)
    found: dict[str, set[str]] = {}
    for caller, hook_names in reader.calls():
        section = CALLERS[caller]
        if section == "strategy":
            section = "lightning.pytorch.LightningModule"
            hook_names = {name for name in hook_names if name in names[section]}
        found.setdefault(section, set()).update(hook_names)
    found.setdefault("lightning.pytorch.Callback", set()).update(reader.callback_helpers())
    unused = set(READ_BY_HAND) - reader.read_by_hand
    if unused:
        raise LookupError(f"READ_BY_HAND has entries Lightning's source no longer builds: {sorted(unused)}")
    return found


class _HookReader:
    """Reads the hook names passed to Lightning's hook callers, following a name to its assignments in the function,
    a parameter to the calls of its function, and ``self.<field>`` to the constructor calls of the class."""

    def __init__(self, sources: dict[Path, str]) -> None:
        self.sources = sources
        self.read_by_hand: set[str] = set()
        self._trees: dict[Path, ast.Module] = {}
        self.functions: list[tuple[Path, ast.ClassDef | None, ast.FunctionDef]] = []
        for path, text in sources.items():
            if not any(name in text for name in (*CALLERS, "_call_callbacks_")):
                continue  # no call of a hook caller here: parsed only if a name is followed into it
            tree = self._tree(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef):
                            self.functions.append((path, node, item))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.functions.append((path, None, node))

    def _tree(self, path: Path) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.sources[path])
        return self._trees[path]

    def _calls_of(self, callee: str) -> list[ast.Call]:
        """Every call of the function or class named ``callee`` in Lightning's source."""
        return [
            node
            for path, text in self.sources.items()
            if f"{callee}(" in text
            for node in ast.walk(self._tree(path))
            if isinstance(node, ast.Call) and _callee(node) == callee
        ]

    def calls(self) -> Iterator[tuple[str, set[str]]]:
        """(caller, the hook names one call passes) for every call of a hook caller."""
        for path, cls, function in self.functions:
            if function.name in CALLERS:
                continue
            aliases = self._aliases(function)
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                callee = _callee(node)
                for caller in aliases.get(callee, {callee} if callee in CALLERS else set()):
                    argument = node.args[1] if len(node.args) > 1 else _keyword(node, "hook_name")
                    if argument is None:
                        raise LookupError(f"{path}:{node.lineno}: a call of {caller} without a hook name")
                    yield caller, self._strings(argument, function, cls, f"{path}:{node.lineno}")

    def callback_helpers(self) -> set[str]:
        """The callback methods Lightning's ``_call_callbacks_*`` helpers call (``state_dict``, ...)."""
        found = set()
        for _, cls, function in self.functions:
            if cls is None and function.name.startswith("_call_callbacks_"):
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        owner = node.func.value
                        if isinstance(owner, ast.Name) and owner.id == "callback":
                            found.add(node.func.attr)
        return found

    def _aliases(self, function: ast.FunctionDef) -> dict[str, set[str]]:
        aliases: dict[str, set[str]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Attribute, ast.Name)):
                target = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if target in CALLERS:
                    for name in node.targets:
                        if isinstance(name, ast.Name):
                            aliases.setdefault(name.id, set()).add(target)
        return aliases

    def _strings(self, expr: ast.expr, function: ast.FunctionDef, cls: ast.ClassDef | None, where: str) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.IfExp):
            return self._strings(expr.body, function, cls, where) | self._strings(expr.orelse, function, cls, where)
        if isinstance(expr, ast.Name):
            # the name's last assignment before its use (the evaluation loop reuses one name for several hooks)
            assigned = [
                node
                for node in ast.walk(function)
                if isinstance(node, ast.Assign)
                and node.lineno < expr.lineno
                and any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets)
            ]
            if assigned:
                last = max(assigned, key=lambda node: node.lineno)
                return self._strings(last.value, function, cls, where)
            params = [a.arg for a in function.args.args]
            if expr.id in params:
                index = params.index(expr.id) - (1 if cls is not None else 0)
                return self._from_calls(function.name, index, expr.id, where)
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
            and cls is not None
        ):
            fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
            if expr.attr in fields:
                return self._from_calls(cls.name, fields.index(expr.attr), expr.attr, where)
        text = ast.unparse(expr)
        if text in READ_BY_HAND:
            self.read_by_hand.add(text)
            return set(READ_BY_HAND[text])
        raise LookupError(
            f"{where}: Lightning passes a hook name the inventory cannot read, `{text}`; "
            "add what it takes to READ_BY_HAND in surge_lightning/inventory/surface.py"
        )

    def _from_calls(self, callee: str, index: int, keyword: str, where: str) -> set[str]:
        """The strings the calls of ``callee`` pass at position ``index`` (or as ``keyword``)."""
        found: set[str] = set()
        calls = self._calls_of(callee)
        if not calls:
            raise LookupError(f"{where}: the hook name comes from calls of {callee}, and the inventory finds none")
        for call in calls:
            argument = call.args[index] if len(call.args) > index else _keyword(call, keyword)
            if argument is not None:
                found |= self._strings(argument, _EMPTY, None, f"{where} (through a call of {callee})")
        return found


_EMPTY = ast.FunctionDef(name="", args=ast.arguments([], [], None, [], [], None, []), body=[], decorator_list=[])


def _callee(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Lightning's import and Trainer print tips and warnings; the walk keeps them out of the output."""
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)
