"""``DeviceStatsMonitor``: memory (and CPU) use of the training process, written to the loggers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import surge
import torch
from loguru import logger

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["DeviceStatsConfig", "DeviceStatsMonitor"]

SOURCE = "device_stats"
PREFIX = "device_stats"
_MB = 2**20


class DeviceStatsMonitor:
    """Writes device statistics through ``trainer.log_metrics(..., source="device_stats")``.

    * CUDA, ``gpu_memory="all"``: ``device_stats/<counter>`` for every counter of
      ``torch.cuda.memory_stats(device)`` (``allocated_bytes.all.current``, ``reserved_bytes.all.peak``, ...).
    * CUDA, ``gpu_memory="min_max"``: ``device_stats/min_gpu_mem_MB`` and ``device_stats/max_gpu_mem_MB``,
      the smallest and largest ``torch.cuda.memory_reserved`` across the run's processes (one all-reduce
      when there are several; every process takes part, rank zero writes).
    * CPU (``cpu_stats``): ``device_stats/cpu_rss_MB`` (this process's resident memory),
      ``device_stats/cpu_percent`` (its CPU use since the previous write, 100 = one core), and
      ``device_stats/system_memory_percent``, from psutil.
    * When: at the training batch that completes an optimizer step whose metrics are written
      (``log_every_n_steps``; ``interval="step"``), or at the end of each training epoch. Nothing runs on
      other batches; reading the counters costs no device sync (``min_max`` with several processes adds
      one small all-reduce per write).

    Args:
        gpu_memory: On a CUDA device: ``"all"``, every counter of ``torch.cuda.memory_stats``; ``"min_max"``,
            the smallest and largest memory reserved by the processes of the run (one value with a single
            process).
        cpu_stats: Process RSS, CPU percent and system memory use; ``None``: when training on the CPU.
        interval: Write at the steps whose metrics are written (``log_every_n_steps``), or at each training
            epoch's end.
    """

    surge_name = "device_stats"
    surge_kind = "observer"  # it reports what happened: after participants and the Module changed it

    @surge.validated
    def __init__(
        self,
        gpu_memory: Literal["all", "min_max"] = "min_max",
        cpu_stats: bool | None = None,
        interval: Literal["step", "epoch"] = "step",
    ) -> None:
        self.gpu_memory = gpu_memory
        self.cpu_stats = cpu_stats
        self.interval = interval
        self._device: torch.device | None = None
        self._cpu = False
        self._process: Any = None
        self._last_step = -1

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        return frozenset({"train_epoch_end"} if self.interval == "step" else {"train_batch_end"})

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        trainer = event.trainer
        device = trainer.strategy.root_device
        self._device = device if device.type == "cuda" else None
        self._cpu = self.cpu_stats if self.cpu_stats is not None else device.type == "cpu"
        self._last_step = trainer.global_step  # write after the next optimizer step, not before any
        if self._cpu:
            import psutil

            self._process = psutil.Process()
            self._process.cpu_percent(None)  # the first call starts the measurement
        if self._device is None and not self._cpu:
            logger.warning("device_stats: the run trains on {}, which has no statistics to write", device)

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        trainer = event.trainer
        step = trainer.global_step
        # Not @surge.hookimpl(every_n_steps=...): n is the Trainer's log_every_n_steps, and a resumed fit must not
        # write again at the step it resumes at (the filter's "last step" starts afresh with each run).
        if step == self._last_step or not trainer.should_log:  # several batches of one accumulation window
            return
        self._last_step = step
        self._write(trainer)

    @surge.hookimpl
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        self._write(event.trainer)

    def _write(self, trainer: surge.Trainer) -> None:
        stats = self.collect(trainer)
        if stats:
            trainer.log_metrics(stats, source=SOURCE)

    def collect(self, trainer: surge.Trainer) -> dict[str, float]:
        """The statistics of this moment (every process must call it alike: ``min_max`` reduces)."""
        stats: dict[str, float] = {}
        if self._device is not None:
            if self.gpu_memory == "all":
                for key, value in torch.cuda.memory_stats(self._device).items():
                    stats[f"{PREFIX}/{key}"] = float(value)
            else:
                reserved = torch.cuda.memory_reserved(self._device) / _MB  # the allocator's count: no sync
                low = high = reserved
                if trainer.world_size > 1:
                    both = torch.tensor([reserved, -reserved], dtype=torch.float64, device=self._device)
                    high, low = (float(v) for v in trainer.strategy.reduce(both, "max").tolist())  # one collective
                    low = -low
                stats[f"{PREFIX}/min_gpu_mem_MB"] = low
                stats[f"{PREFIX}/max_gpu_mem_MB"] = high
        if self._cpu and self._process is not None:
            import psutil

            stats[f"{PREFIX}/cpu_rss_MB"] = self._process.memory_info().rss / _MB
            stats[f"{PREFIX}/cpu_percent"] = float(self._process.cpu_percent(None))
            stats[f"{PREFIX}/system_memory_percent"] = float(psutil.virtual_memory().percent)
        return stats


DeviceStatsConfig = surge.settings_model(DeviceStatsMonitor)
"""The ``device_stats`` plugin's settings, derived from :class:`DeviceStatsMonitor`'s signature."""
