"""Code that runs before Surge can act, found without running it: what a lab reports but cannot stop.

Python runs some code of the environment before any line of Surge (or of the training script): an executable line
(``import ...``) of a ``.pth`` file in a site folder, the ``sitecustomize`` and ``usercustomize`` modules, and
the console script a command was started with. Libraries a run imports load entry points of their own groups
by themselves: torch calls every ``torch.backends`` entry point at ``import torch``, pydantic loads every
``pydantic`` one when the first model is built (``import surge`` builds models). None of this can be refused after
it ran; :func:`startup_code` and :func:`edited_scripts` find it, with the distribution each piece comes from, so
that a lab (:mod:`surge.plugins.lab`) reports what its pins do not cover and, under ``strict = true``, refuses
to run. The interpreter's own standard library (where some Linux distributions put a ``sitecustomize``) is part of
the interpreter, which a lab takes as given.
"""

from __future__ import annotations

import ast
import os
import site
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from packaging.utils import canonicalize_name

__all__ = ["Startup", "startup_code", "edited_scripts", "AUTOLOADED_GROUPS"]


def _pydantic_disabled() -> bool:
    return os.environ.get("PYDANTIC_DISABLE_PLUGINS", "") in ("__all__", "1", "true")


def _torch_disabled() -> bool:
    return os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "0"


AUTOLOADED_GROUPS: dict[str, tuple[str, str, Callable[[], bool]]] = {
    "torch.backends": ("torch calls it at `import torch`", "TORCH_DEVICE_BACKEND_AUTOLOAD=0", _torch_disabled),
    "pydantic": (
        "pydantic loads it when the first model is built",
        "PYDANTIC_DISABLE_PLUGINS=__all__",
        _pydantic_disabled,
    ),
}
"""Entry-point groups that libraries a run imports load by themselves: group -> (when, the variable that switches
the loading off, whether it is off now)."""


@dataclass(frozen=True)
class Startup:
    """One piece of code that runs before Surge, and the distribution it comes from (``None``: none)."""

    kind: Literal["startup", "autoload"]
    path: str
    """The file (for an entry point: the distribution's metadata folder)."""
    what: str
    distribution: Any | None
    fix: str

    @property
    def label(self) -> str:
        dist = self.distribution
        return f"{dist.metadata['Name']} {dist.version}" if dist is not None else "no distribution"


def _site_packages() -> list[str]:
    return [*getattr(site, "getsitepackages", list)(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]


def _interpreter_test() -> Callable[[Path], bool]:
    """Whether a path (resolved) is part of the interpreter: its standard library, site folders excluded."""
    sites = [Path(folder).resolve() for folder in _site_packages()]
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    base |= {"installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)
    stdlib = [Path(paths[key]).resolve() for key in ("stdlib", "platstdlib") if key in paths]
    return lambda path: not any(path.is_relative_to(s) for s in sites) and any(path.is_relative_to(d) for d in stdlib)


def _site_dirs() -> list[Path]:
    """The folders whose ``.pth`` files Python reads at start-up: the site folders and every ``sys.path`` folder (a
    ``.pth`` file can add a site folder, which then is on ``sys.path``), less the interpreter's own."""
    interpreter = _interpreter_test()
    seen: dict[Path, None] = {}
    for entry in [*_site_packages(), *sys.path]:
        try:
            path = Path(entry or ".").resolve()
        except OSError:
            continue
        if path.is_dir() and not interpreter(path):
            seen.setdefault(path)
    return list(seen)


def _executable_lines(pth: Path) -> list[str]:
    try:
        text = pth.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.startswith(("import ", "import\t"))]


def _customize() -> Iterator[tuple[str, Path]]:
    """``sitecustomize`` and ``usercustomize`` (when the user site is on): the file imported at start-up, or the
    one a new interpreter started here would import."""
    names = ["sitecustomize", *(["usercustomize"] if site.ENABLE_USER_SITE else [])]
    for name in names:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if origin is None:
            spec = PathFinder.find_spec(name)
            origin = spec.origin if spec is not None and spec.has_location else None
        if origin:
            path = Path(origin).resolve()
            if not _interpreter_test()(path):
                yield name, path


def _owners(paths: Iterable[Path]) -> dict[Path, Any]:
    """The installed distribution whose ``RECORD`` lists each of ``paths`` (resolved). Remembered per file, its
    modification time and ``sys.path``: reading every ``RECORD`` costs more than the rest of the look-around."""
    found: dict[Path, Any] = {}
    wanted = []
    for path in set(paths):
        try:
            key = (path, path.stat().st_mtime_ns, tuple(sys.path))
        except OSError:
            continue
        if key in _owner_cache:
            if _owner_cache[key] is not None:
                found[path] = _owner_cache[key]
        else:
            wanted.append((path, key))
    if not wanted:
        return found
    folders: dict[str, Path] = {}
    for dist in metadata.distributions():
        located = str(dist.locate_file(""))
        folder = folders.get(located) or folders.setdefault(located, Path(located).resolve())
        mine = [(path, key) for path, key in wanted if path.is_relative_to(folder) and path not in found]
        if not mine:
            continue
        try:
            listed = {line.rsplit(",", 2)[0] for line in (dist.read_text("RECORD") or "").splitlines()}
        except OSError:
            continue
        for path, _ in mine:
            if path.relative_to(folder).as_posix() in listed:
                found[path] = dist
    for path, key in wanted:
        _owner_cache[key] = found.get(path)
    return found


_owner_cache: dict[tuple[Path, int, tuple[str, ...]], Any] = {}


def startup_code() -> list[Startup]:
    """Every executable ``.pth`` line, ``sitecustomize``/``usercustomize`` and entry point of an auto-loaded group
    (:data:`AUTOLOADED_GROUPS`, unless switched off) in this environment, with the distribution it comes from."""
    pieces: list[tuple[Literal["startup", "autoload"], Path, str, str]] = []
    for folder in _site_dirs():
        for pth in sorted(folder.glob("*.pth")):
            lines = _executable_lines(pth)
            if lines:
                shown = lines[0] if len(lines[0]) <= 80 else lines[0][:77] + "..."
                pieces.append(
                    ("startup", pth.resolve(), f"the .pth file {pth} runs `{shown}` at every start of Python", "")
                )
    for name, path in _customize():
        pieces.append(("startup", path, f"{path} is imported as {name} at every start of Python", ""))
    owners = _owners(path for _, path, _, _ in pieces)
    found = [
        Startup(kind, str(path), what, owners.get(path), fix or _fix(owners.get(path), path))
        for kind, path, what, fix in pieces
    ]
    everything = metadata.entry_points()
    for group, (when, switch, disabled) in AUTOLOADED_GROUPS.items():
        if disabled():
            continue
        for ep in everything.select(group=group):
            dist = getattr(ep, "dist", None)
            where = str(getattr(dist, "_path", "")) if dist is not None else "?"
            found.append(
                Startup(
                    "autoload",
                    where,
                    f"its entry point '{ep.name}' ({ep.value}) of the group '{group}': {when}",
                    dist,
                    f"{_uninstall(dist)}, or set {switch} for every run"
                    if dist is not None
                    else f"set {switch} for every run",
                )
            )
    return found


def _uninstall(dist: Any) -> str:
    return f"pip uninstall {dist.metadata['Name']} (or pin it in [distributions] if the lab trusts it)"


def _fix(dist: Any | None, path: Path) -> str:
    return _uninstall(dist) if dist is not None else f"delete {path} (no distribution installed it)"


def canonical(dist: Any) -> str:
    return str(canonicalize_name(str(dist.metadata["Name"])))


# -- console scripts ---------------------------------------------------------------------------------------------


def edited_scripts(dist: Any) -> list[tuple[str, str]]:
    """The console scripts of ``dist`` that are not plain launchers of their entry points: ``(file, what is
    wrong)``. A launcher imports ``re``/``sys`` and the entry point's object and calls it under ``if __name__ ==
    "__main__":``, tidying ``sys.argv[0]`` (as pip and uv write them), run by this interpreter; anything else is
    code that runs before Surge."""
    points = getattr(dist, "entry_points", ())  # surge.testing's in-memory distributions have none
    scripts = {ep.name: ep for ep in points if ep.group in ("console_scripts", "gui_scripts")}
    if not scripts:
        return []
    found = []
    for entry in dist.files or ():
        name = PurePosixPath(str(entry)).name
        if name not in scripts:
            continue
        path = Path(os.path.normpath(dist.locate_file(entry)))  # ../../bin/NAME, from the installation folder
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        problem = _launcher_problem(text, scripts[name].value)
        if problem is not None:
            found.append((str(path), problem))
    return found


def _launcher_problem(text: str, value: str) -> str | None:
    module, _, attr = value.partition(":")
    module, attr = module.strip(), attr.split("[")[0].strip()
    head = attr.split(".")[0]
    lines = text.splitlines()
    interpreter = _shebang(lines)
    if interpreter is not None and not _same_interpreter(interpreter):
        return f"its first line runs {interpreter}, not this environment's Python ({sys.executable})"
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "it is not Python (not a launcher pip or uv writes)"
    for statement in tree.body:
        problem = _statement_problem(statement, module, head)
        if problem is not None:
            return f"{problem} (line {statement.lineno}), which a launcher of {value} does not hold"
    return None


def _shebang(lines: list[str]) -> str | None:
    if not lines or not lines[0].startswith("#!"):
        return None
    words = lines[0][2:].strip().split()
    if not words:
        return None
    if words[0] == "/bin/sh" and len(lines) > 1 and lines[1].startswith("'''exec' "):  # pip's launcher for long paths
        quoted = lines[1][len("'''exec' ") :].strip()
        return quoted.split('"')[1] if quoted.startswith('"') else quoted.split()[0]
    return None if Path(words[0]).name == "env" else words[0]


def _same_interpreter(interpreter: str) -> bool:
    try:
        mine, theirs = Path(sys.executable), Path(interpreter)
        return mine.resolve() == theirs.resolve() and mine.parent.resolve() == theirs.parent.resolve()
    except OSError:
        return False


def _statement_problem(node: ast.stmt, module: str, head: str) -> str | None:
    if isinstance(node, ast.Import):
        extra = [a.name for a in node.names if a.name not in ("re", "sys") or a.asname]
        return f"`import {', '.join(extra)}`" if extra else None
    if isinstance(node, ast.ImportFrom):
        if node.module != module or node.level or [(a.name, a.asname) for a in node.names] != [(head, None)]:
            return f"`from {'.' * node.level}{node.module} import ...`"
        return None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return None  # the string of pip's /bin/sh trampoline
    if isinstance(node, ast.If) and _is_main_test(node.test) and not node.orelse:
        for inner in node.body:
            problem = _main_problem(inner, head)
            if problem is not None:
                return problem
        return None
    return f"a `{type(node).__name__}` statement"


def _is_main_test(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _is_argv0(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "sys"
        and node.value.attr == "argv"
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    )


def _main_problem(node: ast.stmt, head: str) -> str | None:
    """What the ``if __name__ == "__main__":`` block of a launcher may hold: ``sys.argv[0]`` tidied (``re.sub``,
    ``endswith``, slicing) and ``sys.exit(<entry point>())``."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_argv0(node.targets[0]):
        return _expression_problem(node.value, head, exiting=False)
    if isinstance(node, ast.If):
        problem = _expression_problem(node.test, head, exiting=False)
        for inner in [*node.body, *node.orelse]:
            problem = problem or _main_problem(inner, head)
        return problem
    if isinstance(node, ast.Expr):
        call = node.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and (call.func.value.id, call.func.attr) == ("sys", "exit")
            and len(call.args) == 1
            and not call.keywords
        ):
            return _expression_problem(call.args[0], head, exiting=True)
    return f"a `{type(node).__name__}` statement under `if __name__ == '__main__':`"


def _expression_problem(node: ast.expr, head: str, *, exiting: bool) -> str | None:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            allowed = (
                (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "re")
                or (isinstance(func, ast.Attribute) and _is_argv0(func.value) and func.attr == "endswith")
                or (exiting and _names(func, head))
            )
            if not allowed:
                return f"a call of `{ast.unparse(func)}`"
        elif isinstance(inner, ast.Name) and inner.id not in ("sys", "re", head):
            return f"the name `{inner.id}`"
        elif isinstance(inner, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return f"a `{type(inner).__name__}` expression"
    return None


def _names(func: ast.expr, head: str) -> bool:
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id == head
