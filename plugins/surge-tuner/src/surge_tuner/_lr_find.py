"""The learning-rate finder: a short fit whose learning rate grows every optimizer step from ``min_lr`` to
``max_lr``, recording the smoothed training loss; the suggestion is where that loss falls fastest."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import surge
import torch
from loguru import logger
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class LRFindSettings(BaseModel):
    """The arguments of :meth:`surge_tuner.Tuner.lr_find`."""

    model_config = ConfigDict(extra="forbid")

    min_lr: float = Field(1e-8, gt=0)
    max_lr: float = Field(1.0, gt=0)
    num_training: int = Field(100, ge=2)
    mode: Literal["exponential", "linear"] = "exponential"
    early_stop_threshold: float | None = Field(4.0, gt=0)
    """Stop once the smoothed loss exceeds this multiple of the best one so far; ``None``: never."""
    update_attr: bool = True
    attr_name: str = ""

    @model_validator(mode="after")
    def _range(self) -> LRFindSettings:
        if self.min_lr >= self.max_lr:
            raise ValueError(f"min_lr ({self.min_lr}) must be smaller than max_lr ({self.max_lr})")
        return self


def schedule(settings: LRFindSettings) -> list[float]:
    """The learning rate of each optimizer step: from ``min_lr`` to ``max_lr``, evenly spaced on a log scale
    (``exponential``) or a linear one."""
    lo, hi, n = settings.min_lr, settings.max_lr, settings.num_training
    if settings.mode == "exponential":
        return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


class Sweep(LRScheduler):
    """Sets every parameter group's learning rate to ``lrs[k]`` for the k-th optimizer step."""

    def __init__(self, optimizer: Optimizer, lrs: list[float]) -> None:
        self.lrs = lrs
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        lr = self.lrs[min(self.last_epoch, len(self.lrs) - 1)]
        return [lr for _ in self.optimizer.param_groups]


def _loss_of(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else None


class LossRecorder:
    """Records the smoothed training loss of every optimizer step, and stops the trial when it diverges.

    The loss of a step is the mean over its accumulation window, smoothed by an exponential moving average
    (``beta``, with bias correction). It is paired with the learning rate that step used.
    """

    surge_name = "lr_finder"

    def __init__(self, lrs: list[float], early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.lrs, self.threshold, self.beta = lrs, early_stop_threshold, beta
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._window: list[float] = []
        self._steps = 0
        self._average = 0.0
        self._best = math.inf

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        loss = _loss_of(event.outputs)
        if loss is not None:
            self._window.append(loss)
        trainer = event.trainer
        if trainer.global_step == self._steps or not self._window:
            return  # the accumulation window is still open
        self._steps = trainer.global_step
        step = len(self.results["loss"])
        raw = sum(self._window) / len(self._window)
        self._window = []
        self._average = self.beta * self._average + (1 - self.beta) * raw
        smoothed = self._average / (1 - self.beta ** (step + 1))
        self.results["lr"].append(self.lrs[min(step, len(self.lrs) - 1)])
        self.results["loss"].append(smoothed)
        if not math.isfinite(smoothed):
            trainer.request_stop("lr finder: the loss is no longer finite")
        elif self.threshold is not None and step > 0 and smoothed > self.threshold * self._best:
            trainer.request_stop(f"lr finder: the loss exceeds {self.threshold} x its best")
        self._best = min(self._best, smoothed)


@dataclass
class LRFinder:
    """What :meth:`surge_tuner.Tuner.lr_find` found: ``results["lr"]`` and ``results["loss"]`` (the smoothed
    training loss of each step, at the learning rate that step used)."""

    mode: str
    min_lr: float
    max_lr: float
    num_training: int
    results: dict[str, list[float]] = field(default_factory=lambda: {"lr": [], "loss": []})
    _optimal_idx: int | None = field(default=None, init=False, repr=False)

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the smoothed loss falls fastest (its most negative slope along the plot's
        x axis: log(lr) in ``exponential`` mode, lr in ``linear``), leaving out the first ``skip_begin``
        points (the average is still settling) and the last ``skip_end`` (divergence). ``None`` when fewer
        than two finite points remain: run more steps or give the loader more batches."""
        lrs, losses = self.results["lr"], self.results["loss"]
        stop = len(lrs) - skip_end
        kept = [i for i in range(skip_begin, stop) if math.isfinite(losses[i])]
        if len(kept) < 2:
            logger.warning(
                "lr finder: too few points for a suggestion ({} recorded, {} kept after skipping {} at the start "
                "and {} at the end); raise num_training or use a loader with more batches",
                len(lrs),
                len(kept),
                skip_begin,
                skip_end,
            )
            self._optimal_idx = None
            return None
        x = torch.tensor([lrs[i] for i in kept], dtype=torch.float64)
        if self.mode == "exponential":
            x = x.log()
        slope = torch.gradient(torch.tensor([losses[i] for i in kept], dtype=torch.float64), spacing=(x,))[0]
        self._optimal_idx = kept[int(slope.argmin())]
        return lrs[self._optimal_idx]

    def plot(self, suggest: bool = True, ax: Axes | None = None) -> Figure:
        """Loss against learning rate (log scale in ``exponential`` mode), with the suggestion marked when
        ``suggest``; drawn into ``ax`` when given. Returns the matplotlib figure (``fig.savefig(path)``)."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise surge.SurgeError(
                "LRFinder.plot() needs matplotlib: `pip install matplotlib` (or surge-tuner[plot])"
            ) from None
        if ax is None:
            figure = Figure()
            ax = figure.subplots()
        else:
            figure = ax.get_figure()  # type: ignore[assignment]
        lrs, losses = self.results["lr"], self.results["loss"]
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("loss (smoothed)")
        if suggest and self.suggestion() is not None:
            assert self._optimal_idx is not None
            i = self._optimal_idx
            ax.plot(lrs[i], losses[i], marker="o", markersize=10, color="red", label=f"suggestion {lrs[i]:.3g}")
            ax.legend()
        return figure
