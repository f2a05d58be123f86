"""Where a pinned distribution's modules come from, and the import guard that holds a lab profile to it.

Under a lab profile (:mod:`surge.plugins.lab`) a module of a pinned distribution must be one of that distribution's own
files. **Its own files** are the files its ``RECORD`` lists inside its installation folder, the very set the lab's
hash covers (:func:`own_files`): an entry whose path leads out of the folder (``../elsewhere/x.py``, an absolute
path, a link to a file outside) is never its own, so a forged ``RECORD`` line cannot widen what is trusted. For an
editable install they are also its source folders (the paths its ``.pth`` file adds, else the project folder of
``direct_url.json``). A folder or file of the same name earlier on ``sys.path`` (the working directory, which
``surge fit`` adds; the training script's folder; ``PYTHONPATH``; a zip) is refused before it runs, naming both
paths. That holds for the core too: the ``surge`` package is its distribution's like any plugin's module.
:func:`where` answers without importing anything (``Lab.check`` uses it); the guard, first on ``sys.meta_path`` while
a lab is active, checks every import of a pinned module, the entry point's and any later one.

Under a pin with a hash, the guard also compiles a pinned module from its source file, the one the hash
covered, and never reads Python's byte-code cache (``__pycache__/*.pyc``), which the hash leaves out: a
replaced ``.pyc`` whose header matches the source is not run (a byte-code-only module is refused). Checking
each ``.pyc`` against its source instead would need compiling the source anyway, so compiling is the check.
A module imported before the guard was on (``surge`` itself, a plugin module the training script imports
first) already ran: :func:`foreign_modules` finds those that are not their distribution's own files and
:func:`foreign_bytecode` those whose cache did not hold their source's code, and the run refuses.

The guard's state (the homes, the lab's name) lives in a closure of the finder on ``sys.meta_path``, not in a module
attribute a plugin could assign; while discovery imports plugin modules the guard cannot be replaced, and discovery
refuses a plugin whose import took it off ``sys.meta_path`` or put a finder before it. Plugin code runs in the same
interpreter, so a determined one can still reach the closure (``gc``, ``sys.meta_path``): the lab pins *which* code
runs, it does not sandbox it (docs/plugins.md, "What a lab proves").
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import posixpath
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader, SourcelessFileLoader
from importlib.util import MAGIC_NUMBER, cache_from_source, source_hash
from pathlib import Path, PurePosixPath
from types import CodeType, ModuleType
from typing import Any
from urllib.parse import unquote, urlparse

from surge.errors import LabError

__all__ = [
    "Home",
    "home_of",
    "own_files",
    "where",
    "guard",
    "holding",
    "intact",
    "shadow",
    "foreign_modules",
    "foreign_files",
    "foreign_bytecode",
    "planted_bytecode",
]

_MODULE_SUFFIXES = (".py", ".so", ".pyd")
_PER_INSTALL = {"RECORD", "RECORD.jws", "RECORD.p7s", "INSTALLER", "REQUESTED", "direct_url.json"}
"""``.dist-info`` files that legitimately differ between two installs of one wheel: neither hashed nor trusted."""


@dataclass(frozen=True)
class Home:
    """A distribution's own modules: its installed files, or the source folders of an editable install."""

    distribution: str
    version: str
    files: frozenset[Path]
    """Its own files (resolved): what the lab's hash covers, and nothing outside its installation folder."""
    roots: tuple[Path, ...]
    search_path: tuple[str, ...]
    """Where its own modules are found: its source folders, or the folder it is installed in."""
    modules: frozenset[str] = frozenset()
    """Its top modules (namespace packages excluded): everything at or below them is its own."""
    hashed: bool = False
    folder: Path | None = None
    """The installation folder (resolved) of a distribution installed from a wheel; ``None`` for an editable one."""

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}"

    def owns(self, origin: str) -> bool:
        return _owns(self, origin)

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


def _owns(home: Home, origin: str) -> bool:
    try:
        path = Path(origin).resolve()
    except (OSError, RuntimeError):  # a link loop
        return False
    return path in home.files or any(path.is_relative_to(root) for root in home.roots)


def _counted(path: PurePosixPath) -> str | None:
    """The normalised path of a ``RECORD`` entry when it is one the hash covers, else ``None``: byte-code caches,
    the per-install ``.dist-info`` files and anything whose path leads out of the installation folder are not."""
    text = posixpath.normpath(str(path))
    parts = PurePosixPath(text).parts
    if not parts or text.startswith(("/", "../")) or text == ".." or "__pycache__" in parts:
        return None
    if PurePosixPath(text).suffix in (".pyc", ".pyo"):
        return None
    if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in _PER_INSTALL:
        return None
    return text


def own_files(dist: Any) -> tuple[dict[str, Path], dict[str, Path]]:
    """A distribution's own files, the set its hash covers and the guard trusts: normalised ``RECORD`` path ->
    the resolved file, for every counted entry inside its installation folder; and, apart, the counted entries that
    are links leading out of it (path -> where they lead), which are neither."""
    base = os.path.realpath(str(dist.locate_file("")))
    own: dict[str, Path] = {}
    outside: dict[str, Path] = {}
    folders: dict[str, str] = {}  # each folder resolved once: a RECORD lists hundreds of files in a few folders
    for entry in dist.files or ():
        relative = _counted(PurePosixPath(str(entry)))
        if relative is None:
            continue
        folder, name = os.path.split(os.path.join(base, relative))
        try:
            real = folders.get(folder) or folders.setdefault(folder, os.path.realpath(folder))
            located = os.path.join(real, name)
            if os.path.islink(located):
                located = os.path.realpath(located)
        except (OSError, RuntimeError):
            outside[relative] = Path(base, relative)
            continue
        if located == base or located.startswith(base + os.sep):
            own[relative] = Path(located)
        else:
            outside[relative] = Path(located)
    return own, outside


def home_of(dist: Any, entry_points: Iterable[str] = (), hashed: bool = False) -> Home | None:
    """The home of an installed distribution (``None`` for ``surge.testing``'s in-memory ones, which have
    no files); ``entry_points`` are the modules its entry points name, guarded too.

    Remembered per process while its ``RECORD`` is unchanged: resolving every listed file costs more than the rest of
    a run's lab check. A file that turns into a link later is still refused, since :meth:`Home.owns` resolves the
    file an import would run each time."""
    if not hasattr(dist, "locate_file"):
        return None
    entry_points = tuple(entry_points)
    try:
        record = Path(dist._path, "RECORD").stat()  # a PathDistribution's metadata folder
        key: tuple[Any, ...] | None = (str(dist._path), record.st_mtime_ns, record.st_size, entry_points, hashed)
    except (AttributeError, OSError, TypeError):
        key = None
    if key is not None and key in _homes:
        return _homes[key]
    home = _home_of(dist, entry_points, hashed)
    if key is not None:
        _homes[key] = home
    return home


_homes: dict[tuple[Any, ...], Home] = {}


def _home_of(dist: Any, entry_points: tuple[str, ...], hashed: bool) -> Home:
    own, outside = own_files(dist)
    roots = _editable_roots(dist, own)
    folder = Path(dist.locate_file("")).resolve()
    search_path = tuple(map(str, roots)) if roots else (str(folder),)
    metadata = dist.metadata  # parsed on each access
    home = Home(
        str(metadata["Name"]),
        str(metadata["Version"]),
        frozenset(own.values()),
        roots,
        search_path,
        folder=None if roots else folder,
    )
    modules = set(_record_modules([PurePosixPath(p) for p in [*own, *outside]]))  # a link out is guarded, refused
    try:  # setuptools' list of top-level names: for an editable install, the only one without a folder scan
        top_level = (dist.read_text("top_level.txt") or "").split()
    except (OSError, UnicodeDecodeError):
        top_level = []
    for module in [*entry_points, *(name for name in top_level if name.isidentifier())]:
        files, _ = where(module, find=home._find_own)
        modules.update(name for name, _ in files[:1])
    return replace(home, modules=frozenset(modules), hashed=hashed)


def _editable_roots(dist: Any, own: dict[str, Path]) -> tuple[Path, ...]:
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except (ValueError, OSError):
        return ()
    if not direct.get("dir_info", {}).get("editable"):
        return ()
    roots = []
    for relative, path in own.items():  # setuptools, hatch, pdm: a .pth file naming the source folder
        if relative.endswith(".pth") and path.is_file():
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
        if getattr(type(finder), "_surge_lab_guard", False) or find_spec is None:
            continue
        spec = find_spec(name, path, target)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def _find_fresh(name: str, path: Any) -> ModuleSpec | None:
    """As :func:`_find`, for a module not imported yet even when it is (what a new process started here finds)."""
    return _find(name, path)


def where(
    module: str, find: Callable[[str, Any], ModuleSpec | None] = _find
) -> tuple[list[tuple[str, str]], str | None]:
    """The modules and regular packages on the way to ``module`` (``module`` included), each with the file an
    import would run, found without importing anything (namespace packages are passed through); and the first
    name on the way that is not found (``None`` when every one is). With the default ``find``, a module already
    imported answers with the file it came from; :func:`_find_fresh` looks on ``sys.path`` as it is now."""
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
    offender = _offender(origin, module, home)
    own = home.own_file(module)
    link = Path(origin).resolve() if Path(origin).is_symlink() else None
    leads = f" (a link to {link}, outside its installation folder)" if link is not None else ""
    return (
        f"`import {module}` would run {origin}{leads}, which is not a file of the pinned distribution {home.label} "
        f"({'its own is ' + own if own else 'it installed no such module'})",
        f"remove or rename {offender}, or start the run from another directory (the working directory and the "
        "training script's folder come first on sys.path)"
        if link is None
        else f"reinstall it: pip install --force-reinstall --no-deps '{home.distribution}=={home.version}'",
    )


def _offender(origin: str, module: str = "", home: Home | None = None) -> str:
    """The thing to remove for a foreign ``origin`` of ``module``: the zip holding it, the foreign top-level package
    folder it is in (a copy of a whole package), its package folder, or the file (one dropped into a package of
    ``home``'s own)."""
    path = Path(origin)
    for parent in path.parents:
        if parent.suffix in (".zip", ".egg", ".whl") and parent.is_file():
            return str(parent)
    parts = module.split(".") if module else [path.stem]
    depth = len(parts) - (0 if path.name.startswith("__init__.") else 1)  # folders between the file and the top
    top = path.parents[depth - 1] if 0 < depth <= len(path.parents) else None
    if top is not None and top.name == parts[0] and not (home is not None and home.owns(str(top / "__init__.py"))):
        return str(top)
    return str(path.parent if path.name.startswith("__init__.") else path)


def foreign_modules(home: Home) -> list[tuple[str, str]]:
    """Modules of ``home`` imported before the guard was on (``surge`` itself; a plugin module the training script
    imported first) from a file that is not one of its own (a copy in the script's folder, on ``PYTHONPATH``, in a
    zip): ``(module, file)``, the top-most of each."""
    found: list[tuple[str, str]] = []
    tops = {module.partition(".")[0] for module in home.modules}
    for name, module in sorted(sys.modules.items()):
        if name.partition(".")[0] not in tops or not any(p in home.modules for p in _prefixes(name)):
            continue
        if any(name.startswith(f + ".") for f, _ in found):
            continue
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if spec is not None and spec.has_location and origin and not home.owns(origin):
            found.append((name, origin))
    return found


def foreign_files(home: Home) -> list[str]:
    """Files Python would import in the package folders of ``home`` (installed from a wheel) that are not its own:
    a module dropped into its package, which no import has met yet."""
    if home.folder is None:
        return []
    found = []
    for module in sorted(home.modules):
        package = home.folder.joinpath(*module.split("."))
        if (package / "__init__.py").resolve() not in home.files:
            continue  # a module, not a package of its own (a folder of that name beside it is a shadow)
        for directory, folders, names in os.walk(package):
            folders[:] = sorted(f for f in folders if f != "__pycache__")
            for name in sorted(names):
                path = Path(directory, name)
                if path.suffix in (*_MODULE_SUFFIXES, ".pyc") and path.resolve() not in home.files:
                    found.append(str(path))
    return found


def foreign_bytecode(home: Home) -> list[tuple[str, str, str]]:
    """Modules of a hashed ``home`` imported before the guard was on (with ``surge`` itself, or by the training
    script) from a byte-code cache that does not hold their source's code: ``(module, source, cache)``. The
    code such a module ran cannot be taken back, but the run can still refuse."""
    found = []
    tops = {module.partition(".")[0] for module in home.modules}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in tops:
            continue
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


def planted_bytecode(home: Home) -> list[tuple[str, str]]:
    """Byte-code caches of ``home``'s own source files that Python would run instead of the source and that do not
    hold its code: ``(source, cache)``. Under the lab's hash the guard never reads them, but any import before the
    lab is read (or outside the lab) runs them: ``surge plugins check`` reports them."""
    found: list[tuple[str, str]] = []
    for path in sorted(home.files):
        if path.suffix != ".py" or not path.is_file():
            continue
        try:
            cached = cache_from_source(str(path))
        except (NotImplementedError, ValueError):
            return found  # no byte-code caching on this interpreter
        if Path(cached).is_file() and not _cache_holds_source(str(path), cached):
            found.append((str(path), cached))
    return found


def _cache_holds_source(source: str, cached: str) -> bool:
    """Whether the cache Python would run instead of ``source`` holds the code ``source`` compiles to (a cache
    Python would not use, because its header does not match the source, holds it as far as a run is concerned)."""
    try:
        data, stat = Path(cached).read_bytes(), Path(source).stat()
    except OSError:
        return True  # no cache: compiled from the source
    flags = int.from_bytes(data[4:8], "little")
    if data[:4] != MAGIC_NUMBER:
        return True
    try:
        text = Path(source).read_bytes()
    except OSError:
        return True
    if flags == 0:  # a timestamp cache: used when the source's modification time and size are in its header
        stamp = (int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
        if (int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")) != stamp:
            return True
    elif flags == 3 and data[8:16] != source_hash(text):  # a checked hash cache, whose hash does not match
        return True
    try:  # flags 1 (an unchecked hash cache) is used whatever the source holds
        return bool(marshal.loads(data[16:]) == compile(text, source, "exec", dont_inherit=True))
    except (ValueError, EOFError, TypeError, SyntaxError):
        return False


class _SourceOnly(SourceFileLoader):
    """Compiles the module from its source file, never from (or into) the byte-code cache."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)  # type: ignore[no-any-return]


def _prefixes(name: str) -> Iterator[str]:
    parts = name.split(".")
    for depth in range(len(parts), 0, -1):
        yield ".".join(parts[:depth])


def _make_guard() -> tuple[
    Callable[[Iterable[Home], str], None],
    Callable[[], contextlib.AbstractContextManager[None]],
    Callable[[], str | None],
]:
    """The guard's three handles: install it (or take it off), hold it in place while plugin modules are imported,
    and say whether it is intact. Its state is in this closure: no attribute of this module holds it, and what it
    calls is bound here, so assigning a module attribute changes nothing."""
    homes: dict[str, Home] = {}
    state: dict[str, Any] = {"source": "", "holding": 0}
    find, owns, refuse, prefixes, source_only, error = _find, _owns, shadow, _prefixes, _SourceOnly, LabError
    sourceless, source_loader = SourcelessFileLoader, SourceFileLoader

    class _Guard(MetaPathFinder):
        """First on ``sys.meta_path`` while a lab is active: every module of a pinned distribution is its own file,
        and under a hash is compiled from its verified source."""

        __slots__ = ()
        _surge_lab_guard = True

        def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
            home = next((homes[n] for n in prefixes(fullname) if n in homes), None)
            if home is None:
                return None
            spec = find(fullname, path, target)
            if spec is None or not spec.has_location or spec.origin is None:
                return spec
            refused = (
                f"the lab profile {state['source']} pins {home.label}, and this import is refused before it runs: "
            )
            if not owns(home, spec.origin):
                problem, fix = refuse(home, fullname, spec.origin)
                raise error(f"{refused}{problem}. Fix: {fix}")
            if home.hashed and isinstance(spec.loader, sourceless):
                raise error(
                    refused + f"{fullname} is byte-code only ({spec.origin}), which the lab's hash does not cover. "
                    f"Reinstall it from a wheel with sources: pip install --force-reinstall --no-deps "
                    f"'{home.distribution}=={home.version}'"
                )
            if home.hashed and type(spec.loader) is source_loader:
                spec.loader = source_only(fullname, spec.origin)
            return spec

        def __repr__(self) -> str:
            return f"<surge lab import guard: {state['source'] or 'off'}>"

    finder = _Guard()

    def install(held: Iterable[Home], source: str) -> None:
        """Hold imports to ``held`` (replacing the previous lab's); with none, take the guard off ``sys.meta_path``."""
        new = {module: home for home in held for module in home.modules}
        if state["holding"] and new != homes:
            raise error(
                "the import guard of the lab profile cannot be changed while plugin modules are being imported; a "
                "plugin's import code tried to (remove that code, or the plugin, from the lab)"
            )
        homes.clear()
        homes.update(new)
        state["source"] = source
        while finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if homes:
            sys.meta_path.insert(0, finder)

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        """While plugin modules are imported: the guard cannot be replaced or taken off by :func:`guard`."""
        state["holding"] += 1
        try:
            yield
        finally:
            state["holding"] -= 1

    def check() -> str | None:
        """``None`` while the guard is as installed (first on ``sys.meta_path``, or off with no lab); else what
        changed."""
        if not homes:
            return None
        if finder not in sys.meta_path:
            return "took Surge's import guard off sys.meta_path"
        if sys.meta_path[0] is not finder:
            return f"put {sys.meta_path[0]!r} before Surge's import guard on sys.meta_path"
        return None

    return install, hold, check


guard, holding, intact = _make_guard()
