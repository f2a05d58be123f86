"""The ``timer`` plugin with a fake clock that advances a fixed time per training batch."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
import surge
from surge_callbacks import Timer, parse_duration

SECONDS_PER_BATCH = 7.0
BATCHES_PER_EPOCH = 4  # the `fit` fixture's limit_train_batches


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class Tick:
    """Advances ``clock`` by ``seconds`` when every training batch starts (a batch 'takes' that long)."""

    surge_name = "tick"

    def __init__(self, clock: FakeClock, seconds: float = SECONDS_PER_BATCH) -> None:
        self.clock, self.seconds = clock, seconds

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self.clock.now += self.seconds


class SaveAtStep:
    """Saves a checkpoint in ``train_batch_end`` once ``global_step`` reaches ``step``."""

    surge_name = "save_at_step"

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if event.trainer.global_step == self.step:
            event.trainer.save_checkpoint(self.path)


def test_step_interval_stops_at_the_first_batch_past_the_duration(fit):
    clock = FakeClock()
    timer = Timer(duration=30, clock=clock)
    trainer = fit([timer, Tick(clock)], max_epochs=10, limit_val_batches=0)
    expected = math.ceil(30 / SECONDS_PER_BATCH)  # 5 batches: 35 s >= 30 s, while 4 batches are 28 s
    assert trainer.global_step == expected
    assert trainer.state.stop_reason.startswith("time limit reached: trained 0:00:35 of the 0:00:30 allowed")
    assert timer.time_elapsed("train") == expected * SECONDS_PER_BATCH
    assert timer.time_remaining("train") == 30 - expected * SECONDS_PER_BATCH
    assert "timer" not in trainer.event_order("train_epoch_end")


def test_epoch_interval_stops_at_the_first_epoch_end_past_the_duration(fit):
    clock = FakeClock()
    trainer = fit(
        [Timer({"seconds": 30}, interval="epoch", clock=clock), Tick(clock)], max_epochs=10, limit_val_batches=0
    )
    epochs = math.ceil(30 / (SECONDS_PER_BATCH * BATCHES_PER_EPOCH))  # 2 epochs: 56 s >= 30 s, one is 28 s
    assert trainer.global_step == epochs * BATCHES_PER_EPOCH
    assert trainer.current_epoch == epochs
    assert "timer" not in trainer.event_order("train_batch_end")


def test_a_resumed_fit_counts_the_time_already_spent(fit, tmp_path):
    path = str(tmp_path / "step3.ckpt")
    clock = FakeClock()
    fit([Timer(duration=30, clock=clock), Tick(clock), SaveAtStep(3, path)], max_epochs=10, limit_val_batches=0)

    clock = FakeClock(start=1000.0)  # another process: its clock has nothing to do with the first one's
    timer = Timer(duration=30, clock=clock)
    trainer = fit([timer, Tick(clock)], ckpt_path=path, max_epochs=10, limit_val_batches=0)
    # 21 s spent before the save; 2 more batches make 35 s >= 30 s: the same step as an uninterrupted run
    assert trainer.global_step == 3 + math.ceil((30 - 3 * SECONDS_PER_BATCH) / SECONDS_PER_BATCH) == 5
    assert timer.time_elapsed("train") == 5 * SECONDS_PER_BATCH


def test_max_time_requests_the_plugin_and_the_class_clock_is_used(fit, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(Timer, "clock", staticmethod(clock))
    trainer = fit([Tick(clock)], max_time="00:00:00:20", max_epochs=10, limit_val_batches=0)
    assert "timer" in trainer.plugin_names
    assert trainer.global_step == math.ceil(20 / SECONDS_PER_BATCH)


def test_validate_and_test_stages_are_timed(fit, monkeypatch):
    clock = FakeClock()

    class Slow:
        surge_name = "slow"

        @surge.hookimpl
        def validation_batch_start(self, event: Any) -> None:
            clock.now += 2.0

        @surge.hookimpl
        def test_batch_start(self, event: Any) -> None:
            clock.now += 3.0

    timer = Timer(duration=3600, clock=clock)
    trainer = fit([timer, Slow()], max_epochs=1)
    assert timer.time_elapsed("validate") == 2 * 2.0  # the last validation run: 2 batches
    trainer.test(datamodule=None, dataloaders=trainer.val_dataloaders[0])
    assert timer.time_elapsed("test") == 4 * 3.0  # the validation loader has 4 batches
    assert timer.start_time("test") is not None and timer.end_time("test") is not None
    with pytest.raises(surge.SurgeError, match="stage 'predict' is not measured"):
        timer.time_elapsed("predict")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("01:02:03:04", datetime.timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ({"hours": 1, "minutes": 30}, datetime.timedelta(hours=1, minutes=30)),
        (90, datetime.timedelta(seconds=90)),
        (datetime.timedelta(minutes=5), datetime.timedelta(minutes=5)),
    ],
)
def test_duration_forms(value, expected):
    assert parse_duration(value) == expected


def test_bad_durations_are_config_errors():
    with pytest.raises(surge.ConfigError, match=r"trainer.max_time: got '1 hour': .*'DD:HH:MM:SS'"):
        surge.Trainer(max_time="1 hour", logger=False)
    with pytest.raises(surge.ConfigError, match=r"unknown unit\(s\) \['hour'\]"):
        surge.Trainer(plugins={"timer": {"duration": {"hour": 1}}}, logger=False)
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.timer.interval"):
        surge.Trainer(plugins={"timer": {"duration": 5, "interval": "batch"}}, logger=False)
    with pytest.raises(ValueError, match="must be positive"):
        Timer(duration=0)
