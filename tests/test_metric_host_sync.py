"""Logging every step copies nothing to the host except when metrics are written.

Every Python-level way a tensor's value reaches the host (``item``, ``tolist``, ``float()``, ``bool()``,
``numpy``, ``cpu``/``to`` on a device tensor...) goes through ``__torch_function__``, so a
``TorchFunctionMode`` sees each one. On an accelerator each of them is a device-to-host copy and a stall;
on the CPU they are the same calls, so counting them here tells what would stall a GPU.
"""

from __future__ import annotations

import sys
from typing import Any

import surge
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from torch.overrides import TorchFunctionMode

HOST_READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.numpy,
    torch.Tensor.cpu,
}


class CountHostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.where: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in HOST_READS:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            # torch's own CPU bookkeeping (the DataLoader's sampler draws its seed with .item()) is not ours
            if not caller.startswith("torch."):
                self.count += 1
        return func(*args, **(kwargs or {}))


class Busy(TinyModule):
    """Logs four values every step: per step, per epoch (a mean and a max), and one for the progress bar."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss_epoch_mean", loss, on_step=False, on_epoch=True)
        self.log("loss_max", loss, on_step=True, on_epoch=True, reduce_fx="max")
        self.log("shown", loss * 2, prog_bar=True)
        return loss


class PerStep:
    """Snapshots the counter around every training batch: from its start event to the next batch's start (or
    the epoch's end event). In between lie the step, the optimizer step, the metric publication, the end event
    and, when due, the step's write (after the end event, whose handlers' values it holds)."""

    surge_name = "per_step"

    def __init__(self, counter: CountHostReads) -> None:
        self.counter = counter
        self.reads: dict[int, int] = {}
        self._at = 0
        self._step: int | None = None

    def _close(self) -> None:
        if self._step is not None:
            self.reads[self._step] = self.counter.count - self._at
            self._step = None

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self._close()
        self._at = self.counter.count

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self._step = event.trainer.global_step

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        self._close()


class Written:
    surge_name = "written"
    surge_kind = "observer"

    def __init__(self) -> None:
        self.steps: list[tuple[str, int, int]] = []

    @surge.hookimpl
    def log_metrics(self, event: Any) -> None:
        self.steps.append((event.stage, event.step, len(event.metrics)))


def _fit(make_trainer: Any, **kwargs: Any) -> tuple[PerStep, Written, surge.Trainer]:
    counter = CountHostReads()
    per_step, written = PerStep(counter), Written()
    trainer = make_trainer(
        max_epochs=2,
        limit_train_batches=8,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[per_step, written],
        **kwargs,
    )
    with counter:
        trainer.fit(Busy(), datamodule=TinyDataModule())
    return per_step, written, trainer


def test_no_host_read_on_steps_that_do_not_write(make_trainer):
    per_step, written, _ = _fit(make_trainer, log_every_n_steps=4)  # the csv logger is on
    assert sorted(per_step.reads) == list(range(1, 17))
    writes = {step for stage, step, _ in written.steps if stage == "train"}
    assert writes == {4, 8, 12, 16}
    assert {step: n for step, n in per_step.reads.items() if step not in writes} == dict.fromkeys(
        set(range(1, 17)) - writes, 0
    )
    # a write copies each written value once (train_loss, loss_max_step, shown), and the counter does see them
    assert all(1 <= per_step.reads[step] <= 3 for step in writes)


def test_without_a_log_metrics_subscriber_nothing_is_ever_copied(make_trainer):
    counter = CountHostReads()
    per_step = PerStep(counter)
    trainer = make_trainer(
        max_epochs=1,
        limit_train_batches=8,
        limit_val_batches=0,
        log_every_n_steps=1,  # every step is a write step
        plugins=[per_step],
        **quiet_trainer_args(),
    )
    with counter:
        trainer.fit(Busy(), datamodule=TinyDataModule())
    assert per_step.reads == dict.fromkeys(range(1, 9), 0)
    assert counter.count == 0  # not at the epoch's end either
    assert isinstance(trainer.callback_metrics["loss_max_epoch"], torch.Tensor)  # values stay tensors


def test_progress_bar_metrics_are_floats_read_on_demand(make_trainer):
    _, _, trainer = _fit(make_trainer, log_every_n_steps=4)
    counter = CountHostReads()
    with counter:
        shown = trainer.progress_bar_metrics
    assert shown == {"shown": float(trainer.callback_metrics["shown"])}
    assert counter.count == 1
