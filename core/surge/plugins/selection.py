"""From Trainer arguments and the plugin catalog to the list of bus subscribers and chosen providers."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from loguru import logger
from pydantic import ValidationError

from surge import plugins as _plugins
from surge.config import TrainerConfig, format_validation_error
from surge.errors import ConfigError, PluginConflictError, PluginError, ProviderError
from surge.events import Event
from surge.events.bus import Subscriber, Tier, Timing, timing
from surge.events.hooks import PROJECT
from surge.events.protocols import CheckpointIO, Tuner, missing_members, role_problem
from surge.plugins import ROLE_PROTOCOLS, Catalog, PluginRecord
from surge.plugins._first_party import (
    CALLBACK_HINT,
    LEGACY_MODULE_HOOKS,
    LIGHTNING,
    LIGHTNING_PLUGINS,
    PRECISION_NAMES,
    SERVED_BY,
    SLOT_DISTRIBUTIONS,
    SYNONYMS,
    install_hint,
)
from surge.plugins.backends import Accelerator, Precision, Strategy, api_names
from surge.settings import SurgeSettings

SWITCHES_GROUP = "surge.switches"
"""The entry-point group in which a distribution names the Trainer arguments its plugins serve (their
``surge.Plugin(switches=...)``), so that setting one requests the plugin without importing any other: an entry
point named after the argument whose value is the serving plugin's ``surge.plugins`` entry point's value::

    [project.entry-points."surge.switches"]
    max_time = "surge_callbacks:timer_plugin"
"""


def _asks(argument: str, value: Any) -> bool:
    """Whether ``value`` of a plugin-served argument asks for a plugin: away from its default, except an int
    ``accumulate_grad_batches``, which the loop applies itself (a ``{epoch: k}`` schedule is a plugin's)."""
    if argument == "accumulate_grad_batches":
        return isinstance(value, Mapping)
    default = TrainerConfig.model_fields[argument].default
    return bool(value != default)


def switched_plugins(config: TrainerConfig) -> set[str]:
    """The plugins whose distributions name, in :data:`SWITCHES_GROUP`, an argument ``config`` sets: requests,
    read from metadata only, so ``SURGE_DISABLE_PLUGIN_AUTOLOAD`` still loads them."""
    names: set[str] = set()
    for ep in _plugins.source.entry_points():
        for entry in getattr(getattr(ep, "dist", None), "entry_points", ()):
            if (
                entry.group == SWITCHES_GROUP
                and entry.value == ep.value
                and entry.name in TrainerConfig.model_fields
                and _asks(entry.name, getattr(config, entry.name))
            ):
                names.add(ep.name)
    return names


def apply_switches(req: Requests, catalog: Catalog, config: TrainerConfig) -> None:
    """Switch on the plugins that serve the Trainer arguments ``config`` sets, with the settings each plugin's
    ``switches`` makes of the value (settings given in ``plugins=`` win); an asked argument no installed plugin
    serves is a problem of ``req``, naming the distribution that would."""
    claims: dict[str, tuple[PluginRecord, Callable[[Any], Mapping[str, Any] | None]]] = {}
    for record in catalog.loaded():
        assert record.plugin is not None
        for argument, settings_of in record.plugin.switches.items():
            if argument in claims:
                raise PluginConflictError(
                    f"{claims[argument][0].describe()} and {record.describe()} both serve the Trainer argument "
                    f"'{argument}'; uninstall one, or block it with SURGE_DISABLE_PLUGINS"
                )
            claims[argument] = (record, settings_of)
    for argument in sorted({*claims, *SERVED_BY}):
        value = getattr(config, argument)
        if argument not in claims:
            if _asks(argument, value):
                req.problems.append((f"trainer.{argument}", _unserved(argument, catalog)))
            continue
        record, settings_of = claims[argument]
        settings = settings_of(value)
        if settings is None:
            continue
        name = record.name
        model = record.plugin.config if record.plugin is not None else None
        if model is not None:  # the serving plugin's rules, reported under the argument the user set
            try:
                model.model_validate(dict(settings))
            except ValidationError as exc:
                for _, message in format_validation_error(exc, "", model=model):
                    req.problems.append((f"trainer.{argument}", message))
                continue
        if name in req.off:
            req.problems.append(
                (f"trainer.{argument}", f"asks for the '{name}' plugin, which trainer.plugins switches off")
            )
            continue
        req.on[name] = {**settings, **req.on.get(name, {})}  # settings given in plugins= win


def _unserved(argument: str, catalog: Catalog) -> str:
    distribution = SERVED_BY[argument]
    held = [r for r in catalog.records.values() if r.distribution == distribution and r.plugin is None]
    if held:
        return f"no loaded plugin serves it: {held[0].describe()} is {held[0].status}: {held[0].reason}"
    return f"no installed plugin serves it; `pip install {distribution}` adds one"


# Which Trainer switch turns which role off.
_SWITCHES = {
    "enable_checkpointing": "checkpoint",
    "enable_progress_bar": "progress",
    "enable_model_summary": "model_summary",
}


@dataclass
class Requests:
    """What the Trainer's ``plugins=``, ``logger=`` and ``enable_*`` arguments ask for."""

    on: dict[str, dict[str, Any]] = field(default_factory=dict)
    off: set[str] = field(default_factory=set)
    instances: list[tuple[str, object]] = field(default_factory=list)
    """Objects passed in ``plugins=``/``callbacks=``/``logger=``, each with where it was written."""
    checkpoint_io: list[tuple[str, object]] = field(default_factory=list)
    """:class:`~surge.events.protocols.CheckpointIO` objects passed in ``plugins=`` (Lightning's way to give one)."""
    roles_off: set[str] = field(default_factory=set)
    loggers: set[str] | None = None
    """Logger plugins chosen by name; ``None`` means the default loggers."""
    problems: list[tuple[str, str]] = field(default_factory=list)
    """Malformed entries, reported by :func:`activate` together with unknown names and bad settings."""

    @property
    def names(self) -> set[str]:
        return set(self.on) | (self.loggers or set())


def parse_requests(config: TrainerConfig, fast_dev_run: bool) -> Requests:
    """Normalise ``plugins``, ``logger`` and the switches, reporting every malformed entry at once."""
    req = Requests()
    problems: list[tuple[str, str]] = []
    plugins = config.plugins
    if plugins is None:
        pass
    elif isinstance(plugins, Mapping):
        _add_settings(req, plugins, "trainer.plugins", problems)
    elif isinstance(plugins, (list, tuple)):
        for i, item in enumerate(plugins):
            if isinstance(item, str):
                req.on[item] = {}
            elif isinstance(item, Mapping):  # {name: settings} beside names and objects
                _add_settings(req, item, f"trainer.plugins[{i}]", problems)
            elif isinstance(item, (int, float, bool, bytes)) or item is None:
                problems.append(
                    (f"trainer.plugins[{i}]", f"got {item!r}: list entries are plugin names or plugin objects")
                )
            else:
                _add_instance(req, item, f"trainer.plugins[{i}]", problems)
    elif isinstance(plugins, str):
        req.on[plugins] = {}
    elif isinstance(plugins, (int, float, bytes)):
        problems.append(("trainer.plugins", f"got {plugins!r}: pass a list of names or objects, or a dict"))
    else:
        _add_instance(req, plugins, "trainer.plugins", problems)

    callbacks = config.callbacks
    for i, item in enumerate(callbacks if isinstance(callbacks, (list, tuple)) else [callbacks] if callbacks else []):
        if isinstance(item, (str, bytes, int, float, bool, Mapping)) or item is None:
            problems.append(
                (f"trainer.callbacks[{i}]", f"got {item!r}: callbacks are plugin objects; plugin names go in plugins=")
            )
        else:
            _add_instance(req, item, f"trainer.callbacks[{i}]", problems)

    logger = config.logger
    if logger is False or logger is None:
        req.roles_off.add("logger")
    elif logger is True:
        pass
    else:
        items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
        req.loggers = set()
        for i, item in enumerate(items):
            if isinstance(item, str):
                req.loggers.add(item)
            elif isinstance(item, (bool, int, float, Mapping)) or item is None:
                problems.append((f"trainer.logger[{i}]", f"got {item!r}: use a logger plugin name or object"))
            else:
                _add_instance(req, item, f"trainer.logger[{i}]", problems)
    for switch, role in _SWITCHES.items():
        if not getattr(config, switch):
            req.roles_off.add(role)
    if fast_dev_run:
        req.roles_off |= {"logger", "checkpoint"}
    clash = sorted(req.names & req.off)
    if clash:
        problems.append(("trainer.plugins", f"{clash} both switched on and off"))
    req.problems = problems
    return req


def _add_instance(req: Requests, obj: object, where: str, problems: list[tuple[str, str]]) -> None:
    if where.startswith("trainer.plugins") and not isinstance(obj, Strategy):
        if not missing_members(obj, CheckpointIO):  # Lightning's Trainer(plugins=[MyCheckpointIO()])
            req.checkpoint_io.append((where, obj))
            return
    req.instances.append((where, obj))


def subscriber_for(obj: object, catalog: Catalog, built_by_plugin: bool = False) -> object:
    """What joins the bus for an object passed in ``callbacks=``/``plugins=``/``logger=`` (or, ``built_by_plugin``,
    one a plugin's factory built): what its ``__surge_subscriber__()`` returns when it has that method (its adapter,
    whose ``__wrapped__`` is it); else the object itself (a plugin built, or one with ``@surge.hookimpl``
    handlers); else the first installed plugin's ``adapter`` that takes it (``surge.Plugin(adapter=...)``).
    Raises :class:`PluginError` for an object that would handle nothing, naming what would run it."""
    what = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if inspect.isfunction(inspect.getattr_static(obj, "__surge_subscriber__", None)):
        return obj.__surge_subscriber__()  # type: ignore[attr-defined]  # it names its adapter
    if built_by_plugin:
        return obj
    if isinstance(obj, torch.nn.Module):
        kind = "Module" if callable(getattr(obj, "training_step", None)) else "torch.nn.Module"
        raise PluginError(f"{what} is a {kind}, not a callback: pass it to trainer.fit(model)")
    for base, slot in ((Accelerator, "accelerator"), (Strategy, "strategy"), (Precision, "precision")):
        if isinstance(obj, base):
            raise PluginError(
                f"{what} is a {base.__name__}: choose it with Trainer({slot}=...), not in a list of plugins"
            )
    if any(getattr(inspect.getattr_static(obj, n, None), f"{PROJECT}_impl", None) for n in dir(obj)):
        return obj  # a Surge plugin: the bus checks its handlers (and refuses unmarked ones named after events)
    for record in catalog.loaded():
        adapter = record.plugin.adapter if record.plugin is not None else None
        if adapter is not None:
            try:
                adapted = adapter(obj)
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"{record.describe()}'s adapter failed on {what}: {exc}") from exc
            if adapted is not None:
                return adapted
    if callable(getattr(obj, "surge_checkpoint_path", None)):
        raise PluginError(
            f"{what} has a surge_checkpoint_path method, which Surge no longer calls: resolve ckpt_path aliases in "
            "a handler, @surge.hookimpl def checkpoint_path(self, event): return self.surge_checkpoint_path("
            "event.alias) (docs/events.md, 'Questions')"
        )
    hooks = sorted(n for n in dir(obj) if n.startswith("on_") and inspect.isroutine(getattr(obj, n, None)))
    if hooks:
        adapters = [r.describe() for r in catalog.loaded() if r.plugin is not None and r.plugin.adapter is not None]
        held = [r for r in catalog.records.values() if r.name == LIGHTNING_PLUGINS["adapter"] and not r.plugin]
        if adapters:
            runs = f"no installed adapter ({', '.join(adapters)}) takes it"
        elif held:
            runs = f"{held[0].describe()} adapts such objects but is {held[0].status}: {held[0].reason}"
            runs += _how_to_load(held[0], held[0].name)
        else:
            runs = f"no installed plugin adapts such objects: {CALLBACK_HINT}"
        raise PluginError(
            f"{what} has hook methods ({', '.join(hooks[:3])}{', ...' if len(hooks) > 3 else ''}) but no "
            f"@surge.hookimpl handler, so nothing would call them; {runs}. A Surge plugin marks methods named after "
            "events (train_epoch_end, without 'on_') with @surge.hookimpl (docs/plugins.md)"
        )
    raise PluginError(
        f"{what} handles nothing: it has no @surge.hookimpl handler and no __surge_subscriber__(), so nothing would "
        "ever call it. A Surge plugin marks methods named after events with @surge.hookimpl (docs/plugins.md); "
        f"{CALLBACK_HINT}"
    )


def _instance_tier(obj: object) -> Tier:
    return Tier.OBSERVER if getattr(obj, "surge_kind", "participant") == "observer" else Tier.PARTICIPANT


def instance_name(obj: object) -> str:
    name = getattr(obj, "surge_name", None)
    return name if isinstance(name, str) and name else type(obj).__name__


def _add_settings(req: Requests, entries: Mapping[Any, Any], path: str, problems: list[tuple[str, str]]) -> None:
    """``{name: True | False | settings}``: switch plugins on (with settings) or off."""
    for name, value in entries.items():
        where = f"{path}.{name}"
        if not isinstance(name, str):
            problems.append((where, "keys must be plugin names"))
        elif value is False:
            req.off.add(name)
        elif value is True:
            req.on[name] = {}
        elif isinstance(value, Mapping):
            req.on[name] = dict(value)
        else:
            problems.append((where, f"got {value!r}: use True, False or a dict of the plugin's settings"))


def roles_filled(req: Requests) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The roles the objects passed in fill (:class:`surge.events.protocols.CallbackRole`): role -> where the first
    of them was written; and the problems of malformed ``surge_callback_role`` values."""
    filled: dict[str, str] = {}
    problems = []
    for where, obj in req.instances:
        problem = role_problem(obj, f"{type(obj).__module__}.{type(obj).__qualname__}")
        role = getattr(obj, "surge_callback_role", None)
        if problem is not None:
            problems.append((where, problem))
        elif role is not None:
            filled.setdefault(role, where)
    return filled, problems


def activate(catalog: Catalog, req: Requests) -> list[Subscriber]:
    """Build the participants and observers that are on, in a deterministic order, each object joining through
    :func:`subscriber_for`. A default plugin whose role an object passed in fills stands aside (is not built)
    unless the run names it."""
    problems: list[tuple[str, str]] = list(req.problems)
    filled, role_problems = roles_filled(req)
    problems += role_problems
    for name in sorted(req.names | req.off):
        record = catalog.records.get(name)
        if name in (req.loggers or ()) and name not in req.on:
            problems += logger_problems([name], catalog)
        elif record is None:
            problems.append((f"trainer.plugins.{name}", _unknown_plugin(name, catalog)))
        elif record.plugin is None:
            problems.append((f"trainer.plugins.{name}", f"{record.describe()} is {record.status}: {record.reason}"))
        elif record.plugin.kind == "provider" and req.on.get(name) and record.plugin.config is None:
            slots = ", ".join(f"{slot}=" for slot in record.plugin.provides)
            problems.append(
                (
                    f"trainer.plugins.{name}",
                    f"'{name}' is a provider that declares no settings; choose it with {slots}",
                )
            )
    subscribers: list[Subscriber] = []
    for record in catalog.loaded():
        plugin = record.plugin
        assert plugin is not None
        if plugin.kind == "provider" or not _is_on(record, req):
            continue
        if plugin.role in filled and record.name not in req.names:
            record.reason = f"stands aside: the object in {filled[plugin.role]} fills its role '{plugin.role}'"
            logger.info("the default plugin '{}' {}", record.name, record.reason)
            continue
        try:
            obj = plugin.build(req.on.get(record.name))
        except ValidationError as exc:
            problems += format_validation_error(exc, f"trainer.plugins.{record.name}", model=plugin.config)
            continue
        except Exception as exc:
            raise PluginError(f"{record.describe()} failed to build its subscriber: {exc}") from exc
        protocol = ROLE_PROTOCOLS.get(plugin.role or "")
        if protocol is not None and (missing := missing_members(obj, protocol)):
            problems.append(
                (
                    f"trainer.plugins.{record.name}",
                    f"{record.describe()} has role={plugin.role!r} but its object lacks {', '.join(missing)} "
                    f"(surge.events.protocols.{protocol.__name__})",
                )
            )
            continue
        try:
            obj = subscriber_for(obj, catalog, built_by_plugin=True)  # one written for another framework: adapted
        except PluginError as exc:
            problems.append((f"trainer.plugins.{record.name}", f"{record.describe()}: {exc}"))
            continue
        tier = Tier.OBSERVER if plugin.kind == "observer" else Tier.PARTICIPANT
        subscribers.append(Subscriber(record.name, obj, tier, record.distribution, record.version))
        record.status = "active"
    instances = []
    for where, passed in req.instances:
        try:
            instances.append(subscriber_for(passed, catalog))
        except PluginError as exc:
            problems.append((where, str(exc)))
    if problems:
        raise ConfigError(problems)
    taken = {s.name for s in subscribers}
    for obj in instances:
        name = base = instance_name(obj)
        count = 1
        while hasattr(obj, "__wrapped__") and name in taken:  # Lightning takes several callbacks of one class
            count += 1
            name = f"{base}-{count}"
        taken.add(name)
        subscribers.append(Subscriber(name, obj, _instance_tier(obj)))
    return subscribers


def module_claims(catalog: Catalog) -> dict[str, PluginRecord]:
    """Module method name -> the loaded plugin that claims it (``surge.Plugin(module_hooks=...)``); two claiming
    one method is a conflict naming both."""
    claims: dict[str, PluginRecord] = {}
    for record in catalog.loaded():
        assert record.plugin is not None
        for method in record.plugin.module_hooks:
            if method in claims:
                raise PluginConflictError(
                    f"{claims[method].describe()} and {record.describe()} both claim the Module method '{method}'; "
                    "uninstall one, or block it with SURGE_DISABLE_PLUGINS"
                )
            claims[method] = record
    return claims


def module_plugins(
    catalog: Catalog, claims: Mapping[str, PluginRecord], module: object, settings: Mapping[str, Mapping[str, Any]]
) -> list[Subscriber]:
    """The plugins a run adds for its Module: each plugin claiming a method ``module`` defines, built with the
    settings of every claimed method it defines (under those ``plugins=`` gave it, ``settings``). A Module
    defining an older API's hook that no loaded plugin claims is a :class:`ConfigError` naming the hook, its
    replacement and the distribution that runs it."""
    defined = [name for name in (*claims, *LEGACY_MODULE_HOOKS) if callable(getattr(module, name, None))]
    if not defined:
        return []
    owner = type(module).__name__
    problems: list[tuple[str, str]] = []
    asked: dict[str, tuple[PluginRecord, dict[str, Any]]] = {}
    for name in dict.fromkeys(defined):
        record = claims.get(name)
        if record is None:
            held = [r for r in catalog.records.values() if r.name == LIGHTNING_PLUGINS["module_hooks"] and not r.plugin]
            why = (
                f"{held[0].describe()} runs it but is {held[0].status}: {held[0].reason}{_how_to_load(held[0], held[0].name)}"
                if held
                else f"`pip install {LIGHTNING}` runs it"
            )
            problems.append(
                (
                    f"{owner}.{name}",
                    f"is a Lightning 1.x hook that Lightning 2 removed, and no installed plugin runs it: write "
                    f"{LEGACY_MODULE_HOOKS[name]}(self) instead, with what you need collected in the step method; "
                    f"or {why}",
                )
            )
            continue
        assert record.plugin is not None
        asked.setdefault(record.name, (record, {}))[1].update(record.plugin.module_hooks[name])
    if problems:
        raise ConfigError(problems, "the Module")
    subscribers = []
    for name, (record, merged) in asked.items():
        plugin = record.plugin
        assert plugin is not None
        try:
            obj = subscriber_for(plugin.build({**merged, **settings.get(name, {})}), catalog, built_by_plugin=True)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, f"trainer.plugins.{name}", model=plugin.config)) from None
        tier = Tier.OBSERVER if plugin.kind == "observer" else Tier.PARTICIPANT
        subscribers.append(Subscriber(name, obj, tier, record.distribution, record.version))
    return subscribers


def _is_on(record: PluginRecord, req: Requests) -> bool:
    plugin = record.plugin
    assert plugin is not None
    if record.name in req.off or plugin.module_hooks:  # module_hooks: on for the runs whose Module asks
        return False
    if plugin.role == "logger" and req.loggers is not None:
        return record.name in req.loggers
    if record.name in req.on:
        return True
    return plugin.default and plugin.role not in req.roles_off


def logger_problems(names: Collection[str], catalog: Catalog) -> list[tuple[str, str]]:
    """``logger=``'s names that are not installed logger plugins, under ``trainer.logger`` (where they were written)."""
    loggers = sorted(r.name for r in catalog.loaded() if r.plugin and r.plugin.role == "logger")
    problems = []
    for name in names:
        record = catalog.records.get(name)
        if record is not None and record.plugin is None:
            problem = f"{record.describe()} is {record.status}: {record.reason}"
        elif record is not None and record.plugin is not None and record.plugin.role != "logger":
            problem = f"'{name}' is a {record.plugin.kind}, not a logger (role='logger'); loggers: {', '.join(loggers)}"
        elif record is None:
            close = difflib.get_close_matches(name, loggers, n=1) or difflib.get_close_matches(
                name, catalog.records, n=1
            )
            guess = f"did you mean '{close[0]}'? " if close else ""
            problem = f"no installed logger is named '{name}'; {guess}loggers: {', '.join(loggers) or 'none'}."
            problem += install_hint(name)
        else:
            continue
        problems.append(("trainer.logger", problem))
    return problems


def _unknown_plugin(name: str, catalog: Catalog) -> str:
    known = sorted(catalog.records)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"no installed plugin is named '{name}'; {hint}installed: {', '.join(known) or 'none'}.{install_hint(name)}"


@dataclass
class Providers:
    accelerator: Accelerator
    strategy: Strategy
    precision: Precision
    subscribers: list[Subscriber]
    profiler: object | None = None
    """The profiler chosen by ``profiler=`` (a bus subscriber like the others; see docs/plugins.md,
    "Profilers"), or ``None``."""
    tuner: Tuner | None = None
    """The tuner a plugin's switches or ``plugins=`` asked for, built and configured; ``None``: none asked."""

    def bus_timing(self, trace: bool) -> Timing | None:
        """How the Trainer's buses time their handlers: ``SURGE_TRACE_PLUGINS`` (``trace``) and the profiler's
        ``handler_timer`` when it has one; ``None`` (plain dispatchers) when neither asks."""
        return timing(trace, getattr(self.profiler, "handler_timer", None))


def resolve_providers(
    catalog: Catalog,
    config: TrainerConfig,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    checkpoint_io: Sequence[tuple[str, object]] = (),
) -> Providers:
    """The accelerator, strategy, precision, checkpoint IO, profiler and tuner ``config`` chooses, built, each
    configured with its plugin's settings (``settings``: plugin name -> what ``plugins=`` gave it; see
    :func:`configure`). ``checkpoint_io``: the CheckpointIO objects passed in ``plugins=``, with where."""
    given = settings or {}
    subscribers: list[Subscriber] = []
    accelerators = catalog.providers("accelerator")
    accelerator_arg = config.accelerator
    if isinstance(accelerator_arg, Accelerator):
        accelerator = accelerator_arg
        subscribers.append(Subscriber("accelerator", accelerator, Tier.PROVIDER, api=api_names(accelerator)))
    elif accelerator_arg == "auto":
        name = choose_auto(accelerators, catalog)
        accelerator, sub = _build("accelerator", name, accelerators, given)
        subscribers.append(sub)
    elif isinstance(accelerator_arg, str):
        if accelerator_arg not in accelerators:
            catalog.clash("accelerator", accelerator_arg)
            raise ProviderError(
                _missing("accelerator", accelerator_arg, accelerators, SLOT_DISTRIBUTIONS["accelerator"], catalog)
            )
        cls = accelerators[accelerator_arg][0]
        if isinstance(cls, type) and issubclass(cls, Accelerator) and not cls.is_available():
            raise ProviderError(
                f"trainer.accelerator: '{accelerator_arg}' is installed but not available on this machine "
                f"(no {accelerator_arg} device found); use accelerator='auto' or 'cpu'"
            )
        accelerator, sub = _build("accelerator", accelerator_arg, accelerators, given)
        subscribers.append(sub)
    else:
        raise ConfigError([("trainer.accelerator", f"got {accelerator_arg!r}: a name or an Accelerator instance")])
    try:
        indices = accelerator.parse_devices(config.devices)
    except ValueError as exc:
        raise ConfigError([("trainer.devices", str(exc))]) from None

    strategies = catalog.providers("strategy")
    strategy_arg = config.strategy
    if isinstance(strategy_arg, Strategy):
        strategy = strategy_arg
        subscribers.append(Subscriber("strategy", strategy, Tier.PROVIDER, api=api_names(strategy)))
    elif isinstance(strategy_arg, str):
        name = strategy_arg
        if name == "auto":
            if (len(indices) > 1 or config.num_nodes > 1) and "ddp" not in strategies:
                raise ProviderError(
                    f"trainer.strategy: devices={config.devices!r} and num_nodes={config.num_nodes} need a "
                    f"distributed strategy; install one (`pip install {SLOT_DISTRIBUTIONS['distributed']}`) and pass "
                    "strategy='ddp'"
                )
            if len(indices) > 1 or config.num_nodes > 1:  # an argument to add, not a plugin to install
                raise ConfigError(
                    [
                        (
                            "trainer.strategy",
                            f"devices={config.devices!r} and num_nodes={config.num_nodes} need a distributed "
                            "strategy; pass strategy='ddp'",
                        )
                    ]
                )
            name = "single_device"
        if name not in strategies:
            catalog.clash("strategy", name)
            raise ProviderError(_missing("strategy", name, strategies, SLOT_DISTRIBUTIONS["strategy"], catalog))
        factory, record = strategies[name]
        strategy = factory(accelerator, indices, config.num_nodes)
        configure(strategy, record, given.get(record.name))
        record.status = "active"
        subscribers.append(
            Subscriber(
                f"{record.name}.strategy",
                strategy,
                Tier.PROVIDER,
                record.distribution,
                record.version,
                api_names(strategy),
            )
        )
    else:
        raise ConfigError([("trainer.strategy", f"got {strategy_arg!r}: a name or a Strategy instance")])
    if config.sync_batchnorm:
        _sync_batchnorm(strategy)
    io = _resolve_checkpoint_io(catalog, config.checkpoint_io, checkpoint_io, given)
    if io is not None:
        strategy.checkpoint_io = io

    precision_arg = config.precision
    if isinstance(precision_arg, Precision):
        precision = precision_arg
        subscribers.append(Subscriber("precision", precision, Tier.PROVIDER, api=api_names(precision)))
    else:
        key = str(precision_arg)
        failed = catalog.provider_clashes.get("precision", {})  # names two claim: only a run asking for one fails
        precisions: dict[str, Any] = {alias: (Precision, None) for alias in Precision.aliases if alias not in failed}
        for name, (cls, record) in catalog.providers("precision").items():
            for alias in dict.fromkeys((name, *getattr(cls, "aliases", ()))):
                if alias not in failed:
                    precisions[alias] = (cls, record)
        if key not in precisions:
            catalog.clash("precision", key)
            meant = SYNONYMS["precision"].get(key, key)
            package = SLOT_DISTRIBUTIONS["precision"] if meant in PRECISION_NAMES else ""
            raise ProviderError(_missing("precision", key, precisions, package, catalog))
        cls, record = precisions[key]
        precision = cls()
        if record is not None:
            configure(precision, record, given.get(record.name))
            record.status = "active"
            subscribers.append(
                Subscriber(
                    f"{record.name}.precision",
                    precision,
                    Tier.PROVIDER,
                    record.distribution,
                    record.version,
                    api_names(precision),
                )
            )
    profiler = _resolve_profiler(catalog, config.profiler, subscribers)
    tuner = resolve_tuner(catalog, given) if given else None
    return Providers(accelerator, strategy, precision, subscribers, profiler, tuner)


def choose_auto(accelerators: Mapping[str, tuple[Any, PluginRecord]], catalog: Catalog) -> str:
    """``accelerator="auto"``: the available accelerator with the highest ``auto_priority``, among those whose class
    body sets one (an accelerator that leaves it ``None``, or inherits it, is never chosen by ``auto``, so installing
    a package never changes what ``auto`` means unless that package says so). Two at the top with one priority are an error naming
    both, never a choice by name. The choice is logged with what it was chosen from."""
    candidates = []
    for name, (cls, record) in sorted(accelerators.items()):
        priority = vars(cls).get("auto_priority") if isinstance(cls, type) else None  # its own body's only
        if isinstance(cls, type) and issubclass(cls, Accelerator) and priority is not None:
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise PluginError(
                    f"{record.describe()}: accelerator '{name}' ({cls.__qualname__}) has auto_priority={priority!r}; it "
                    "must be an int (higher is preferred by accelerator='auto') or None (never chosen by it)"
                )
            if cls.is_available():
                candidates.append((priority, name, record))
    if not candidates:
        raise ProviderError(_missing("accelerator", "auto", accelerators, SLOT_DISTRIBUTIONS["accelerator"], catalog))
    top = max(priority for priority, _, _ in candidates)
    best = [(name, record) for priority, name, record in candidates if priority == top]
    if len(best) > 1:
        who = " and ".join(f"'{name}' ({record.describe()})" for name, record in best)
        raise ProviderError(
            f"trainer.accelerator: 'auto' cannot choose between {who}: both are available with auto_priority={top}. "
            f"Choose one by name (accelerator='{best[0][0]}'), or uninstall or block one (SURGE_DISABLE_PLUGINS="
            f"{best[-1][1].name}); their authors decide the order by giving them different priorities"
        )
    name, record = best[0]
    considered = ", ".join(f"{n} ({p})" for p, n, _ in sorted(candidates, reverse=True))
    logger.info(
        "accelerator='auto' chose '{}' from {} (auto_priority {}; available: {})",
        name,
        record.describe(),
        top,
        considered,
    )
    return name


def _resolve_checkpoint_io(
    catalog: Catalog, arg: Any, passed: Sequence[tuple[str, object]], given: Mapping[str, Mapping[str, Any]]
) -> CheckpointIO | None:
    """``checkpoint_io=`` (a provider's name or an object) or one CheckpointIO object in ``plugins=``; ``None``:
    neither, and the strategy keeps its own (by default :class:`surge.checkpoint.FileCheckpointIO`)."""
    chosen = [("trainer.checkpoint_io", arg)] if arg is not None else []
    chosen += passed
    if len(chosen) > 1:
        raise ConfigError(
            [
                (
                    where,
                    "a second checkpoint IO; a run writes through one: keep one of " + ", ".join(w for w, _ in chosen),
                )
                for where, _ in chosen[1:]
            ]
        )
    if not chosen:
        return None
    where, obj = chosen[0]
    if isinstance(obj, str):
        found = catalog.providers("checkpoint_io")
        if obj not in found:
            catalog.clash("checkpoint_io", obj)
            raise ProviderError(_missing("checkpoint_io", obj, found, "", catalog))
        factory, record = found[obj]
        obj = factory()
        configure(obj, record, given.get(record.name))
        record.status = "active"
        what = f"{record.describe()}'s checkpoint_io '{arg}'"
    elif isinstance(obj, (bool, int, float, bytes, Mapping, list, tuple)):
        raise ConfigError([(where, f"got {obj!r}: pass a checkpoint IO's name or object")])
    else:
        what = f"{type(obj).__module__}.{type(obj).__qualname__}"
    missing = missing_members(obj, CheckpointIO)
    if missing:
        raise ConfigError(
            [
                (
                    where,
                    f"{what} is no checkpoint IO: it lacks {', '.join(missing)} (surge.events.protocols.CheckpointIO)",
                )
            ]
        )
    return obj  # type: ignore[return-value]


def resolve_tuner(catalog: Catalog, given: Mapping[str, Mapping[str, Any]], required: bool = False) -> Tuner | None:
    """The ``tuner`` provider of the plugin ``given`` switches on (its ``switches``, or ``plugins=``), built and
    configured; with none switched on, ``None``, or when ``required`` (``Trainer.tune``) the only tuner installed,
    with its defaults. No tuner, or several to choose from, is an error naming them (and why one is not loaded)."""
    tuners = catalog.providers("tuner")
    asked = sorted(name for name, (_, record) in tuners.items() if record.name in given)
    candidates = asked or (sorted(tuners) if required else [])
    if not candidates:
        if required:
            raise ProviderError(f"trainer.tune() needs a tuner provider: {_no_tuner(catalog)}")
        return None
    if len(candidates) > 1:
        owners = ", ".join(tuners[name][1].describe() for name in candidates)
        raise ProviderError(
            f"trainer.tune(): several tuners could run ({owners}); choose one with plugins=['<its plugin>'] or "
            "uninstall the others"
        )
    factory, record = tuners[candidates[0]]
    tuner = factory()
    configure(tuner, record, given.get(record.name))
    missing = missing_members(tuner, Tuner)
    if missing:
        raise PluginError(
            f"{record.describe()}'s tuner {type(tuner).__qualname__} lacks {', '.join(missing)} "
            "(surge.events.protocols.Tuner)"
        )
    record.status = "active"
    return tuner  # type: ignore[no-any-return]


def _no_tuner(catalog: Catalog) -> str:
    declared = declared_providers()
    owners = [
        catalog.records[p]
        for p, pairs in declared.items()
        if p in catalog.records and any(s == "tuner" for s, _ in pairs)
    ]
    if owners:
        return "; ".join(
            f"{r.describe()} provides one but is {r.status}: {r.reason}{_how_to_load(r, r.name)}" for r in owners
        )
    return f"none is installed.{install_hint('tuner')}"


def _sync_batchnorm(strategy: Strategy) -> None:
    """``sync_batchnorm=True`` sets the strategy's own switch (a :class:`ProcessGroupStrategy` converts the
    BatchNorm layers in ``setup_module``); a single process has nothing to synchronise."""
    if hasattr(strategy, "sync_batchnorm"):
        strategy.sync_batchnorm = True
    elif strategy.world_size > 1:
        raise ConfigError(
            [
                (
                    "trainer.sync_batchnorm",
                    f"strategy '{strategy.name or type(strategy).__name__}' runs {strategy.world_size} processes but "
                    "has no sync_batchnorm switch to synchronise BatchNorm with; use a strategy built on "
                    "surge.ProcessGroupStrategy (strategy='ddp', for one), or "
                    "convert the layers yourself (torch.nn.SyncBatchNorm.convert_sync_batchnorm)",
                )
            ]
        )


def _resolve_profiler(catalog: Catalog, arg: Any, subscribers: list[Subscriber]) -> object | None:
    """``profiler=``: None (no profiler: nothing is registered, the bus stays untimed), a provider's name,
    or an object with ``@surge.hookimpl`` handlers (it joins as a provider-tier subscriber)."""
    if arg is None:
        return None
    if isinstance(arg, str):
        profilers = catalog.providers("profiler")
        if arg not in profilers:
            catalog.clash("profiler", arg)
            raise ProviderError(_missing("profiler", arg, profilers, SLOT_DISTRIBUTIONS["profiler"], catalog))
        profiler, sub = _build("profiler", arg, profilers, {})
        subscribers.append(sub)
        return profiler
    if isinstance(arg, (bool, int, float, bytes, Mapping, list, tuple)):
        raise ConfigError(
            [("trainer.profiler", f"got {arg!r}: pass a profiler's name ('simple', 'advanced', 'pytorch') or object")]
        )
    subscribers.append(Subscriber(instance_name(arg) if hasattr(arg, "surge_name") else "profiler", arg, Tier.PROVIDER))
    return arg


def _build(
    slot: str, name: str, found: Mapping[str, tuple[Any, PluginRecord]], given: Mapping[str, Mapping[str, Any]]
) -> tuple[Any, Subscriber]:
    factory, record = found[name]
    obj = factory()
    configure(obj, record, given.get(record.name))
    record.status = "active"
    return obj, Subscriber(
        f"{record.name}.{slot}", obj, Tier.PROVIDER, record.distribution, record.version, api_names(obj)
    )


def configure(obj: object, record: PluginRecord, settings: Mapping[str, Any] | None) -> None:
    """Give a provider object its plugin's settings: when the plugin declares a settings model (``config=``),
    the settings from ``plugins={name: {...}}`` (a run config's ``plugins:`` section, ``SURGE_TRAINER_PLUGINS``,
    the command line's ``--plugins.<name>.<key>``), validated by that model, defaults included, go to the
    object's ``configure(settings)`` (:class:`surge.events.protocols.Configurable`). A plugin without a model
    takes none."""
    plugin = record.plugin
    assert plugin is not None
    if plugin.config is None:
        return
    try:
        model = plugin.config.model_validate(dict(settings or {}))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, f"trainer.plugins.{record.name}", model=plugin.config)) from None
    method = getattr(obj, "configure", None)
    if not callable(method):
        raise PluginError(
            f"{record.describe()} declares settings (config={plugin.config.__name__}) but its provider object "
            f"{type(obj).__module__}.{type(obj).__qualname__} has no configure(settings) method to take them "
            "(surge.events.protocols.Configurable)"
        )
    method(model)


def _missing(slot: str, name: str, found: Collection[str], package: str, catalog: Catalog | None = None) -> str:
    return f"trainer.{slot}: {unknown_provider(slot, name, found, package, catalog)}"


def unknown_provider(
    slot: str, name: str, found: Collection[str], package: str = "", catalog: Catalog | None = None
) -> str:
    """Why no loaded plugin provides ``name`` in ``slot``: the installed plugin declaring it and why it is not
    loaded; else the valid names, a "did you mean", and the plugins not imported that might provide it."""
    records = catalog.records if catalog else {}
    declared = declared_providers() if records else {}
    # "auto" picks among everything the slot's plugins provide
    provides = (
        (lambda pairs: any(s == slot for s, _ in pairs)) if name == "auto" else (lambda pairs: (slot, name) in pairs)
    )
    owners = [records[p] for p, pairs in declared.items() if provides(pairs) and p in records]
    unloaded = [r for r in owners if r.plugin is None]  # one loaded that declares the name but lacks it: below
    if unloaded:
        return "; ".join(
            f"no {slot} named '{name}' is loaded: {r.describe()} provides it but is {r.status}: {r.reason}"
            + _how_to_load(r, r.name)
            for r in unloaded
        )
    valid = sorted({*found, *(n for pairs in declared.values() for s, n in pairs if s == slot)})
    close = _did_you_mean(slot, name, valid)
    message = f"no {slot} named '{name}'.{f' Did you mean {close!r}?' if close else ''} "
    message += f"Valid names: {', '.join(valid) or 'none available'}."
    # Plugins not imported whose distributions do not declare their providers: any of them may provide it.
    why_not: dict[str, list[str]] = {}
    for record in records.values():
        if record.plugin is None and record.name not in declared:
            why_not.setdefault(f"{record.status}: {record.reason}", []).append(record.name)
    for reason, names in why_not.items():
        which = names[0] if len(names) == 1 else "<name>"
        listed = ", ".join(names) if len(names) <= 5 else f"{len(names)} plugins (`surge plugins` lists them)"
        message += f" Not loaded ({reason}), and may provide it: {listed}{_how_to_load(records[names[0]], which)}."
    installed = {r.distribution for r in records.values()}
    missing = [p for p in package.split(" or ") if p and p not in installed]
    install = f"`pip install {' or '.join(missing)}`" if missing else "a plugin that provides it"
    return f"{message} Plugins add others ({install}); `surge plugins` lists what is installed."


def _did_you_mean(slot: str, name: str, valid: Collection[str]) -> str | None:
    """The name ``name`` stands for: a synonym of the domain (``fp16`` -> ``16-mixed``), the same name in
    lower case, else the closest spelling."""
    if name in SYNONYMS.get(slot, {}):
        return SYNONYMS[slot][name]
    if name.lower() in valid:
        return name.lower()
    close = difflib.get_close_matches(name, valid, n=1)
    return close[0] if close else None


def _how_to_load(record: PluginRecord, name: str) -> str:
    """The fix for a plugin that is not loaded, from its status and the reason discovery gave."""
    reason = record.reason
    if record.status == "failed":
        return f"; fix or reinstall {record.distribution or 'its distribution'}"
    if "SURGE_DISABLE_PLUGIN_AUTOLOAD" in reason:
        return f"; request it with plugins=['{name}']"
    if "SURGE_DISABLE_PLUGINS" in reason:
        return "; take it out of SURGE_DISABLE_PLUGINS"
    if "SURGE_PLUGINS" in reason:
        return "; add it to SURGE_PLUGINS"
    return ""  # a lab profile's rule: its reason names the profile


PROVIDERS_GROUP = "surge.providers"
"""The entry-point group in which a distribution declares the providers its plugins offer, so that choosing
one by name (``accelerator="cpu"``) requests its plugin without importing any other: an entry point named
``<slot>.<name>`` whose value is that plugin's ``surge.plugins`` entry point's value::

    [project.entry-points."surge.providers"]
    "accelerator.cpu" = "surge_devices:plugin"
"""


def declared_providers() -> dict[str, set[tuple[str, str]]]:
    """Plugin name -> the ``(slot, name)`` providers its distribution declares in :data:`PROVIDERS_GROUP`,
    for every plugin of a distribution that declares any (others are absent: what they provide is unknown
    until imported). Reads metadata only."""
    declared: dict[str, set[tuple[str, str]]] = {}
    for ep in _plugins.source.entry_points():
        entries = [e for e in getattr(getattr(ep, "dist", None), "entry_points", ()) if e.group == PROVIDERS_GROUP]
        if not entries:
            continue
        pairs = declared[ep.name] = set()
        for entry in entries:
            slot, _, name = entry.name.partition(".")
            if entry.value == ep.value and slot and name:
                pairs.add((slot, name))
    return declared


def _chosen_providers(config: TrainerConfig) -> set[tuple[str, str | None]]:
    """The providers ``config`` chooses by name, as ``(slot, name)``; ``None``: any of the slot (``"auto"``)."""
    chosen: set[tuple[str, str | None]] = set()
    if isinstance(config.accelerator, str):
        chosen.add(("accelerator", None if config.accelerator == "auto" else config.accelerator))
    if isinstance(config.strategy, str):
        chosen.add(("strategy", "single_device" if config.strategy == "auto" else config.strategy))
    if not isinstance(config.precision, Precision) and str(config.precision) not in Precision.aliases:
        chosen.add(("precision", str(config.precision)))
    if isinstance(config.profiler, str):
        chosen.add(("profiler", config.profiler))
    if isinstance(config.checkpoint_io, str):
        chosen.add(("checkpoint_io", config.checkpoint_io))
    return chosen


def named_providers(config: TrainerConfig, settings: SurgeSettings) -> set[str]:
    """Under ``SURGE_DISABLE_PLUGIN_AUTOLOAD=1``, the plugins to import because ``config`` chooses a provider
    their distributions declare (``accelerator="auto"``: every declared accelerator): a provider chosen by
    name is a request for its plugin. Empty otherwise (everything allowed is imported anyway)."""
    if not settings.disable_plugin_autoload:
        return set()
    chosen = _chosen_providers(config)
    return {
        plugin
        for plugin, pairs in declared_providers().items()
        if any((slot, name) in chosen or (slot, None) in chosen for slot, name in pairs)
    }


def declared_events(catalog: Catalog) -> list[type[Event]]:
    """The events the loaded plugins declare (``surge.Plugin(events=...)``), for the run's bus: those of plugins
    that are not active too, since an instance of a plugin's class passed in ``plugins=[...]`` publishes them
    (a ``ModelCheckpoint(...)`` with the checkpoint plugin off); two plugins declaring one name conflict."""
    events: dict[str, tuple[type[Event], PluginRecord]] = {}
    for record in catalog.loaded():
        if record.plugin is None:
            continue
        for cls in record.plugin.events:
            taken = events.get(cls.name)
            if taken is not None and taken[0] is not cls:
                raise PluginConflictError(
                    f"{taken[1].describe()} and {record.describe()} both declare the event '{cls.name}'; uninstall "
                    "one, or block it with SURGE_DISABLE_PLUGINS"
                )
            events[cls.name] = (cls, record)
    return [cls for cls, _ in events.values()]
