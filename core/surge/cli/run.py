"""``surge fit | validate | test | predict | tune``: a run from config files and command-line overrides, and
``surge completion bash|zsh``.

With no ``--config`` the run is the embedded digits example (``surge.examples.digits``); ``--max-epochs``,
``--seed``, ``--root`` and ``--accelerator`` are short for ``--trainer.max_epochs``, ``--seed_everything``,
``--trainer.default_root_dir`` and ``--trainer.accelerator``. The resolution and validation of the config is
:mod:`surge.cli.runconfig`'s; this module turns a resolved config into objects, runs them, and reports.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from surge.events.hooks import hookimpl

COMMANDS = {
    "fit": "train a model (with no --config: the embedded digits example)",
    "validate": "run one validation pass over the validation data",
    "test": "run one test pass over the test data",
    "predict": "run the model's predict_step over the predict data and save the outputs",
    "tune": "find a batch size and learning rate (trainer.auto_scale_batch_size, auto_lr_find; a tuner plugin)",
}

_EXAMPLE = "surge.examples.digits"


def register(commands: Any) -> None:
    for name, summary in COMMANDS.items():
        parser = commands.add_parser(name, help=summary, description=summary, add_help=False, allow_abbrev=False)
        parser.add_argument("-h", "--help", action=_Help, help="show this help, every Trainer and plugin option")
        parser.add_argument(
            "-c",
            "--config",
            action="append",
            metavar="FILE",
            default=[],
            help="a YAML run config (path or fsspec URL); repeat to merge several, later over earlier",
        )
        parser.add_argument(
            "--print-config", action="store_true", help="print the complete resolved config as YAML and exit"
        )
        parser.add_argument("--max-epochs", type=int, default=None, help="short for --trainer.max_epochs")
        parser.add_argument("--seed", type=int, default=None, help="short for --seed_everything")
        parser.add_argument("--root", default=None, help="short for --trainer.default_root_dir")
        parser.add_argument("--accelerator", default=None, help="short for --trainer.accelerator")
        from surge.cli import plugins as _cli_plugins

        _cli_plugins.add_lab_option(parser)
        _cli_plugins.add_plugin_option(parser)
        parser.set_defaults(run=run, overrides_allowed=True)


def register_completion(commands: Any, top: argparse.ArgumentParser) -> None:
    completion = commands.add_parser("completion", help="print a shell completion script (bash or zsh)")
    completion.add_argument("shell", choices=["bash", "zsh"])
    completion.set_defaults(run=lambda args: _print_completion(top, args.shell))


# -- running ----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    with _cwd_importable():
        return _run(args)


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """Class paths resolve against the current directory too, as under ``python -m``."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _run(args: argparse.Namespace) -> int:
    from surge.cli import runconfig
    from surge.errors import SurgeError

    command: str = args.command
    overrides = runconfig.parse_overrides(args.overrides)
    _shorthands(args, overrides)
    files = runconfig.load_files(args.config)
    if not args.config:
        files = [_embedded(args)]
    config = runconfig.resolve(files, overrides, command=command)
    if args.print_config:
        print(config.to_yaml(), end="")
        return 0
    try:
        text: str | None = config.to_yaml()
    except SurgeError as exc:  # no PyYAML: the embedded example still runs, without its config.yaml
        print(f"surge {command}: note: config.yaml is not written: {exc}", file=sys.stderr)
        text = None

    import surge

    if config.seed_everything is not None:
        surge.seed_everything(config.seed_everything)
    assert config.model is not None
    model = config.model.build()
    data = config.data.build() if config.data else None
    objects: list[object] = [spec.build() for spec in config.plugin_objects.values()]
    if text is not None:
        objects.append(_ConfigWriter(text))
    if command == "fit":
        objects.append(_ConsoleReport())
    plugins = [config.plugins, *objects] if config.plugins else objects
    trainer = surge.Trainer(**config.trainer_kwargs, plugins=plugins or None)
    if command == "fit" and trainer.is_global_zero:  # one banner per run, not one per process
        where = (
            "the embedded digits example (scikit-learn's 8x8 images)" if not args.config else config.model.class_path
        )
        print(f"surge fit: {where}, {trainer.max_epochs} epochs on {trainer.strategy.root_device}")
    if command == "tune":
        return _tune(trainer, model, data)
    method = getattr(trainer, command)
    quiet = {"verbose": False} if command in ("validate", "test") else {}  # _report prints the results once
    result = method(model, datamodule=data, ckpt_path=config.ckpt_path, **quiet)
    if trainer.interrupted:
        print("interrupted; stopped at a step boundary", file=sys.stderr)
        return 130
    if trainer.is_global_zero:  # one report per run, not one per process
        _report(command, trainer, result)
    return 0


def _shorthands(args: argparse.Namespace, overrides: Any) -> None:
    """The embedded example's flags, as command-line overrides."""
    values = {
        ("trainer", "max_epochs"): args.max_epochs,
        ("seed_everything",): args.seed,
        ("trainer", "default_root_dir"): args.root,
        ("trainer", "accelerator"): args.accelerator,
    }
    flags = {"max_epochs": "--max-epochs", "seed_everything": "--seed", "default_root_dir": "--root"}
    for path, value in values.items():
        if value is None:
            continue
        target = overrides.data
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
        overrides.where[path] = f"the command line ({flags.get(path[-1], '--' + path[-1])} {value})"


def _embedded(args: argparse.Namespace) -> Any:
    """The digits example as a config layer; its model and data follow --max-epochs and --seed."""
    from surge.cli.runconfig import Layer

    epochs = 10 if args.max_epochs is None else args.max_epochs
    seed = 0 if args.seed is None else args.seed
    data = {
        "seed_everything": seed,
        "model": {"class_path": f"{_EXAMPLE}.DigitsClassifier", "init_args": {"max_epochs": epochs}},
        "data": {"class_path": f"{_EXAMPLE}.DigitsDataModule", "init_args": {"seed": seed}},
        "trainer": {"max_epochs": 10, "log_every_n_steps": 5},  # 23 steps an epoch: a few points an epoch
    }
    where: dict[tuple[str, ...], str] = {(): "the embedded digits example"}
    return Layer(data, where, "the embedded digits example")


def _report(command: str, trainer: Any, result: Any) -> None:
    if command == "fit":
        metrics = trainer.callback_metrics
        if "val_acc" in metrics:
            print(f"final validation accuracy: {float(metrics['val_acc']):.4f}")
        shown = {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        if shown:
            print("final metrics: " + "  ".join(f"{k}={v:.4f}" for k, v in sorted(shown.items())))
    elif command in ("validate", "test"):
        for i, metrics in enumerate(result or []):
            figures = "  ".join(f"{k}={float(v):.4f}" for k, v in sorted(metrics.items()))
            print(f"{command} dataloader {i}: {figures}")
    elif command == "predict":
        batches = len(result or [])
        if trainer.run_dir:
            import fsspec
            import torch

            with fsspec.open(f"{trainer.run_dir}/predictions.pt", "wb") as f:
                torch.save(result, f)
            print(f"{batches} prediction batch(es) saved to {trainer.run_dir}/predictions.pt")
        else:
            print(f"{batches} prediction batch(es)")
    if trainer._run_dir is not None:  # one was made (reading trainer.run_dir would make one)
        print(f"run directory: {trainer.run_dir}")
        if command == "fit" and any(s["name"] == "csv" for s in trainer.plugin_set()):
            print(f"plot its metrics: surge plot {trainer.run_dir}")
    sys.stdout.flush()  # the report is out before the interpreter's shutdown (where gloo can abort a process)


def _tune(trainer: Any, model: Any, data: Any) -> int:
    """``trainer.tune``: the batch-size finder (``trainer.auto_scale_batch_size``) and the learning-rate finder
    (``trainer.auto_lr_find``) of the ``tuner`` provider; prints what they found, to put in the config."""
    from surge.errors import SurgeError

    if not hasattr(trainer, "tune"):
        from surge.plugins._first_party import SLOT_DISTRIBUTIONS

        raise SurgeError(
            f"this version of surge has no Trainer.tune(); upgrade surge and `pip install {SLOT_DISTRIBUTIONS['tuner']}`"
        )
    if not (trainer.config.auto_lr_find or trainer.config.auto_scale_batch_size):
        raise SurgeError(
            "nothing to tune: pass --trainer.auto_lr_find=true and/or --trainer.auto_scale_batch_size=true "
            "(or set them in the config)"
        )
    found = trainer.tune(model, datamodule=data)
    size = found.get("scale_batch_size")
    if size is not None:
        print(f"batch size: {size}  (put it in data.init_args.batch_size or model.init_args.batch_size)")
    finder = found.get("lr_find")
    if finder is not None:
        suggestion = finder.suggestion() if hasattr(finder, "suggestion") else None
        print(f"learning rate: {suggestion}  (put it in model.init_args.lr)")
    return 0


class _ConsoleReport:
    """Prints one line per epoch with the epoch's metrics (an observer, like any logger)."""

    surge_name = "cli_report"
    surge_kind = "observer"

    def __init__(self) -> None:
        self._started = time.perf_counter()

    @hookimpl
    def train_start(self, event: Any) -> None:
        self._started = time.perf_counter()

    @hookimpl
    def train_epoch_end(self, event: Any) -> None:
        t = event.trainer
        if not t.is_global_zero:
            return
        shown = {k: v for k, v in t.callback_metrics.items() if not k.endswith(("_step", "_epoch"))}
        figures = "  ".join(f"{k}={float(v):.4f}" for k, v in sorted(shown.items()))
        elapsed = time.perf_counter() - self._started
        # numbered from 0 out of max_epochs - 1, as the progress bar beside it and Lightning's bars number them
        epoch = f"epoch {event.epoch}/{t.max_epochs - 1}" if t.max_epochs > 0 else f"epoch {event.epoch}"
        print(f"{epoch}  {figures}  [{elapsed:.2f}s]", flush=True)


class _ConfigWriter:
    """Writes the resolved config as ``config.yaml`` into the run directory once it exists (global rank 0)."""

    surge_name = "cli_config"
    surge_kind = "observer"

    def __init__(self, text: str) -> None:
        self.text = text
        self.written = False

    @hookimpl
    def setup(self, event: Any) -> None:
        run_dir = event.trainer.run_dir
        if self.written or not run_dir:
            return
        import fsspec

        with fsspec.open(f"{run_dir}/config.yaml", "w", encoding="utf-8") as f:
            f.write(self.text)
        self.written = True


# -- help -------------------------------------------------------------------------------------------------


class _Help(argparse.Action):
    """``-h``: argparse's help, then every Trainer argument and every installed plugin's settings."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        print(parser.format_help())
        print(options_reference())
        parser.exit()


def options_reference() -> str:
    """The ``--trainer.*`` and ``--plugins.*`` options, from TrainerConfig and each plugin's model."""
    from surge.cli.runconfig import field_docs
    from surge.config import TrainerConfig

    lines = [
        "config sections (--config FILE) and their command-line overrides:",
        "  --seed_everything=INT       seed python, numpy and torch first (true: a fresh seed, recorded)",
        "  --model.class_path=PATH     the surge.Module class; --model.NAME=VALUE is --model.init_args.NAME",
        "  --data.class_path=PATH      the surge.DataModule class; --data.NAME=VALUE is --data.init_args.NAME",
        "  --ckpt_path=PATH            resume fit from it, or evaluate it (a path, fsspec URL, last or best)",
        "",
        "precedence, lowest first: defaults < lab profile [trainer] < --config files in order",
        "  < SURGE_TRAINER_NAME environment variables < command line; lab [plugins] rules are forced on top.",
        "",
        "trainer options (--trainer.NAME=VALUE, values are YAML: 3, 0.5, true, null, [0, 1]):",
    ]
    docs = field_docs(TrainerConfig)
    for name, info in TrainerConfig.model_fields.items():
        if name in ("plugins", "callbacks"):
            continue
        lines += _option(f"--trainer.{name}", info, docs.get(name, ""))
    lines += ["", "plugin options (--plugins.NAME.SETTING=VALUE; --plugins.NAME=true|false switches it):"]
    try:
        from surge.plugins import discover
        from surge.settings import load_settings

        catalog = discover(load_settings())
    except Exception as exc:  # help must print even where discovery refuses (a lab mismatch)
        return "\n".join([*lines, f"  (plugins cannot be listed here: {type(exc).__name__}: {exc})"])
    for record in catalog.records.values():
        plugin = record.plugin
        if plugin is None:
            lines.append(f"  {record.name}: {record.status} ({record.reason})")
            continue
        if plugin.kind == "provider":
            slots = "; ".join(f"{slot}: {', '.join(sorted(names))}" for slot, names in plugin.provides.items())
            state = f"provider; {slots}"
        else:
            state = "on by default" if plugin.default else "off unless requested"
        lines.append(
            f"  {record.name} ({record.distribution or '?'} {record.version or '?'}, {state})"
            + (f": {plugin.description}" if plugin.description else "")
        )
        if plugin.config is not None:
            plugin_docs = field_docs(plugin.config)
            for name, info in plugin.config.model_fields.items():
                lines += _option(f"--plugins.{record.name}.{name}", info, plugin_docs.get(name, ""), indent=4)
    return "\n".join(lines)


def _option(flag: str, info: Any, doc: str, indent: int = 2) -> list[str]:
    default = "required" if info.is_required() else f"default: {info.get_default(call_default_factory=True)!r}"
    line = f"{' ' * indent}{flag}  {_type_name(info.annotation)} ({default})"
    return [line] + ([f"{' ' * (indent + 4)}{doc}"] if doc else [])


def _type_name(annotation: Any) -> str:
    if annotation is Any:
        return "any"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and origin is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "")


# -- completion -------------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser, run_command: bool) -> list[str]:
    words = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    words += list(_subcommands(parser))
    if run_command:
        from surge.config import TrainerConfig

        words += [f"--trainer.{n}=" for n in TrainerConfig.model_fields if n not in ("plugins", "callbacks")]
        words += ["--seed_everything=", "--ckpt_path=", "--model.class_path=", "--data.class_path="]
        try:
            from surge.plugins import discover
            from surge.settings import load_settings

            for record in discover(load_settings()).loaded():
                config = record.plugin.config if record.plugin else None
                words.append(f"--plugins.{record.name}=")
                words += [f"--plugins.{record.name}.{n}=" for n in (config.model_fields if config else ())]
        except Exception:  # completion without plugin options rather than none
            pass
    return words


def completion_script(top: argparse.ArgumentParser, shell: str) -> str:
    cases = []
    for name, sub in _subcommands(top).items():
        words = _words(sub, name in COMMANDS)
        for child, subsub in _subcommands(sub).items():
            child_words = " ".join(_words(subsub, False))
            cases.append(f'        "{name} {child}"|"{name} {child} "*) opts="{child_words}" ;;')
        cases.append(f'        "{name}"|"{name} "*) opts="{" ".join(words)}" ;;')
    top_words = " ".join(_words(top, False))
    script = f"""# surge {shell} completion: eval "$(surge completion {shell})" in your shell's rc file
_surge_complete() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" w opts
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$w" in -*) ;; *) path="${{path:+$path }}$w" ;; esac
    done
    case "$prev" in --config|-c|--lab|--root) COMPREPLY=($(compgen -f -- "$cur")); return ;; esac
    case "$path" in
{chr(10).join(cases)}
        *) opts="{top_words}" ;;
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    if [[ ${{#COMPREPLY[@]}} -eq 1 && "${{COMPREPLY[0]}}" == *= ]]; then compopt -o nospace 2>/dev/null; fi
}}
complete -o default -F _surge_complete surge
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def _print_completion(top: argparse.ArgumentParser, shell: str) -> int:
    print(completion_script(top, shell), end="")
    return 0
