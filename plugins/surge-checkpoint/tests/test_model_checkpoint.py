"""ModelCheckpoint through real fits: schedules, names, top-k, several instances, state, aliases."""

from __future__ import annotations

import datetime
import re

import pytest
import surge
import surge_checkpoint
import torch
from loguru import logger
from surge import checkpoint as store
from surge.testing import TinyDataModule, TinyModule, assert_discovered
from surge_checkpoint import CheckpointConfig, ModelCheckpoint


@pytest.fixture
def warnings():
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    yield messages
    logger.remove(sink)


def load(path):
    return store.load(str(path))


# -- the plugin ---------------------------------------------------------------------------------------


def test_is_discovered_as_a_default_participant_with_the_checkpoint_role():
    plugin = assert_discovered("checkpoint", distribution="surge-checkpoint", kind="participant")
    assert plugin is surge_checkpoint.plugin
    assert plugin.default is True and plugin.role == "checkpoint" and plugin.config is CheckpointConfig
    assert issubclass(surge_checkpoint.Preempted, surge.SurgeError)


def test_on_by_default_saving_into_the_run_directory(fit, names, tmp_path):
    trainer = fit(max_epochs=2)
    callback = _plugin(trainer)
    assert callback.dirpath == f"{trainer.run_dir}/checkpoints"
    assert names(callback.dirpath) == ["epoch=1-step=8.ckpt"]  # save_top_k=1: the newest only
    assert callback.best_model_path == f"{callback.dirpath}/epoch=1-step=8.ckpt"
    checkpoint = load(callback.best_model_path)
    assert checkpoint["global_step"] == 8 and checkpoint["plugins"]["checkpoint"]["best_model_path"]


@pytest.mark.parametrize("switch", [{"enable_checkpointing": False}, {"plugins": {"checkpoint": False}}])
def test_switched_off(fit, tmp_path, switch):
    trainer = fit(**switch)
    assert "checkpoint" not in trainer.plugin_names
    assert not list(tmp_path.rglob("*.ckpt"))


def test_settings_through_the_run_config(fit, names, tmp_path):
    trainer = fit(plugins={"checkpoint": {"dirpath": str(tmp_path / "c"), "save_last": True, "save_top_k": -1}})
    assert names(tmp_path / "c") == ["epoch=0-step=4.ckpt", "last.ckpt"]
    assert _plugin(trainer).state_key == "checkpoint"


def test_bad_settings_are_reported_with_their_path(make_trainer):
    with pytest.raises(surge.ConfigError) as info:
        make_trainer(plugins={"checkpoint": {"mode": "mx", "save_top_k": -2, "every_n_step": 3}})
    text = str(info.value)
    assert "trainer.plugins.checkpoint.mode" in text and "trainer.plugins.checkpoint.save_top_k" in text
    assert "every_n_step" in text
    with pytest.raises(surge.ConfigError, match="needs a monitor"):
        ModelCheckpoint(save_top_k=3)
    with pytest.raises(surge.ConfigError, match="choose one of every_n_train_steps"):
        ModelCheckpoint(every_n_train_steps=2, every_n_epochs=1)
    with pytest.raises(surge.ConfigError, match="ModelCheckpoint.preemption_signals"):
        ModelCheckpoint(preemption_signals=["SIGNOPE"])
    with pytest.raises(surge.ConfigError, match="ModelCheckpoint.train_time_interval"):
        ModelCheckpoint(train_time_interval=datetime.timedelta(0))
    assert CheckpointConfig(train_time_interval="PT1H").train_time_interval == datetime.timedelta(hours=1)


# -- names ------------------------------------------------------------------------------------------------


def test_filename_template_with_metric_values(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path / "a", filename="{epoch}-{step}-{val_loss:.3f}")])
    fit([ModelCheckpoint(dirpath=tmp_path / "b", filename="{epoch}_{val_loss:.2f}", auto_insert_metric_name=False)])
    (a,) = names(tmp_path / "a")
    (b,) = names(tmp_path / "b")
    assert re.fullmatch(r"epoch=0-step=4-val_loss=\d+\.\d{3}\.ckpt", a), a
    assert re.fullmatch(r"0_\d+\.\d{2}\.ckpt", b), b
    assert a.split("val_loss=")[1][:4] == b.split("_")[1][:4]  # the same value, formatted twice


def test_a_filename_metric_that_was_not_logged_is_an_error_naming_it(fit, tmp_path):
    with pytest.raises(
        surge.SurgeError, match=r"refers to \['val_acc'\].*logged metrics: \['train_loss', 'val_loss'\]"
    ):
        fit([ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val_acc:.2f}")])


def test_a_missing_monitor_is_an_error_naming_it(fit, tmp_path):
    with pytest.raises(surge.SurgeError, match=r"monitor='val_acc'.*logged metrics: \['train_loss', 'val_loss'\]"):
        fit([ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")])


def test_a_taken_name_gets_a_version_suffix(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path, filename="same", save_top_k=-1)], max_epochs=3)
    assert names(tmp_path) == ["same-v1.ckpt", "same-v2.ckpt", "same.ckpt"]


# -- top k ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "scores", "kept", "best"),
    [
        ("min", [5, 3, 4, 1, 2], [3, 4], 3),
        ("max", [5, 3, 4, 1, 2], [0, 2], 0),
    ],
)
def test_top_k_by_monitor(fit, scored, names, tmp_path, mode, scores, kept, best):
    tmp_path = tmp_path / "c"
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", mode=mode, save_top_k=2, filename="{epoch}")
    fit([callback], model=scored(scores), max_epochs=5)
    assert names(tmp_path) == [f"epoch={e}.ckpt" for e in kept]
    assert callback.best_model_path == str(tmp_path / f"epoch={best}.ckpt")
    assert callback.best_model_score == scores[best]
    assert sorted(callback.best_k_models.values()) == sorted(scores[e] for e in kept)
    assert callback.kth_value == (max if mode == "min" else min)(scores[e] for e in kept)
    # every file left has its marker; no marker of a removed file is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*names(tmp_path), *(f"{n}.sha256" for n in names(tmp_path))]
    )


def test_nan_ranks_last(fit, scored, names, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, filename="{epoch}")
    fit([callback], model=scored([2.0, float("nan"), 1.0]), max_epochs=3)
    assert names(tmp_path) == ["epoch=2.ckpt"]


def test_save_top_k_all_none_and_last(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path / "all", save_top_k=-1)], max_epochs=3)
    fit([ModelCheckpoint(dirpath=tmp_path / "none", save_top_k=0)], max_epochs=2)
    fit([ModelCheckpoint(dirpath=tmp_path / "last", save_top_k=0, save_last=True)], max_epochs=2)
    assert names(tmp_path / "all") == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"]
    assert names(tmp_path / "none") == []
    assert names(tmp_path / "last") == ["last.ckpt"]
    assert load(tmp_path / "last" / "last.ckpt")["global_step"] == 8


def test_a_new_checkpoint_is_committed_before_the_old_one_is_removed(fit, scored, tmp_path, monkeypatch):
    log: list[tuple[str, str]] = []
    save, remove = store.save, store.remove

    def spy_save(checkpoint, url):
        result = save(checkpoint, url)
        log.append(("saved", url))
        return result

    def spy_remove(url):
        newest = next(u for op, u in reversed(log) if op == "saved")
        store.verify(newest)  # the replacement is complete and committed when the old one goes
        log.append(("removed", url))
        remove(url)

    monkeypatch.setattr(store, "save", spy_save)
    monkeypatch.setattr(store, "remove", spy_remove)
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, filename="{epoch}")
    fit([callback], model=scored([3, 2, 1]), max_epochs=3)
    ops = [(op, url.rsplit("/", 1)[1]) for op, url in log]
    assert ops == [
        ("saved", "epoch=0.ckpt"),
        ("saved", "epoch=1.ckpt"),
        ("removed", "epoch=0.ckpt"),
        ("saved", "epoch=2.ckpt"),
        ("removed", "epoch=1.ckpt"),
    ]


# -- when -------------------------------------------------------------------------------------------------


def test_every_n_train_steps_and_every_n_epochs(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=3, save_top_k=-1)], max_epochs=2)
    fit([ModelCheckpoint(dirpath=tmp_path / "epochs", every_n_epochs=2, save_top_k=-1)], max_epochs=4)
    assert names(tmp_path / "steps") == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"]
    assert names(tmp_path / "epochs") == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"]


def test_every_n_train_steps_counts_optimizer_steps_under_accumulation(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1)], accumulate_grad_batches=2)
    assert names(tmp_path) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]


def test_train_time_interval(fit, names, tmp_path, monkeypatch):
    import surge_checkpoint._callback as callback_module

    clock = [1000.0]
    monkeypatch.setattr(callback_module.time, "monotonic", lambda: clock[0])

    class Slow(TinyModule):
        def training_step(self, batch, batch_idx):
            clock[0] += 10.0  # each batch "takes" 10 s
            return super().training_step(batch, batch_idx)

    interval = datetime.timedelta(seconds=25)
    fit([ModelCheckpoint(dirpath=tmp_path, train_time_interval=interval, save_top_k=-1)], model=Slow(), max_epochs=2)
    assert names(tmp_path) == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"]  # 30 s after the start, then 30 s later


def test_save_on_train_epoch_end_or_after_validation(fit, names, tmp_path):
    # Validation twice per epoch: by default the checkpoint follows each validation, with its metrics.
    mid = ModelCheckpoint(dirpath=tmp_path / "val", monitor="val_loss", save_top_k=-1, filename="{step}")
    fit([mid], val_check_interval=0.5)
    assert names(tmp_path / "val") == ["step=2.ckpt", "step=4.ckpt"]
    end = ModelCheckpoint(dirpath=tmp_path / "end", save_top_k=-1, filename="{step}", save_on_train_epoch_end=True)
    fit([end], val_check_interval=0.5)
    assert names(tmp_path / "end") == ["step=4.ckpt"]


def test_save_weights_only(fit, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path, save_weights_only=True)
    fit([callback])
    checkpoint = load(callback.best_model_path)
    assert "state_dict" in checkpoint and "optimizer_states" not in checkpoint and "plugins" not in checkpoint


def test_no_checkpoint_in_fast_dev_run_or_sanity_check(fit, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path / "fast")], fast_dev_run=2)
    fit(
        [ModelCheckpoint(dirpath=tmp_path / "sanity", monitor="val_loss")],
        num_sanity_val_steps=2,
        limit_train_batches=0,
    )
    assert not list(tmp_path.rglob("*.ckpt"))


def test_metrics_are_read_only_when_a_save_is_due(fit, tmp_path, monkeypatch):
    reads = []
    original = surge.Trainer.callback_metrics

    def counting(trainer):
        reads.append(trainer.global_step)
        return original.fget(trainer)

    monkeypatch.setattr(surge.Trainer, "callback_metrics", property(counting))
    fit([ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)], max_epochs=2, limit_val_batches=0)
    assert reads == [3, 6]  # 8 steps, two saves: no read on the other steps


# -- several instances, state, resume ------------------------------------------------------------------


def test_several_instances_side_by_side(fit, names, tmp_path):
    by_score = ModelCheckpoint(dirpath=tmp_path / "best", monitor="val_loss", save_top_k=2)
    by_steps = ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=2, save_top_k=-1)
    trainer = fit([by_score, by_steps], max_epochs=2)
    assert by_score.state_key != by_steps.state_key
    assert len(names(tmp_path / "best")) == 2 and len(names(tmp_path / "steps")) == 4
    assert not (tmp_path / "root" / "surge_runs" / "version_0" / "checkpoints").exists()  # the default stood aside
    assert set(load(by_steps.best_model_path)["plugins"]) == {by_score.state_key, by_steps.state_key}
    # the default is not in the run at all: the selection left it out, as the event order shows
    assert "checkpoint" not in trainer.plugin_names
    assert [n for n in trainer.event_order("validation_end") if "checkpoint" in n.lower()] == [
        by_score.state_key,
        by_steps.state_key,
    ]
    assert trainer.checkpoint_callbacks == [by_score, by_steps]


def test_naming_the_default_keeps_it_beside_instances(fit, names, tmp_path):
    mine = ModelCheckpoint(dirpath=tmp_path / "mine", every_n_epochs=1)
    trainer = fit([mine, "checkpoint"], max_epochs=1)
    assert trainer.checkpoint_callbacks == [_plugin(trainer), mine]  # discovered plugins first, then objects
    assert names(tmp_path / "mine") == names(f"{trainer.run_dir}/checkpoints") == ["epoch=0-step=4.ckpt"]


def test_two_identical_instances_are_refused(make_trainer, tmp_path):
    with pytest.raises(surge.SurgeError, match="both named"):
        make_trainer(plugins=[ModelCheckpoint(dirpath=tmp_path), ModelCheckpoint(dirpath=tmp_path)])


def test_top_k_state_survives_a_resume(fit, scored, names, tmp_path):
    scores = [5, 3, 4, 1, 2, 6]
    straight = ModelCheckpoint(
        dirpath=tmp_path / "a", monitor="score", save_top_k=2, save_last=True, filename="{epoch}"
    )
    fit([straight], model=scored(scores), max_epochs=6)

    first = ModelCheckpoint(dirpath=tmp_path / "b", monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    fit([first], model=scored(scores), max_epochs=3)
    second = ModelCheckpoint(dirpath=tmp_path / "b", monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    trainer = fit([second], model=scored(scores), max_epochs=6, ckpt_path="last")
    assert trainer.global_step == 24
    assert names(tmp_path / "b") == names(tmp_path / "a") == ["epoch=3.ckpt", "epoch=4.ckpt", "last.ckpt"]
    assert second.best_model_path == str(tmp_path / "b" / "epoch=3.ckpt") and second.best_model_score == 1
    assert {k.rsplit("/", 1)[1]: v for k, v in second.best_k_models.items()} == {"epoch=3.ckpt": 1, "epoch=4.ckpt": 2}


def test_trainer_save_checkpoint_carries_the_state_and_is_found_as_last(fit, scored, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", filename="{epoch}")
    trainer = fit([callback], model=scored([2, 1]), max_epochs=2)
    manual = str(tmp_path / "manual.ckpt")
    trainer.save_checkpoint(manual)
    state = load(manual)["plugins"][callback.state_key]
    assert state["best_model_path"] == str(tmp_path / "epoch=1.ckpt") and state["best_model_score"] == 1
    assert callback.surge_checkpoint_path("last") == manual  # the newest file in dirpath, whoever wrote it

    fresh = ModelCheckpoint(dirpath=tmp_path, monitor="score", filename="{epoch}")
    surge.Trainer(plugins=[fresh], default_root_dir=str(tmp_path), logger=False)
    assert fresh.surge_checkpoint_path("best") == str(tmp_path / "epoch=1.ckpt")  # read from the newest's state
    results = trainer.validate(datamodule=TinyDataModule(), ckpt_path="best")
    assert results and "val_loss" in results[0]


def test_orphaned_temp_files_are_swept_at_start(fit, names, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    orphan = tmp_path / ".epoch=0-step=4.ckpt.0123456789abcdef0123456789abcdef.surge-tmp"
    orphan.write_bytes(b"half a checkpoint")
    fit([ModelCheckpoint(dirpath=tmp_path)])
    assert not orphan.exists()
    assert names(tmp_path) == ["epoch=0-step=4.ckpt"]


# -- ckpt_path="last" / "best" ---------------------------------------------------------------------------


def test_last_falls_back_to_the_newest_valid_checkpoint_and_says_so(fit, names, tmp_path, warnings):
    callback = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    fit([callback], max_epochs=3)
    newest = tmp_path / "epoch=2-step=12.ckpt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    newest.write_bytes(bytes(data))

    resumed = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    trainer = fit([resumed], max_epochs=3, ckpt_path="last")
    assert trainer.global_step == 12  # resumed at step 8, trained the third epoch again
    text = "\n".join(warnings)
    assert str(newest) in text and "corrupt" in text and str(tmp_path / "epoch=1-step=8.ckpt") in text


def test_last_with_every_checkpoint_damaged_names_them(fit, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    fit([callback], max_epochs=2)
    for path in tmp_path.glob("*.ckpt"):
        path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(surge.SurgeError, match=r"no checkpoint in .* can be loaded") as info:
        fit([ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)], ckpt_path="last")
    assert "epoch=0-step=4.ckpt" in str(info.value) and "epoch=1-step=8.ckpt" in str(info.value)


def test_last_across_runs_with_the_default_directory(fit, names, tmp_path):
    first = fit(plugins={"checkpoint": {"save_last": True}}, max_epochs=2)
    trainer = fit(max_epochs=3, ckpt_path="last")
    assert trainer.global_step == 12  # continued from the first run's last.ckpt (step 8) in its run directory
    assert names(f"{first.run_dir}/checkpoints") == ["epoch=1-step=8.ckpt", "last.ckpt"]
    assert names(f"{trainer.run_dir}/checkpoints") == ["epoch=2-step=12.ckpt"]  # this run's own directory
    assert _plugin(trainer).surge_checkpoint_path("last") == f"{trainer.run_dir}/checkpoints/epoch=2-step=12.ckpt"


def test_best_without_a_monitor_is_the_newest_top_k(fit, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path)
    trainer = fit([callback], max_epochs=2)
    assert callback.surge_checkpoint_path("best") == str(tmp_path / "epoch=1-step=8.ckpt")
    assert trainer.test(datamodule=TinyDataModule(), ckpt_path="best")


def _plugin(trainer: surge.Trainer) -> ModelCheckpoint:
    callback = trainer.plugin("checkpoint")  # the object the checkpoint plugin's factory built for this Trainer
    assert isinstance(callback, ModelCheckpoint)
    return callback


def test_checkpoint_file_loads_with_plain_torch(fit, tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path)
    fit([callback])
    raw = torch.load(callback.best_model_path, weights_only=True)
    assert raw["plugins"][callback.state_key]["dirpath"] == str(tmp_path)


@pytest.mark.parametrize(
    "settings, per_step",
    [
        ({}, False),
        ({"every_n_train_steps": 3}, True),
        ({"async_save": True}, True),  # polls the background writer for a failure at each step
        ({"train_time_interval": datetime.timedelta(hours=1)}, True),
    ],
)
def test_train_batch_end_is_dispatched_only_when_a_setting_needs_it(tmp_path, settings, per_step):
    callback = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), **settings)
    trainer = surge.Trainer(
        max_epochs=1, limit_train_batches=4, num_sanity_val_steps=0, default_root_dir=str(tmp_path), plugins=[callback]
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    ours = [
        name for name in trainer.event_order("train_batch_end") if name.startswith(("checkpoint", "ModelCheckpoint"))
    ]
    assert bool(ours) is per_step  # the default costs no per-step call (nor does the default plugin standing aside)
    if "train_time_interval" not in settings:  # (a time schedule saves on time only: none within an hour)
        assert store.is_valid(callback.best_model_path or callback.last_model_path)
