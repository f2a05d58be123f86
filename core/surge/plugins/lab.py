"""Lab profiles: the plugin set a lab pins, checked before a run has any side effect.

A lab profile is a TOML file (or a ``[tool.surge.lab]`` table in ``pyproject.toml``)::

    autoload = false                 # a plugin whose distribution is not listed is never imported

    [distributions]                  # PEP 440 specifiers; "" or "*" is any version
    surge = "==0.1.0"
    surge-devices = "==0.1.0"
    surge-ddp = { version = "==0.3.1", sha256 = "9f2c...64 hex digits" }

    [plugins]                        # forced on (true) or off (false), over every other choice
    checkpoint = true
    swa = false

    [trainer]                        # the lab's Trainer defaults
    precision = "bf16-mixed"

    strict = true                    # also refuse runs where code ran before Surge could check (see below)

Where it is found, first match wins: ``surge --lab PATH`` (which sets ``SURGE_LAB`` for its command), the
``SURGE_LAB`` environment variable (a path or any fsspec URL; a ``pyproject.toml`` there means its
``[tool.surge.lab]`` table), or a ``[tool.surge.lab]`` table in the nearest ``pyproject.toml`` above the current
directory. The nearest ``pyproject.toml`` decides even without a table (a project is its own root): a table in a
``pyproject.toml`` further up is then passed over, with a warning naming both files. ``SURGE_LAB`` (or ``--lab``)
over a project's own table is said the same way.

Under a lab the modules of a pinned distribution must be its own files, and under a hash they are compiled from
the sources the hash covered, never from byte-code caches (see :mod:`surge.plugins._pinned`); the ``surge``
distribution is held to this like every plugin's.

**Code that runs before Surge can act** is found and reported, not stopped: an executable line of a ``.pth`` file,
``sitecustomize``/``usercustomize``, an entry point of a group another library loads by itself (``torch.backends``
at ``import torch``, ``pydantic`` when a model is built) and an edited console script of a pinned distribution.
What a pinned distribution installs is covered by its pin; anything else is a problem ``surge plugins check``
reports, and a run refuses it under ``strict = true`` (it warns otherwise). ``surge plugins lock`` pins the
distributions such code comes from.

Precedence: ``[trainer]`` values are defaults under ``SURGE_TRAINER_*`` variables, which are under explicit
Trainer arguments. The rules (pins, ``autoload``, ``[plugins]``) are on top of everything: a forced-off plugin
is blocked before import even when ``SURGE_PLUGINS`` or ``plugins=[...]`` names it, a forced-on one is active
even when ``SURGE_DISABLE_PLUGINS``, ``plugins={"name": False}`` or a Trainer switch turns it off.

**The hash** of a distribution (``sha256``) is the SHA-256 of the UTF-8 text made of one line
``"<path> <sha256 of the file's bytes, hex>\\n"`` per file that ``importlib.metadata`` lists for it (its
``RECORD``), sorted by path, where ``<path>`` is the normalised POSIX path relative to the installation directory.
Left out are files that legitimately differ between two installs of the same wheel: byte-code caches
(``__pycache__/``, ``*.pyc``), paths leading out of the installation directory (console scripts, whose first line
names the interpreter), and the ``.dist-info`` files ``RECORD``, ``RECORD.jws``, ``RECORD.p7s``,
``INSTALLER``, ``REQUESTED`` and ``direct_url.json``. A listed file that is missing hashes as ``missing``; a listed
file that is a link leading out of the installation directory cannot be hashed (the check reports it). The files
hashed are exactly the files the import guard takes for the distribution's own.
An editable install lists its metadata and path hooks, not its sources, so its hash proves nothing:
``surge plugins lock --hashes`` leaves it out.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from surge._logging import logger
from surge.errors import ConfigError, LabError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from surge.plugins import _startup
from surge.plugins._first_party import FIRST_PARTY
from surge.plugins._pinned import (
    Home,
    _find_fresh,
    _offender,
    foreign_bytecode,
    foreign_files,
    foreign_modules,
    home_of,
    own_files,
    planted_bytecode,
    shadow,
    where,
)

if TYPE_CHECKING:
    from surge.plugins.selection import Requests
    from surge.settings import SurgeSettings

__all__ = [
    "DistributionPin",
    "LabProfile",
    "Lab",
    "Mismatch",
    "resolve",
    "find",
    "load",
    "parse",
    "lock",
    "distribution_hash",
]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
STARTUP_KINDS = frozenset({"startup", "autoload", "script"})
"""The mismatches of code that runs before Surge can act: ``surge plugins check`` reports them; a run refuses them
only under ``strict = true`` (and warns otherwise)."""


class DistributionPin(BaseModel):
    """One distribution the lab requires: a version specifier and, optionally, the hash of its files."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: str = ""
    """A PEP 440 specifier (``"==0.3.1"``, ``">=1,<2"``); a bare version means ``==``; ``""``/``"*"``: any."""
    sha256: str | None = None
    """The distribution's hash (see the module docstring), 64 lower-case hex digits."""

    @field_validator("version")
    @classmethod
    def _specifier(cls, value: str) -> str:
        value = value.strip()
        if value in ("", "*"):
            return ""
        try:
            return f"=={Version(value)}"  # a bare version: the pin is exact
        except InvalidVersion:
            pass
        try:
            return str(SpecifierSet(value))
        except InvalidSpecifier:
            raise ValueError("not a PEP 440 version specifier (e.g. '==0.3.1' or '>=1.2,<2')") from None

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX64.match(value.lower()):
            raise ValueError("must be 64 hex digits, as `surge plugins lock --hashes` writes them")
        return value.lower() if value else value

    @property
    def specifier(self) -> SpecifierSet:
        return SpecifierSet(self.version)

    def requirement(self, name: str) -> str:
        return f"'{name}{self.version}'"


class LabProfile(BaseModel):
    """The profile file's tables. Unknown keys are errors (with a "did you mean")."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    autoload: bool = True
    """``false``: a plugin whose distribution is not in ``[distributions]`` is never imported, and a run
    refuses to start while one is installed."""
    strict: bool = False
    """``true``: a run also refuses to start while code that runs before Surge can act (an executable ``.pth``
    line, ``sitecustomize``, an auto-loaded entry point, an edited console script) does not come from a pinned
    distribution; otherwise it warns. ``surge plugins check`` reports them either way."""
    distributions: dict[str, DistributionPin] = {}
    plugins: dict[str, bool] = {}
    """Plugin name -> forced on (``true``) or off (``false``)."""
    trainer: dict[str, Any] = {}
    """Trainer defaults (any Trainer argument but ``plugins``), checked like ``Trainer(...)`` arguments."""

    @field_validator("distributions", mode="before")
    @classmethod
    def _short_form(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {k: {"version": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("distributions")
    @classmethod
    def _unique(cls, value: dict[str, DistributionPin]) -> dict[str, DistributionPin]:
        seen: dict[str, str] = {}
        for name in value:
            other = seen.setdefault(canonicalize_name(name), name)
            if other != name:
                raise ValueError(f"'{other}' and '{name}' are the same distribution; keep one")
        return value


@dataclass(frozen=True)
class Mismatch:
    """One difference between the environment and the profile, and the command that removes it."""

    kind: Literal[
        "missing",
        "version",
        "hash",
        "unexpected",
        "plugin",
        "shadowed",
        "nowhere",
        "clash",
        "record",
        "import",
        "bytecode",
        "foreign",
        "twice",
        "refused",
        "startup",
        "autoload",
        "script",
    ]
    subject: str
    detail: str
    fix: str

    def render(self) -> str:
        return f"  - {self.kind:<10} {self.subject}: {self.detail}\n    {'':<10} fix: {self.fix}"


@dataclass(frozen=True)
class Lab:
    """A loaded profile and where it came from (``source`` names the file in every message)."""

    profile: LabProfile
    source: str
    replaces: str = ""
    """The project's own ``[tool.surge.lab]`` table that ``SURGE_LAB`` (or ``--lab``) replaced, or empty."""

    @property
    def _pins(self) -> dict[str, tuple[str, DistributionPin]]:
        return {canonicalize_name(n): (n, pin) for n, pin in self.profile.distributions.items()}

    def pins(self, distribution: str | None) -> bool:
        return distribution is not None and canonicalize_name(distribution) in self._pins

    def forces_on(self, plugin: str) -> bool:
        return self.profile.plugins.get(plugin) is True

    def blocked_reason(self, plugin: str, distribution: str | None) -> str:
        """Why discovery must not import ``plugin`` (empty when the lab allows it)."""
        if self.profile.plugins.get(plugin) is False:
            return f"switched off by the lab profile {self.source}"
        if not self.profile.autoload and not self.pins(distribution):
            return f"its distribution {distribution or '?'} is not in the lab profile {self.source} (autoload = false)"
        return ""

    def check(self, settings: SurgeSettings | None = None) -> list[Mismatch]:
        """Every difference between the installed distributions and the profile, and every reason a run under it
        would refuse that can be seen without importing a plugin: a pinned plugin's module that is not its own
        file (shadowed), an entry point to a module that does not exist, a plugin name two distributions claim.

        With ``settings`` and nothing else wrong, the plugins a run would import (discovery under this profile
        and ``settings``) are imported too, so a pinned plugin that fails to import is found as a run finds it;
        without, nothing is imported (the check every run makes first)."""
        installed = _plugin_distributions()
        problems: list[Mismatch] = []
        for key, (name, pin) in sorted(self._pins.items()):
            dist = installed[key][0] if key in installed else _find(name)
            wanted = f"the lab pins {pin.version or 'any version'}"
            if dist is None:
                problems.append(
                    Mismatch("missing", name, f"not installed; {wanted}", f"pip install {pin.requirement(name)}")
                )
                continue
            version = dist.version
            try:
                ok = pin.specifier.contains(Version(version), prereleases=True)
            except InvalidVersion:
                ok = False
            if not ok:
                problems.append(
                    Mismatch(
                        "version", name, f"{version} is installed; {wanted}", f"pip install {pin.requirement(name)}"
                    )
                )
            elif pin.sha256 is not None:
                try:
                    found = distribution_hash(dist)
                    detail = f"its installed files hash to {found}; the lab pins {pin.sha256}"
                except LabError as exc:
                    found, detail = "", f"{exc}; the lab pins the hash {pin.sha256}"
                if found != pin.sha256:
                    fix = f"pip install --force-reinstall --no-deps '{name}=={version}'"
                    problems.append(Mismatch("hash", f"{name} {version}", detail, fix))
        if not self.profile.autoload:
            for key, (dist, plugins) in sorted(installed.items()):
                if key not in self._pins:
                    label = "plugin" if len(plugins) == 1 else "plugins"
                    problems.append(
                        Mismatch(
                            "unexpected",
                            f"{_name(dist)} {dist.version}",
                            f"provides the {label} {', '.join(sorted(plugins))} but is not in the profile, "
                            "whose autoload = false",
                            f"pip uninstall {_name(dist)}",
                        )
                    )
        available = {p for _, plugins in installed.values() for p in plugins} | _unowned_plugins()
        for plugin, on in sorted(self.profile.plugins.items()):
            if on and plugin not in available:
                problems.append(
                    Mismatch(
                        "plugin",
                        plugin,
                        "forced on by the lab, but no installed distribution provides it",
                        f"pip install {FIRST_PARTY[plugin]}"
                        if plugin in FIRST_PARTY
                        else "install the distribution that provides it",
                    )
                )
        homes = self.homes(installed)
        problems += (
            self._origins(installed, homes) + self._clashes(installed) + self._twice() + self._startup(installed)
        )
        if settings is not None and not [p for p in problems if p.kind not in STARTUP_KINDS]:
            problems += self._imports(settings)
        return problems

    def homes(self, installed: dict[str, tuple[Any, dict[str, str]]] | None = None) -> list[Home]:
        """Where each installed pinned distribution's modules must come from (what the import guard holds to): the
        plugins' distributions and any other pinned one, ``surge`` itself included."""
        installed = _plugin_distributions() if installed is None else installed
        homes = []
        for key, (name, pin) in sorted(self._pins.items()):
            dist, plugins = installed.get(key) or (_find(name), {})
            modules = [_module(value) for value in plugins.values()]
            home = home_of(dist, modules, hashed=pin.sha256 is not None) if dist is not None else None
            if home is not None:
                homes.append(home)
        return homes

    def _origins(self, installed: dict[str, tuple[Any, dict[str, str]]], homes: list[Home]) -> list[Mismatch]:
        """Each pinned plugin's entry point leads to a module, every module on the way is the pinned
        distribution's own file (not a folder of the same name earlier on sys.path), every module of a pinned
        distribution imported before the lab was read (``surge`` itself) came from its own files, nothing foreign
        sits in its package folders, and under a hash no module imported before the lab was read ran byte-code
        other than its source's."""
        problems = []
        for home in homes:
            key = canonicalize_name(home.distribution)
            plugins = {
                n: v for n, v in installed.get(key, (None, {}))[1].items() if self.profile.plugins.get(n) is not False
            }
            reinstall = f"pip install --force-reinstall --no-deps '{home.distribution}=={home.version}'"
            if plugins and not home.files and not home.roots:
                detail = "lists no installed files (no RECORD), so its modules cannot be told from copies elsewhere"
                problems.append(Mismatch("record", home.label, detail, reinstall))
                continue
            for module, origin in foreign_modules(home):
                own = home.own_file(module)
                detail = (
                    f"{module} was imported before the lab was read, from {origin}, which is not a file of the pinned "
                    f"distribution {home.label} ({'its own is ' + own if own else 'it installed no such module'})"
                )
                offender = _offender(origin, module, home)
                fix = f"remove or rename {offender} (a copy beside the training script, on PYTHONPATH or in a zip)"
                problems.append(Mismatch("shadowed", home.label, detail, fix + ", then start the run again"))
            for module, source, cached in foreign_bytecode(home) if home.hashed else ():
                detail = (
                    f"{module} was imported before the lab was read, from {cached}, byte-code that is not the code of "
                    f"its hashed source {source}"
                )
                problems.append(Mismatch("bytecode", home.label, detail, f"delete {cached}, then start the run again"))
            for path in foreign_files(home):
                detail = f"{path} is in its package folder but is not one of its files, so an import of it is refused"
                problems.append(Mismatch("foreign", home.label, detail, f"delete {path}, or {reinstall}"))
            entry_modules = {_module(value) for value in plugins.values()}
            for module in sorted(home.modules):  # what a process started here would import (the working directory too)
                if any(m == module or m.startswith(module + ".") for m in entry_modules):
                    continue  # checked with its entry point below
                files, _ = where(module, find=_find_fresh)
                foreign = next(((m, origin) for m, origin in files if not home.owns(origin)), None)
                if foreign is not None:
                    detail, fix = shadow(home, *foreign)
                    problems.append(Mismatch("shadowed", home.label, detail, fix))
            for plugin, value in sorted(plugins.items()):
                files, missing = where(_module(value))
                for module, origin in files:
                    if not home.owns(origin):
                        detail, fix = shadow(home, module, origin)
                        problems.append(Mismatch("shadowed", home.label, f"plugin '{plugin}': {detail}", fix))
                        break
                else:
                    if missing is not None:
                        detail = (
                            f"the entry point of its plugin '{plugin}' ({value}) names {missing}, which is not found"
                        )
                        problems.append(Mismatch("nowhere", home.label, detail, reinstall))
        return problems

    def _clashes(self, installed: dict[str, tuple[Any, dict[str, str]]]) -> list[Mismatch]:
        """Plugin names claimed by two distributions where one of them is pinned: a run cannot load either."""
        claimed: dict[str, list[tuple[Any, str]]] = {}
        for dist, plugins in installed.values():
            for plugin, value in plugins.items():
                claimed.setdefault(plugin, []).append((dist, value))
        problems = []
        for plugin, claims in sorted(claimed.items()):
            if self.profile.plugins.get(plugin) is False:
                continue  # blocked before import, so neither is loaded and the name is simply off
            if not self.profile.autoload:  # an unpinned claimant is reported as unexpected
                claims = [(dist, value) for dist, value in claims if self.pins(_name(dist))]
            if len(claims) > 1 and any(self.pins(_name(dist)) for dist, _ in claims):
                who = " and ".join(f"{_name(dist)} {dist.version} ({value})" for dist, value in claims)
                fix = "pip uninstall " + " or ".join(sorted({_name(dist) for dist, _ in claims}))
                problems.append(Mismatch("clash", plugin, f"claimed by {who}; a run loads neither", fix))
        return problems

    def _twice(self) -> list[Mismatch]:
        """A pinned distribution whose metadata is found in two places on sys.path (another spelling of its name
        included): the first one found is the one every lookup uses, so a copy earlier on sys.path stands in for
        the installed distribution, its files and its entry points."""
        problems = []
        for _key, (name, _) in sorted(self._pins.items()):
            places: dict[str, Any] = {}
            for dist in metadata.distributions(name=name):
                place = str(getattr(dist, "_path", "") or Path(str(dist.locate_file(""))).resolve())
                places.setdefault(str(Path(place).resolve()), dist)
            if len(places) > 1:
                first, *others = places
                detail = (
                    f"its metadata is found {len(places)} times on sys.path: {first} (which every lookup uses) and "
                    f"{', '.join(others)}"
                )
                fix = f"delete the one that is not the installed distribution: {' or '.join(places)}"
                problems.append(Mismatch("twice", name, detail, fix))
        return problems

    def _startup(self, installed: dict[str, tuple[Any, dict[str, str]]]) -> list[Mismatch]:
        """Code that runs before Surge can act and that no pinned distribution installs, and the pinned
        distributions' console scripts that are not plain launchers (:mod:`surge.plugins._startup`)."""
        problems = []
        for piece in _startup.startup_code():
            if piece.distribution is not None and self.pins(_name(piece.distribution)):
                continue  # what a pinned distribution installs is covered by its pin (and its hash)
            problems.append(Mismatch(piece.kind, piece.label, piece.what, piece.fix))
        for key, (name, _) in sorted(self._pins.items()):
            dist = installed[key][0] if key in installed else _find(name)
            if dist is None:
                continue
            for path, problem in _startup.edited_scripts(dist):
                detail = f"its console script {path} is not a plain launcher: {problem}; it runs before Surge"
                fix = f"pip install --force-reinstall --no-deps '{_name(dist)}=={dist.version}'"
                problems.append(Mismatch("script", f"{_name(dist)} {dist.version}", detail, fix))
        return problems

    def planted(self) -> list[Mismatch]:
        """Byte-code caches of the hashed pinned plugin distributions and of ``surge`` that hold other code than their
        source (which a run under the hash never reads, but an import before the lab or outside it runs):
        ``surge plugins check`` adds them. (Each cache is compared by compiling its source: the other pinned
        distributions, dependencies and start-up code, are left out.)"""
        installed = _plugin_distributions()
        problems = []
        for home in self.homes(installed):
            if canonicalize_name(home.distribution) not in {*installed, "surge"}:
                continue
            for source, cached in planted_bytecode(home) if home.hashed else ():
                detail = (
                    f"the byte-code cache {cached} holds other code than its hashed source {source}; a run under this "
                    "profile never reads it, but an import before the lab is read (or without it) runs it"
                )
                problems.append(Mismatch("bytecode", home.label, detail, f"delete {cached}"))
        return problems

    def _imports(self, settings: SurgeSettings) -> list[Mismatch]:
        from surge.plugins import discover

        problems = []
        try:
            catalog = discover(settings, lab=self, fatal=False)
        except LabError as exc:  # the guard refused a module while the plugins were imported
            return [Mismatch("refused", "import", str(exc), "see above; then check again")]
        for record in catalog.records.values():
            if record.status == "failed" and self.pins(record.distribution):
                problems.append(
                    Mismatch(
                        "import",
                        f"{record.distribution} {record.version}",
                        f"its plugin '{record.name}' fails to load: {record.reason}",
                        f"fix or reinstall it (pip install --force-reinstall --no-deps "
                        f"'{record.distribution}=={record.version}'), or switch it off in the profile "
                        f"([plugins] {record.name} = false)",
                    )
                )
        return problems

    def report(self, problems: list[Mismatch]) -> str:
        """The readable diff: one entry per problem with its fix, then the fixes as one set of commands."""
        lines = [f"the environment does not match the lab profile {self.source} ({len(problems)} problem(s)):"]
        lines += [p.render() for p in problems]
        uninstall = [p.subject.split()[0] for p in problems if p.kind == "unexpected"]
        install = [p.fix.removeprefix("pip install ") for p in problems if p.kind in ("missing", "version")]
        reinstall = [p.fix.split()[-1] for p in problems if p.kind == "hash"]
        commands = []
        if uninstall:
            commands.append("pip uninstall -y " + " ".join(uninstall))
        if install:
            commands.append("pip install " + " ".join(install))
        if reinstall:
            commands.append("pip install --force-reinstall --no-deps " + " ".join(reinstall))
        if len(problems) > 1 and commands:
            lines.append("all at once: " + " && ".join(commands))
        return "\n".join(lines)

    def verify(self) -> None:
        """Raise :class:`LabError` with the diff unless the environment matches. Code that runs before Surge can act
        (:data:`STARTUP_KINDS`) is refused under ``strict = true``, and a warning otherwise (once per process)."""
        problems = self.check()
        refused = [p for p in problems if self.profile.strict or p.kind not in STARTUP_KINDS]
        for problem in problems:
            if problem not in refused and (self.source, problem) not in _warned_startup:
                _warned_startup.add((self.source, problem))
                logger.warning(
                    "the lab profile {} does not cover code that runs before Surge can act: {} {}: {} (fix: {}); "
                    "strict = true in the profile refuses such a run",
                    self.source,
                    problem.kind,
                    problem.subject,
                    problem.detail,
                    problem.fix,
                )
        if refused:
            raise LabError(self.report(refused) + "\nnothing was run: a lab run starts only in a matching environment")

    def apply(self, requests: Requests) -> None:
        """Force the ``[plugins]`` set to ``true`` on, as if each were in ``plugins=[...]``, over the run's own
        switches. (Those set to ``false`` are blocked by discovery, before import.)"""
        for name, on in sorted(self.profile.plugins.items()):
            if not on:
                continue
            if name in requests.off:
                logger.warning(
                    "plugins={{'{}': False}} is overridden: the lab profile {} forces it on", name, self.source
                )
                requests.off.discard(name)
            requests.on.setdefault(name, {})
            if requests.loggers is not None:
                requests.loggers.add(name)  # so a forced-on logger survives logger=[...]


# -- loading --------------------------------------------------------------------------------------


def resolve(settings: SurgeSettings, cwd: Path | None = None) -> Lab | None:
    """The active lab: ``SURGE_LAB`` (which ``surge --lab`` sets), else ``[tool.surge.lab]`` in the nearest
    ``pyproject.toml`` above ``cwd``; ``None`` without either. Warns (once per process) about each profile
    higher up that the nearest ``pyproject.toml`` passes over."""
    lab, passed_over = find(settings, cwd)
    for warning in passed_over:
        if warning not in _warned:
            _warned.add(warning)
            logger.warning(warning)
    return lab


_warned: set[str] = set()
_warned_startup: set[tuple[str, Mismatch]] = set()


def find(settings: SurgeSettings, cwd: Path | None = None) -> tuple[Lab | None, list[str]]:
    """The active lab (as :func:`resolve`) and, for each ``[tool.surge.lab]`` table that does not apply (one higher
    up than the nearest ``pyproject.toml``, or the project's own when ``SURGE_LAB`` or ``--lab`` names another
    profile), a sentence saying so and how to run under it."""
    start = (cwd or Path.cwd()).resolve()
    nearest: Path | None = None
    lab: Lab | None = None
    passed_over = []
    for directory in (start, *start.parents):
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        if nearest is None:
            nearest = pyproject
            if settings.lab:
                lab = load(settings.lab)
                if _has_table(pyproject) and not _same_file(settings.lab, pyproject):
                    lab = replace(lab, replaces=f"{pyproject} [tool.surge.lab]")
                    passed_over.append(
                        f"the lab profile {pyproject} [tool.surge.lab] (the project's own) does not apply here: "
                        f"SURGE_LAB (or --lab) names {lab.source}, which replaces it. To run under the project's "
                        "table, unset SURGE_LAB and leave out --lab"
                    )
                break  # SURGE_LAB decides: only the project's own table is worth a word
            lab = _from_pyproject(pyproject)
        elif _has_table(pyproject):
            why = "has a [tool.surge.lab] table of its own" if lab else "has no [tool.surge.lab] table"
            passed_over.append(
                f"the lab profile {pyproject} [tool.surge.lab] does not apply here: the nearest pyproject.toml, "
                f"{nearest}, decides, and it {why}. To run under it, copy the table into {nearest}, or pass "
                f"--lab {pyproject} (or set SURGE_LAB={pyproject})"
            )
    if settings.lab and lab is None:
        lab = load(settings.lab)
    return lab, passed_over


def _same_file(location: str, pyproject: Path) -> bool:
    """Whether ``location`` (``SURGE_LAB``) is ``pyproject`` itself, which then applies as it would anyway."""
    path = location.removeprefix("file://")
    try:
        return "://" not in path and Path(path).resolve() == pyproject.resolve()
    except OSError:
        return False


def _has_table(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8", errors="replace")
        return "surge" in text and isinstance(_lab_table(tomllib.loads(text)), dict)
    except (OSError, tomllib.TOMLDecodeError):
        return False


def _from_pyproject(pyproject: Path) -> Lab | None:
    text = pyproject.read_text(encoding="utf-8", errors="replace")
    if "surge" not in text:  # most projects: no need to parse
        return None
    table = _lab_table(_toml(text, str(pyproject)))
    if table is None:
        return None
    source = f"{pyproject} [tool.surge.lab]"
    if not isinstance(table, dict):
        raise ConfigError([("tool.surge.lab", "must be a table")], f"lab profile {source}")
    return Lab(parse(table, source, prefix="tool.surge.lab."), source)


def _lab_table(data: Any) -> Any:
    for key in ("tool", "surge", "lab"):  # `tool = 1` is valid TOML: only tables are looked into
        data = data.get(key) if isinstance(data, dict) else None
    return data


def load(location: str) -> Lab:
    """Read a profile from a path or an fsspec URL (``file://``, ``memory://``, ``s3://``, ...)."""
    import fsspec

    try:
        with fsspec.open(location, "rb") as f:
            raw = f.read()
    except Exception as exc:
        raise LabError(
            f"cannot read the lab profile {location}: {type(exc).__name__}: {exc}. Fix the path or URL given "
            "with --lab or SURGE_LAB (any fsspec URL works, e.g. file:///shared/labs/vision.toml)"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # TOML is UTF-8 text
        raise ConfigError([("(toml)", f"not UTF-8 text: {exc}")], f"lab profile {location}") from None
    if location.rstrip("/").endswith("pyproject.toml"):  # its [tool.surge.lab] table
        table = _lab_table(_toml(text, location))
        if not isinstance(table, dict):
            raise LabError(f"{location} has no [tool.surge.lab] table; add one, or pass a profile file with --lab")
        source = f"{location} [tool.surge.lab]"
        return Lab(parse(table, source, prefix="tool.surge.lab."), source)
    return Lab(parse(_toml(text, location), location), location)


def _toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([("(toml)", f"not valid TOML: {exc}")], f"lab profile {source}") from None


def parse(data: Mapping[str, Any], source: str, prefix: str = "") -> LabProfile:
    """Validate a profile's tables; every problem is reported at once with its dotted path."""
    from surge.config import TrainerConfig, format_validation_error

    problems: list[tuple[str, str]] = []
    profile = None
    try:
        profile = LabProfile.model_validate(data)
    except ValidationError as exc:
        problems += _problems(exc, prefix)
    trainer = data.get("trainer")
    if isinstance(trainer, Mapping):
        if "plugins" in trainer:
            problems.append((f"{prefix}trainer.plugins", "set plugins in the [plugins] table (name = true/false)"))
        try:
            TrainerConfig.model_validate({k: v for k, v in trainer.items() if k != "plugins"})
        except ValidationError as exc:
            problems += format_validation_error(exc, f"{prefix}trainer")
    if problems or profile is None:
        raise ConfigError(problems, f"lab profile {source}")
    return profile


def _problems(exc: ValidationError, prefix: str) -> list[tuple[str, str]]:
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if loc and loc[0] == "trainer" and len(loc) > 1:
            continue  # the trainer table is checked against TrainerConfig, with better messages
        path = prefix + ".".join(loc)
        if error["type"] == "extra_forbidden":
            valid = list(LabProfile.model_fields) if len(loc) == 1 else list(DistributionPin.model_fields)
            close = difflib.get_close_matches(loc[-1], valid, n=1)
            message = f"unknown key; did you mean '{close[0]}'?" if close else f"unknown key; valid: {', '.join(valid)}"
        else:
            message = f"got {error['input']!r}: {error['msg'].removeprefix('Value error, ')}"
        problems.append((path, message))
    return problems


# -- the environment ------------------------------------------------------------------------------


def _name(dist: Any) -> str:
    return str(dist.metadata["Name"])


def _plugin_distributions() -> dict[str, tuple[Any, dict[str, str]]]:
    """Canonical name -> (distribution, its plugin names -> entry point values) for every distribution with a
    ``surge.plugins`` entry point, in the view discovery has (``surge.testing``'s in-memory plugins included)."""
    from surge import plugins

    found: dict[str, tuple[Any, dict[str, str]]] = {}
    for ep in plugins.source.entry_points():
        dist = getattr(ep, "dist", None)
        if dist is not None:
            found.setdefault(canonicalize_name(_name(dist)), (dist, {}))[1].setdefault(ep.name, ep.value)
    return found


def _module(value: str) -> str:
    return value.split(":")[0].strip()


def _unowned_plugins() -> set[str]:
    from surge import plugins

    return {ep.name for ep in plugins.source.entry_points() if getattr(ep, "dist", None) is None}


def _find(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _editable(dist: Any) -> bool:
    try:
        text = dist.read_text("direct_url.json")
        return bool(text and json.loads(text).get("dir_info", {}).get("editable"))
    except (AttributeError, ValueError, OSError):
        return False


def distribution_hash(dist: Any) -> str:
    """The hash of an installed distribution's files, as defined in the module docstring: the files
    :func:`surge.plugins._pinned.own_files` gives, which are the files the import guard trusts."""
    files = getattr(dist, "files", None)
    if files is None:
        raise LabError(f"{_name(dist)} lists no installed files (no RECORD), so it cannot be hashed")
    own, outside = own_files(dist)
    if outside:
        relative, target = sorted(outside.items())[0]
        raise LabError(
            f"{relative} is a link to {target}, outside its installation folder, so it is not one of its files and "
            "cannot be hashed"
        )
    lines: dict[str, str] = {}
    for relative, path in own.items():
        digest = hashlib.sha256()
        try:
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            lines[relative] = digest.hexdigest()
        except (FileNotFoundError, IsADirectoryError):
            lines[relative] = "missing"
    text = "".join(f"{p} {lines[p]}\n" for p in sorted(lines))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lock(hashes: bool = False) -> str:
    """A profile pinning ``surge``, every distribution that provides a ``surge.plugins`` entry point and every one
    whose code runs before Surge can act (:mod:`surge.plugins._startup`: a ``.pth`` file's executable line, an
    auto-loaded entry point) to its installed version (``==``), with ``autoload = false``; with ``hashes``, each
    one's hash too. Such code that no distribution installed gets a ``# warning:`` line.

    Every plugin is imported first, as a run under the profile would import it: each one that fails (or whose
    name two distributions claim) is written at the top as a ``# warning:`` line, since every run under the
    profile refuses until it is fixed."""
    dists = {key: dist for key, (dist, _) in _plugin_distributions().items()}
    core = _find("surge")
    if core is not None:
        dists.setdefault("surge", core)
    unowned = []
    for piece in _startup.startup_code():  # the distributions whose code runs before Surge can act
        if piece.distribution is not None:
            dists.setdefault(_startup.canonical(piece.distribution), piece.distribution)
        else:
            unowned.append(
                f"{piece.what}, and no distribution installed it: a strict lab refuses to run while it is there "
                f"(fix: {piece.fix})"
            )
    lines = [
        "# Lab profile written by `surge plugins lock` from the current environment.",
        "# Verify an environment with `surge plugins check --lab FILE`; set autoload = true to allow",
        "# plugins that are not listed here, strict = true to refuse runs where code not pinned here ran",
        "# before Surge could check (a .pth file, sitecustomize, an auto-loaded entry point).",
        *(f"# warning: {line}" for line in [*_lock_warnings(), *unowned]),
        "autoload = false",
        "",
        "[distributions]",
    ]
    for key in sorted(dists):
        dist = dists[key]
        name, version = _name(dist), dist.version
        key_text = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
        value = json.dumps(f"=={version}")
        if hashes and _editable(dist):
            lines.append(f"# {name}: an editable install, so no hash (its files are not its sources)")
        elif hashes:
            try:
                value = f"{{ version = {value}, sha256 = {json.dumps(distribution_hash(dist))} }}"
            except LabError as exc:
                lines.append(f"# {name}: no hash: {exc}")
        lines.append(f"{key_text} = {value}")
    return "\n".join(lines) + "\n"


def _lock_warnings() -> list[str]:
    from surge.plugins import discover
    from surge.settings import SurgeSettings

    everything = Lab(LabProfile(), "(none: `surge plugins lock` imports every plugin)")
    catalog = discover(SurgeSettings.model_construct(), lab=everything, fatal=False)
    return [
        f"{record.describe()} fails to load: {record.reason}. Every run under this profile refuses until it is "
        f"fixed (or until [plugins] {record.name} = false switches it off)"
        for record in catalog.records.values()
        if record.status == "failed"
    ]
