"""surge-callbacks: the training techniques of Lightning's callbacks and of the seed Trainer's switches.

Six plugins, each on request, each usable by name with settings (``Trainer(plugins={"early_stopping":
{"monitor": "val_loss"}})``) or as an object (``Trainer(plugins=[EarlyStopping(monitor="val_loss")])``):

* ``early_stopping`` / :class:`EarlyStopping`: stop when a metric stops improving; each check is published
  as the event ``early_stopping_check`` (:class:`EarlyStoppingCheck`), which the progress bar shows;
* ``timer`` / :class:`Timer`: stop after a wall time (``Trainer(max_time=...)``);
* ``gradient_accumulation_scheduler`` / :class:`GradientAccumulationScheduler`: batches per optimizer step,
  per epoch (``Trainer(accumulate_grad_batches={0: 1, 4: 2})``);
* ``nan_guard`` / :class:`NaNGuard`: stop at the first NaN/inf loss or gradient (``terminate_on_nan=True``);
* ``grad_norm`` / :class:`GradNormTracker`: gradient norms to the loggers (``track_grad_norm=2``);
* ``device_stats`` / :class:`DeviceStatsMonitor`: memory and CPU use to the loggers (``log_gpu_memory=...``).

Importing this package imports nothing beyond torch, pydantic and loguru (psutil when device statistics
start). Written against Surge's public API only.
"""

from __future__ import annotations

import surge

from surge_callbacks._accumulation import AccumulationConfig, GradientAccumulationScheduler
from surge_callbacks._device_stats import DeviceStatsConfig, DeviceStatsMonitor
from surge_callbacks._early_stopping import EarlyStopping, EarlyStoppingCheck, EarlyStoppingConfig, EarlyStoppingReason
from surge_callbacks._grad_norm import GradNormConfig, GradNormTracker
from surge_callbacks._nan_guard import NaNGuard, NaNGuardConfig, NonFiniteError, first_non_finite
from surge_callbacks._timer import Timer, TimerConfig, parse_duration

__all__ = [
    "AccumulationConfig",
    "DeviceStatsConfig",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "EarlyStoppingCheck",
    "EarlyStoppingConfig",
    "EarlyStoppingReason",
    "GradNormConfig",
    "GradNormTracker",
    "GradientAccumulationScheduler",
    "NaNGuard",
    "NaNGuardConfig",
    "NonFiniteError",
    "Timer",
    "TimerConfig",
    "device_stats_plugin",
    "early_stopping_plugin",
    "first_non_finite",
    "grad_norm_plugin",
    "gradient_accumulation_scheduler_plugin",
    "nan_guard_plugin",
    "parse_duration",
    "timer_plugin",
]

early_stopping_plugin = surge.Plugin(
    name="early_stopping",
    kind="participant",
    factory=EarlyStopping,
    events=[EarlyStoppingCheck],
    description="EarlyStopping: stop when a monitored metric stops improving, is not finite, or passes a threshold",
)

timer_plugin = surge.Plugin(
    name="timer",
    kind="participant",
    factory=Timer,
    description="Timer: stop training after a wall time (max_time), counting resumed runs' time",
    switches={"max_time": lambda value: None if value is None else {"duration": value}},
)

gradient_accumulation_scheduler_plugin = surge.Plugin(
    name="gradient_accumulation_scheduler",
    kind="participant",
    factory=GradientAccumulationScheduler,
    description="batches accumulated per optimizer step, scheduled by epoch (accumulate_grad_batches={epoch: k})",
    # an int is the loop's own factor; a {epoch: k} schedule is this plugin's
    switches={
        "accumulate_grad_batches": lambda value: {"scheduling": dict(value)} if isinstance(value, dict) else None
    },
)

nan_guard_plugin = surge.Plugin(
    name="nan_guard",
    kind="participant",
    factory=NaNGuard,
    description="stop at the first NaN/inf loss or gradient, naming the parameter (terminate_on_nan)",
    switches={"terminate_on_nan": lambda value: {} if value else None},
)

grad_norm_plugin = surge.Plugin(
    name="grad_norm",
    kind="observer",
    factory=GradNormTracker,
    description="per-parameter and total gradient p-norms, written at the logging steps (track_grad_norm)",
    switches={"track_grad_norm": lambda value: None if value == -1 else {"norm_type": value}},
)

device_stats_plugin = surge.Plugin(
    name="device_stats",
    kind="observer",
    factory=DeviceStatsMonitor,
    description="GPU memory counters or process RSS/CPU use, written at the logging steps (log_gpu_memory)",
    switches={"log_gpu_memory": lambda value: None if value is None else {"gpu_memory": value}},
)
