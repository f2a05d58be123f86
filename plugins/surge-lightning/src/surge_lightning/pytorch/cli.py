"""``lightning.pytorch.cli``: ``LightningCLI``, Lightning's command-line front end, on Surge's run configs.

A script written for Lightning's ``LightningCLI(MyModel, MyDataModule)`` runs with its import changed::

    python main.py fit --config cfg.yaml --trainer.max_epochs=3 --model.lr=0.01

The config files are LightningCLI's: ``model:``/``data:`` hold the given class's init args (or
``{class_path, init_args}`` in subclass mode), ``trainer:`` any Trainer argument plus ``callbacks:`` (a list of
``class_path``/``init_args``) and ``logger:``, and ``seed_everything``/``ckpt_path`` sit at the top. They are
read, merged and checked by :mod:`surge.cli.runconfig` (every problem at once, with its file and line, before
anything is built); Lightning's own callback and logger classes are read as Surge's counterparts. A Surge
``plugins:`` section is accepted too.
"""

from __future__ import annotations

import difflib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import surge
from loguru import logger
from surge import DataModule, Module, configure_logging, hookimpl, seed_everything
from surge.cli import options_reference, runconfig
from surge.cli.runconfig import ClassSpec, Layer, Path, Problems, RunConfig, class_section
from surge.errors import ConfigError, SurgeError
from surge.seed import SEED_ENV

from surge_lightning.pytorch.callbacks.callback import Callback
from surge_lightning.pytorch.trainer.trainer import Trainer

__all__ = ["LightningCLI", "LightningArgumentParser", "SaveConfigCallback"]

SUBCOMMANDS = ("fit", "validate", "test", "predict")

# Lightning's callback and logger classes, by name, and what stands for them here (docs/porting.md)
_CALLBACKS = {
    "EarlyStopping": "surge_callbacks.EarlyStopping",
    "Timer": "surge_callbacks.Timer",
    "GradientAccumulationScheduler": "surge_callbacks.GradientAccumulationScheduler",
    "DeviceStatsMonitor": "surge_callbacks.DeviceStatsMonitor",
    "ModelCheckpoint": "surge_checkpoint.ModelCheckpoint",
    "LearningRateMonitor": "surge_progress.LearningRateMonitor",
    "StochasticWeightAveraging": "surge_swa.StochasticWeightAveraging",
}
_LOGGERS = {"CSVLogger": "csv", "TensorBoardLogger": "tensorboard", "MLFlowLogger": "mlflow"}
_LOGGER_DIR_ARGS = ("name", "version", "prefix", "sub_dir")  # where Lightning's loggers write: the run dir here
_UNSUPPORTED = ("optimizer", "lr_scheduler")  # LightningCLI's automatic configure_optimizers
_METHOD_ARGUMENTS = {"weights_only": None, "verbose": True, "return_predictions": None}  # and Lightning's default


class LightningArgumentParser:
    """What ``LightningCLI.add_arguments_to_parser(parser)`` and ``SaveConfigCallback`` use of Lightning's
    parser: ``set_defaults({"trainer.max_epochs": 5, "model.lr": 0.1})``, ``link_arguments`` and
    ``dump(config)``."""

    def __init__(self) -> None:
        self.defaults: dict[str, Any] = {}
        self.links: list[tuple[tuple[str, ...], str, Callable[..., Any] | None, str]] = []

    def set_defaults(self, *defaults: Mapping[str, Any], **kwargs: Any) -> None:
        for mapping in (*defaults, kwargs):
            self.defaults.update(mapping)

    def link_arguments(
        self,
        source: str | tuple[str, ...],
        target: str,
        compute_fn: Callable[..., Any] | None = None,
        apply_on: str = "parse",
    ) -> None:
        """``target`` (``"model.batch_size"``) takes ``source``'s value (``"data.batch_size"``; several, through
        ``compute_fn``): the configured one (``apply_on="parse"``), or the attribute of the object built
        (``"instantiate"``: ``"data.num_classes"`` reads ``datamodule.num_classes``)."""
        if apply_on not in ("parse", "instantiate"):
            raise SurgeError(f"link_arguments({source!r}, {target!r}, apply_on={apply_on!r}): 'parse' or 'instantiate'")
        self.links.append(((source,) if isinstance(source, str) else tuple(source), target, compute_fn, apply_on))

    def __getattr__(self, name: str) -> Any:  # add_lightning_class_args, add_optimizer_args, ...
        raise AttributeError(
            f"LightningArgumentParser.{name} is not available in surge_lightning.pytorch.cli.LightningCLI, whose parser offers "
            "set_defaults and link_arguments (docs/porting.md, section LightningCLI)"
        )

    @staticmethod
    def dump(config: Mapping[str, Any], **_options: Any) -> str:
        import yaml

        return yaml.safe_dump(_plain(config), sort_keys=False, default_flow_style=False)


class SaveConfigCallback:
    """Writes the resolved config as ``config.yaml`` into the run directory when a stage is set up (global
    rank zero), as Lightning's does into its log directory; override :meth:`save_config` to save it elsewhere
    too. It refuses to overwrite a file there unless ``overwrite=True``."""

    surge_name = "save_config"
    surge_kind = "observer"

    def __init__(
        self,
        parser: LightningArgumentParser,
        config: dict[str, Any],
        config_filename: str = "config.yaml",
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        self.parser, self.config = parser, config
        self.config_filename, self.overwrite, self.save_to_log_dir = config_filename, overwrite, save_to_log_dir
        self.already_saved = False

    @hookimpl
    def setup(self, event: Any) -> None:
        trainer = event.trainer
        if self.already_saved or not trainer.is_global_zero:
            return
        if self.save_to_log_dir:
            import fsspec

            directory = trainer.log_dir or trainer.default_root_dir
            path = f"{directory}/{self.config_filename}"
            fs, root = fsspec.core.url_to_fs(directory)
            local = f"{root.rstrip('/')}/{self.config_filename}"
            if fs.exists(local) and not self.overwrite:
                raise SurgeError(
                    f"SaveConfigCallback: {path} exists already; delete it, pass "
                    "LightningCLI(save_config_kwargs={'overwrite': True}), or LightningCLI(save_config_callback=None)"
                )
            fs.makedirs(root, exist_ok=True)
            with fs.open(local, "w", encoding="utf-8") as f:
                f.write(_header() + self.parser.dump(self.config))
        self.save_config(trainer, event.module, event.stage)
        self.already_saved = True

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Override to save the config somewhere else too (rank zero only)."""


class LightningCLI:
    """Lightning's ``LightningCLI``: parses ``[fit|validate|test|predict] --config FILE --trainer.* --model.*
    --data.*``, seeds, builds ``self.model``, ``self.datamodule`` and ``self.trainer``, and runs the subcommand
    (with ``run=False``: builds them and runs nothing). ``--print_config`` prints the resolved config and
    exits. A problem in the config exits with status 2 and every problem listed, as Lightning's parser does."""

    def __init__(
        self,
        model_class: type[Module] | None = None,
        datamodule_class: type[DataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[surge.Trainer] | Callable[..., surge.Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: Sequence[str] | Mapping[str, Any] | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        configure_logging()  # an application's entry point, as the `surge` command (SURGE_LOG_LEVEL)
        self.subcommand: str | None = None
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        ignored = sorted(set(self.parser_kwargs) - {"default_config_files", *SUBCOMMANDS})
        if ignored:
            logger.warning("LightningCLI(parser_kwargs=...): {} not supported here, ignored", ", ".join(ignored))
        for name, given in (("model_class", model_class), ("datamodule_class", datamodule_class)):
            if given is not None and not isinstance(given, type):
                raise SurgeError(
                    f"LightningCLI({name}={given!r}): pass the class itself (its __init__ arguments are the config's); "
                    "a function that builds the object is not supported here"
                )
        self.model_class, self.datamodule_class = model_class, datamodule_class
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        self.parser = LightningArgumentParser()
        self.add_arguments_to_parser(self.parser)

        self.subcommand, files, print_config, overrides = self._parse(args, run)
        try:
            self._run_config, self._callbacks, self._method_kwargs = self._resolve(files, overrides)
        except ConfigError as exc:
            self._exit(2, f"error: {exc}")
        self.config: dict[str, Any] = self._resolved()
        if print_config:
            print(_header() + self.parser.dump(self.config), end="")
            raise SystemExit(0)
        if self._run_config.seed_everything is not None:
            seed_everything(self._run_config.seed_everything, workers=True)
        if self.subcommand is not None:
            self.config = {"subcommand": self.subcommand, self.subcommand: self.config}
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    def _run_subcommand(self, subcommand: str) -> None:
        """``before_fit()``, ``self.fit(**kwargs)`` if a subclass defines it else ``trainer.fit``, ``after_fit()``."""
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        method = getattr(self, subcommand, None) or getattr(self.trainer, subcommand)
        kwargs = {"model": self.model, "ckpt_path": self._run_config.ckpt_path, **self._method_kwargs}
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        method(**kwargs)
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _resolved(self) -> dict[str, Any]:
        """The config in Lightning's shape: what ``--print_config`` prints and ``SaveConfigCallback`` writes
        (with Surge's ``plugins`` section: every plugin the run activates, with its settings)."""
        surge_config = self._run_config.to_dict()
        trainer = surge_config["trainer"]
        trainer["callbacks"] = [spec.resolved() for spec in self._callbacks] or None
        result: dict[str, Any] = {"seed_everything": surge_config["seed_everything"], "trainer": trainer}
        given = {
            "model": (self.model_class, self.subclass_mode_model),
            "data": (self.datamodule_class, self.subclass_mode_data),
        }
        for section, (cls, subclass) in given.items():
            spec = getattr(self._run_config, section)
            if spec is not None:
                plain = not subclass and spec.cls is cls  # the class given: its init args alone, as Lightning
                result[section] = surge_config[section]["init_args"] if plain else surge_config[section]
        result["plugins"] = surge_config["plugins"]
        result["ckpt_path"] = surge_config["ckpt_path"]
        result.update(self._method_kwargs)
        return result

    # -- what a subclass may override, as in Lightning ------------------------------------------------------

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to set defaults: ``parser.set_defaults({"trainer.max_epochs": 5})``."""

    def before_instantiate_classes(self) -> None:
        """Runs after parsing and seeding, before the model, data module and Trainer are built."""

    def instantiate_classes(self) -> None:
        self.datamodule = self._run_config.data.build() if self._run_config.data else None
        assert self._run_config.model is not None
        linked = {}  # link_arguments(..., apply_on="instantiate"): read from the data module built
        for sources, target, compute_fn, apply_on in self.parser.links:
            if apply_on == "instantiate" and target.startswith("model."):
                values = [getattr(self.datamodule, source.split(".", 1)[1]) for source in sources]
                linked[target.split(".", 1)[1]] = compute_fn(*values) if compute_fn else values[0]
        spec = self._run_config.model
        self.model = spec.cls(**{**spec.init_args, **linked})
        self.trainer = self.instantiate_trainer()

    def after_instantiate_classes(self) -> None:
        """Runs after the model, data module and Trainer are built."""

    def instantiate_trainer(self, **kwargs: Any) -> surge.Trainer:
        run = self._run_config
        callbacks = [spec.build() for spec in self._callbacks]
        extra = self.trainer_defaults.get("callbacks") or []
        callbacks += extra if isinstance(extra, list) else [extra]
        if self.save_config_callback is not None and not run.trainer.fast_dev_run:
            config = self.config.get(str(self.subcommand), self.config)
            callbacks.append(self.save_config_callback(self.parser, config, **self.save_config_kwargs))
        objects = [spec.build() for spec in run.plugin_objects.values()] + callbacks
        plugins = [run.plugins, *objects] if run.plugins else objects
        options = {**run.trainer_kwargs, **kwargs}
        return self.trainer_class(**options, plugins=plugins or None)

    # -- parsing ----------------------------------------------------------------------------------------------

    def _parse(self, args: Sequence[str] | Mapping[str, Any] | None, run: bool) -> tuple[Any, list[Layer], bool, Layer]:
        """The subcommand, the config layers (files), whether to print the config, and the command line."""
        if isinstance(args, Mapping):  # structured options, as Lightning takes them
            values = dict(args)
            subcommand = values.pop("subcommand", None) if run else None
            if run:
                self._check_subcommand(subcommand)
                values = dict(values.get(str(subcommand)) or {})
            return subcommand, [_tolerant(values, "LightningCLI(args={...})")], False, Layer({})
        tokens = list(sys.argv[1:] if args is None else args)
        subcommand = None
        if run:
            if not tokens or tokens[0] in ("-h", "--help"):
                self._exit(0 if tokens else 2, self._usage())
            subcommand = tokens.pop(0)
            self._check_subcommand(subcommand)
        files: list[str] = list(self._default_config_files(subcommand))
        print_config, rest = False, []
        while tokens:
            token = tokens.pop(0)
            if token in ("-h", "--help"):
                self._exit(0, self._usage(subcommand, detailed=True))
            elif token in ("-c", "--config") and tokens:
                files.append(tokens.pop(0))
            elif token.startswith("--config="):
                files.append(token.partition("=")[2])
            elif token.split("=")[0] in ("--print_config", "--print-config"):
                print_config = True
            else:
                rest.append(token)
        try:
            layers = _load(files)
            overrides = runconfig.parse_overrides(rest)
        except ConfigError as exc:
            self._exit(2, f"error: {exc}")
        return subcommand, layers, print_config, overrides

    def _check_subcommand(self, subcommand: Any) -> None:
        if subcommand not in SUBCOMMANDS:
            close = difflib.get_close_matches(str(subcommand), SUBCOMMANDS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            self._exit(2, f"error: {subcommand!r} is not a subcommand: expected one of {', '.join(SUBCOMMANDS)}{hint}")

    def _default_config_files(self, subcommand: str | None) -> list[str]:
        """``parser_kwargs={"default_config_files": [...]}`` (or per subcommand): those that exist, first."""
        kwargs = self.parser_kwargs.get(subcommand, self.parser_kwargs) if subcommand else self.parser_kwargs
        return [path for path in kwargs.get("default_config_files") or [] if os.path.isfile(path)]

    def _exit(self, status: int, message: str) -> Any:
        prog = os.path.basename(sys.argv[0]) or "LightningCLI"
        if status:
            print(f"{prog} {self.subcommand or ''}".rstrip() + f": {message}", file=sys.stderr)
        else:
            print(message)
        raise SystemExit(status)

    def _usage(self, subcommand: str | None = None, detailed: bool = False) -> str:
        prog = os.path.basename(sys.argv[0]) or "main.py"
        if subcommand is None:
            return (
                f"usage: {prog} {{{','.join(SUBCOMMANDS)}}} [--config FILE] [--print_config] [--trainer.NAME=VALUE ...]"
            )
        lines = [
            f"usage: {prog} {subcommand} [-c FILE]... [--print_config] [--seed_everything=INT] [--ckpt_path=PATH]",
            "  -c, --config FILE     a YAML config; repeat to merge several, later over earlier",
            "  --print_config        print the resolved config and exit",
        ]
        for key, cls, subclass in (
            ("model", self.model_class, self.subclass_mode_model),
            ("data", self.datamodule_class, self.subclass_mode_data),
        ):
            if subclass:
                lines.append(f"  --{key}=CLASS_PATH     the class; --{key}.NAME=VALUE sets its init args")
            if cls is not None:
                for name, param in runconfig.parameters(cls).items():
                    if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                        default = "required" if param.default is param.empty else f"default: {param.default!r}"
                        lines.append(f"  --{key}.{name}=VALUE  ({default})")
        if detailed:
            lines += ["", options_reference()]
        return "\n".join(lines)

    # -- resolving --------------------------------------------------------------------------------------------

    def _resolve(self, files: list[Layer], overrides: Layer) -> tuple[RunConfig, list[ClassSpec], dict[str, Any]]:
        """Lightning's config layers as Surge's run config, checked by :func:`surge.cli.runconfig.resolve`; the
        callbacks (``trainer.callbacks``) are checked here, and every problem is reported at once."""
        classes: dict[str, type] = {}
        bases = {"model": (self.model_class, Module), "data": (self.datamodule_class, DataModule)}
        for given, base in bases.values():
            if isinstance(given, type):
                classes[_class_path(given)] = given
            for cls in _subclasses(given if isinstance(given, type) else base):
                classes.setdefault(cls.__name__, cls)
        layers = [self._defaults(), *files, overrides]
        problems: list[tuple[str, str]] = []
        lightning: list[Layer] = []
        for layer in layers:
            problems += self._as_surge(layer, classes)
            lightning.append(_pop_lightning_keys(layer))
        problems += self._link(layers, classes)
        instantiated = {".".join(_path(t)) for _, t, _, on in self.parser.links if on == "instantiate"}
        try:
            run = runconfig.resolve(layers[:-1], layers[-1], command=self.subcommand or "fit", classes=classes)
        except ConfigError as exc:  # an argument linked from the object built is missing until then
            problems += [(p, m) for p, m in exc.problems if not (p in instantiated and m.startswith("missing"))]
            run = None
        method = getattr(self.trainer_class, self.subcommand or "fit", None)
        callbacks, kwargs = _check_lightning(runconfig.merge(lightning), _parameters_of(method), problems)
        if run is not None:
            for section, spec in (("model", run.model), ("data", run.data)):
                given = bases[section][0]
                if spec is not None and isinstance(given, type) and not issubclass(spec.cls, given):
                    problems.append(
                        (f"{section}.class_path", f"{spec.class_path} is not a subclass of {given.__qualname__}")
                    )
        if problems or run is None:
            plain = [s for s in bases if not (self.subclass_mode_model if s == "model" else self.subclass_mode_data)]
            for prefix in plain:  # --model.lr, as the user wrote it, for the class given
                problems = [(p.replace(f"{prefix}.init_args.", f"{prefix}.", 1), m) for p, m in problems]
            raise ConfigError(problems, "the LightningCLI config")
        return run, callbacks, kwargs

    def _defaults(self) -> Layer:
        """The lowest layer: the classes given, ``seed_everything_default``, ``trainer_defaults`` and the
        parser's ``set_defaults``."""
        data: dict[str, Any] = {"seed_everything": self.seed_everything_default}
        where: dict[Path, str] = {("seed_everything",): "LightningCLI(seed_everything_default=...)"}
        for section, given in (("model", self.model_class), ("data", self.datamodule_class)):
            if isinstance(given, type):
                data[section] = {"class_path": _class_path(given)}
                where[(section,)] = f"LightningCLI({given.__qualname__})"
        trainer = {k: v for k, v in self.trainer_defaults.items() if k != "callbacks"}
        if trainer:
            data["trainer"] = trainer
            where.update({("trainer", k): "LightningCLI(trainer_defaults=...)" for k in trainer})
        for dotted, value in self.parser.defaults.items():
            parts = _path(dotted)
            target = data
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
            where[tuple(parts)] = f"parser.set_defaults({dotted!r})"
        return Layer(data, where, "the LightningCLI defaults")

    def _link(self, layers: list[Layer], classes: Mapping[str, type]) -> list[tuple[str, str]]:
        """``link_arguments(..., apply_on="parse")``: each target set, over every layer, to its source's value
        (as configured, else its class's default)."""
        problems: list[tuple[str, str]] = []
        merged = runconfig.merge(layers).data
        for sources, target, compute_fn, apply_on in self.parser.links:
            if apply_on != "parse":
                continue
            values = []
            for source in sources:
                parts, found = _path(source), merged
                for part in parts:
                    found = found.get(part, _MISSING) if isinstance(found, dict) else _MISSING
                if found is _MISSING and parts[0] in ("model", "data") and len(parts) == 3:
                    found = _default(merged.get(parts[0]), parts[2], classes)
                if found is _MISSING:
                    problems.append((target, f"linked from {source}, which has no value"))
                values.append(found)
            if not any(value is _MISSING for value in values):
                parts, into = _path(target), layers[-1]
                holder = into.data
                for part in parts[:-1]:
                    holder = holder.setdefault(part, {})
                holder[parts[-1]] = compute_fn(*values) if compute_fn else values[0]
                named = sources[0] if len(sources) == 1 else sources
                into.where[tuple(parts)] = f"parser.link_arguments({named!r}, {target!r})"
        return problems

    def _as_surge(self, layer: Layer, classes: Mapping[str, type]) -> list[tuple[str, str]]:
        """Rewrite one layer from Lightning's shape to Surge's run config, in place: ``model: {lr: 0.1}`` is
        ``model: {init_args: {lr: 0.1}}`` for a class given, ``seed_everything: true`` Lightning's seed (the
        inherited one, or 0), a Lightning logger class a logger name."""
        problems = Problems(layer.where)
        data = layer.data
        if data.get("seed_everything") is True:
            inherited = os.environ.get(SEED_ENV, "")
            data["seed_everything"] = int(inherited) if inherited.isdigit() else 0
        for section in ("model", "data"):
            value = data.get(section)
            if isinstance(value, dict) and not {"class_path", "init_args"} & set(value):
                data[section] = {"init_args": value}
                _move(layer.where, (section,), (section, "init_args"))
            elif isinstance(value, str) and value in classes:  # --model=DemoModel: a subclass by its name
                data[section] = _class_path(classes[value])
        trainer = data.get("trainer")
        if isinstance(trainer, dict) and "logger" in trainer:
            _loggers(layer, problems)
        return problems.items


def _pop_lightning_keys(layer: Layer) -> Layer:
    """Take out what Surge's run config has no key for (``trainer.callbacks``, ``optimizer``...), with where
    each was written, into a layer of its own."""
    data: dict[str, Any] = {}
    trainer = layer.data.get("trainer")
    if isinstance(trainer, dict) and "callbacks" in trainer:
        data["trainer"] = {"callbacks": trainer.pop("callbacks")}
    for key in (*_UNSUPPORTED, *_METHOD_ARGUMENTS):
        if key in layer.data:
            data[key] = layer.data.pop(key)
    where = {
        p: at
        for p, at in layer.where.items()
        if p[:2] == ("trainer", "callbacks") or p[:1] in {(k,) for k in data if k != "trainer"}
    }
    return Layer(data, where, layer.name)


def _check_lightning(
    merged: Layer, accepted: set[str], problems: list[tuple[str, str]]
) -> tuple[list[ClassSpec], dict[str, Any]]:
    """The callbacks, and the subcommand's arguments other than ``ckpt_path`` (those the Trainer's method
    takes; ``weights_only: false`` is ``trusted=True``, Lightning's defaults of the others change nothing)."""
    check = Problems(merged.where)
    for key in _UNSUPPORTED:
        if merged.data.get(key) is not None:
            check.add(
                key, "not supported here: build the optimizer and scheduler in the model's configure_optimizers()"
            )
    kwargs: dict[str, Any] = {}
    for key, default in _METHOD_ARGUMENTS.items():
        value = merged.data.get(key, default)
        if key == "weights_only" and value is False:
            kwargs["trusted"] = True
        elif key in accepted and key in merged.data:
            kwargs[key] = value
        elif value not in (default, None):
            check.add(key, f"got {value!r}: this Trainer's method takes no {key}; remove it")
    value = (merged.data.get("trainer") or {}).get("callbacks")
    items = [] if value is None else value if isinstance(value, list) else [value]
    specs = []
    for i, item in enumerate(items):
        path = f"trainer.callbacks.{i}"
        if isinstance(item, str):
            item = {"class_path": item}
        if isinstance(item, dict) and isinstance(item.get("class_path"), str):
            class_path = _callback_path(item["class_path"], path, check)
            if class_path is None:
                continue
            item = {**item, "class_path": class_path}
        spec = class_section(path, item, None, check, required=True)
        if spec is not None:
            specs.append(spec)
    problems += check.items
    return specs, kwargs


def _callback_path(class_path: str, path: str, problems: Problems) -> str | None:
    """Lightning's callbacks (``lightning.pytorch.callbacks.EarlyStopping``, or ``EarlyStopping``) are Surge's
    counterparts, and a short name may name a subclass of ``Callback``; others are problems."""
    head, _, name = class_path.rpartition(".")
    lightning = head.split(".")[0] in ("lightning", "pytorch_lightning")
    if head and not lightning:
        return class_path  # the user's own: imported and checked as any class path
    if name in _CALLBACKS:
        return _CALLBACKS[name]
    found = [cls for cls in _subclasses(Callback) if cls.__name__ == name] if not head else []
    if len(found) == 1:
        return _class_path(found[0])
    problems.add(
        f"{path}.class_path",
        f"Lightning's {name} has no counterpart in Surge; these do: {', '.join(sorted(_CALLBACKS))} (docs/porting.md)"
        if lightning
        else f"no callback class is named {name!r}: give its full class path (package.module.{name})",
    )
    return None


def _loggers(layer: Layer, problems: Problems) -> None:
    """``trainer.logger`` naming Lightning's logger classes becomes logger names, their arguments the
    plugins' settings (``save_dir`` is ``trainer.default_root_dir``: every logger writes into the run dir)."""
    trainer = layer.data["trainer"]
    value = trainer["logger"]
    items = value if isinstance(value, list) else [value]
    names: list[Any] = []
    for i, item in enumerate(items):
        path = ("trainer", "logger", str(i)) if isinstance(value, list) else ("trainer", "logger")
        if isinstance(item, str) and item.rsplit(".", 1)[-1] in _LOGGERS:
            item = {"class_path": item}
        if not (isinstance(item, dict) and isinstance(item.get("class_path"), str)):
            names.append(item)
            continue
        class_name = item["class_path"].rsplit(".", 1)[-1]
        name = _LOGGERS.get(class_name)
        if name is None:
            problems.add(
                ".".join(path),
                f"{item['class_path']}: Surge's loggers are plugins chosen by name ({', '.join(_LOGGERS.values())}); "
                "a logger of your own is a plugin (docs/plugins.md)",
            )
            continue
        names.append(name)
        settings = dict(item.get("init_args") or {})
        save_dir = settings.pop("save_dir", None)
        if save_dir is not None and name == "mlflow":
            settings.setdefault("tracking_uri", f"file:{save_dir}")
        elif save_dir is not None:
            trainer.setdefault("default_root_dir", str(save_dir))
            layer.where.setdefault(("trainer", "default_root_dir"), layer.where.get(path, layer.name))
        dropped = [key for key in _LOGGER_DIR_ARGS if settings.pop(key, None) is not None]
        if dropped:
            logger.warning(
                "{}: {} ignored: every Surge logger writes into the run directory "
                "<default_root_dir>/surge_runs/version_N ({})",
                ".".join(path),
                ", ".join(dropped),
                layer.where.get(path, layer.name),
            )
        if settings:
            plugins = layer.data.setdefault("plugins", {})
            if isinstance(plugins, dict):
                plugins[name] = {**settings, **(plugins.get(name) or {})}
                _move(layer.where, (*path, "init_args"), ("plugins", name))
    trainer["logger"] = names if isinstance(value, list) else names[0] if names else False


def _move(where: dict[Path, str], old: Path, new: Path) -> None:
    for p in [p for p in where if p[: len(old)] == old and len(p) > len(old)]:
        where[new + p[len(old) :]] = where.pop(p)
    if old in where:
        where.setdefault(new, where[old])


def _load(locations: Sequence[str]) -> list[Layer]:
    return runconfig.load_files(locations)


def _tolerant(values: dict[str, Any], source: str) -> Layer:
    where: dict[Path, str] = {}

    def walk(value: Any, path: Path) -> None:
        where[path] = source
        if isinstance(value, dict):
            for key, child in value.items():
                walk(child, (*path, str(key)))

    walk(values, ())
    return Layer(values, where, source)


_MISSING: Any = object()


def _path(dotted: str) -> list[str]:
    """``model.lr`` is ``model.init_args.lr`` in the run config (and ``data.*`` alike)."""
    parts = dotted.split(".")
    if parts[0] in ("model", "data") and len(parts) > 1 and parts[1] not in ("class_path", "init_args"):
        parts.insert(1, "init_args")
    return parts


def _default(section: Any, name: str, classes: Mapping[str, type]) -> Any:
    """The default of ``name`` in the ``__init__`` of the section's class (given, or named by class_path)."""
    class_path = section.get("class_path") if isinstance(section, dict) else None
    cls = classes.get(class_path) if isinstance(class_path, str) else None
    if cls is None and isinstance(class_path, str):
        cls = runconfig.import_object(class_path, "", Problems({}))
    param = runconfig.parameters(cls).get(name) if cls is not None else None
    return _MISSING if param is None or param.default is param.empty else param.default


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _subclasses(base: type) -> list[type]:
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def _plain(value: Any) -> Any:
    """YAML-safe: an object (a callback in ``trainer_defaults``) is written as its class path."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"class_path": _class_path(type(value))}


def _header() -> str:
    return f"# surge=={surge.__version__} (LightningCLI)\n"


def _parameters_of(method: Any) -> set[str]:
    try:
        return set(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return set()
