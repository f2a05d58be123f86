"""The mlflow plugin through real fits, read back from a real SQLite tracking store with ``MlflowClient``."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import pytest
import surge
import surge_mlflow
from surge import checkpoint as store
from surge.testing import TinyDataModule, TinyModule, assert_discovered
from surge_checkpoint import Preempted
from surge_mlflow import MLflowConfig, MLflowLogger, TrackingStoreError
from surge_mlflow._names import flatten_params, valid_name


class Described(TinyModule):
    """Nested and over-long hyper-parameters, and a metric name MLflow refuses as it is."""

    def __init__(self, optim: dict, note: str, lr: float = 0.05) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        self.log("val/acc@top1", 1.0 - self._loss(batch))


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


def _runs(client, experiment: str):
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


# -- the plugin -------------------------------------------------------------------------------------------


def test_is_discovered_as_an_observer_logger_off_by_default():
    plugin = assert_discovered("mlflow", distribution="surge-mlflow", kind="observer")
    assert plugin is surge_mlflow.plugin
    assert plugin.role == "logger" and plugin.default is False and plugin.config is MLflowConfig


def test_off_by_default(make, tmp_path):
    trainer = make(None, default_root_dir=str(tmp_path), enable_checkpointing=False)
    assert "mlflow" not in trainer.plugin_names
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert not list(tmp_path.rglob("mlflow.db")) and not (tmp_path / "mlartifacts").exists()


@pytest.mark.parametrize("how", ["logger", "logger_list", "plugins"])
def test_selected_by_the_logger_switch_or_by_name(make, plugin_env, tmp_path, how):
    class Other:
        pass

    plugin_env.add(surge.Plugin(name="other-logger", kind="observer", factory=Other, role="logger"))
    kwargs = {
        "logger": {"logger": "mlflow"},
        "logger_list": {"logger": ["other-logger", "mlflow"]},
        "plugins": {"plugins": {"mlflow": {"experiment_name": "x"}}},
    }[how]
    trainer = surge.Trainer(default_root_dir=str(tmp_path), **kwargs)
    assert "mlflow" in trainer.plugin_names
    assert ("other-logger" in trainer.plugin_names) == (how == "logger_list")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"tracking_urii": "sqlite:///x.db"},
            r"trainer\.plugins\.mlflow\.tracking_urii: .*did you mean 'tracking_uri'",
        ),
        ({"tags": {"owner:team": "a"}}, r"trainer\.plugins\.mlflow\.tags: .*'owner:team' \(try 'owner_team'\)"),
        ({"experiment_name": ""}, r"trainer\.plugins\.mlflow\.experiment_name"),
    ],
)
def test_bad_settings_are_reported_with_their_path(tmp_path, settings, message):
    with pytest.raises(surge.ConfigError, match=message):
        surge.Trainer(default_root_dir=str(tmp_path), plugins={"mlflow": settings})


# -- what a run records -----------------------------------------------------------------------------------


def test_params_metrics_tags_and_status_of_a_finished_fit(fit, client, experiment, recorder, mlflow_of, history):
    model = Described(optim={"name": "sgd", "betas": {"b1": 0.9, "b2": 0.999}}, note="x" * 7000)
    trainer = fit({"tags": {"team": "vision", "attempt": 3}}, model=model, extras=[recorder], max_epochs=2)
    run_id = mlflow_of(trainer).run_id
    run = client.get_run(run_id)

    assert run.info.status == "FINISHED"
    assert run.info.run_name == os.path.basename(trainer.run_dir) == "version_0"
    assert run.data.params == {
        "optim.name": "sgd",
        "optim.betas.b1": "0.9",
        "optim.betas.b2": "0.999",
        "note": "x" * 5997 + "...",  # MLflow's limit is 6000 characters
        "lr": "0.05",
        "in_features": "8",  # saved by TinyModule's __init__, the base class
        "hidden": "16",
    }
    tags = run.data.tags
    assert tags["team"] == "vision" and tags["attempt"] == "3"
    assert tags["surge.run_dir"] == trainer.run_dir and tags["surge.status"] == "finished"
    assert "mlflow" in tags["surge.plugins"] and tags["mlflow.source.type"] == "LOCAL"

    # Every write the Trainer made, value for value and step for step, in one metric history per name.
    written: dict[str, list[tuple[int, float]]] = {}
    for event in recorder.of("log_metrics"):
        for name, value in event.metrics.items():
            written.setdefault(valid_name(name), []).append((event.step, value))
    assert set(written) == {"train_loss", "val_loss", "val/acc_top1"}
    assert [step for step, _ in written["train_loss"]] == list(range(1, 9))
    for name, expected in written.items():
        assert history(client, run_id, name) == sorted(expected), name
    for name, value in trainer.logged_metrics.items():
        assert run.data.metrics[valid_name(name)] == float(value)


def test_failed_when_training_step_raises(fit, client, experiment, history):
    with pytest.raises(RuntimeError, match="boom at step 2"):
        fit(model=FailsAtStep(2))
    (run,) = _runs(client, experiment)
    assert run.info.status == "FAILED"
    assert run.data.tags["surge.error"] == "RuntimeError: boom at step 2"
    assert [step for step, _ in history(client, run.info.run_id, "train_loss")] == [1, 2]  # written before it failed


def test_killed_after_ctrl_c(fit, client, mlflow_of, history):
    trainer = fit(extras=[SendsSignal(signal.SIGINT, step=2)], max_epochs=3)
    assert trainer.interrupted and trainer.global_step == 2
    run = client.get_run(mlflow_of(trainer).run_id)
    assert run.info.status == "KILLED" and run.data.tags["surge.status"] == "interrupted"
    assert [step for step, _ in history(client, run.info.run_id, "train_loss")] == [1, 2]


def test_preempted_is_killed_and_a_resume_finishes_the_same_run(fit, client, experiment, tmp_path, history):
    root = str(tmp_path / "root")
    with pytest.raises(Preempted):
        fit(extras=[SendsSignal(signal.SIGTERM, step=3)], max_epochs=2, enable_checkpointing=True)
    (run,) = _runs(client, experiment)
    assert run.info.status == "KILLED"

    trainer = fit(max_epochs=2, enable_checkpointing=True, ckpt_path="last", default_root_dir=root)
    (resumed,) = _runs(client, experiment)
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert trainer.global_step == 8
    assert [step for step, _ in history(client, run.info.run_id, "train_loss")] == list(range(1, 9))


def test_a_resumed_fit_continues_the_run(fit, client, experiment, tmp_path, mlflow_of, history, warnings):
    first = fit(enable_checkpointing=True)
    run_id = mlflow_of(first).run_id
    (ckpt,) = (tmp_path / "root").rglob("*.ckpt")
    assert store.load(str(ckpt))["plugins"]["mlflow"] == {"run_id": run_id, "tracking_uri": mlflow_of(first).store.uri}

    second = fit(model=TinyModule(lr=0.1), max_epochs=2, enable_checkpointing=True, ckpt_path=str(ckpt))
    assert mlflow_of(second).run_id == run_id and second.run_dir != first.run_dir
    (run,) = _runs(client, experiment)
    assert run.info.status == "FINISHED"
    assert [step for step, _ in history(client, run_id, "train_loss")] == list(range(1, 9))
    assert run.data.tags["surge.run_dir"] == second.run_dir
    assert run.data.params["lr"] == "0.05"  # MLflow params never change; the change is reported
    assert any("['lr']" in m and "cannot change" in m for m in warnings)


def test_one_run_per_trainer_across_fit_and_test(fit, client, experiment, mlflow_of, history):
    trainer = fit()
    trainer.test(datamodule=TinyDataModule())
    (run,) = _runs(client, experiment)
    assert run.info.run_id == mlflow_of(trainer).run_id and run.info.status == "FINISHED"
    assert "test_loss" in run.data.metrics and len(history(client, run.info.run_id, "train_loss")) == 4


def test_attaches_to_an_existing_run(fit, client, experiment, history, tmp_path):
    # artifacts of the test's own (a sqlite store without a location would put them in ./mlruns, the checkout)
    experiment_id = client.create_experiment(experiment, artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment_id, run_name="made-elsewhere").info.run_id
    fit({"run_id": run_id})
    (run,) = _runs(client, experiment)
    assert run.info.run_id == run_id and run.info.run_name == "made-elsewhere" and run.info.status == "FINISHED"
    assert len(history(client, run_id, "train_loss")) == 4


def test_an_unknown_run_id_is_an_error_before_training(fit, recorder, store_uri):
    with pytest.raises(TrackingStoreError, match=r"run 0123456789abcdef does not exist .*" + re.escape(store_uri)):
        fit({"run_id": "0123456789abcdef"}, extras=[recorder])
    assert not recorder.of("train_batch_start")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["sqlite", "http"])
def test_an_unreachable_store_is_an_error_naming_it_before_training(fit, recorder, tmp_path, monkeypatch, kind):
    if kind == "sqlite":
        (tmp_path / "a-file").write_text("not a directory")
        uri = "sqlite:///" + (tmp_path / "a-file" / "mlflow.db").as_posix()
    else:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's default retries take minutes
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(TrackingStoreError, match=re.escape(repr(uri))) as caught:
        fit({"tracking_uri": uri}, extras=[recorder])
    assert caught.value.uri == uri
    assert not recorder.of("train_batch_start") and recorder.of("teardown")


def test_default_store_in_the_root_dir_and_checkpoints_as_artifacts(make, tmp_path):
    class Leftovers:
        """Files in the checkpoint directory that are not committed checkpoints."""

        surge_name, surge_kind = "leftovers", "participant"

        @surge.hookimpl
        def train_end(self, event):
            directory = os.path.join(event.trainer.run_dir, "checkpoints")
            with open(os.path.join(directory, "uncommitted.ckpt"), "wb") as f:
                f.write(b"no marker")
            with open(os.path.join(directory, "corrupt.ckpt"), "wb") as f:
                f.write(b"wrong digest")
            with open(os.path.join(directory, "corrupt.ckpt.sha256"), "w") as f:
                f.write(f"{'0' * 64}  corrupt.ckpt\n")

    root = tmp_path / "root"
    trainer = make({"log_checkpoints": True}, [Leftovers()], default_root_dir=str(root), logger="mlflow", max_epochs=2)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    logger = trainer.plugin("mlflow")

    assert (root / "mlflow.db").is_file() and logger.store.uri == "sqlite:///" + (root / "mlflow.db").as_posix()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=logger.store.uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "version_0"
    assert client.get_experiment(run.info.experiment_id).name == "surge"
    names = [a.path for a in client.list_artifacts(logger.run_id, "checkpoints")]
    assert names == ["checkpoints/epoch=1-step=8.ckpt", "checkpoints/epoch=1-step=8.ckpt.sha256"]
    assert (root / "mlartifacts").is_dir()
    local = client.download_artifacts(logger.run_id, "checkpoints", str(tmp_path / "download"))
    assert store.load(os.path.join(local, "epoch=1-step=8.ckpt"))["global_step"] == 8  # the marker came along

    # Resumed under another root dir without a tracking_uri: the run goes on in the store the checkpoint names.
    other = tmp_path / "elsewhere"
    resumed = make({}, default_root_dir=str(other), logger="mlflow", max_epochs=3)
    resumed.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=os.path.join(local, "epoch=1-step=8.ckpt"))
    assert resumed.plugin("mlflow").run_id == logger.run_id
    assert not (other / "mlflow.db").exists()
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["surge.run_dir"] == resumed.run_dir
    assert [m.step for m in client.get_metric_history(logger.run_id, "train_loss")] == list(range(1, 13))


def test_artifacts_of_a_sqlite_store_are_kept_next_to_it(fit, client, store_uri, mlflow_of):
    trainer = fit({"log_checkpoints": True}, enable_checkpointing=True)
    run = client.get_run(mlflow_of(trainer).run_id)
    next_to_store = (Path(store_uri[len("sqlite:///") :]).parent / "mlartifacts").as_uri()
    assert run.info.artifact_uri.startswith(next_to_store)
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/epoch=0-step=4.ckpt",
        "checkpoints/epoch=0-step=4.ckpt.sha256",
    ]


def test_nothing_on_a_non_zero_rank(fit, tmp_path, monkeypatch, recorder):
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: False))
    uri = "sqlite:///" + (tmp_path / "never" / "mlflow.db").as_posix()
    trainer = fit({"tracking_uri": uri}, extras=[recorder])
    logger = trainer.plugin("mlflow")
    assert recorder.of("setup") and recorder.of("teardown") and not recorder.of("log_metrics")
    assert logger.run_id is None and logger.store is None
    assert not (tmp_path / "never").exists()


def test_an_instance_can_be_passed_directly(tmp_path, store_uri, client, experiment):
    logger = MLflowLogger(tracking_uri=store_uri, experiment_name=experiment, run_name="direct")
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path), plugins=[logger], logger=False, enable_checkpointing=False, max_epochs=1
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert client.get_run(logger.run_id).info.run_name == "direct"


# -- names and values MLflow accepts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("train_loss", "train_loss"),
        ("val/acc", "val/acc"),
        ("lr-SGD pg1", "lr-SGD pg1"),
        ("val/acc@top1", "val/acc_top1"),
        ("loss:x", "loss_x"),
        ("a//b/", "a/b"),
        ("/abs", "abs"),
        ("./a/../b", "_/a/__/b"),
        ("", "_"),
        ("x" * 300, "x" * 250),
    ],
)
def test_metric_names_are_made_valid(name, expected):
    assert valid_name(name) == expected


def test_params_are_flattened_and_stringified():
    import argparse

    flat = flatten_params({"a": {"b": {"c": 1}, "d": [1, 2]}, "e": None, "f": {}, "g": argparse.Namespace(h=True)})
    assert flat == {"a.b.c": "1", "a.d": "[1, 2]", "e": "None", "f": "{}", "g.h": "True"}
