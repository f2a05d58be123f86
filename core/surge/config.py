"""The Trainer's arguments as one validated model, with ``SURGE_TRAINER_<FLAG>`` environment defaults."""

from __future__ import annotations

import difflib
import json
import os
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from surge.errors import ConfigError

__all__ = ["TrainerConfig", "build_config", "format_validation_error"]

ENV_PREFIX = "SURGE_TRAINER_"
Fraction = int | float


class TrainerConfig(BaseModel):
    """Every Trainer argument, its type and its default. ``Trainer(**kwargs)`` validates through this."""

    model_config = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True, frozen=True)

    # hardware and backends: provider names or instances
    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: int | str | list[int] = "auto"
    num_nodes: int = Field(1, ge=1)
    precision: Any = "32-true"
    # default plugins and their switches
    logger: Any = True
    enable_checkpointing: bool = True
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    plugins: Any = None
    callbacks: Any = None
    """Lightning's name for plugin objects: ``callbacks=[EarlyStopping(...)]`` is ``plugins=[EarlyStopping(...)]``."""
    profiler: Any = None
    """A profiler provider's name (``"simple"``, ``"advanced"``, ``"pytorch"``: what the installed profiler plugins
    provide) or object."""
    checkpoint_io: Any = None
    """How checkpoint files are written, read and removed: a ``checkpoint_io`` provider's name or an object
    (``surge.events.protocols.CheckpointIO``); ``None``: the strategy's own (``surge.checkpoint.FileCheckpointIO``)."""
    # loop length
    max_epochs: int | None = Field(None, ge=-1)
    min_epochs: int | None = Field(None, ge=0)
    max_steps: int = Field(-1, ge=-1)
    max_time: str | dict[str, int] | None = None
    """Stop after this wall time: ``"DD:HH:MM:SS"`` or ``{"hours": 1, "minutes": 30}`` (the ``timer`` plugin)."""
    min_steps: int | None = Field(None, ge=0)
    limit_train_batches: Fraction | None = Field(None, ge=0)
    limit_val_batches: Fraction | None = Field(None, ge=0)
    limit_test_batches: Fraction | None = Field(None, ge=0)
    limit_predict_batches: Fraction | None = Field(None, ge=0)
    overfit_batches: Fraction = Field(0.0, ge=0)
    fast_dev_run: bool | int = False
    # validation schedule
    val_check_interval: Fraction | None = Field(None, gt=0)
    check_val_every_n_epoch: int | None = Field(1, ge=1)
    num_sanity_val_steps: int = Field(2, ge=-1)
    # optimisation
    accumulate_grad_batches: int | dict[int, int] = 1
    """Micro-batches per optimizer step; ``{epoch: k}`` changes it from those epochs on (the
    ``gradient_accumulation_scheduler`` plugin)."""
    gradient_clip_val: Fraction | None = Field(None, ge=0)
    gradient_clip_algorithm: Literal["norm", "value"] = "norm"
    # seed switches for training techniques, each served by a plugin that claims it (surge.Plugin(switches=...))
    stochastic_weight_avg: bool = False
    track_grad_norm: int | float | str = -1
    terminate_on_nan: bool = False
    log_gpu_memory: str | None = None
    auto_lr_find: bool | str = False
    auto_scale_batch_size: bool | str = False
    # data
    reload_dataloaders_every_n_epochs: int = Field(0, ge=0)
    multiple_trainloader_mode: Literal["max_size_cycle", "min_size"] = "max_size_cycle"
    use_distributed_sampler: bool = True
    prepare_data_per_node: bool = True
    # logging and reproducibility
    log_every_n_steps: int = Field(50, ge=1)
    move_metrics_to_cpu: bool = False
    deterministic: bool | Literal["warn"] | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    default_root_dir: str | None = None
    # Lightning's switches for debugging, speed measurement and logging
    detect_anomaly: bool = False
    """``torch.autograd.set_detect_anomaly(True)`` while ``fit`` runs: a backward that produces NaN raises,
    naming the operation whose forward made it (slow: for debugging)."""
    sync_batchnorm: bool = False
    """Convert the model's BatchNorm layers to ``SyncBatchNorm`` under a distributed strategy (any
    :class:`surge.ProcessGroupStrategy`, ``ddp`` for one), whose batch statistics then span every process; no
    effect on a single process."""
    barebones: bool = False
    """Measure the loop's own overhead, as Lightning's: no logger, checkpointing, progress bar, model summary,
    sanity check, and ``self.log`` does nothing. Asking for one of those too is an error."""
    enable_autolog_hparams: bool = True
    """Send the Module's and DataModule's ``hparams`` to the loggers when a run starts."""

    @field_validator("default_root_dir", mode="before")
    @classmethod
    def _path_to_str(cls, value: object) -> object:
        return os.fspath(value) if isinstance(value, PurePath) else value

    @field_validator("fast_dev_run")
    @classmethod
    def _fast_dev_run(cls, value: bool | int) -> bool | int:
        if not isinstance(value, bool) and value < 0:
            raise ValueError("must be True, False or a number of batches >= 0")
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: int | str | list[int]) -> int | str | list[int]:
        if (isinstance(value, int) and value < -1) or value == 0:
            raise ValueError("must be 'auto', -1 (all), a positive count, or a list of device indices")
        return value

    @field_validator(
        "limit_train_batches",
        "limit_val_batches",
        "limit_test_batches",
        "limit_predict_batches",
        "overfit_batches",
        "val_check_interval",
    )
    @classmethod
    def _fraction(cls, value: Fraction | None) -> Fraction | None:
        if isinstance(value, float) and value > 1.0:
            raise ValueError(
                f"a float is a fraction of the batches and must be <= 1.0; for a count pass an int ({int(value)})"
            )
        return value

    @field_validator("accumulate_grad_batches")
    @classmethod
    def _accumulate(cls, value: int | dict[int, int]) -> int | dict[int, int]:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be >= 1")
        if isinstance(value, dict):
            if not value:
                raise ValueError("an {epoch: batches} schedule needs at least one entry")
            bad = {e: k for e, k in value.items() if e < 0 or k < 1}
            if bad:
                raise ValueError(f"{bad}: epochs must be >= 0 and batch counts >= 1")
        return value

    @field_validator("track_grad_norm")
    @classmethod
    def _norm_type(cls, value: int | float | str) -> int | float | str:
        if isinstance(value, str) and value != "inf":
            raise ValueError("a p-norm order: a number > 0, 'inf', or -1 for off")
        if not isinstance(value, str) and value != -1 and value <= 0:
            raise ValueError("a p-norm order: a number > 0, 'inf', or -1 for off")
        return value

    @model_validator(mode="before")
    @classmethod
    def _barebones(cls, data: Any) -> Any:
        """``barebones=True`` turns off everything that costs time, as Lightning does; asking for any of it
        too is refused (an "off" value, as a resolved run config holds, is accepted)."""
        if not isinstance(data, Mapping) or data.get("barebones") is not True:
            return data
        wanted = {
            name: data[name]
            for name, off in _BAREBONES_OFF.items()
            if name in data and not (isinstance(data[name], (bool, int, type(None))) and data[name] in (off, None))
        }
        if wanted:
            given = ", ".join(f"{name}={value!r}" for name, value in wanted.items())
            raise ValueError(
                f"barebones=True turns off logging, checkpointing, the progress bar, the model summary, the "
                f"sanity check, fast_dev_run, detect_anomaly and profiling, but {given} asks for them; drop "
                "barebones=True or those arguments"
            )
        return {**data, **_BAREBONES_OFF}

    @model_validator(mode="after")
    def _consistent(self) -> TrainerConfig:
        if self.min_epochs is not None and self.max_epochs not in (None, -1) and self.min_epochs > self.max_epochs:
            raise ValueError(f"min_epochs ({self.min_epochs}) is larger than max_epochs ({self.max_epochs})")
        if self.min_steps is not None and self.max_steps != -1 and self.min_steps > self.max_steps:
            raise ValueError(f"min_steps ({self.min_steps}) is larger than max_steps ({self.max_steps})")
        return self


_BAREBONES_OFF: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
    "fast_dev_run": False,
    "detect_anomaly": False,
    "profiler": None,
}
"""What ``barebones=True`` sets (Lightning's list, less ``log_every_n_steps``: with no logger it writes nothing)."""


def _env_defaults(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Values from ``SURGE_TRAINER_<FLAG>``, JSON-decoded when they parse as JSON (``3``, ``0.5``, ``true``,
    ``null``, ``[0, 1]``), else taken as strings (``ddp``). Returns the values and their variable names."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field_name in TrainerConfig.model_fields:
        key = ENV_PREFIX + field_name.upper()
        if key in environ:
            raw = environ[key]
            try:
                values[field_name] = json.loads(raw)
            except ValueError:
                values[field_name] = raw
            sources[field_name] = key
    return values, sources


def build_config(
    kwargs: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    defaults_source: str = "the defaults",
) -> TrainerConfig:
    """Merge ``defaults`` (a lab profile's ``[trainer]`` table, named by ``defaults_source``) under the
    environment defaults under ``kwargs``, and validate; every problem is reported at once."""
    env_values, env_sources = _env_defaults(os.environ if environ is None else environ)
    defaults = dict(defaults or {})
    merged = {**defaults, **env_values, **kwargs}
    try:
        return TrainerConfig.model_validate(merged)
    except ValidationError as exc:
        sources = {k: defaults_source for k in defaults}
        sources.update({k: f"the environment variable {v}" for k, v in env_sources.items()})
        sources = {k: v for k, v in sources.items() if k not in kwargs}
        raise ConfigError(format_validation_error(exc, "trainer", sources), "Trainer arguments") from None


def format_validation_error(
    exc: ValidationError, prefix: str, sources: Mapping[str, str] | None = None, model: type[BaseModel] | None = None
) -> list[tuple[str, str]]:
    """Turn pydantic's errors into ``(dotted path, message)`` pairs with the value, the rule, and a
    "did you mean" for misspelt keys."""
    model_fields = (model or TrainerConfig).model_fields
    fields = list(model_fields)
    unions = {name for name, info in model_fields.items() if _is_union(info.annotation)}
    problems: dict[str, str] = {}
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if len(loc) > 1 and loc[0] in unions:
            loc = loc[:1]  # pydantic reports each member of a union ("devices.int", ...): one path per field
        path = ".".join([prefix, *loc]) if loc else prefix
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc[-1], fields, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid names: {', '.join(fields)}"
            message = f"unknown argument{hint}"
        elif path in problems:  # another member of the same union: add what it would have accepted
            problems[path] += f"; or {error['msg']}" if error["msg"] not in problems[path] else ""
            continue
        elif not loc and error["type"] == "value_error":  # a rule across arguments: its message names them
            message = error["msg"].removeprefix("Value error, ")
        else:
            message = f"got {error['input']!r}: {error['msg']}"
        problems[path] = message
    if sources:
        for path, message in problems.items():
            field_name = path[len(prefix) + 1 :].split(".")[0]
            if field_name in sources and not message.startswith("unknown argument"):
                problems[path] = f"{message} (from {sources[field_name]})"
    return list(problems.items())


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
