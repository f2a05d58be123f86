"""Run configs: the YAML files of ``surge fit --config run.yaml``, resolved into one validated run.

A run config has six top-level keys::

    seed_everything: 0
    model: {class_path: surge.examples.digits.DigitsClassifier, init_args: {lr: 0.003}}
    data: {class_path: surge.examples.digits.DigitsDataModule, init_args: {batch_size: 64}}
    trainer: {max_epochs: 10}          # any Trainer argument (surge.config.TrainerConfig) but plugins
    plugins: {checkpoint: {save_top_k: 2}, swa: true, progress: false}
    ckpt_path: null                    # fit resumes from it; validate/test/predict load it

Layers, lowest first: built-in defaults < the lab profile's ``[trainer]`` table < the config files in order
< ``SURGE_TRAINER_*`` environment variables < command-line overrides; the lab profile's ``[plugins]`` rules go
over all of these. Mappings merge key by key down to one setting (``trainer.max_epochs``,
``model.init_args.lr``, ``plugins.swa.swa_lrs``); a setting's value replaces the one below it whole, and a
later ``class_path`` that differs drops the ``init_args`` written for the class before it.

:func:`resolve` reports every problem at once in one :class:`surge.ConfigError`, each with the dotted path, the
file and line it came from, the value, what is allowed, and a "did you mean" for misspelt names. It builds
nothing and writes nothing: classes are imported and ``init_args`` checked against their signatures, plugin
sections against each plugin's pydantic model.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import os
import random
import textwrap
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from surge.config import ENV_PREFIX, TrainerConfig, _env_defaults, format_validation_error
from surge.errors import ConfigError, SurgeError
from surge.seed import SEED_ENV

__all__ = [
    "Layer",
    "ClassSpec",
    "Problems",
    "RunConfig",
    "SECTIONS",
    "class_section",
    "import_object",
    "load_file",
    "load_files",
    "merge",
    "parameters",
    "parse_yaml",
    "parse_overrides",
    "resolve",
]

SECTIONS = ("seed_everything", "model", "data", "trainer", "plugins", "ckpt_path")
_CLASS_KEYS = ("class_path", "init_args")
_SEED_MAX = 2**32 - 1
Path = tuple[str, ...]


@dataclass
class Layer:
    """One source of values (a file, the command line, the environment, a lab profile) and, for every dotted
    path in it, where it was written (``"run.yaml, line 4"``)."""

    data: dict[str, Any]
    where: dict[Path, str] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class ClassSpec:
    """``model:`` or ``data:``: the imported class and its (signature-checked) ``init_args``."""

    class_path: str
    cls: type
    init_args: dict[str, Any]

    def build(self) -> Any:
        return self.cls(**{k: v.build() if isinstance(v, ClassSpec) else v for k, v in self.init_args.items()})

    def resolved(self) -> dict[str, Any]:
        """``class_path`` and every ``init_args`` value, defaults of the signature filled in where plain."""
        args: dict[str, Any] = {}
        for name, param in parameters(self.cls).items():
            if name in self.init_args:
                value = self.init_args[name]
                args[name] = value.resolved() if isinstance(value, ClassSpec) else value
            elif param.default is not inspect.Parameter.empty and _plain(param.default):
                args[name] = param.default
        args.update({k: v for k, v in self.init_args.items() if k not in args})  # **kwargs entries
        return {"class_path": self.class_path, "init_args": args}


@dataclass
class RunConfig:
    """A resolved, validated run: what ``surge fit`` builds, and the YAML that reproduces it."""

    model: ClassSpec | None
    data: ClassSpec | None
    trainer: TrainerConfig
    trainer_kwargs: dict[str, Any]
    """The Trainer arguments set by any layer, to pass explicitly (the rest are the Trainer's defaults)."""
    plugins: dict[str, Any]
    """The ``plugins`` section as given (name -> True, False or settings), for ``Trainer(plugins=...)``."""
    plugin_objects: dict[str, ClassSpec]
    """Entries of the ``plugins`` section that name no installed plugin but a ``class_path``: objects to
    build and add, as ``Trainer(plugins=[obj])`` would."""
    active_plugins: dict[str, Any]
    """Every plugin the run activates, with its full settings (defaults filled in), or ``False`` for a
    default plugin switched off."""
    seed_everything: int | None
    ckpt_path: str | None

    def to_dict(self) -> dict[str, Any]:
        trainer = self.trainer.model_dump(exclude={"plugins", "callbacks"})
        return {
            "seed_everything": self.seed_everything,
            "model": self.model.resolved() if self.model else None,
            "data": self.data.resolved() if self.data else None,
            "trainer": trainer,
            "plugins": self.active_plugins,
            "ckpt_path": self.ckpt_path,
        }

    def to_yaml(self) -> str:
        yaml = _yaml()
        header = "# the resolved run config: `surge fit --config THIS_FILE` runs it again\n"
        return header + yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)


# -- reading layers ---------------------------------------------------------------------------------------


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise SurgeError("run configs are YAML: `pip install PyYAML` to read them") from None
    return yaml


def load_file(location: str) -> Layer:
    """Read one config file (a path or an fsspec URL)."""
    import fsspec

    try:
        with fsspec.open(location, "r", encoding="utf-8") as f:
            text = f.read()
    except Exception as exc:
        raise ConfigError([("--config", f"cannot read {location}: {type(exc).__name__}: {exc}")], location) from None
    return parse_yaml(text, location)


def load_files(locations: Sequence[str]) -> list[Layer]:
    """:func:`load_file` for each location, every file's syntax problems at once (a file that cannot be parsed
    cannot be checked further)."""
    layers, problems = [], []
    for location in locations:
        try:
            layers.append(load_file(location))
        except ConfigError as exc:
            problems += [(path, f"{message} ({location})") for path, message in exc.problems]
    if problems:
        raise ConfigError(problems, "the run config")
    return layers


def parse_yaml(text: str, source: str) -> Layer:
    """Parse YAML text into a layer, remembering the line of every key; a syntax error is a ConfigError."""
    yaml = _yaml()
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return Layer({}, {}, source)
        where: dict[Path, str] = {}
        data = _construct(node, (), where, source, set(), yaml.constructor.SafeConstructor())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f"{source}, line {mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([("(yaml)", f"not valid YAML at {at}: {problem}")], source) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # e.g. an unhashable mapping key
        raise ConfigError([("(yaml)", f"cannot read {source}: {exc}")], source) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            [("(top level)", f"got {_short(data)}: a run config is a mapping of {', '.join(SECTIONS)}")], source
        )
    where.setdefault((), source)
    return Layer(data, where, source)


def _construct(node: Any, path: Path, where: dict[Path, str], source: str, active: set[int], constructor: Any) -> Any:
    """Build plain Python values from composed nodes, keeping each key's line (aliases are followed, a
    recursive one is an error)."""
    import yaml

    if id(node) in active:
        raise ValueError(f"line {node.start_mark.line + 1}: a recursive alias")
    where.setdefault(path, f"{source}, line {node.start_mark.line + 1}")
    if isinstance(node, yaml.ScalarNode):
        return constructor.construct_object(node, deep=True)
    active.add(id(node))
    try:
        if isinstance(node, yaml.SequenceNode):
            return [
                _construct(item, (*path, str(i)), where, source, active, constructor)
                for i, item in enumerate(node.value)
            ]
        if isinstance(node, yaml.MappingNode):
            constructor.flatten_mapping(node)  # `<<: *defaults` merge keys
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = constructor.construct_object(key_node, deep=True)
                if isinstance(key, (list, dict, set)):
                    raise ValueError(f"line {key_node.start_mark.line + 1}: a mapping key must be a plain value")
                child = (*path, str(key))
                where[child] = f"{source}, line {key_node.start_mark.line + 1}"
                result[key] = _construct(
                    value_node, child, where, source, active, constructor
                )  # the key's line is kept
            return result
    finally:
        active.discard(id(node))
    raise ValueError(f"unexpected YAML node {type(node).__name__}")  # pragma: no cover - PyYAML has three kinds


def parse_overrides(tokens: Sequence[str]) -> Layer:
    """``--trainer.max_epochs=3``, ``--model.lr 0.01`` (short for ``--model.init_args.lr``),
    ``--plugins.swa.swa_lrs=0.05``, ``--seed_everything=1``: values are YAML scalars (``3``, ``0.5``,
    ``true``, ``null``, ``[0, 1]``); a bare ``--trainer.fast_dev_run`` with no value is ``true``."""
    data: dict[str, Any] = {}
    where: dict[Path, str] = {}
    problems: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or len(token) == 2:
            problems.append((token, "unexpected argument; overrides look like --trainer.max_epochs=3"))
            continue
        key, has_value, raw = token[2:].partition("=")
        if not has_value:
            if i < len(tokens) and not tokens[i].startswith("--"):
                raw, i = tokens[i], i + 1
            else:
                raw = "true"
        parts = key.split(".")
        if any(not part for part in parts):
            problems.append((key, f"{token}: an empty name in the dotted path"))
            continue
        if parts[0] in ("model", "data") and len(parts) > 1 and parts[1] not in _CLASS_KEYS:
            parts.insert(1, "init_args")  # --model.lr=0.01 is --model.init_args.lr=0.01
        value = _scalar(raw)
        target = data
        for j, part in enumerate(parts[:-1]):
            existing = target.get(part)
            if not isinstance(existing, dict):
                existing = target[part] = {}
                where[tuple(parts[: j + 1])] = "the command line"
            target = existing
        target[parts[-1]] = value
        where[tuple(parts)] = f"the command line ({token if has_value else f'--{key} {raw}'})"
    if problems:
        raise ConfigError(problems, "the command line")
    return Layer(data, where, "the command line")


def _scalar(raw: str) -> Any:
    yaml = _yaml()
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw  # not YAML: the text itself


def environment_layer(environ: Mapping[str, str] | None = None) -> Layer:
    """``SURGE_TRAINER_*`` as a layer; ``SURGE_TRAINER_PLUGINS`` (what ``Trainer(plugins=...)`` takes: a name,
    a list of names and ``{name: settings}`` mappings, or a mapping) goes into the ``plugins`` section."""
    values, sources = _env_defaults(os.environ if environ is None else environ)
    where: dict[Path, str] = {("trainer", str(k)): f"the environment variable {v}" for k, v in sources.items()}
    data: dict[str, Any] = {}
    if "plugins" in values:
        del where[("trainer", "plugins")]
        section = data["plugins"] = _plugins_as_section(values.pop("plugins"))
        paths = [("plugins",), *(("plugins", str(n)) for n in (section if isinstance(section, dict) else ()))]
        where.update({path: f"the environment variable {sources['plugins']}" for path in paths})
    if values:
        data["trainer"] = values
    return Layer(data, where, f"the environment ({ENV_PREFIX}*)")


def _plugins_as_section(value: Any) -> Any:
    """``Trainer(plugins=...)``'s forms as a ``plugins`` section; a value of another shape is kept, and
    reported by the section's check."""
    if value is None:
        return {}
    items = [value] if isinstance(value, (str, dict)) else value if isinstance(value, list) else None
    if items is None or not all(isinstance(item, (str, dict)) for item in items):
        return value
    section: dict[str, Any] = {}
    for item in items:
        section.update({item: True} if isinstance(item, str) else item)
    return section


def lab_layer(lab: Any) -> Layer:
    if not lab or not lab.profile.trainer:
        return Layer({}, {}, "no lab profile")
    source = f"the lab profile {lab.source}"
    where: dict[Path, str] = {("trainer", str(k)): source for k in lab.profile.trainer}
    return Layer({"trainer": dict(lab.profile.trainer)}, where, source)


# -- merging ----------------------------------------------------------------------------------------------


def merge(layers: Iterable[Layer]) -> Layer:
    """Merge layers in order, later over earlier (see the module docstring for how deep)."""
    data: dict[str, Any] = {}
    where: dict[Path, str] = {}
    for layer in layers:
        for key, value in layer.data.items():
            _merge_key(data, where, (str(key),), key, value, layer.where)
    return Layer(data, where, "merged")


def _depth(path: Path) -> int:
    """How many levels below ``path`` merge key by key: 0 means a later value replaces it whole."""
    if len(path) == 1:
        return 2 if path[0] in ("trainer", "model", "data", "plugins") else 0
    if len(path) == 2 and path[0] in ("model", "data") and path[1] == "init_args":
        return 1
    if len(path) == 2 and path[0] == "plugins":
        return 1
    return 0


def _merge_key(
    target: dict[Any, Any], where: dict[Path, str], path: Path, key: Any, value: Any, source: Mapping[Path, str]
) -> None:
    old = target.get(key)
    if _depth(path) and isinstance(old, dict) and isinstance(value, dict):
        if path[0] in ("model", "data") and len(path) == 1:
            if "class_path" in value and "class_path" in old and value["class_path"] != old["class_path"]:
                old.pop("init_args", None)  # another class: the earlier arguments were for the old one
                _forget(where, (*path, "init_args"))
        for k, v in value.items():
            _merge_key(old, where, (*path, str(k)), k, v, source)
        return
    _forget(where, path)
    target[key] = _copy(value)
    for p, at in source.items():
        if p[: len(path)] == path:
            where[p] = at


def _forget(where: dict[Path, str], path: Path) -> None:
    for p in [p for p in where if p[: len(path)] == path]:
        del where[p]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# -- validating -------------------------------------------------------------------------------------------


class Problems:
    """Collects ``(dotted path, message)`` pairs, each told where its value came from."""

    def __init__(self, where: Mapping[Path, str]) -> None:
        self.where = where
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        at = self.locate(path)
        self.items.append((path, f"{message} ({at})" if at else message))

    def locate(self, path: str) -> str:
        parts = tuple(path.split("."))
        for n in range(len(parts), 0, -1):
            if parts[:n] in self.where:
                return self.where[parts[:n]]
        return ""


def resolve(
    files: Sequence[Layer],
    overrides: Layer | None = None,
    *,
    command: str = "fit",
    environ: Mapping[str, str] | None = None,
    lab: Any = None,
    catalog: Any = None,
    classes: Mapping[str, type] | None = None,
) -> RunConfig:
    """Merge ``files`` (in order) with the environment, ``overrides`` and the lab profile, and validate the
    result; every problem is reported at once. ``lab`` defaults to the active lab profile (``False``: none),
    ``catalog`` to the plugins discovery finds. ``classes`` are class paths that name the classes given
    (a class defined in a script, handed to ``LightningCLI``) without importing them."""
    from surge.settings import load_settings

    settings = load_settings()
    if lab is None:
        from surge.plugins.lab import resolve as resolve_lab

        lab = resolve_lab(settings)
        if lab is not None:
            lab.verify()
    layers = [lab_layer(lab), *files, environment_layer(environ), overrides or Layer({})]
    merged = merge(layers)
    data, problems = merged.data, Problems(merged.where)

    for key in data:
        if key not in SECTIONS:
            close = difflib.get_close_matches(str(key), SECTIONS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(SECTIONS)}"
            problems.add(str(key), f"unknown key; {hint}")

    trainer_values = data.get("trainer")
    trainer: TrainerConfig | None = None
    if trainer_values is None:
        trainer_values = {}
    if not isinstance(trainer_values, dict):
        problems.add("trainer", f"got {_short(trainer_values)}: a mapping of Trainer arguments")
        trainer_values = {}
    else:
        for key in ("plugins", "callbacks"):
            if key in trainer_values:
                problems.add(f"trainer.{key}", "plugins have their own top-level section: `plugins: {name: settings}`")
                trainer_values = {k: v for k, v in trainer_values.items() if k != key}
        try:
            trainer = TrainerConfig.model_validate(trainer_values)
        except ValidationError as exc:
            for path, message in format_validation_error(exc, "trainer"):
                problems.add(path, message)

    plugins = _plugin_section(data.get("plugins"), problems)
    model = class_section("model", data.get("model"), "Module", problems, required=True, classes=classes)
    datamodule = class_section("data", data.get("data"), "DataModule", problems, required=False, classes=classes)
    seed = _seed(data.get("seed_everything"), problems)
    ckpt_path = data.get("ckpt_path")
    if ckpt_path is not None and not isinstance(ckpt_path, str):
        problems.add("ckpt_path", f"got {_short(ckpt_path)}: a path, an fsspec URL, 'last' or 'best'")

    active: dict[str, Any] = {}
    objects: dict[str, ClassSpec] = {}
    if plugins is not None:
        if catalog is None:
            from surge.plugins import discover
            from surge.plugins.selection import named_providers, parse_requests, switched_plugins

            requested = {n for n, v in plugins.items() if v is not False}
            if trainer is not None:  # loggers and providers chosen by name are requests too, as for the Trainer
                requested |= parse_requests(trainer, False).names | named_providers(trainer, settings)
                requested |= switched_plugins(trainer)
            catalog = discover(settings, requested=requested, lab=lab or None)
        for name, value in list(plugins.items()):
            if isinstance(value, dict) and "class_path" in value and name not in catalog.records:
                del plugins[name]  # not an installed plugin: an object built from its class, like plugins=[obj]
                spec = class_section(f"plugins.{name}", value, None, problems, required=True)
                if spec is not None:
                    objects[name] = spec
        _check_plugins(plugins, catalog, problems)
        _check_providers(trainer_values, catalog, problems)
        if trainer is not None and not problems.items:
            active = _active_plugins(trainer, plugins, catalog, lab, problems)
            active.update({name: spec.resolved() for name, spec in objects.items()})
    if problems.items or trainer is None or plugins is None:
        raise ConfigError(problems.items, "the run config")
    return RunConfig(
        model=model,
        data=datamodule,
        trainer=trainer,
        trainer_kwargs={k: getattr(trainer, k) for k in trainer_values},
        plugins=plugins,
        plugin_objects=objects,
        active_plugins=active,
        seed_everything=seed,
        ckpt_path=ckpt_path,
    )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _seed(value: Any, problems: Problems) -> int | None:
    if value is None or value is False:
        return None
    if value is True:  # a fresh seed, recorded in the resolved config so the run can be repeated
        inherited = os.environ.get(SEED_ENV, "")  # chosen by the process that launched this one (ddp)
        return int(inherited) if inherited.isdigit() and int(inherited) <= _SEED_MAX else random.randint(0, _SEED_MAX)
    if isinstance(value, int) and 0 <= value <= _SEED_MAX:
        return value
    problems.add("seed_everything", f"got {_short(value)}: an integer in [0, {_SEED_MAX}], true (a fresh seed) or null")
    return None


def _plugin_section(section: Any, problems: Problems) -> dict[str, Any] | None:
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.add("plugins", f"got {_short(section)}: a mapping of plugin name -> true, false or settings")
        return None
    result: dict[str, Any] = {}
    for name, value in section.items():
        path = f"plugins.{name}"
        if not isinstance(name, str):
            problems.add(path, "keys are plugin names")
        elif value is None or value is True:  # `swa:` with nothing after it: on, with its defaults
            result[name] = True
        elif value is False or isinstance(value, dict):
            result[name] = value
        else:
            problems.add(path, f"got {_short(value)}: true (on), false (off) or a mapping of the plugin's settings")
    return result


def _check_plugins(plugins: Mapping[str, Any], catalog: Any, problems: Problems) -> None:
    from surge.plugins.selection import _unknown_plugin

    for name, value in plugins.items():
        path = f"plugins.{name}"
        record = catalog.records.get(name)
        if record is None:
            problems.add(path, _unknown_plugin(name, catalog))
            continue
        plugin = record.plugin
        if plugin is None:
            if value is not False:
                problems.add(path, f"{record.describe()} is {record.status}: {record.reason}")
            continue
        if not isinstance(value, dict):
            continue
        if plugin.kind == "provider" and plugin.config is None:
            if value:
                slots = ", ".join(f"trainer.{slot}" for slot in plugin.provides)
                problems.add(path, f"'{name}' is a provider that declares no settings; choose it with {slots}")
            continue
        if plugin.config is not None:
            try:
                plugin.config.model_validate(value)
            except ValidationError as exc:
                for p, message in format_validation_error(exc, path, model=plugin.config):
                    problems.add(p, message)
        elif plugin.factory is not None:
            _check_arguments(plugin.factory, value, path, problems)


def _check_providers(trainer: Mapping[str, Any], catalog: Any, problems: Problems) -> None:
    """A provider chosen by name (``trainer.accelerator: cuda``, ``trainer.profiler: simple``) must be installed,
    and a logger chosen by name must be an installed logger; whether a device is present is the Trainer's
    question. The messages are the Trainer's."""
    from surge.errors import PluginError
    from surge.plugins.backends import Precision
    from surge.plugins.selection import logger_problems, unknown_provider

    for slot in ("accelerator", "strategy", "precision", "profiler"):
        value = trainer.get(slot)  # absent: the default, "auto" (None for the profiler)
        if not isinstance(value, (str, int)) or isinstance(value, bool) or (value == "auto" and slot != "profiler"):
            continue
        try:
            found = catalog.providers(slot)
        except PluginError:
            continue  # two plugins claim a name: the Trainer says which
        names = set(found)
        if slot == "precision":
            names |= set(Precision.aliases)
            names |= {alias for cls, _ in found.values() for alias in getattr(cls, "aliases", ())}
        elif slot != "profiler":
            names.add("auto")
        if str(value) not in names:
            problems.add(f"trainer.{slot}", unknown_provider(slot, str(value), names, catalog=catalog))
    logger = trainer.get("logger")
    loggers = logger if isinstance(logger, list) else [logger]
    for path, message in logger_problems([n for n in loggers if isinstance(n, str)], catalog):
        problems.add(path, message)


def _active_plugins(
    trainer: TrainerConfig, plugins: dict[str, Any], catalog: Any, lab: Any, problems: Problems
) -> dict[str, Any]:
    """What the Trainer will switch on, with full settings: the same rules as ``Trainer(...)``."""
    from surge.plugins.selection import _is_on, apply_switches, parse_requests

    config = trainer.model_copy(update={"plugins": plugins or None})
    requests = parse_requests(config, bool(trainer.fast_dev_run))
    apply_switches(requests, catalog, config)
    for path, message in requests.problems:
        if not path.startswith("trainer.plugins"):  # the section itself was checked above
            problems.add(path, message)
    if lab:
        lab.apply(requests)
    active: dict[str, Any] = {}
    for record in catalog.loaded():
        plugin = record.plugin
        if plugin.kind == "provider":
            continue
        if not _is_on(record, requests):
            if plugin.default:
                active[record.name] = False
            continue
        settings = requests.on.get(record.name, {})
        if plugin.config is None:
            active[record.name] = dict(settings) or True
            continue
        try:
            active[record.name] = plugin.config.model_validate(settings).model_dump(mode="json")
        except ValidationError as exc:  # a seed switch's value the plugin refuses
            for p, message in format_validation_error(exc, f"plugins.{record.name}", model=plugin.config):
                problems.add(p, message)
        except Exception:  # settings that do not serialise: keep what was given
            active[record.name] = dict(settings) or True
    return active


def class_section(
    section: str,
    value: Any,
    base: str | None,
    problems: Problems,
    required: bool,
    classes: Mapping[str, Any] | None = None,
) -> ClassSpec | None:
    if value is None:
        if required:
            problems.add(
                section,
                f"missing: `{section}: {{class_path: package.module.Class, init_args: {{...}}}}` names the "
                f"{f'surge.{base}' if base else 'class'} to use",
            )
        return None
    if isinstance(value, str):
        value = {"class_path": value}
    if not isinstance(value, dict):
        problems.add(section, f"got {_short(value)}: a mapping with class_path and init_args")
        return None
    for key in value:
        if key not in _CLASS_KEYS:
            close = difflib.get_close_matches(str(key), [*_CLASS_KEYS], n=1)
            hint = f"did you mean '{close[0]}'?" if close else "valid keys: class_path, init_args"
            problems.add(
                f"{section}.{key}",
                f"unknown key; {hint} (a short form --{section}.NAME=VALUE on the command line means init_args.NAME)",
            )
    class_path = value.get("class_path")
    init_args = value.get("init_args")
    if init_args is None:
        init_args = {}
    if not isinstance(init_args, dict):
        problems.add(f"{section}.init_args", f"got {_short(init_args)}: a mapping of the class's arguments")
        init_args = {}
    if not isinstance(class_path, str) or not class_path:
        problems.add(f"{section}.class_path", f"got {_short(class_path)}: a dotted path like package.module.Class")
        return None
    cls = (classes or {}).get(class_path) or import_object(class_path, f"{section}.class_path", problems)
    if cls is None:
        return None
    import surge

    expected = getattr(surge, base) if base else object
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        problems.add(
            f"{section}.class_path", f"{class_path} is not a {f'subclass of surge.{base}' if base else 'class'}"
        )
        return None
    nested: dict[str, ClassSpec] = {}
    if _check_arguments(cls, init_args, f"{section}.init_args", problems, nested):
        return ClassSpec(class_path, cls, {**init_args, **nested})
    return None


def import_object(class_path: str, path: str, problems: Problems) -> Any:
    parts = class_path.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        problems.add(path, f"got {class_path!r}: a dotted path like package.module.Class")
        return None
    module = None
    for n in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:n])
        try:
            module = importlib.import_module(name)
            break
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this prefix is not a module: try a shorter one (Outer.Inner classes)
            problems.add(path, f"importing {name} failed: {type(exc).__name__}: {exc}")
            return None
        except Exception as exc:  # the user's module is broken: say so rather than crash
            problems.add(path, f"importing {name} failed: {type(exc).__name__}: {exc}")
            return None
    if module is None:
        problems.add(path, f"cannot import {class_path}: no module named '{parts[0]}' (is it installed?)")
        return None
    obj: Any = module
    for k, attr in enumerate(parts[n:], start=n):
        if not hasattr(obj, attr):
            owner = ".".join(parts[:k])
            names = [a for a in dir(obj) if not a.startswith("_") and isinstance(getattr(obj, a, None), type)]
            close = difflib.get_close_matches(attr, names, n=1)
            hint = f"; did you mean '{owner}.{close[0]}'?" if close else ""
            problems.add(path, f"cannot import {class_path}: {owner} has no attribute '{attr}'{hint}")
            return None
        obj = getattr(obj, attr)
    return obj


def parameters(target: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return {}


def _check_arguments(
    target: Any,
    arguments: Mapping[Any, Any],
    path: str,
    problems: Problems,
    nested: dict[str, ClassSpec] | None = None,
) -> bool:
    """Check ``arguments`` against ``target``'s signature (names, required ones, annotated types). With
    ``nested``, an argument annotated with a class whose value is ``{class_path: ..., init_args: ...}`` is
    resolved (checked the same way, recursively) into ``nested[name]``, built with the object around it."""
    before = len(problems.items)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return True  # nothing to check against
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for key in arguments:
        if not isinstance(key, str):
            problems.add(f"{path}.{key}", "argument names are strings")
        elif key not in named and not takes_any:
            close = difflib.get_close_matches(key, named, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"accepted: {', '.join(named) or 'none'}"
            problems.add(f"{path}.{key}", f"unknown argument; {hint}")
    for name in named:
        if params[name].default is inspect.Parameter.empty and name not in arguments:
            problems.add(f"{path}.{name}", "missing: a required argument without a default")
    if len(problems.items) == before:
        try:
            signature.bind(**{str(k): v for k, v in arguments.items()})
        except TypeError as exc:
            problems.add(path, str(exc))
    hints = _hints(target)
    for key, value in arguments.items():
        if nested is not None and key in named and _names_a_class(hints.get(key), value):
            spec = class_section(f"{path}.{key}", value, None, problems, required=True)
            if spec is not None and not _fits(hints[key], spec.cls):
                problems.add(f"{path}.{key}.class_path", f"{spec.class_path} is not a {_type_name(hints[key])}")
            elif spec is not None:
                nested[str(key)] = spec
        elif key in hints and key in named:
            _check_type(hints[key], value, f"{path}.{key}", problems)
    return len(problems.items) == before


def _classes(hint: Any) -> list[type]:
    """The classes a type hint admits (``nn.Module | None`` -> ``[nn.Module]``); builtins and containers aside."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return [t for t in options if isinstance(t, type) and t.__module__ != "builtins" and t is not type(None)]


def _names_a_class(hint: Any, value: Any) -> bool:
    """A ``{class_path: ...}`` mapping given for an argument annotated with a class: an object to build."""
    return isinstance(value, dict) and "class_path" in value and bool(_classes(hint))


def _fits(hint: Any, cls: type) -> bool:
    return isinstance(cls, type) and any(issubclass(cls, t) for t in _classes(hint))


def _type_name(hint: Any) -> str:
    return " or ".join(f"{t.__module__}.{t.__qualname__}" for t in _classes(hint))


def _hints(target: Any) -> dict[str, Any]:
    function: Any = target.__init__ if isinstance(target, type) else target  # type: ignore[misc]
    try:
        return typing.get_type_hints(function)
    except Exception:  # an annotation that does not resolve: no type check
        return {}


def _check_type(hint: Any, value: Any, path: str, problems: Problems) -> None:
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint)
    except Exception:  # a type pydantic cannot check (a torch module, a callable protocol...)
        return
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        messages = "; or ".join(dict.fromkeys(e["msg"] for e in exc.errors()))
        problems.add(path, f"got {_short(value)}: {messages}")
    except Exception:  # a validator that raised something else: not ours to judge
        return


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in value.items())
    return False


# -- help text: descriptions from the models ---------------------------------------------------------------


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's description: ``Field(description=...)``, else the docstring written under it."""
    docs: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in zip(body, [*body[1:], None], strict=False):
            target = getattr(node, "target", None)
            if isinstance(node, ast.AnnAssign) and isinstance(target, ast.Name) and isinstance(following, ast.Expr):
                if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                    docs[target.id] = " ".join(following.value.value.split())
    for name, info in model.model_fields.items():
        if info.description:
            docs[name] = info.description
    return docs
