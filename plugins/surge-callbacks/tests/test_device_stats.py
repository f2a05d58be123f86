"""The ``device_stats`` plugin on the CPU: what it writes and when."""

from __future__ import annotations

import os

import pytest
import surge
from surge.testing import EventRecorder
from surge_callbacks import DeviceStatsMonitor

CPU_KEYS = ["device_stats/cpu_percent", "device_stats/cpu_rss_MB", "device_stats/system_memory_percent"]


def written(recorder: EventRecorder) -> list[tuple[int, dict[str, float]]]:
    return [(e.step, dict(e.metrics)) for e in recorder.of("log_metrics") if e.stage == "device_stats"]


def own_rss_mb() -> float:
    """This process's resident memory from /proc, independently of psutil."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_cpu_statistics_at_the_written_steps(fit):
    recorder = EventRecorder("recorder", kind="observer")
    fit([DeviceStatsMonitor()], logger=recorder, log_every_n_steps=3, max_epochs=2)
    rows = written(recorder)
    assert [step for step, _ in rows] == [3, 6]  # 8 optimizer steps, written every 3rd
    for _, metrics in rows:
        assert sorted(metrics) == CPU_KEYS
        assert metrics["device_stats/cpu_rss_MB"] == pytest.approx(own_rss_mb(), rel=0.25)
        assert metrics["device_stats/cpu_percent"] >= 0
        assert 0 < metrics["device_stats/system_memory_percent"] <= 100


def test_one_write_per_step_under_accumulation(fit):
    recorder = EventRecorder("recorder", kind="observer")
    fit({"device_stats": {}}, logger=recorder, log_every_n_steps=1, accumulate_grad_batches=2, max_epochs=1)
    assert [step for step, _ in written(recorder)] == [1, 2]  # 4 batches, 2 steps: not one write per batch


def test_log_gpu_memory_requests_it_and_epoch_interval(fit):
    recorder = EventRecorder("recorder", kind="observer")
    trainer = fit({"device_stats": {"interval": "epoch"}}, logger=recorder, log_gpu_memory="all", log_every_n_steps=1)
    assert "device_stats" in trainer.plugin_names
    assert "device_stats" not in trainer.event_order("train_batch_end")
    rows = written(recorder)
    assert [step for step, _ in rows] == [4, 8]  # the end of each of the 2 epochs
    assert all(sorted(metrics) == CPU_KEYS for _, metrics in rows)  # no CUDA device: the CPU's figures


def test_bad_settings_are_config_errors():
    # reported under the argument the user set, by the serving plugin's rules
    with pytest.raises(
        surge.ConfigError, match="trainer.log_gpu_memory: got 'max': Input should be 'all' or 'min_max'"
    ):
        surge.Trainer(log_gpu_memory="max", logger=False)
