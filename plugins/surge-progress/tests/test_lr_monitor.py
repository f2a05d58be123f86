"""The ``lr_monitor`` plugin: what it writes through ``trainer.log_metrics``, read back by a recording
subscriber of ``log_metrics``, against the optimizer's schedule worked out independently."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import surge
import torch
from loguru import logger
from surge.testing import EventRecorder, TinyDataModule, TinyModule
from surge_progress import LearningRateMonitor


class Scheduled(TinyModule):
    """TinyModule whose ``configure_optimizers`` is ``make(self)``."""

    def __init__(self, make: Callable[[TinyModule], Any]) -> None:
        super().__init__()
        self.make = make

    def configure_optimizers(self) -> Any:
        return self.make(self)


class TwoOptimizers(Scheduled):
    """Manual optimization: each optimizer steps once per batch."""

    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        for optimizer in self.optimizers():
            optimizer.zero_grad()
            self.manual_backward(self._loss(batch))
            optimizer.step()


def run(make: Callable[[TinyModule], Any], lr_monitor: Any = True, module: type = Scheduled, **kwargs: Any):
    """Fit with ``lr_monitor`` (its settings, or an instance) and a recorder in the logger's place; return the
    trainer, the lr_monitor's writes as ``{step: metrics}`` and the steps of the training rows."""
    recorder = EventRecorder("recorder", kind="observer")
    plugins = [lr_monitor] if isinstance(lr_monitor, LearningRateMonitor) else {"lr_monitor": lr_monitor}
    trainer = surge.Trainer(
        plugins=plugins,
        logger=recorder,
        default_root_dir=kwargs.pop("root"),
        max_epochs=kwargs.pop("max_epochs", 2),
        num_sanity_val_steps=0,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    torch.manual_seed(0)
    trainer.fit(module(make), datamodule=TinyDataModule())
    writes: dict[int, dict[str, float]] = {}
    train_steps = []
    for event in recorder.of("log_metrics"):
        if event.stage == "lr_monitor":
            assert event.step not in writes, f"two writes at step {event.step}"
            writes[event.step] = dict(event.metrics)
        elif event.stage == "train":
            train_steps.append(event.step)
    return trainer, writes, train_steps


def sgd_steplr(module: TinyModule) -> Any:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def rates_used(make: Callable[[TinyModule], Any], steps: int) -> dict[int, float]:
    """The learning rate optimizer step k (1-based) runs with, from a fresh optimizer and scheduler stepped
    by hand."""
    config = make(TinyModule())
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    used = {}
    for k in range(1, steps + 1):
        used[k] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
    return used


def test_step_interval_follows_the_schedule_at_the_logging_steps(tmp_path):
    trainer, writes, train_steps = run(
        sgd_steplr, {"log_momentum": True, "log_weight_decay": True}, root=tmp_path, log_every_n_steps=2
    )
    assert trainer.global_step == 16  # 2 epochs of 8 batches
    used = rates_used(sgd_steplr, 16)
    assert sorted(writes) == [2, 4, 6, 8, 10, 12, 14, 16] == train_steps  # the rows the step's loss goes to
    for step, metrics in writes.items():
        assert metrics == {
            "lr-SGD": pytest.approx(used[step]),
            "lr-SGD-momentum": 0.9,
            "lr-SGD-weight_decay": 1e-4,
        }
    assert [writes[s]["lr-SGD"] for s in (2, 4, 6, 8)] == pytest.approx([0.1, 0.05, 0.05, 0.05 / 2])
    monitor = trainer.plugin("lr_monitor")
    assert monitor.lrs["lr-SGD"] == [writes[s]["lr-SGD"] for s in sorted(writes)]


def adam_exponential(module: TinyModule) -> Any:
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)}


def test_epoch_scheduler_is_written_when_each_epoch_starts(tmp_path):
    trainer, writes, _ = run(adam_exponential, True, root=tmp_path, max_epochs=3, log_every_n_steps=1)
    assert "lr_monitor" in trainer.event_order("before_optimizer_step")  # it could have step writes
    assert writes == {0: {"lr-Adam": 0.1}, 8: {"lr-Adam": 0.05}, 16: {"lr-Adam": pytest.approx(0.025)}}


def test_logging_interval_epoch_and_step_force_one_schedule(tmp_path):
    trainer, writes, _ = run(sgd_steplr, {"logging_interval": "epoch"}, root=tmp_path / "a", log_every_n_steps=2)
    assert "lr_monitor" not in trainer.event_order("before_optimizer_step")  # switched off for the run
    used = rates_used(sgd_steplr, 16)
    assert writes == {0: {"lr-SGD": 0.1}, 8: {"lr-SGD": pytest.approx(used[9])}}
    trainer, writes, _ = run(adam_exponential, {"logging_interval": "step"}, root=tmp_path / "b", log_every_n_steps=4)
    assert "lr_monitor" not in trainer.event_order("train_epoch_start")
    assert writes == {4: {"lr-Adam": 0.1}, 8: {"lr-Adam": 0.1}, 12: {"lr-Adam": 0.05}, 16: {"lr-Adam": 0.05}}


def test_names_of_groups_second_optimizers_and_named_schedulers(tmp_path):
    def groups(module: TinyModule) -> Any:
        first, last = module.net[0], module.net[2]
        adam = torch.optim.Adam([{"params": first.parameters()}, {"params": last.parameters(), "lr": 0.01}], lr=0.1)
        named = torch.optim.Adam([{"params": [torch.nn.Parameter(torch.zeros(1))], "name": "head"}], lr=0.2)
        plain = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
        other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.4)
        step = torch.optim.lr_scheduler.StepLR(other, 1)
        return (
            [adam, named, plain, other],
            [torch.optim.lr_scheduler.StepLR(adam, 1), {"scheduler": step, "name": "my-lr", "interval": "step"}],
        )

    monitor = LearningRateMonitor(logging_interval="epoch", log_momentum=True)
    _, writes, _ = run(groups, monitor, module=TwoOptimizers, root=tmp_path, max_epochs=1, limit_train_batches=1)
    assert writes == {
        0: {
            "lr-Adam/pg1": 0.1,
            "lr-Adam/pg1-momentum": 0.9,  # Adam's betas[0]
            "lr-Adam/pg2": 0.01,
            "lr-Adam/pg2-momentum": 0.9,
            "my-lr": 0.4,
            "my-lr-momentum": 0.0,
            "lr-Adam-1/head": 0.2,
            "lr-Adam-1/head-momentum": 0.9,
            "lr-SGD": 0.3,
            "lr-SGD-momentum": 0.0,
        }
    }


def test_manual_optimization_writes_once_per_logging_step(tmp_path):
    def two(module: TinyModule) -> Any:
        return [
            torch.optim.SGD(module.net[0].parameters(), lr=0.1),
            torch.optim.SGD(module.net[2].parameters(), lr=0.2),
        ]

    trainer, writes, _ = run(
        two, {"logging_interval": "step"}, module=TwoOptimizers, root=tmp_path, max_epochs=1, log_every_n_steps=4
    )
    assert trainer.global_step == 16  # two optimizer steps per batch
    assert writes == {step: {"lr-SGD": 0.1, "lr-SGD-1": 0.2} for step in (4, 8, 12, 16)}


def test_on_request_only(make_trainer):
    assert "lr_monitor" not in make_trainer().plugin_names
    assert "lr_monitor" in make_trainer(plugins=["lr_monitor"]).plugin_names
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.lr_monitor.logging_interval"):
        make_trainer(plugins={"lr_monitor": {"logging_interval": "batch"}})


def test_warns_without_a_logger_and_keeps_the_values(tmp_path):
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING")
    try:
        monitor = LearningRateMonitor()
        trainer = surge.Trainer(
            plugins=[monitor],
            logger=False,
            default_root_dir=str(tmp_path),
            max_epochs=1,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=2,
        )
        trainer.fit(Scheduled(sgd_steplr), datamodule=TinyDataModule())
    finally:
        logger.remove(sink)
    assert any("lr_monitor: no active plugin handles log_metrics" in m for m in messages)
    assert len(monitor.lrs["lr-SGD"]) == 4
    # as Lightning's monitor: the last values are metrics other handlers read (trainer.log_metrics(publish=True))
    assert trainer.callback_metrics["lr-SGD"].item() == pytest.approx(monitor.lrs["lr-SGD"][-1])


def test_duplicate_group_names_are_an_error_naming_them(tmp_path):
    def duplicated(module: TinyModule) -> Any:
        return torch.optim.SGD(
            [{"params": module.net[0].parameters(), "name": "x"}, {"params": module.net[2].parameters(), "name": "x"}],
            lr=0.1,
        )

    with pytest.raises(surge.SurgeError, match=r"several parameter groups named \['x'\]"):
        run(duplicated, True, root=tmp_path)


def test_silent_on_other_ranks(tmp_path, monkeypatch):
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: False))
    _, writes, _ = run(sgd_steplr, True, root=tmp_path, log_every_n_steps=2)
    assert writes == {}
