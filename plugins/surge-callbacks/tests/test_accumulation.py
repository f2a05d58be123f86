"""The ``gradient_accumulation_scheduler`` plugin: optimizer steps per epoch, and gradients equal to those
of a hand-written accumulation loop."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import surge
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule
from surge_callbacks import GradientAccumulationScheduler
from torch.utils.data import DataLoader

BATCHES = 6


class InOrder(TinyDataModule):
    """The training batches in a fixed order, so that a hand-written loop can see the same ones."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=False)


class GradRecorder(TinyModule):
    """Keeps a copy of the gradients at every optimizer step (the Module's hook runs after the participants')."""

    def __init__(self) -> None:
        super().__init__()
        self.grads: list[list[torch.Tensor]] = []

    def on_before_optimizer_step(self) -> None:
        self.grads.append([p.grad.clone() for p in self.parameters()])


def steps_per_epoch(recorder: EventRecorder) -> list[int]:
    counts: list[int] = []
    for name in recorder.names():
        if name == "train_epoch_start":
            counts.append(0)
        elif name == "after_optimizer_step":
            counts[-1] += 1
    return counts


def hand_loop(model: TinyModule, loader: DataLoader, schedule: list[int]) -> list[list[torch.Tensor]]:
    """Plain PyTorch: accumulate ``k`` batches' loss / k, step after every k-th and after the last batch."""
    optimizer = model.configure_optimizers()
    grads = []
    for k in schedule:
        for i, (x, y) in enumerate(loader):
            if i == BATCHES:
                break
            loss = torch.nn.functional.mse_loss(model(x), y)
            (loss / k if k > 1 else loss).backward()
            if (i + 1) % k == 0 or i + 1 == BATCHES:
                grads.append([p.grad.clone() for p in model.parameters()])
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return grads


def test_steps_per_epoch_and_gradients_match_a_hand_written_loop(fit):
    schedule = {0: 1, 1: 2, 2: 4}
    recorder = EventRecorder()
    torch.manual_seed(0)
    model = GradRecorder()
    start = copy.deepcopy(model)
    data = InOrder()
    fit(
        [GradientAccumulationScheduler(schedule), recorder],
        model=model,
        datamodule=data,
        max_epochs=3,
        limit_train_batches=BATCHES,
        limit_val_batches=0,
    )
    per_epoch = [1, 2, 4]
    assert steps_per_epoch(recorder) == [math.ceil(BATCHES / k) for k in per_epoch] == [6, 3, 2]

    data.setup("fit")
    expected = hand_loop(start, data.train_dataloader(), per_epoch)
    assert len(model.grads) == len(expected) == 11
    for step, (got, want) in enumerate(zip(model.grads, expected, strict=True)):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, msg=lambda m, step=step: f"optimizer step {step}: {m}")


def test_trainer_switch_fills_one_below_the_first_key(fit):
    recorder = EventRecorder()
    trainer = fit(
        [recorder], accumulate_grad_batches={2: 3}, max_epochs=3, limit_train_batches=BATCHES, limit_val_batches=0
    )
    assert "gradient_accumulation_scheduler" in trainer.plugin_names
    assert steps_per_epoch(recorder) == [BATCHES, BATCHES, BATCHES // 3]
    assert trainer.accumulate_grad_batches == 3


def test_get_accumulate_grad_batches():
    scheduler = GradientAccumulationScheduler({"4": 2, 1: 3})  # keys from JSON/YAML may be strings
    assert [scheduler.get_accumulate_grad_batches(e) for e in range(6)] == [1, 3, 3, 3, 2, 2]


def test_bad_schedules_are_refused():
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(plugins={"gradient_accumulation_scheduler": {"scheduling": {-1: 2, 3: 0}}}, logger=False)
    ((path, message),) = info.value.problems
    assert path == "trainer.plugins.gradient_accumulation_scheduler.scheduling"
    assert "[-1] are negative" in message
    with pytest.raises(surge.ConfigError, match="GradientAccumulationScheduler.scheduling: .*must be >= 1"):
        GradientAccumulationScheduler({0: 0})
    with pytest.raises(surge.ConfigError, match="at least one"):
        GradientAccumulationScheduler({})


class Manual(TinyModule):
    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(self._loss(batch))
        optimizer.step()


def test_manual_optimization_is_refused(fit):
    with pytest.raises(surge.SurgeError, match="manual optimization"):
        fit([GradientAccumulationScheduler({0: 2})], model=Manual())
