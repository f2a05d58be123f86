"""One test (at least) per loop flag of the Trainer, through real runs on TinyModule/TinyDataModule.

TinyDataModule: 64 training samples (8 batches of 8, shuffled), 32 validation/test/predict samples (4 batches).
"""

from __future__ import annotations

import json
import os
import random

import fsspec
import numpy as np
import pytest
import surge
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule

TRAIN_BATCHES, VAL_BATCHES = 8, 4


class Probe:
    """Records, per event, what the run looked like when it fired."""

    surge_name = "probe"

    def __init__(self) -> None:
        self.train_batches: list[tuple[int, int, int]] = []  # (epoch, batch_idx, global_step)
        self.val_batches: list[tuple[bool, int, int]] = []  # (sanity_checking, dataloader_idx, batch_idx)
        self.val_runs: list[tuple[bool, int, int]] = []  # (sanity_checking, epoch, global_step) per validation
        self.epochs: list[int] = []

    @surge.hookimpl
    def train_epoch_start(self, event: surge.events.TrainEpochStart) -> None:
        self.epochs.append(event.epoch)

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        t = event.trainer
        self.train_batches.append((t.current_epoch, event.batch_idx, t.global_step))

    @surge.hookimpl
    def validation_batch_end(self, event: surge.events.ValidationBatchEnd) -> None:
        self.val_batches.append((event.trainer.sanity_checking, event.dataloader_idx, event.batch_idx))

    @surge.hookimpl
    def validation_start(self, event: surge.events.ValidationStart) -> None:
        t = event.trainer
        self.val_runs.append((t.sanity_checking, t.current_epoch, t.global_step))

    def fit_val_runs(self) -> list[tuple[int, int]]:
        return [(epoch, step) for sanity, epoch, step in self.val_runs if not sanity]

    def sanity_batches(self) -> list[int]:
        return [idx for sanity, _, idx in self.val_batches if sanity]


class StopAt:
    """Requests a stop at the end of the given training batch (by global batch count)."""

    surge_name = "stop_at"

    def __init__(self, after_batches: int = 1) -> None:
        self.after, self.seen = after_batches, 0

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        self.seen += 1
        if self.seen == self.after:
            event.trainer.request_stop("test asked to stop")


def fit(make_trainer, *, model=None, data=None, plugins=(), **flags):
    probe = Probe()
    trainer = make_trainer(plugins=[probe, *plugins], **flags)
    trainer.fit(model or TinyModule(), datamodule=data or TinyDataModule())
    return trainer, probe


# -- how long the run is -------------------------------------------------------------------------------


def test_max_epochs(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=3, num_sanity_val_steps=0)
    assert trainer.current_epoch == 3
    assert trainer.global_step == 3 * TRAIN_BATCHES
    assert probe.epochs == [0, 1, 2]


def test_max_epochs_default_is_1000_but_max_steps_alone_bounds_the_run(make_trainer):
    trainer = make_trainer()
    assert trainer.max_epochs == 1000
    trainer, probe = fit(make_trainer, max_steps=20, num_sanity_val_steps=0)
    assert trainer.max_epochs == -1
    assert trainer.global_step == 20
    assert probe.epochs == [0, 1, 2]


def test_request_stop_ends_the_run_at_the_next_step_boundary(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=5, plugins=[StopAt(3)], num_sanity_val_steps=0)
    assert trainer.global_step == 3
    assert trainer.should_stop
    assert probe.epochs == [0]


def test_min_epochs_overrides_a_stop_request(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=5, min_epochs=2, plugins=[StopAt(1)], num_sanity_val_steps=0)
    assert probe.epochs == [0, 1]
    assert trainer.current_epoch == 2
    assert trainer.global_step == 2 * TRAIN_BATCHES


def test_max_steps_stops_mid_epoch(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=5, max_steps=11, num_sanity_val_steps=0)
    assert trainer.global_step == 11
    assert probe.epochs == [0, 1]
    assert [b[1] for b in probe.train_batches] == [*range(8), 0, 1, 2]


def test_min_steps_overrides_a_stop_request_until_reached(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=5, min_steps=11, plugins=[StopAt(1)], num_sanity_val_steps=0)
    assert trainer.global_step == 11
    assert len(probe.train_batches) == 11


def test_min_greater_than_max_is_a_config_error(make_trainer):
    with pytest.raises(surge.ConfigError, match="min_epochs"):
        make_trainer(min_epochs=3, max_epochs=2)
    with pytest.raises(surge.ConfigError, match="min_steps"):
        make_trainer(min_steps=3, max_steps=2)


# -- how much data ------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit, expected", [(3, 3), (0.25, 2), (1.0, 8), (100, 8)])
def test_limit_train_batches(make_trainer, limit, expected):
    trainer, probe = fit(make_trainer, max_epochs=2, limit_train_batches=limit, num_sanity_val_steps=0)
    assert trainer.num_training_batches == expected
    assert trainer.global_step == 2 * expected
    assert [b[1] for b in probe.train_batches] == [*range(expected)] * 2


def test_limit_train_batches_zero_skips_training(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=2, limit_train_batches=0, num_sanity_val_steps=0)
    assert trainer.global_step == 0
    assert probe.train_batches == []


def test_a_fraction_smaller_than_one_batch_is_an_error(make_trainer):
    with pytest.raises(surge.SurgeError, match="less than one batch"):
        fit(make_trainer, max_epochs=1, limit_train_batches=0.01)


@pytest.mark.parametrize("limit, expected", [(3, 3), (0.5, 2)])
def test_limit_val_batches(make_trainer, limit, expected):
    trainer, probe = fit(make_trainer, max_epochs=2, limit_val_batches=limit, num_sanity_val_steps=0)
    assert trainer.num_val_batches == [expected]
    assert [idx for _, _, idx in probe.val_batches] == [*range(expected)] * 2


def test_limit_val_batches_zero_disables_validation(make_trainer):
    trainer, probe = fit(make_trainer, max_epochs=2, limit_val_batches=0)
    assert probe.val_runs == []
    assert "val_loss" not in trainer.callback_metrics


@pytest.mark.parametrize("limit, expected", [(3, 3), (0.5, 2)])
def test_limit_test_batches(make_trainer, event_recorder, limit, expected):
    trainer = make_trainer(limit_test_batches=limit, plugins=[event_recorder])
    trainer.test(TinyModule(), datamodule=TinyDataModule())
    assert [e.batch_idx for e in event_recorder.of("test_batch_end")] == [*range(expected)]


@pytest.mark.parametrize("limit, expected", [(3, 3), (0.5, 2)])
def test_limit_predict_batches(make_trainer, limit, expected):
    trainer = make_trainer(limit_predict_batches=limit)
    predictions = trainer.predict(TinyModule(), datamodule=TinyDataModule())
    assert len(predictions) == expected


def test_limit_batches_above_one_as_float_is_rejected(make_trainer):
    with pytest.raises(surge.ConfigError, match=r"limit_val_batches.*pass an int \(2\)"):
        make_trainer(limit_val_batches=2.0)


# -- when to validate ---------------------------------------------------------------------------------


def test_validation_runs_once_per_epoch_by_default(make_trainer):
    _, probe = fit(make_trainer, max_epochs=2, num_sanity_val_steps=0)
    assert probe.fit_val_runs() == [(0, 8), (1, 16)]


def test_val_check_interval_fraction(make_trainer):
    _, probe = fit(make_trainer, max_epochs=2, val_check_interval=0.5, num_sanity_val_steps=0)
    assert probe.fit_val_runs() == [(0, 4), (0, 8), (1, 12), (1, 16)]


def test_val_check_interval_int_counts_batches_within_an_epoch(make_trainer):
    _, probe = fit(make_trainer, max_epochs=2, val_check_interval=3, num_sanity_val_steps=0)
    assert probe.fit_val_runs() == [(0, 3), (0, 6), (1, 11), (1, 14)]


def test_val_check_interval_int_across_epochs_without_check_val_every_n_epoch(make_trainer):
    _, probe = fit(
        make_trainer, max_epochs=3, val_check_interval=5, check_val_every_n_epoch=None, num_sanity_val_steps=0
    )
    assert probe.fit_val_runs() == [(0, 5), (1, 10), (1, 15), (2, 20)]


def test_val_check_interval_larger_than_an_epoch_needs_check_val_every_n_epoch_none(make_trainer):
    with pytest.raises(surge.SurgeError, match="check_val_every_n_epoch=None"):
        fit(make_trainer, max_epochs=2, val_check_interval=20, num_sanity_val_steps=0)
    _, probe = fit(
        make_trainer, max_epochs=3, val_check_interval=20, check_val_every_n_epoch=None, num_sanity_val_steps=0
    )
    assert probe.fit_val_runs() == [(2, 20)]


def test_check_val_every_n_epoch(make_trainer):
    _, probe = fit(make_trainer, max_epochs=5, check_val_every_n_epoch=2, num_sanity_val_steps=0)
    assert probe.fit_val_runs() == [(1, 16), (3, 32)]


def test_check_val_every_n_epoch_with_fractional_interval(make_trainer):
    _, probe = fit(
        make_trainer, max_epochs=2, check_val_every_n_epoch=2, val_check_interval=0.5, num_sanity_val_steps=0
    )
    assert probe.fit_val_runs() == [(1, 12), (1, 16)]


@pytest.mark.parametrize("steps, expected", [(0, []), (2, [0, 1]), (-1, [0, 1, 2, 3])])
def test_num_sanity_val_steps(make_trainer, event_recorder, steps, expected):
    _, probe = fit(make_trainer, max_epochs=1, num_sanity_val_steps=steps, plugins=[event_recorder])
    assert probe.sanity_batches() == expected
    assert len(event_recorder.of("sanity_check_start")) == (1 if expected else 0)
    # the run's own validation is unaffected
    assert [idx for sanity, _, idx in probe.val_batches if not sanity] == [0, 1, 2, 3]


def test_num_sanity_val_steps_all_respects_limit_val_batches(make_trainer):
    _, probe = fit(make_trainer, max_epochs=1, num_sanity_val_steps=-1, limit_val_batches=3)
    assert probe.sanity_batches() == [0, 1, 2]


def test_sanity_check_events_bracket_its_validation(make_trainer, event_recorder):
    fit(make_trainer, max_epochs=1, limit_train_batches=1, plugins=[event_recorder])
    names = event_recorder.names()
    start, end = names.index("sanity_check_start"), names.index("sanity_check_end")
    assert names.index("fit_start") < start < names.index("validation_batch_end") < end < names.index("train_start")


# -- fast_dev_run and overfit_batches -------------------------------------------------------------------


def _role_plugins(plugin_env, calls: list[str]) -> None:
    """Installs fake default-on plugins with the logger and checkpoint roles that note when they are built."""

    def factory(name: str):
        def build() -> object:
            calls.append(name)

            class Noop:
                @surge.hookimpl
                def fit_start(self, event) -> None:
                    calls.append(f"{name}:fit_start")

            return Noop()

        return build

    for name, role in [("fakelog", "logger"), ("fakeckpt", "checkpoint")]:
        plugin_env.add(surge.Plugin(name=name, kind="observer", role=role, default=True, factory=factory(name)))


@pytest.mark.parametrize("flag, n", [(True, 1), (3, 3)])
def test_fast_dev_run(make_trainer, plugin_env, flag, n):
    calls: list[str] = []
    _role_plugins(plugin_env, calls)
    model, data = TinyModule(), TinyDataModule()
    probe = Probe()
    trainer = make_trainer(fast_dev_run=flag, max_epochs=5, plugins=[probe])
    assert trainer.fast_dev_run
    assert "fakelog" not in trainer.plugin_names and "fakeckpt" not in trainer.plugin_names
    trainer.fit(model, datamodule=data)
    assert calls == []  # neither built nor called
    assert probe.epochs == [0]
    assert trainer.global_step == n
    assert probe.sanity_batches() == []
    assert [idx for _, _, idx in probe.val_batches] == [*range(n)]
    (result,) = trainer.test(model, datamodule=data)
    assert "test_loss" in result
    assert len(trainer.predict(model, datamodule=data)) == n


def test_without_fast_dev_run_the_role_plugins_are_on(make_trainer, plugin_env):
    calls: list[str] = []
    _role_plugins(plugin_env, calls)
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    assert {"fakelog", "fakeckpt"} <= set(trainer.plugin_names)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert sorted(calls) == ["fakeckpt", "fakeckpt:fit_start", "fakelog", "fakelog:fit_start"]


class BatchKeeper(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.train_inputs: list[torch.Tensor] = []
        self.val_count = 0

    def training_step(self, batch, batch_idx):
        self.train_inputs.append(batch[0].clone())
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.val_count += 1
        return super().validation_step(batch, batch_idx)


@pytest.mark.parametrize("overfit, n, n_val", [(2, 2, 2), (0.25, 2, 1), (3, 3, 3)])
def test_overfit_batches_trains_on_the_same_first_batches_in_order(make_trainer, overfit, n, n_val):
    model, data = BatchKeeper(), TinyDataModule()
    trainer = make_trainer(max_epochs=3, overfit_batches=overfit, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 3 * n
    expected = data.train_set.tensors[0][: n * 8]  # sequential, not shuffled
    for epoch in range(3):
        seen = torch.cat(model.train_inputs[epoch * n : (epoch + 1) * n])
        assert torch.equal(seen, expected)
    assert trainer.num_val_batches == [n_val]  # the same limit (a fraction: of each loader) for validation
    assert model.val_count == 3 * n_val


def test_without_overfit_batches_training_is_shuffled(make_trainer):
    model, data = BatchKeeper(), TinyDataModule()
    make_trainer(max_epochs=1, limit_train_batches=2, num_sanity_val_steps=0).fit(model, datamodule=data)
    assert not torch.equal(torch.cat(model.train_inputs), data.train_set.tensors[0][:16])


# -- reproducibility switches ----------------------------------------------------------------------------


class GlobalsProbe:
    surge_name = "globals_probe"

    def __init__(self) -> None:
        self.deterministic: list[bool] = []
        self.benchmark: list[bool] = []

    @surge.hookimpl
    def train_batch_start(self, event) -> None:
        self.deterministic.append(torch.are_deterministic_algorithms_enabled())
        self.benchmark.append(torch.backends.cudnn.benchmark)


@pytest.fixture
def restore_torch_globals():
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark = benchmark
    if cublas is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def test_deterministic(make_trainer, restore_torch_globals):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = True
    probe = GlobalsProbe()
    fit(make_trainer, max_epochs=1, limit_train_batches=2, deterministic=True, plugins=[probe])
    assert probe.deterministic == [True, True]
    assert probe.benchmark == [False, False]  # deterministic implies benchmark=False unless given
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG")


def test_deterministic_warn(make_trainer, restore_torch_globals):
    torch.use_deterministic_algorithms(False)
    probe = GlobalsProbe()
    fit(make_trainer, max_epochs=1, limit_train_batches=1, deterministic="warn", plugins=[probe])
    assert probe.deterministic == [True]
    assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_deterministic_false_and_unset(make_trainer, restore_torch_globals):
    torch.use_deterministic_algorithms(True)
    probe = GlobalsProbe()
    fit(make_trainer, max_epochs=1, limit_train_batches=1, plugins=[probe])
    assert probe.deterministic == [True]  # None leaves the session's setting alone
    fit(make_trainer, max_epochs=1, limit_train_batches=1, deterministic=False, plugins=[probe])
    assert probe.deterministic == [True, False]


@pytest.mark.parametrize("before, flag, during", [(False, True, True), (True, False, False), (True, None, True)])
def test_benchmark(make_trainer, restore_torch_globals, before, flag, during):
    torch.backends.cudnn.benchmark = before
    probe = GlobalsProbe()
    fit(make_trainer, max_epochs=1, limit_train_batches=1, benchmark=flag, plugins=[probe])
    assert probe.benchmark == [during]


def test_seed_everything_seeds_python_numpy_and_torch():
    assert surge.seed_everything(123) == 123
    first = (random.random(), np.random.rand(), torch.rand(1))
    assert surge.seed_everything(123) == 123
    second = (random.random(), np.random.rand(), torch.rand(1))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])
    surge.seed_everything(124)
    assert random.random() != first[0]


def test_seed_everything_rejects_out_of_range_seeds():
    with pytest.raises(ValueError, match="seed"):
        surge.seed_everything(-1)


def test_seed_everything_gives_the_same_training_run(make_trainer):
    def losses() -> list[float]:
        surge.seed_everything(99)
        trainer, _ = fit(make_trainer, max_epochs=2, num_sanity_val_steps=0)
        return [float(trainer.callback_metrics["train_loss"]), float(trainer.callback_metrics["val_loss"])]

    assert losses() == losses()


# -- where the run writes --------------------------------------------------------------------------------


def test_default_root_dir_holds_versioned_run_directories(tmp_path):
    root = tmp_path / "runs"
    first = surge.Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    assert not root.exists()  # nothing on disk before a run (reading first.run_dir would make the directory)
    first.fit(TinyModule(), datamodule=TinyDataModule())
    second = surge.Trainer(default_root_dir=str(root), max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    second.fit(TinyModule(), datamodule=TinyDataModule())
    assert first.run_dir == str(root / "surge_runs" / "version_0")
    assert second.run_dir == str(root / "surge_runs" / "version_1")
    plugin_set = json.loads((root / "surge_runs/version_0/plugins.json").read_text())
    assert plugin_set == first.plugin_set()
    assert {p["name"] for p in plugin_set} == set(first.plugin_names) - {"module"}


def test_a_trainer_keeps_its_run_directory_across_entry_points(tmp_path):
    trainer = surge.Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    model, data = TinyModule(), TinyDataModule()
    trainer.fit(model, datamodule=data)
    trainer.validate(model, datamodule=data)
    assert sorted(p.name for p in (tmp_path / "surge_runs").iterdir()) == ["version_0"]


def test_default_root_dir_is_the_working_directory_when_unset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = surge.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert os.path.realpath(trainer.run_dir) == os.path.realpath(tmp_path / "surge_runs" / "version_0")


def test_default_root_dir_as_fsspec_url():
    fs = fsspec.filesystem("memory")
    root = "memory://surge-test-root"
    if fs.exists("/surge-test-root"):
        fs.rm("/surge-test-root", recursive=True)
    try:
        trainer = surge.Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
        assert trainer.run_dir.startswith("memory://")  # still a URL, not a local path
        run_fs, run_path = fsspec.core.url_to_fs(trainer.run_dir)
        assert isinstance(run_fs, type(fs)) and run_path == "/surge-test-root/surge_runs/version_0"
        assert fs.exists("/surge-test-root/surge_runs/version_0/plugins.json")
        plugin_set = json.loads(fs.cat_file("/surge-test-root/surge_runs/version_0/plugins.json"))
        assert plugin_set == trainer.plugin_set()
        again = surge.Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
        again.fit(TinyModule(), datamodule=TinyDataModule())
        assert fsspec.core.url_to_fs(again.run_dir)[1] == "/surge-test-root/surge_runs/version_1"
        assert not os.path.exists("surge-test-root") and not os.path.exists("memory:")  # nothing written locally
    finally:
        if fs.exists("/surge-test-root"):
            fs.rm("/surge-test-root", recursive=True)


# -- the module and trainer views of the loop ------------------------------------------------------------


def test_trainer_counters_seen_from_the_module(make_trainer):
    seen: list[tuple[int, int, bool]] = []

    class Watch(TinyModule):
        def training_step(self, batch, batch_idx):
            seen.append((self.current_epoch, self.global_step, self.trainer.sanity_checking))
            return super().training_step(batch, batch_idx)

    trainer, _ = fit(make_trainer, model=Watch(), max_epochs=2, limit_train_batches=2)
    assert seen == [(0, 0, False), (0, 1, False), (1, 2, False), (1, 3, False)]
    assert trainer.estimated_stepping_batches == 4


def test_interrupted_and_state_after_a_normal_run(make_trainer):
    trainer, _ = fit(make_trainer, max_epochs=1, limit_train_batches=2)
    assert not trainer.interrupted
    assert trainer.state.status == "finished"


def test_event_order_of_one_short_epoch(make_trainer):
    recorder = EventRecorder()
    # checkpointing (before/after_checkpoint_save) and loggers off: only the loop's own events
    fit(
        make_trainer,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        plugins=[recorder],
        enable_checkpointing=False,
        logger=False,
    )
    # the loop's own events (logger=False switches logger plugins off; the recorder still hears log_*)
    names = recorder.names(exclude={"init_start", "init_end", "log_hyperparams", "log_metrics"})
    assert names == [
        "setup",
        "fit_start",
        "train_start",
        "train_epoch_start",
        "train_batch_start",
        "before_backward",
        "after_backward",
        "before_optimizer_step",
        "after_optimizer_step",
        "before_zero_grad",
        "after_zero_grad",
        "train_batch_end",
        "validation_start",
        "validation_epoch_start",
        "validation_batch_start",
        "validation_batch_end",
        "validation_epoch_end",
        "validation_end",
        "train_epoch_end",
        "train_end",
        "fit_end",
        "teardown",
    ]


def test_a_stop_requested_during_the_sanity_check_is_dropped(make_trainer):
    class StopInSanity:
        surge_name = "stop_in_sanity"

        @surge.hookimpl
        def validation_epoch_end(self, event) -> None:
            if event.trainer.sanity_checking:
                event.trainer.request_stop("decided on sanity-check metrics")

    trainer = make_trainer(max_epochs=2, num_sanity_val_steps=1, plugins=[StopInSanity()])
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.current_epoch == 2 and trainer.global_step == 16
