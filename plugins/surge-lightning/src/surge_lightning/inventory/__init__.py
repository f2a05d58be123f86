"""The inventory of Lightning's public surface: every name Lightning 2.6 exposes, and what Surge does with it.

``lightning.toml`` beside this file has one line per name, grouped by module or class (the sections
:mod:`surge_lightning.inventory.surface` reads from the installed Lightning), each classified as one of:

* **implemented**: Surge serves it at the mirrored path (``lightning.pytorch.callbacks.ModelCheckpoint`` is
  ``surge_lightning.pytorch.callbacks.ModelCheckpoint``; a member of ``Trainer`` is one of
  ``surge_lightning.pytorch.Trainer``), and the listed tests (pytest node ids) compare it with Lightning;
* **mapped**: Surge has it under another spelling, because Lightning's path cannot be kept (the reason says why);
* **refused**: Surge does not serve it; using it, calling it or overriding it raises an error that gives the reason
  and the alternative.

A module refused in the ``[modules]`` table refuses its submodules and every name in them: importing one raises.

This module reads the file and answers the run-time questions (is this name refused, and what does the error say);
it imports no Lightning. :mod:`.check` compares the file with the installed Lightning, :mod:`.markdown` writes
docs/porting.md's table from it.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from surge.errors import ConfigError, SurgeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the core depends on tomli there
    import tomli as tomllib

FILE = Path(__file__).with_name("lightning.toml")

Status = Literal["implemented", "mapped", "refused"]

STATUSES: tuple[Status, ...] = ("implemented", "mapped", "refused")

CLASS_SECTIONS = (
    "lightning.pytorch.Trainer",
    "lightning.pytorch.LightningModule",
    "lightning.pytorch.LightningDataModule",
    "lightning.pytorch.Callback",
    "lightning.pytorch.loggers.Logger",
)
"""The sections that hold a class's members; every other section is a module's names."""


@dataclass(frozen=True)
class Entry:
    """One classified name: ``name`` of ``section`` (a module's or a class's dotted Lightning path)."""

    section: str
    name: str
    status: Status
    tests: tuple[str, ...] = ()
    """implemented: the pytest node ids that compare it with Lightning."""
    differs: str = ""
    """implemented: where Surge's behaves otherwise than Lightning's, when it does (docs/porting.md shows it)."""
    spelling: str = ""
    """mapped: Surge's spelling."""
    reason: str = ""
    """mapped: why Lightning's path cannot be kept; refused: why Surge does not serve it."""
    use: str = ""
    """refused: what to use instead."""
    hook: bool = False
    """refused or mapped member: Lightning's loops call it, so a user's override of it is refused (Surge would not
    call it). Written in the file as ``hook = true``; the check compares it with the hooks read from Lightning."""

    @property
    def lightning(self) -> str:
        """The name as Lightning spells it: ``lightning.pytorch.callbacks.BasePredictionWriter``."""
        return f"{self.section}.{self.name}" if self.name else self.section

    @property
    def mirrored(self) -> str:
        """Where the mechanical porting rule puts it: ``surge_lightning.pytorch.callbacks.BasePredictionWriter``."""
        return mirrored(self.lightning)

    def message(self) -> str:
        """What using a refused or mapped name says: what, why, and what to use."""
        if self.status == "mapped":
            return f"{self.mirrored} ({self.lightning}) is spelt {self.spelling} in Surge: {self.reason}"
        if self.status == "refused":
            return f"{self.mirrored} ({self.lightning}) is not served by Surge: {self.reason}. Instead: {self.use}"
        return f"{self.mirrored} is served by Surge"


class Refused(SurgeError, ImportError):
    """A Lightning module or module-level name that Surge refuses or spells otherwise. An ``ImportError``, so that
    ``from surge_lightning.pytorch.callbacks import BasePredictionWriter`` shows this message (Python replaces an
    ``AttributeError`` raised there with its own "cannot import name")."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        super().__init__(entry.message())


class RefusedMember(SurgeError, AttributeError):
    """A member of a Lightning class (Trainer, LightningModule, ...) that Surge refuses or spells otherwise. An
    ``AttributeError``, so that ``hasattr`` and ``getattr(obj, name, default)`` answer as for a missing name."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        super().__init__(entry.message())


@dataclass(frozen=True)
class Inventory:
    """The classification file, read: ``modules`` the refused modules, ``sections`` every section's entries."""

    modules: dict[str, Entry]
    sections: dict[str, dict[str, Entry]]

    def entries(self) -> list[Entry]:
        """Every entry, refused modules first, in the file's order."""
        return [*self.modules.values(), *(e for names in self.sections.values() for e in names.values())]

    def refused_module(self, module: str) -> Entry | None:
        """The entry refusing ``module`` (a Lightning module path), itself or its nearest refused ancestor."""
        parts = module.split(".")
        for end in range(len(parts), 0, -1):
            entry = self.modules.get(".".join(parts[:end]))
            if entry is not None:
                return entry
        return None

    def entry(self, section: str, name: str) -> Entry | None:
        return self.sections.get(section, {}).get(name)

    def not_served(self, section: str) -> dict[str, Entry]:
        """The refused and mapped names of ``section``: those that raise at the mirrored path."""
        return {name: e for name, e in self.sections.get(section, {}).items() if e.status != "implemented"}


def lightning_path(path: str) -> str:
    """A ``surge_lightning`` dotted path as Lightning spells it (the porting rule backwards)."""
    if path == "surge_lightning" or path.startswith("surge_lightning."):
        return "lightning" + path[len("surge_lightning") :]
    raise ValueError(f"{path!r} is not a surge_lightning path")


def refused_name(module: str, name: str) -> Refused | None:
    """The error for ``name`` of the module ``module`` (``surge_lightning.pytorch.callbacks``) when the inventory
    refuses or maps it; ``None`` when it serves it or has no line for it (then the module says what it has)."""
    entry = load().entry(lightning_path(module), name)
    return Refused(entry) if entry is not None and entry.status != "implemented" else None


def refused_submodule(module: str, name: str) -> Refused | None:
    """The error for reading ``name`` from the package ``module`` when ``module.name`` is a module the inventory
    refuses (``surge_lightning.pytorch.loops`` read from ``surge_lightning.pytorch``)."""
    entry = load().refused_module(lightning_path(f"{module}.{name}"))
    return Refused(entry) if entry is not None else None


def refuse_module(module: str) -> NoReturn:
    """Raise the error of a module the inventory refuses whole: the file of such a module calls this with its
    ``__name__``, so importing it (or anything under it) says why and what to use."""
    entry = load().refused_module(lightning_path(module))
    if entry is None:
        raise LookupError(f"{module} calls refuse_module, but {FILE.name} does not refuse {lightning_path(module)}")
    raise Refused(entry)


def refused_member(section: str, name: str) -> RefusedMember | None:
    """The error for the member ``name`` of the class section ``section`` (``lightning.pytorch.Trainer``) when the
    inventory refuses or maps it; for a class's ``__getattr__``, which Python calls for missing names only."""
    entry = load().not_served(section).get(name)
    return RefusedMember(entry) if entry is not None else None


class _NotServed:
    """A member of a Lightning class that Surge refuses or spells otherwise, as a data descriptor on
    surge_lightning's class: reading or assigning it on an object raises :class:`RefusedMember` saying why and what
    to use (an assignment too, since Surge would ignore the value); a subclass's own definition of it (a hook
    override) shadows it, and :func:`check_overrides` refuses that. Reading it on the class gives the descriptor.
    Every other attribute is untouched: no ``__getattr__`` on the path of a Module's parameters and submodules."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry

    def __get__(self, obj: object, owner: type | None = None) -> object:
        if obj is None:
            return self
        raise RefusedMember(self.entry)

    def __set__(self, obj: object, value: object) -> None:
        raise RefusedMember(self.entry)

    def __delete__(self, obj: object) -> None:
        raise RefusedMember(self.entry)


def refuse_members(cls: type, section: str, keep: tuple[str, ...] = ()) -> None:
    """Put a :class:`_NotServed` on ``cls`` for each member of ``section`` the inventory refuses or maps, except the
    names ``cls`` already has (Surge's own, for something else) and ``keep`` (attributes Surge's own base class sets
    on its objects, ``Trainer.state``)."""
    for name, entry in load().not_served(section).items():
        if name not in keep and not hasattr(cls, name):
            setattr(cls, name, _NotServed(entry))


def check_overrides(cls: type, section: str, base: type, where: str) -> None:
    """A :class:`ConfigError` naming each refused hook of ``section`` that ``cls`` (a user's LightningModule,
    LightningDataModule or Callback class) defines itself, below ``base``: Surge would never call it, so the
    override would be silently ignored. ``where`` names the object (``trainer.fit(model)``)."""
    mro = cls.__mro__
    own = mro[: mro.index(base)] if base in mro else mro
    problems = [
        (f"{where}: {cls.__qualname__}.{name}", f"{entry.message()}")
        for name, entry in load().not_served(section).items()
        if entry.hook and any(name in vars(k) for k in own)
    ]
    if problems:
        raise ConfigError(problems, source=f"the hooks {cls.__qualname__} overrides")


def mirrored(path: str) -> str:
    """A Lightning dotted path under the mechanical porting rule: ``lightning`` -> ``surge_lightning``
    (``lightning.pytorch`` -> ``surge_lightning.pytorch``)."""
    if path == "lightning" or path.startswith("lightning."):
        return "surge_lightning" + path[len("lightning") :]
    raise ValueError(f"{path!r} is not a Lightning path")


def load(path: Path | None = None) -> Inventory:
    """The classification file (``path``, by default :data:`FILE`, read once), checked for form (each line one of
    the three kinds, with what that kind needs); a :class:`SurgeError` names the file, the section and the name of
    each line that is not."""
    return _load(path or FILE)


@functools.cache
def _load(path: Path) -> Inventory:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    modules = {module: _entry(module, "", value, problems, path) for module, value in data.pop("modules", {}).items()}
    sections = {
        section: {name: _entry(section, name, value, problems, path) for name, value in names.items()}
        for section, names in data.items()
    }
    if problems:
        raise SurgeError(f"{path}: {len(problems)} malformed line(s):\n" + "\n".join(f"  - {p}" for p in problems))
    return Inventory(modules=modules, sections=sections)


_FORMS = {
    "implemented": ({"implemented"}, {"implemented", "differs"}),
    "mapped": ({"mapped", "why"}, {"mapped", "why", "hook"}),
    "refused": ({"refused", "use"}, {"refused", "use", "hook"}),
}


def _entry(section: str, name: str, value: object, problems: list[str], path: Path) -> Entry:
    where = f"[{section}] {name}" if name else f"[modules] {section}"
    kinds = [kind for kind in STATUSES if isinstance(value, dict) and kind in value]
    if not isinstance(value, dict) or len(kinds) != 1 or set(value) not in _FORMS[kinds[0]]:
        problems.append(
            f'{where}: expected one of {{implemented = [test node ids]}} (with differs = "..." where Surge\'s '
            f'behaves otherwise), {{mapped = "Surge\'s spelling", why = "..."}}, '
            f'{{refused = "why", use = "what instead"}} (the last two with hook = true for a hook); got {value!r}'
        )
        return Entry(section, name, "refused")
    kind = kinds[0]
    if kind == "implemented":
        tests = value["implemented"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t for t in tests):
            problems.append(f"{where}: implemented needs a non-empty list of test node ids, got {tests!r}")
            return Entry(section, name, "refused")
        differs = value.get("differs", "")
        if not isinstance(differs, str) or ("differs" in value and not differs.strip()):
            problems.append(f"{where}: differs needs a non-empty string, got {differs!r}")
        return Entry(section, name, "implemented", tests=tuple(tests), differs=str(differs))
    texts = {key: value[key] for key in _FORMS[kind][0]}
    if not all(isinstance(text, str) and text.strip() for text in texts.values()):
        problems.append(f"{where}: {kind} needs non-empty strings for {sorted(texts)}, got {value!r}")
    if value.get("hook", True) is not True or ("hook" in value and section not in CLASS_SECTIONS):
        problems.append(f"{where}: hook = true is the only value, and only a class's member has it; got {value!r}")
    hook = value.get("hook") is True
    if kind == "mapped":
        return Entry(section, name, "mapped", spelling=str(value["mapped"]), reason=str(value["why"]), hook=hook)
    return Entry(section, name, "refused", reason=str(value["refused"]), use=str(value["use"]), hook=hook)
