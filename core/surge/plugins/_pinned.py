"""Where a pinned distribution's modules come from, and the import guard that holds a lab profile to it.

Under a lab profile (:mod:`surge.plugins.lab`) a module of a pinned distribution must be one of that distribution's own
files: its installed files (``RECORD``), or for an editable install its source folders (the paths its ``.pth``
file adds, else the project folder of ``direct_url.json``). A folder or file of the same name earlier on
``sys.path`` (the working directory, which ``surge fit`` adds; the training script's folder) is refused
before it runs, naming both paths. :func:`where` answers without importing anything (``Lab.check`` uses it);
:class:`Guard`, on ``sys.meta_path`` while a lab is active, checks every import of a pinned module, the
entry point's and any later one.

Under a pin with a hash, the guard also compiles a pinned module from its source file, the one the hash
covered, and never reads Python's byte-code cache (``__pycache__/*.pyc``), which the hash leaves out: a
replaced ``.pyc`` whose header matches the source is not run (a byte-code-only module is refused). Checking
each ``.pyc`` against its source instead would need compiling the source anyway, so compiling is the check.
A module imported before the guard was on (``surge`` itself, a plugin module the training script imports
first) already ran; :func:`foreign_bytecode` finds those whose cache did not hold their source's code, and the
run refuses.
"""

from __future__ import annotations

import json
import marshal
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader, SourcelessFileLoader
from importlib.util import MAGIC_NUMBER
from pathlib import Path, PurePosixPath
from types import CodeType, ModuleType
from typing import Any
from urllib.parse import unquote, urlparse

from surge.errors import LabError

__all__ = ["Home", "Guard", "home_of", "where", "guard", "shadow", "foreign_bytecode"]

_MODULE_SUFFIXES = (".py", ".so", ".pyd")


@dataclass(frozen=True)
class Home:
    """A distribution's own modules: its installed files, or the source folders of an editable install."""

    distribution: str
    version: str
    files: frozenset[Path]
    roots: tuple[Path, ...]
    search_path: tuple[str, ...]
    """Where its own modules are found: its source folders, or the folder it is installed in."""
    modules: frozenset[str] = frozenset()
    """Its top modules (namespace packages excluded): everything at or below them is its own."""
    hashed: bool = False

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}"

    def owns(self, origin: str) -> bool:
        path = Path(origin).resolve()
        return path in self.files or any(path.is_relative_to(root) for root in self.roots)

    def own_file(self, module: str) -> str | None:
        """The file ``module`` is imported from when only this distribution's own folders are searched."""
        parts = module.split(".")
        for base in self.search_path:  # its source file, even where a folder of the same name hides it
            for candidate in (Path(base, *parts[:-1], f"{parts[-1]}.py"), Path(base, *parts, "__init__.py")):
                if self.owns(str(candidate)):
                    return str(candidate)
        files, missing = where(module, find=self._find_own)  # an extension module, a namespace package's module
        own = files[-1][1] if files and missing is None else None
        return own if own is not None and self.owns(own) else None

    def _find_own(self, name: str, path: Any) -> ModuleSpec | None:
        return PathFinder.find_spec(name, list(self.search_path) if path is None else path)


def home_of(dist: Any, entry_points: Iterable[str] = (), hashed: bool = False) -> Home | None:
    """The home of an installed distribution (``None`` for ``surge.testing``'s in-memory ones, which have
    no files); ``entry_points`` are the modules its entry points name, guarded too."""
    if not hasattr(dist, "locate_file"):
        return None
    record = [PurePosixPath(str(f)) for f in dist.files or ()]
    located = {path: Path(dist.locate_file(path)).resolve() for path in record}
    roots = _editable_roots(dist, located)
    search_path = tuple(map(str, roots)) if roots else (str(Path(dist.locate_file("")).resolve()),)
    metadata = dist.metadata  # parsed on each access
    home = Home(str(metadata["Name"]), str(metadata["Version"]), frozenset(located.values()), roots, search_path)
    modules = set(_record_modules(record))
    for module in entry_points:  # for an editable install, the only modules known without a folder scan
        files, _ = where(module, find=home._find_own)
        modules.update(name for name, _ in files[:1])
    return replace(home, modules=frozenset(modules), hashed=hashed)


def _editable_roots(dist: Any, located: dict[PurePosixPath, Path]) -> tuple[Path, ...]:
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except (ValueError, OSError):
        return ()
    if not direct.get("dir_info", {}).get("editable"):
        return ()
    roots = []
    for relative, path in located.items():  # setuptools, hatch, pdm: a .pth file naming the source folder
        if relative.suffix == ".pth" and path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            roots += [Path(line).resolve() for line in lines if line and not line.startswith(("#", "import"))]
    url = urlparse(direct.get("url", ""))
    if not roots and url.scheme == "file":  # an import hook: the project folder holds its sources
        roots.append(Path(unquote(url.path)).resolve())
    return tuple(root for root in roots if root.is_dir())


def _record_modules(record: list[PurePosixPath]) -> Iterator[str]:
    """The top modules a RECORD installs: the first regular package (or module) on each file's path."""
    listed = set(record)
    for path in record:
        parts = path.parts
        if path.suffix not in _MODULE_SUFFIXES or not parts or not all(p.isidentifier() for p in parts[:-1]):
            continue
        for depth in range(1, len(parts) + 1):
            if depth == len(parts):
                name = parts[-1].split(".")[0]
                if name.isidentifier() and name != "__init__":
                    yield ".".join([*parts[:-1], name])
            elif PurePosixPath(*parts[:depth], "__init__.py") in listed:
                yield ".".join(parts[:depth])
            else:
                continue
            break


def _find(name: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
    """The spec the import system finds for ``name`` now, without the guard and without importing."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if isinstance(finder, Guard) or find_spec is None:
            continue
        spec = find_spec(name, path, target)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def where(
    module: str, find: Callable[[str, Any], ModuleSpec | None] = _find
) -> tuple[list[tuple[str, str]], str | None]:
    """The modules and regular packages on the way to ``module`` (``module`` included), each with the file an
    import would run, found without importing anything (namespace packages are passed through); and the first
    name on the way that is not found (``None`` when every one is)."""
    files: list[tuple[str, str]] = []
    path = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if depth > 1 and path is None:  # the name before is a module, not a package
            return files, name
        loaded = sys.modules.get(name) if find is _find else None
        spec = getattr(loaded, "__spec__", None) if loaded is not None else find(name, path)
        if spec is None:
            return files, None if loaded is not None else name  # a module made in memory has no file to check
        if spec.has_location and spec.origin:
            files.append((name, spec.origin))
        path = spec.submodule_search_locations
    return files, None


def shadow(home: Home, module: str, origin: str) -> tuple[str, str]:
    """What is wrong when ``module`` of ``home`` would be imported from ``origin``, and the fix."""
    offender = Path(origin).parent if Path(origin).name.startswith("__init__.") else Path(origin)
    own = home.own_file(module)
    return (
        f"`import {module}` would run {origin}, which is not a file of the pinned distribution {home.label} "
        f"({'its own is ' + own if own else 'it installed no such module'})",
        f"remove or rename {offender}, or start the run from another directory (the working directory and the "
        "training script's folder come first on sys.path)",
    )


def foreign_bytecode(home: Home) -> list[tuple[str, str, str]]:
    """Modules of a hashed ``home`` imported before the guard was on (with ``surge`` itself, or by the training
    script) from a byte-code cache that does not hold their source's code: ``(module, source, cache)``. The
    code such a module ran cannot be taken back, but the run can still refuse."""
    found = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if not any(p in home.modules for p in _prefixes(name)) or spec is None or (name, id(module)) in _verified:
            continue
        if type(spec.loader) is SourceFileLoader and spec.origin and spec.cached:
            if not _cache_holds_source(spec.origin, spec.cached):
                found.append((name, spec.origin, spec.cached))
                continue
        _verified.add((name, id(module)))
    return found


_verified: set[tuple[str, int]] = set()


def _cache_holds_source(source: str, cached: str) -> bool:
    """Whether the cache Python would have run instead of ``source`` holds the code ``source`` compiles to."""
    try:
        data, stat = Path(cached).read_bytes(), Path(source).stat()
    except OSError:
        return True  # no cache: compiled from the source
    flags = int.from_bytes(data[4:8], "little")
    stamp = (int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    header = (int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little"))
    if data[:4] != MAGIC_NUMBER or (flags == 0 and header != stamp):
        return True  # a cache Python does not use: it compiled the source
    try:
        return bool(marshal.loads(data[16:]) == compile(Path(source).read_bytes(), source, "exec", dont_inherit=True))
    except (ValueError, EOFError, TypeError, SyntaxError):
        return False


class _SourceOnly(SourceFileLoader):
    """Compiles the module from its source file, never from (or into) the byte-code cache."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)  # type: ignore[no-any-return]


class Guard(MetaPathFinder):
    """First on ``sys.meta_path`` while a lab is active: every module of a pinned distribution is its own file,
    and under a hash is compiled from its verified source."""

    def __init__(self) -> None:
        self.homes: dict[str, Home] = {}
        self.source = ""

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
        home = next((self.homes[n] for n in _prefixes(fullname) if n in self.homes), None)
        if home is None:
            return None
        spec = _find(fullname, path, target)
        if spec is None or not spec.has_location or spec.origin is None:
            return spec
        refused = f"the lab profile {self.source} pins {home.label}, and this import is refused before it runs: "
        if not home.owns(spec.origin):
            problem, fix = shadow(home, fullname, spec.origin)
            raise LabError(f"{refused}{problem}. Fix: {fix}")
        if home.hashed and isinstance(spec.loader, SourcelessFileLoader):
            raise LabError(
                refused + f"{fullname} is byte-code only ({spec.origin}), which the lab's hash does not cover. "
                f"Reinstall it from a wheel with sources: pip install --force-reinstall --no-deps "
                f"'{home.distribution}=={home.version}'"
            )
        if home.hashed and type(spec.loader) is SourceFileLoader:
            spec.loader = _SourceOnly(fullname, spec.origin)
        return spec


def _prefixes(name: str) -> Iterator[str]:
    parts = name.split(".")
    for depth in range(len(parts), 0, -1):
        yield ".".join(parts[:depth])


_guard = Guard()


def guard(homes: Iterable[Home], source: str) -> None:
    """Hold imports to ``homes`` (replacing the previous lab's); with none, take the guard off ``sys.meta_path``."""
    _guard.homes = {module: home for home in homes for module in home.modules}
    _guard.source = source
    if _guard in sys.meta_path:
        sys.meta_path.remove(_guard)
    if _guard.homes:
        sys.meta_path.insert(0, _guard)
