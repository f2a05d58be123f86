"""The wandb plugin through real fits with wandb in offline mode, read back from the ``.wandb`` transaction
logs wandb wrote (see conftest)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import surge
import surge_wandb
from surge import checkpoint as store
from surge.testing import TinyDataModule, TinyModule, assert_discovered
from surge_checkpoint import Preempted
from surge_wandb import WandbConfig, WandbError, WandbLogger

CHILD = str(Path(__file__).with_name("_child.py"))


class Described(TinyModule):
    """Nested hyper-parameters, and a hook that logs through ``logger.experiment``."""

    def __init__(self, optim: dict, layers: tuple, lr: float = 0.05) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()

    def on_train_start(self) -> None:
        self.logger.experiment.log({"custom": 7.0})


class StepsPerBatchInValidation(TinyModule):
    """Logs a value at every validation batch: Surge writes it at the evaluation's own batch count, a step that
    goes back below the training steps written before it."""

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        self.log("val_batch_loss", self._loss(batch), on_step=True, on_epoch=False)


class FailsAtStep(TinyModule):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.fail_at = step

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == self.fail_at:
            raise RuntimeError(f"boom at step {self.fail_at}")
        return super().training_step(batch, batch_idx)


class SendsSignal:
    """Sends ``signum`` to this process after the training batch that reaches ``step``."""

    surge_name = "sends_signal"
    surge_kind = "participant"

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step, self.sent = signum, step, False

    @surge.hookimpl
    def train_batch_end(self, event):
        if event.trainer.global_step == self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


def _written(recorder) -> list[dict]:
    """Every write the Trainer made, as the one history row each should be."""
    return [{**event.metrics, "trainer/global_step": event.step} for event in recorder.of("log_metrics")]


def _train_steps(run) -> list[int]:
    return [row["trainer/global_step"] for row in run.rows() if "train_loss" in row]


# -- the plugin -------------------------------------------------------------------------------------------


def test_is_discovered_as_an_observer_logger_off_by_default():
    plugin = assert_discovered("wandb", distribution="surge-wandb", kind="observer")
    assert plugin is surge_wandb.plugin
    assert plugin.role == "logger" and plugin.default is False and plugin.config is WandbConfig


def test_off_by_default(make, tmp_path):
    trainer = make(None, default_root_dir=str(tmp_path / "root"), enable_checkpointing=False)
    assert "wandb" not in trainer.plugin_names
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert not list((tmp_path / "root").rglob("wandb"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"projct": "x"}, r"trainer\.plugins\.wandb\.projct: .*did you mean 'project'"),
        ({"mode": "cloud"}, r"trainer\.plugins\.wandb\.mode"),
        ({"tags": ["ok", "x" * 65]}, r"trainer\.plugins\.wandb\.tags: .*1 to 64 characters"),
        ({"id": "a/b"}, r"trainer\.plugins\.wandb\.id: .*not a W&B run id"),
        ({"project": "a#b"}, r"trainer\.plugins\.wandb\.project: .*characters W&B refuses"),
        ({"checkpoint_name": "my model"}, r"trainer\.plugins\.wandb\.checkpoint_name: .*artifact names"),
        ({"dir": "s3://bucket/runs"}, r"trainer\.plugins\.wandb\.dir: .*not a local directory"),
        ({"init_kwargs": {"project": "x"}}, r"trainer\.plugins\.wandb\.init_kwargs: .*a setting of its own"),
        ({"init_kwargs": {"resume": "must"}}, r"trainer\.plugins\.wandb\.init_kwargs: .*set by the plugin"),
    ],
)
def test_bad_settings_are_reported_with_their_path(tmp_path, settings, message):
    with pytest.raises(surge.ConfigError, match=message):
        surge.Trainer(default_root_dir=str(tmp_path), plugins={"wandb": settings})


def test_experiment_before_the_run_opens_is_an_error():
    with pytest.raises(surge.SurgeError, match=r"logger\.experiment .* from fit_start on"):
        WandbLogger().experiment  # noqa: B018


# -- what a run records -----------------------------------------------------------------------------------


def test_config_metrics_and_status_of_a_finished_fit(fit, recorder, wandb_runs, tmp_path):
    import wandb

    model = Described(optim={"name": "sgd", "betas": {"b1": 0.9, "b2": 0.999}}, layers=(16, 8))
    settings = {"group": "sweep-1", "job_type": "train", "notes": "first try", "tags": ["vision", "tiny"]}
    trainer = fit(settings, model=model, extras=[recorder], max_epochs=2)
    logger = trainer.logger
    assert isinstance(logger, WandbLogger) and isinstance(logger.experiment, wandb.Run)
    assert logger.experiment.id == logger.run_id

    (run,) = wandb_runs(tmp_path / "root")
    assert run.path.is_relative_to(Path(trainer.run_dir) / "wandb")  # wandb's files are in the run directory
    assert (run.id, run.project, run.name) == (logger.run_id, "surge", "version_0")
    assert (run.group, run.job_type, run.notes, run.tags) == ("sweep-1", "train", "first try", ["vision", "tiny"])
    assert run.config == {
        "optim": {"name": "sgd", "betas": {"b1": 0.9, "b2": 0.999}},
        "layers": [16, 8],
        "lr": 0.05,
        "in_features": 8,  # saved by TinyModule's __init__, the base class
        "hidden": 16,
    }

    # One row per write, in order, value for value; the step is the x-axis of every metric, also of the user's
    # own writes through experiment.log (wandb adds the latest step, none yet: 0).
    written = _written(recorder)
    assert run.rows() == [{"custom": 7.0, "trainer/global_step": 0}, *written]
    assert _train_steps(run) == list(range(1, 9)) and len(written) == 10  # 8 steps, 2 validations
    assert run.step_metrics == {"trainer/global_step": "", "*": "trainer/global_step"}

    assert run.exit_code == 0 and not run.preempting
    assert run.summary["surge/status"] == "finished" and run.summary["surge/run_dir"] == trainer.run_dir
    assert "surge/error" not in run.summary


def test_writes_at_steps_that_go_back_are_all_kept(fit, recorder, wandb_runs, tmp_path):
    fit(model=StepsPerBatchInValidation(), extras=[recorder], max_epochs=2)
    written = _written(recorder)
    steps = [row["trainer/global_step"] for row in written]
    assert any(later < earlier for earlier, later in itertools.pairwise(steps))  # wandb's own step would drop these
    (run,) = wandb_runs(tmp_path / "root")
    assert run.rows() == written


def test_failed_when_training_step_raises(fit, wandb_runs, tmp_path):
    with pytest.raises(RuntimeError, match="boom at step 2"):
        fit(model=FailsAtStep(2))
    (run,) = wandb_runs(tmp_path / "root")
    assert run.exit_code == 1 and not run.preempting
    assert run.summary["surge/status"] == "failed"
    assert run.summary["surge/error"] == "RuntimeError: boom at step 2"
    assert _train_steps(run) == [1, 2]  # written before it failed


def test_killed_by_ctrl_c(fit, wandb_runs, tmp_path):
    trainer = fit(extras=[SendsSignal(signal.SIGINT, step=2)], max_epochs=3)
    assert trainer.interrupted and trainer.global_step == 2
    (run,) = wandb_runs(tmp_path / "root")
    assert run.exit_code == 255 and not run.preempting  # wandb's own exit code for Ctrl-C
    assert run.summary["surge/status"] == "interrupted"
    assert _train_steps(run) == [1, 2]


def test_preempted_is_killed_and_a_resume_finishes_the_same_run(fit, wandb_runs, tmp_path):
    root = str(tmp_path / "root")
    with pytest.raises(Preempted):
        fit(extras=[SendsSignal(signal.SIGTERM, step=3)], max_epochs=2, enable_checkpointing=True)
    (preempted,) = wandb_runs(root)
    assert preempted.exit_code == 255 and preempted.preempting
    assert _train_steps(preempted) == [1, 2, 3]

    trainer = fit(max_epochs=2, enable_checkpointing=True, ckpt_path="last", default_root_dir=root)
    assert trainer.global_step == 8 and trainer.logger.run_id == preempted.id
    first, resumed = wandb_runs(root)
    assert first.path == preempted.path and resumed.id == preempted.id
    assert resumed.exit_code == 0 and not resumed.preempting
    assert _train_steps(resumed) == [4, 5, 6, 7, 8]  # the checkpoint was at step 3


def test_a_resumed_fit_continues_the_run(fit, wandb_runs, tmp_path):
    first = fit({"name": "baseline"}, enable_checkpointing=True)
    run_id = first.logger.run_id
    (ckpt,) = (tmp_path / "root").rglob("*.ckpt")
    assert store.load(str(ckpt))["plugins"]["wandb"] == {"run_id": run_id, "project": "surge", "entity": None}

    other = tmp_path / "elsewhere"
    second = fit(
        model=TinyModule(lr=0.1),
        max_epochs=2,
        enable_checkpointing=True,
        ckpt_path=str(ckpt),
        default_root_dir=str(other),
    )
    assert second.logger.run_id == run_id and second.run_dir != first.run_dir
    (before,) = wandb_runs(tmp_path / "root")
    (after,) = wandb_runs(other)  # the continued run's files are in the new run directory
    assert before.id == after.id == run_id and after.project == "surge"
    assert before.name == "baseline" and after.name == ""  # a continued run keeps its name: none is sent
    assert _train_steps(before) == [1, 2, 3, 4] and _train_steps(after) == [5, 6, 7, 8]
    assert after.config["lr"] == 0.1  # the config follows the hyper-parameters
    assert after.summary["surge/run_dir"] == second.run_dir and after.exit_code == 0


@pytest.mark.slow
def test_a_fit_resumed_in_another_process_continues_the_run(fit, wandb_runs, tmp_path):
    first = fit(enable_checkpointing=True)
    (ckpt,) = (tmp_path / "root").rglob("*.ckpt")
    other = tmp_path / "child"
    child = subprocess.run(
        [sys.executable, CHILD, "resume", str(ckpt), str(other)], capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert f"run_id {first.logger.run_id}" in child.stdout.splitlines()
    (resumed,) = wandb_runs(other)
    assert resumed.id == first.logger.run_id and resumed.exit_code == 0
    assert _train_steps(resumed) == [5, 6, 7, 8]


def test_one_run_across_fit_and_test(fit, wandb_runs, tmp_path):
    trainer = fit()
    trainer.test(datamodule=TinyDataModule())
    fitted, tested = wandb_runs(tmp_path / "root")
    assert fitted.id == tested.id == trainer.logger.run_id
    assert fitted.exit_code == tested.exit_code == 0
    assert len(_train_steps(fitted)) == 4
    assert tested.rows() == [{"test_loss": float(trainer.logged_metrics["test_loss"]), "trainer/global_step": 4}]


def test_an_id_setting_names_the_run_and_wins_over_the_checkpoint(fit, wandb_runs, tmp_path):
    fit({"id": "surge-run-1", "project": "tiny"}, enable_checkpointing=True)
    (ckpt,) = (tmp_path / "root").rglob("*.ckpt")
    trainer = fit({"id": "surge-run-2"}, ckpt_path=str(ckpt), max_epochs=2, default_root_dir=str(tmp_path / "b"))
    assert trainer.logger.run_id == "surge-run-2"
    (first,) = wandb_runs(tmp_path / "root")
    (second,) = wandb_runs(tmp_path / "b")
    assert (first.id, first.project) == ("surge-run-1", "tiny")
    assert (second.id, second.project) == ("surge-run-2", "tiny")  # the project still follows the checkpoint


def test_checkpoints_are_logged_as_an_artifact_only_when_asked(make, fit, wandb_runs, tmp_path):
    fit(enable_checkpointing=True)
    (plain,) = wandb_runs(tmp_path / "root")
    assert plain.artifacts == []

    class Leftovers:
        """Files in the checkpoint directory that are not committed checkpoints."""

        surge_name, surge_kind = "leftovers", "participant"

        @surge.hookimpl
        def train_end(self, event):
            directory = Path(event.trainer.run_dir) / "checkpoints"
            (directory / "uncommitted.ckpt").write_bytes(b"no marker")
            (directory / "corrupt.ckpt").write_bytes(b"wrong digest")
            (directory / "corrupt.ckpt.sha256").write_text(f"{'0' * 64}  corrupt.ckpt\n")

    root = tmp_path / "with-artifacts"
    trainer = make({"log_checkpoints": True}, [Leftovers()], default_root_dir=str(root), logger="wandb", max_epochs=2)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    (run,) = wandb_runs(root)
    (artifact,) = run.artifacts
    assert (artifact.name, artifact.type, list(artifact.aliases)) == (f"model-{run.id}", "model", ["latest"])
    files = run.files(artifact)
    assert sorted(files) == ["epoch=1-step=8.ckpt", "epoch=1-step=8.ckpt.sha256"]
    for name, entry in files.items():
        original = (Path(trainer.run_dir) / "checkpoints" / name).read_bytes()
        assert entry.digest == base64.b64encode(hashlib.md5(original).digest()).decode()
        assert Path(entry.local_path).read_bytes() == original  # the staged copy `wandb sync` uploads
    assert run.exit_code == 0

    named = fit(
        {"log_checkpoints": True, "checkpoint_name": "tiny-model"},
        enable_checkpointing=True,
        default_root_dir=str(tmp_path / "named"),
    )
    (run,) = wandb_runs(tmp_path / "named")
    assert [a.name for a in run.artifacts] == ["tiny-model"] and named.logger.run_id == run.id


def test_a_remote_run_directory_needs_a_local_dir(fit, recorder, wandb_runs, tmp_path):
    root = f"memory://surge-wandb/{tmp_path.name}"
    with pytest.raises(WandbError, match=r"memory://.* is not a local directory.*'dir'"):
        fit(extras=[recorder], default_root_dir=root)
    assert not recorder.of("train_batch_start")

    trainer = fit(
        {"dir": str(tmp_path / "local"), "log_checkpoints": True}, enable_checkpointing=True, default_root_dir=root
    )
    (run,) = wandb_runs(tmp_path / "local")
    assert run.summary["surge/run_dir"] == trainer.run_dir and trainer.run_dir.startswith("memory://")
    (artifact,) = run.artifacts  # copied from the remote checkpoint directory
    assert sorted(run.files(artifact)) == ["epoch=0-step=4.ckpt", "epoch=0-step=4.ckpt.sha256"]


def test_nothing_on_a_non_zero_rank(fit, tmp_path, monkeypatch, recorder):
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: False))
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing wandb now fails: other ranks never do
    trainer = fit(extras=[recorder])
    logger = trainer.logger
    assert recorder.of("setup") and recorder.of("teardown") and not recorder.of("log_metrics")
    assert logger.run is None and logger.run_id is None
    assert logger.experiment.log({"x": 1.0}) is None  # a no-op, as Lightning's DummyExperiment
    assert not (tmp_path / "root").exists()


def test_disabled_mode_writes_nothing(fit, tmp_path):
    trainer = fit({"mode": "disabled"})
    trainer.logger.experiment.log({"x": 1.0})
    assert not (tmp_path / "root").exists() and not list(tmp_path.rglob("*.wandb"))


def test_online_without_credentials_fails_before_training(fit, recorder, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc with a key
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    with pytest.raises(WandbError, match=r"starting a run .*mode 'online'.* API key.*`wandb login`.*'mode': 'offline'"):
        fit({"mode": "online"}, extras=[recorder])
    assert not recorder.of("train_batch_start") and recorder.of("teardown")


def test_logs_into_a_run_the_process_started(fit, wandb_runs, tmp_path, warnings):
    import wandb

    own = wandb.init(dir=str(tmp_path / "own"), project="mine")
    try:
        trainer = fit()
        assert trainer.logger.run is own and wandb.run is own  # still open
        own.log({"after": 1.0})
    finally:
        own.finish()
    assert not list((tmp_path / "root").rglob("*.wandb"))
    (run,) = wandb_runs(tmp_path / "own")
    assert run.project == "mine" and _train_steps(run) == [1, 2, 3, 4]
    assert run.rows()[-1] == {"after": 1.0, "trainer/global_step": 4} and run.exit_code == 0
    assert any("already has a run" in m for m in warnings)


def test_an_instance_can_be_passed_directly(tmp_path, wandb_runs):
    logger = WandbLogger(project="direct", name="direct-run")
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path / "root"),
        plugins=[logger],
        logger=False,
        enable_checkpointing=False,
        max_epochs=1,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    (run,) = wandb_runs(tmp_path / "root")
    assert (run.id, run.project, run.name) == (logger.run_id, "direct", "direct-run")


@pytest.mark.slow
def test_importing_the_plugin_or_building_a_trainer_does_not_import_wandb():
    result = subprocess.run([sys.executable, CHILD, "imports"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "after import: []",
        "after Trainer(): []",
        "after Trainer(logger='wandb'): []",
    ]
