"""Lightning 1.x Trainer arguments (the seed's era): each mapped to its modern spelling, with one warning that
names it, or refused with that spelling where no mapping is honest. docs/porting.md, "Lightning 1.x", has the
table. :func:`translate` is the ``lightning`` plugin's ``surge.Plugin(translate=...)``: the core applies it to
``Trainer(**options)`` before they are validated. What the modern arguments cannot carry
(``resume_from_checkpoint``, ``truncated_bptt_steps``) becomes the ``lightning`` plugin's settings, served by
:class:`LightningV1` through the plugin contract (the ``resume_path`` question, the ``setup`` event)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import surge
from loguru import logger
from surge.config import TrainerConfig
from surge.errors import ConfigError

__all__ = ["DEFAULTS", "TRANSLATES", "LightningV1", "translate"]

DEFAULTS: dict[str, Any] = {
    "gpus": None,
    "tpu_cores": None,
    "num_processes": 1,
    "auto_select_gpus": False,
    "distributed_backend": None,
    "amp_backend": "native",
    "amp_level": "O2",
    "checkpoint_callback": True,
    "resume_from_checkpoint": None,
    "weights_summary": "top",
    "weights_save_path": None,
    "progress_bar_refresh_rate": None,
    "process_position": 0,
    "flush_logs_every_n_steps": 100,
    "reload_dataloaders_every_epoch": False,
    "replace_sampler_ddp": True,
    "truncated_bptt_steps": None,
}
"""The seed Trainer's arguments that Lightning 2 no longer has, with the seed's defaults (at its default an
argument asks for nothing, and is only dropped)."""

_BACKENDS = {"dp", "ddp", "ddp2", "ddp_spawn", "ddp_cpu", "ddp_sharded", "ddp_sharded_spawn", "horovod", "tpu_spawn"}
"""Lightning 1.x ``distributed_backend``/``accelerator`` values: strategies today (``ddp_cpu`` is ``ddp`` on CPU)."""

_ACCELERATORS = {"cuda": ("gpu", "cuda", "auto"), "tpu": ("tpu", "auto"), "cpu": ("cpu", "auto")}
"""For an accelerator a device argument asks for, the explicit ``accelerator=`` values it agrees with."""


TRANSLATES = (*DEFAULTS, "accelerator", "max_steps")
"""The arguments :func:`translate` takes (those of the seed Trainer that Lightning 2 dropped, and the modern two whose
1.x values it rewrites: ``accelerator=None`` or a backend name, ``max_steps=None``)."""

PLUGIN = "lightning"
"""The plugin whose settings carry what the modern arguments cannot (:class:`LightningV1`)."""


class LightningV1:
    """The ``lightning`` plugin's object, active when a Lightning 1.x argument needs it: ``resume_from_checkpoint``
    is the first ``fit``'s ``ckpt_path`` (it answers the ``resume_path`` question), ``truncated_bptt_steps`` the
    Module's attribute when it sets none (set in ``setup``).

    Args:
        resume_from_checkpoint: The checkpoint the first ``fit`` without ``ckpt_path`` continues (a file that does
            not exist starts training from scratch, as in Lightning 1.x).
        truncated_bptt_steps: The Module's ``truncated_bptt_steps`` when it sets none (0).
    """

    def __init__(self, resume_from_checkpoint: str | None = None, truncated_bptt_steps: int = 0) -> None:
        self.resume_from_checkpoint = resume_from_checkpoint
        self.truncated_bptt_steps = truncated_bptt_steps

    @surge.hookimpl
    def resume_path(self, event: surge.events.ResumePath) -> str | None:
        path, self.resume_from_checkpoint = self.resume_from_checkpoint, None  # the first fit only
        if path is None:
            return None
        import fsspec

        fs, local = fsspec.core.url_to_fs(path)
        if not fs.exists(local):
            logger.warning("resume_from_checkpoint={!r}: no file there; training starts from scratch", path)
            return None
        return path

    @surge.hookimpl
    def setup(self, event: surge.events.Setup) -> None:
        module = event.module
        if event.stage == "fit" and self.truncated_bptt_steps and not getattr(module, "truncated_bptt_steps", True):
            module.truncated_bptt_steps = self.truncated_bptt_steps


def translate(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every Lightning 1.x argument replaced by its modern spelling; one warning lists them all.
    Raises :class:`ConfigError` for those that have no honest mapping or that contradict a modern argument."""
    legacy = {k: v for k, v in options.items() if k in DEFAULTS}
    given = {k: v for k, v in options.items() if k not in DEFAULTS}
    if isinstance(given.get("accelerator"), str) and given["accelerator"] in _BACKENDS:  # 1.x: a backend
        legacy["accelerator"] = given.pop("accelerator")
    nones: dict[str, Any] = {k: given.pop(k) for k in ("max_steps", "accelerator") if k in given and given[k] is None}
    if not legacy and not nones:
        return dict(options)
    out, v1 = _Arguments(given), {}
    for key in nones:  # 1.x's spelling of the default: "no limit", "chosen from the other arguments"
        out.note(key, f"the default ({key}={TrainerConfig.model_fields[key].default!r}); drop it")
    _devices(legacy, out)
    for arg, value in legacy.items():
        if arg in out.spelled or arg in out.refused or value == DEFAULTS.get(arg):
            continue
        if arg == "auto_select_gpus":
            out.refuse(arg, "it picked free GPUs; choose them yourself with devices=[0, 2] or CUDA_VISIBLE_DEVICES")
        elif arg == "amp_backend":
            out.refuse(arg, "Apex is gone (Lightning 2 removed it too); mixed precision is precision='16-mixed'")
        elif arg == "amp_level":
            out.note(arg, "nothing: only Apex read it; mixed precision is precision='16-mixed'")
        elif arg == "checkpoint_callback" and isinstance(value, bool):
            out.put(arg, enable_checkpointing=value)
        elif arg == "checkpoint_callback":  # 1.x also took the ModelCheckpoint object here
            callbacks = out.values.get("callbacks")
            items = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks] if callbacks else []
            out.values["callbacks"] = [*items, value]
            out.note(arg, f"callbacks=[{type(value).__name__}(...)]")
        elif arg == "resume_from_checkpoint":
            v1[arg] = os.fspath(value)
            out.note(arg, f"trainer.fit(model, ckpt_path={v1[arg]!r}), in the first fit")
        elif arg == "weights_summary" and value is None:
            out.put(arg, enable_model_summary=False)
        elif arg == "weights_summary" and value == "full":
            out.plugin(arg, "model_summary", {"mode": "full"})
        elif arg == "weights_summary":
            out.refuse(arg, f"got {value!r}; 1.x took None, 'top' or 'full'")
        elif arg == "weights_save_path":
            out.refuse(
                arg,
                "checkpoints go to <default_root_dir>/surge_runs/version_N/checkpoints; to write them elsewhere "
                f"pass callbacks=[ModelCheckpoint(dirpath={value!r})] (from surge_checkpoint)",
            )
        elif arg == "progress_bar_refresh_rate" and value == 0:
            out.put(arg, enable_progress_bar=False)
        elif arg == "progress_bar_refresh_rate":
            out.plugin(arg, "progress", {"refresh_rate": value})
        elif arg == "process_position":
            out.refuse(arg, "the progress bar has no position to stack bars; pass enable_progress_bar=False instead")
        elif arg == "flush_logs_every_n_steps":
            out.note(arg, "nothing: Surge's loggers flush at every write (every log_every_n_steps)")
        elif arg == "reload_dataloaders_every_epoch":
            out.put(arg, reload_dataloaders_every_n_epochs=1)
        elif arg == "replace_sampler_ddp":
            out.put(arg, use_distributed_sampler=value)
        elif arg == "truncated_bptt_steps":
            v1[arg] = value
            out.note(arg, f"the Module's truncated_bptt_steps = {value} (set by fit when the Module has none)")
    for arg in legacy.keys() - out.spelled.keys() - out.refused:
        out.note(arg, "nothing: it is Lightning 1.x's default; drop it")
    if v1:  # what the modern arguments cannot carry: the lightning plugin's settings (LightningV1)
        notes = dict(out.spelled)
        out.plugin("resume_from_checkpoint" if "resume_from_checkpoint" in v1 else "truncated_bptt_steps", PLUGIN, v1)
        out.spelled = notes
    if out.problems:
        raise ConfigError(out.problems, "Trainer arguments")
    written: dict[str, Any] = {**options, **legacy, **nones}
    logger.warning(
        "Trainer: Lightning 1.x arguments, taken as their modern spelling (write that instead; docs/porting.md, "
        "'Lightning 1.x'):\n{}",
        "\n".join(f"  {arg}={written[arg]!r} -> {spelled}" for arg, spelled in out.spelled.items()),
    )
    return out.values


class _Arguments:
    """The modern arguments being built, what each legacy one became, and the problems found."""

    def __init__(self, given: dict[str, Any]) -> None:
        self.given = dict(given)
        self.values = dict(given)
        self.spelled: dict[str, str] = {}
        self.refused: set[str] = set()
        self.problems: list[tuple[str, str]] = []

    def put(self, arg: str, **modern: Any) -> None:
        """``arg`` becomes the ``modern`` arguments, unless one of them is passed with another value."""
        for key, value in modern.items():
            if key != arg and key in self.given and self.given[key] != value:
                self.problems.append(
                    (
                        f"trainer.{arg}",
                        f"means {key}={value!r}, but {key}={self.given[key]!r} is passed too; pass {key} only",
                    )
                )
                return
        self.values.update(modern)
        self.spelled[arg] = ", ".join(f"{key}={value!r}" for key, value in modern.items())

    def note(self, arg: str, text: str) -> None:
        self.spelled[arg] = text

    def refuse(self, arg: str, text: str) -> None:
        self.refused.add(arg)
        self.problems.append((f"trainer.{arg}", f"is a Lightning 1.x argument with no equivalent here: {text}"))

    def plugin(self, arg: str, name: str, settings: dict[str, Any]) -> None:
        """``arg`` becomes settings of plugin ``name`` (those given in ``plugins=`` win)."""
        plugins = self.values.get("plugins")
        if isinstance(plugins, Mapping):
            theirs = plugins.get(name)
            if theirs is False:
                self.problems.append((f"trainer.{arg}", f"asks for the '{name}' plugin, which plugins= switches off"))
                return
            merged = {**settings, **(theirs if isinstance(theirs, Mapping) else {})}
            self.values["plugins"] = {**plugins, name: merged}
        else:
            items = list(plugins) if isinstance(plugins, (list, tuple)) else [] if plugins is None else [plugins]
            self.values["plugins"] = [*items, {name: settings}]
        self.spelled[arg] = f"plugins={{{name!r}: {settings!r}}}"


def _devices(legacy: dict[str, Any], out: _Arguments) -> None:
    """``distributed_backend`` (and 1.x's ``accelerator``) -> ``strategy``; ``gpus``, ``tpu_cores`` and
    ``num_processes`` -> ``accelerator`` and ``devices``."""
    backends = {arg: legacy[arg] for arg in ("distributed_backend", "accelerator") if legacy.get(arg) is not None}
    if len(set(backends.values())) > 1:
        out.refuse("distributed_backend", f"{backends} both name a backend; pass strategy= only")
    for arg, backend in backends.items():
        out.put(arg, strategy="ddp" if backend == "ddp_cpu" else backend)
    wanted: list[tuple[str, str, Any]] = []  # (argument, accelerator, devices)
    if legacy.get("tpu_cores") is not None:
        wanted.append(("tpu_cores", "tpu", legacy["tpu_cores"]))
    if legacy.get("gpus") not in (None, 0, "0", "", []):
        wanted.append(("gpus", "cuda", _gpu_devices(legacy["gpus"])))
    if legacy.get("num_processes", 1) != 1 or "ddp_cpu" in backends.values():
        wanted.append(("num_processes", "cpu", legacy.get("num_processes", 1)))
    if len(wanted) > 1:
        out.refuse(
            wanted[0][0], f"{' and '.join(w[0] for w in wanted)} each choose a device; pass accelerator= and devices="
        )
        return
    if not wanted and "gpus" in legacy:
        wanted.append(("gpus", "cpu", None))  # no GPU asked for: 1.x trained on the CPU
    if not wanted:
        return
    arg, accelerator, devices = wanted[0]
    explicit = out.given.get("accelerator")
    agrees = explicit is None or explicit in _ACCELERATORS[accelerator]
    if not agrees and legacy[arg] == DEFAULTS[arg]:
        return  # 1.x's default beside a modern accelerator: that one wins
    if not agrees:
        out.problems.append(
            (
                f"trainer.{arg}",
                f"means accelerator={accelerator!r}, but accelerator={explicit!r} is passed too; pass "
                "accelerator= and devices= only",
            )
        )
        return
    modern = {"accelerator": accelerator} if explicit in (None, "auto") else {}
    out.put(arg, **modern, **({"devices": devices} if devices is not None else {}))


def _gpu_devices(gpus: Any) -> Any:
    """1.x's ``gpus``: a count, ``-1`` (all), a list of indices, or a string of either (``"2"``, ``"0,1"``)."""
    if isinstance(gpus, str):
        text = gpus.strip()
        if "," in text:
            return [int(part) for part in text.split(",") if part.strip()]
        return int(text)
    return list(gpus) if isinstance(gpus, (list, tuple)) else gpus
