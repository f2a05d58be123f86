"""``LearningRateMonitor``: the learning rates (and optionally momentum and weight decay) of every
optimizer, written to the loggers through ``trainer.log_metrics``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import surge
import torch
from loguru import logger

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["LRMonitorConfig", "LearningRateMonitor"]

SOURCE = "lr_monitor"


@dataclass(frozen=True)
class _Watched:
    """One optimizer, the metric name of each of its parameter groups, and when it is written: ``"step"``
    or ``"epoch"`` (its scheduler's interval), or ``None`` (no scheduler: at every write)."""

    optimizer: torch.optim.Optimizer
    names: tuple[str, ...]
    interval: str | None


class LearningRateMonitor:
    """Writes each optimizer's learning rate per parameter group, with Lightning's names.

    * ``lr-SGD``; ``lr-Adam/pg1``, ``lr-Adam/pg2`` for several parameter groups (a group's ``"name"``
      replaces ``pgN``); ``lr-Adam-1`` for the second optimizer of one type; a scheduler config's
      ``"name"`` replaces ``lr-<Optimizer>``. ``-momentum`` and ``-weight_decay`` are appended for those.
    * When: optimizers whose scheduler steps per ``"step"`` at the optimizer steps that complete a
      ``log_every_n_steps`` window (the steps where ``trainer.should_log`` writes the step's metrics), with
      the rate that step used; those stepping per ``"epoch"`` when each training epoch starts; optimizers
      without a scheduler at both (once when both fall on one step). ``logging_interval`` forces every
      optimizer to one of the two.
    * The values also go into ``lrs`` (name -> list of learning rates), as in Lightning.

    The ``lr_monitor`` plugin builds one with its settings when a run asks for it
    (``Trainer(plugins=["lr_monitor"])``).

    Args:
        logging_interval: ``"step"``: every ``log_every_n_steps`` optimizer steps; ``"epoch"``: when each
            training epoch starts; ``None``: each scheduler at its own interval.
        log_momentum: Also ``<name>-momentum``: ``betas[0]`` for Adam-like optimizers, else ``momentum`` (0
            when none).
        log_weight_decay: Also ``<name>-weight_decay``.
    """

    surge_name = "lr_monitor"
    surge_kind = "observer"

    @surge.validated
    def __init__(
        self,
        logging_interval: Literal["step", "epoch"] | None = None,
        log_momentum: bool = False,
        log_weight_decay: bool = False,
    ) -> None:
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self._watched: list[_Watched] = []
        self._at_step: list[_Watched] = []
        self._at_epoch: list[_Watched] = []
        self._last_step = -1

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        if self.logging_interval == "epoch":
            return frozenset({"before_optimizer_step"})
        if self.logging_interval == "step":
            return frozenset({"train_epoch_start"})
        return frozenset()

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        trainer = event.trainer
        self._watched = _watch(trainer)
        self.lrs = {name: [] for w in self._watched for name in w.names}
        interval = self.logging_interval
        self._at_step = [w for w in self._watched if interval == "step" or (interval is None and w.interval != "epoch")]
        self._at_epoch = [
            w for w in self._watched if interval == "epoch" or (interval is None and w.interval != "step")
        ]
        self._last_step = -1
        # the order holds the Module's place ("module") from the start: a logger is any other handler
        if trainer.is_global_zero and not set(trainer.event_order("log_metrics")) - {"module"}:
            logger.warning(
                "lr_monitor: no active plugin handles log_metrics (no logger), so the learning rates are only "
                "kept in LearningRateMonitor.lrs; enable a logger (Trainer(logger=True) or logger='csv')"
            )
        if self.log_momentum:
            plain = [type(w.optimizer).__name__ for w in self._watched if not _has_momentum(w.optimizer)]
            if plain:
                logger.warning("lr_monitor: log_momentum=True, but {} have no momentum; 0 is written", plain)

    @surge.hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        step = event.trainer.global_step
        watched = self._at_epoch
        if step == self._last_step:  # the last step wrote at this number: only what it did not write
            watched = [w for w in watched if w not in self._at_step]
        if watched:
            self._write(event.trainer, watched, step)

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        trainer = event.trainer
        step = trainer.global_step + 1  # the step being taken: its metrics are written under this number
        # Not @surge.hookimpl(every_n_steps=...): n is the Trainer's log_every_n_steps, counted on the step being
        # taken (the filter reads global_step, not yet incremented here), and train_epoch_start reads _last_step.
        if step % trainer.config.log_every_n_steps or step == self._last_step or not self._at_step:
            return
        self._last_step = step  # several optimizers stepping in one batch (manual optimization): one write
        self._write(trainer, self._at_step, step)

    def _write(self, trainer: surge.Trainer, watched: list[_Watched], step: int) -> None:
        stats: dict[str, float] = {}
        for w in watched:
            for group, name in zip(w.optimizer.param_groups, w.names, strict=True):
                lr = float(group["lr"])
                stats[name] = lr
                self.lrs[name].append(lr)
                if self.log_momentum:
                    stats[f"{name}-momentum"] = float(_momentum(group))
                if self.log_weight_decay:
                    stats[f"{name}-weight_decay"] = float(group.get("weight_decay", 0.0))
        # as Lightning's monitor: the values are also metrics other handlers can read (a scheduler, a callback)
        trainer.log_metrics(stats, step=step, source=SOURCE, publish=True)


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    return any("betas" in g or "momentum" in g for g in optimizer.param_groups)


def _momentum(group: dict[str, Any]) -> float:
    if "betas" in group:
        return float(group["betas"][0])
    return float(group.get("momentum", 0.0))


def _watch(trainer: surge.Trainer) -> list[_Watched]:
    """Every optimizer of the run with its names: first those with a scheduler, in the schedulers' order,
    then the others, in the optimizers' order (Lightning's order, so the ``-1`` suffixes match)."""
    seen_types: Counter[type] = Counter()
    watched: list[_Watched] = []
    by_optimizer: dict[int, int] = {}

    def add(optimizer: torch.optim.Optimizer, base: str | None, interval: str | None) -> None:
        if id(optimizer) in by_optimizer:
            i = by_optimizer[id(optimizer)]
            if interval is not None and watched[i].interval != interval:  # two schedulers, two intervals
                watched[i] = _Watched(optimizer, watched[i].names, None)
            return
        cls = type(optimizer)
        if base is None:
            seen_types[cls] += 1
            base = f"lr-{cls.__name__}" + (f"-{seen_types[cls] - 1}" if seen_types[cls] > 1 else "")
        by_optimizer[id(optimizer)] = len(watched)
        watched.append(_Watched(optimizer, _group_names(optimizer, base), interval))

    for config in trainer.lr_scheduler_configs:
        add(config.scheduler.optimizer, config.name, config.interval)
    for optimizer in trainer.optimizers:
        add(optimizer, None, None)
    return watched


def _group_names(optimizer: torch.optim.Optimizer, base: str) -> tuple[str, ...]:
    groups = optimizer.param_groups
    given = [g["name"] for g in groups if "name" in g]
    duplicated = sorted({n for n in given if given.count(n) > 1})
    if duplicated:
        raise surge.SurgeError(
            f"lr_monitor: {type(optimizer).__name__} has several parameter groups named {duplicated}; give each "
            "group of one optimizer its own 'name' (the metric names are built from them)"
        )
    if len(groups) == 1:
        return (f"{base}/{groups[0]['name']}",) if "name" in groups[0] else (base,)
    return tuple(f"{base}/{g.get('name', f'pg{i + 1}')}" for i, g in enumerate(groups))


LRMonitorConfig = surge.settings_model(LearningRateMonitor)
"""The ``lr_monitor`` plugin's settings, derived from :class:`LearningRateMonitor`'s signature."""
