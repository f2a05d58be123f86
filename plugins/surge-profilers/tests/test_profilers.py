"""The three profilers in real fits, their selection through ``Trainer(profiler=...)``, and spans from names."""

from __future__ import annotations

import glob
import json
import os
import pstats
import time
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from loguru import logger
from surge.testing import TinyDataModule, TinyModule, assert_discovered
from surge_profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler, Spans


class Slow:
    """Sleeps 5 ms in every ``train_batch_end``."""

    surge_name = "slow"

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        time.sleep(0.005)


class Quick:
    """Does next to nothing in ``train_batch_end``."""

    surge_name = "quick"

    def __init__(self) -> None:
        self.calls = 0

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.calls += 1


def _fit(tmp_path: Path, profiler: Any, plugins: Any = None, **kwargs: Any) -> surge.Trainer:
    kwargs.setdefault("max_epochs", 1)
    kwargs.setdefault("limit_train_batches", 4)
    kwargs.setdefault("limit_val_batches", 2)
    trainer = surge.Trainer(
        profiler=profiler,
        plugins=plugins,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    torch.manual_seed(0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return trainer


def test_is_discovered() -> None:
    plugin = assert_discovered("profilers", distribution="surge-profilers", kind="provider")
    assert set(plugin.provides["profiler"]) == {"simple", "advanced", "pytorch"}


# -- simple ------------------------------------------------------------------------------------------------


def test_simple_attributes_a_slow_plugin_to_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quick = Quick()
    trainer = _fit(tmp_path, "simple", plugins=[Slow(), quick], logger="csv")
    profiler = trainer.profiler
    assert isinstance(profiler, SimpleProfiler)
    assert "profilers.profiler" in trainer.plugin_names

    slow = profiler.handlers[("slow", "train_batch_end")]
    assert slow.calls == 4 and slow.mean >= 0.005
    others = {key: stat for key, stat in profiler.handlers.items() if key != ("slow", "train_batch_end")}
    assert others[("quick", "train_batch_end")].calls == quick.calls == 4
    assert all(stat.total < slow.total for key, stat in others.items() if key[1] == "train_batch_end")
    assert ("csv", "log_metrics") in others  # the logger's handler, and logging as an action
    assert not any(plugin.startswith("profilers") for plugin, _ in profiler.handlers)  # its own: overhead
    assert profiler.overhead > 0

    actions = profiler.actions
    for action in ("data_fetch", "forward", "backward", "optimizer_step", "zero_grad", "train_batch"):
        assert actions[action].calls == 4, action
    assert actions["validation"].calls == 2  # the sanity check's and the epoch's
    assert actions["log_metrics"].calls >= 1 and actions["log_metrics"].total > 0

    run_dir = Path(trainer.run_dir or "")
    data = json.loads((run_dir / "profile-simple.json").read_text())
    assert data == json.loads(json.dumps(profiler.as_dict("fit")))
    row = next(r for r in data["handlers"] if (r["plugin"], r["event"]) == ("slow", "train_batch_end"))
    assert row["calls"] == 4 and row["mean_s"] >= 0.005
    table = (run_dir / "profile-simple.txt").read_text()
    printed = capsys.readouterr().err
    assert table in printed and "slow" in table and "own bookkeeping" in table


def test_simple_reports_each_run_in_its_own_file(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, SimpleProfiler(stream=None, sort_by="name"), logger=False, enable_checkpointing=False)
    trainer.test(datamodule=TinyDataModule())
    run_dir = Path(trainer.run_dir or "")
    assert (run_dir / "profile-simple.txt").exists()
    test_report = json.loads((run_dir / "profile-simple-test.json").read_text())
    assert test_report["stage"] == "test" and "test_batch" in test_report["actions"]
    assert "train_batch" not in test_report["actions"]  # each run starts from nothing
    assert list(test_report["actions"]) == sorted(test_report["actions"])


def test_simple_and_the_plugin_trace_share_the_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURGE_TRACE_PLUGINS", "1")
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), format="{message}", level="INFO")
    try:
        trainer = _fit(tmp_path, SimpleProfiler(stream=None), plugins=[Slow()], logger=False)
    finally:
        logger.remove(sink)
    traces = [m for m in messages if m.startswith("surge trace: train_batch_end")]
    assert len(traces) == 4 and all("slow " in m for m in traces)
    assert trainer.profiler.handlers[("slow", "train_batch_end")].calls == 4


# -- advanced ----------------------------------------------------------------------------------------------


def test_advanced_writes_pstats_files_naming_the_training_step(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, AdvancedProfiler(top_n=15, stream=None), logger=False)
    run_dir = Path(trainer.run_dir or "")
    stats = pstats.Stats(str(run_dir / "profile-advanced-forward.prof"))
    assert any(name == "training_step" for _, _, name in stats.stats)  # type: ignore[attr-defined]
    backward = pstats.Stats(str(run_dir / "profile-advanced-backward.prof"))
    assert not any(name == "training_step" for _, _, name in backward.stats)  # type: ignore[attr-defined]
    report = (run_dir / "profile-advanced.txt").read_text()
    assert "Action: forward" in report and "training_step" in report and "cumulative" in report
    assert trainer.profiler.files and all(os.path.exists(f) for f in trainer.profiler.files)


def test_advanced_profiles_only_the_actions_asked_for(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, AdvancedProfiler(actions=["train_batch"], stream=None), logger=False)
    assert set(trainer.profiler.profiles) == {"train_batch"}
    # forward runs inside train_batch: with forward not profiled on its own, train_batch's profile has it
    names = {name for _, _, name in trainer.profiler.stats("train_batch").stats}  # type: ignore[attr-defined]
    assert "training_step" in names
    assert sorted(os.listdir(trainer.run_dir or ""))[-2:] == [
        "profile-advanced-train_batch.prof",
        "profile-advanced.txt",
    ]


# -- pytorch -----------------------------------------------------------------------------------------------


def test_pytorch_writes_chrome_and_tensorboard_traces_with_the_spans(tmp_path: Path) -> None:
    profiler = PyTorchProfiler(wait=0, warmup=1, active=2, repeat=1, record_shapes=True, stream=None)
    trainer = _fit(tmp_path, profiler, logger=False, enable_checkpointing=False)
    run_dir = Path(trainer.run_dir or "")
    assert profiler.traces == ["profile-pytorch-trace-0.json"]
    trace = json.loads((run_dir / "profile-pytorch-trace-0.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"train_batch", "forward", "backward", "optimizer_step", "zero_grad"} <= names
    assert any("Input Dims" in event.get("args", {}) for event in trace["traceEvents"])  # record_shapes
    boards = glob.glob(str(run_dir / "profile-pytorch-tb" / "*.pt.trace.json"))
    assert len(boards) == 1 and "train_batch" in Path(boards[0]).read_text()
    assert "aten::" in (run_dir / "profile-pytorch.txt").read_text()  # the operator table


# -- selection -----------------------------------------------------------------------------------------------


def test_unknown_name_says_what_is_valid(make_trainer: Any) -> None:
    with pytest.raises(surge.errors.ProviderError, match="Did you mean 'simple'.*advanced, pytorch, simple") as info:
        make_trainer(profiler="simpel")
    assert "pip install" not in str(info.value)  # surge-profilers is installed
    with pytest.raises(surge.ConfigError, match="trainer.profiler"):
        make_trainer(profiler=3)
    with pytest.raises(surge.ConfigError, match=r"trainer\.profiler\.sort_by"):
        SimpleProfiler(sort_by="fastest")
    with pytest.raises(surge.ConfigError, match=r"trainer\.profiler\.top_n"):
        AdvancedProfiler(top_n=0)


def test_an_object_with_hooks_and_a_handler_timer_is_a_profiler(tmp_path: Path) -> None:
    class Counting:
        """A third party's profiler: counts batches and collects handler times."""

        def __init__(self) -> None:
            self.batches = 0
            self.timed: list[tuple[str, str]] = []

        @surge.hookimpl
        def train_batch_start(self, event: Any) -> None:
            self.batches += 1

        def handler_timer(self, event: str, plugin: str, start: float, end: float) -> None:
            assert end >= start
            self.timed.append((plugin, event))

    counting = Counting()
    trainer = _fit(tmp_path, counting, plugins=[Slow()], logger=False)
    assert trainer.profiler is counting and "profiler" in trainer.plugin_names
    assert counting.batches == 4
    assert counting.timed.count(("slow", "train_batch_end")) == 4
    assert ("profiler", "train_batch_start") in counting.timed


def test_without_a_profiler_nothing_is_registered_and_nothing_is_timed(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, None, plugins=[Slow()], logger=False)
    assert trainer.profiler is None
    assert not any("profiler" in name for name in trainer.plugin_names)
    # that the dispatchers then stay plain (no timing wrapper) is the core's to check: tests/test_bus.py


# -- spans from names ---------------------------------------------------------------------------------------


def test_plugins_cannot_declare_events_of_their_own(make_trainer: Any) -> None:
    class Custom:
        surge_name = "custom"

        @surge.hookimpl
        def upload_start(self, event: Any) -> None: ...

    with pytest.raises(surge.PluginError, match="unknown hook 'upload_start'"):
        make_trainer(plugins=[Custom()])


def test_an_event_named_by_the_grammar_is_a_span_with_no_code_for_it() -> None:
    profiler = SimpleProfiler(stream=None)
    for name in ["upload_start", "before_compress", "after_compress", "upload_end", "heartbeat"]:
        profiler.event(name)
    assert profiler.actions["upload"].calls == 1 and profiler.actions["compress"].calls == 1
    assert "heartbeat" not in profiler.actions and profiler.spans.stack == []

    spans = Spans()
    assert spans.transitions("train_batch_start") == [(True, "train_batch"), (True, "forward")]
    assert spans.transitions("before_backward") == [(False, "forward"), (True, "backward")]
    # closing a span closes what was opened inside it; closing one not open does nothing
    assert spans.transitions("train_batch_end") == [(False, "backward"), (False, "train_batch"), (True, "data_fetch")]
    assert spans.transitions("after_optimizer_step") == []
