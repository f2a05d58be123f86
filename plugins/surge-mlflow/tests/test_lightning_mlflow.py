"""Lightning's ``MLFlowLogger`` (``surge_lightning.pytorch.loggers.MLFlowLogger``, from ``surge_mlflow.lightning``) in real
fits, into the session's SQLite tracking store, read back with an ``MlflowClient``: its run, params, metrics,
status and checkpoints, and the arguments that name an existing run or a store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_lightning.pytorch.loggers import MLFlowLogger
from surge_mlflow import TrackingStoreError


def _artifacts(tmp_path: Path) -> str:
    """The experiment's artifact folder, in the test's own folder: without one, MLflow puts the artifacts of an
    experiment in a database store under ``./mlruns`` (Lightning passes its ``artifact_location=None`` on)."""
    return (tmp_path / "artifacts").as_uri()


def fit(logger: Any, tmp_path: Path, model: surge.Module | None = None, **kwargs: Any) -> surge.Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    trainer = surge.Trainer(
        logger=logger,
        default_root_dir=str(tmp_path),
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        log_every_n_steps=2,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(model or TinyModule(), datamodule=TinyDataModule())
    return trainer


class Nested(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.hparams["optimizer"] = {"name": "sgd", "momentum": 0.9}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0:  # the run's client, as self.logger.experiment in a step
            self.logger.experiment.set_tag(self.logger.run_id, "seen_in_step", str(self.global_step))
        return super().training_step(batch, batch_idx)


def test_a_fit_is_one_run_with_lightnings_params_metrics_and_status(
    tmp_path: Path, store_uri: str, experiment: str, client: Any, history: Callable[..., Any]
) -> None:
    logger = MLFlowLogger(
        experiment_name=experiment,
        tracking_uri=store_uri,
        run_name="first",
        tags={"team": "a"},
        artifact_location=_artifacts(tmp_path),
    )
    fit(logger, tmp_path, Nested())
    run = client.get_run(logger.run_id)
    assert logger.version == logger.run_id and logger.name == logger.experiment_id == run.info.experiment_id
    assert client.get_experiment(logger.experiment_id).name == experiment and logger.save_dir is None
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert run.data.tags["team"] == "a" and run.data.tags["seen_in_step"] == "4"
    assert run.data.params == {"optimizer/name": "sgd", "optimizer/momentum": "0.9"}  # joined by "/", as Lightning's
    assert [step for step, _ in history(client, logger.run_id, "train_loss")] == [2, 4, 6, 8]
    assert [step for step, _ in history(client, logger.run_id, "epoch")] == [2, 4, 4, 6, 8, 8]


def test_a_failed_fit_ends_its_run_failed(tmp_path: Path, store_uri: str, experiment: str, client: Any) -> None:
    class Failing(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.global_step == 3:
                raise RuntimeError("bad batch")
            return super().training_step(batch, batch_idx)

    logger = MLFlowLogger(experiment_name=experiment, tracking_uri=store_uri, artifact_location=_artifacts(tmp_path))
    with pytest.raises(RuntimeError, match="bad batch"):
        fit(logger, tmp_path, Failing())
    assert client.get_run(logger.run_id).info.status == "FAILED"


def test_run_id_continues_that_run_and_an_unknown_one_is_refused(
    tmp_path: Path, store_uri: str, experiment: str, client: Any
) -> None:
    first = MLFlowLogger(experiment_name=experiment, tracking_uri=store_uri, artifact_location=_artifacts(tmp_path))
    first.log_metrics({"before": 1.0}, step=1)
    again = MLFlowLogger(tracking_uri=store_uri, run_id=first.run_id)
    fit(again, tmp_path)
    assert again.run_id == first.run_id and again.experiment_id == first.experiment_id
    assert {"before", "train_loss"} <= set(client.get_run(first.run_id).data.metrics)

    unknown = MLFlowLogger(tracking_uri=store_uri, run_id="0" * 32)
    with pytest.raises(TrackingStoreError, match=r"no such run .*leave run_id out"):
        fit(unknown, tmp_path / "unknown")
    assert not (tmp_path / "unknown").exists()


@pytest.mark.parametrize(
    ("log_model", "uploads"), [(True, ["epoch=1-step=8"]), ("all", ["epoch=0-step=4", "epoch=1-step=8"])]
)
def test_log_model_uploads_the_checkpoints(
    tmp_path: Path, store_uri: str, experiment: str, client: Any, log_model: Any, uploads: list[str]
) -> None:
    logger = MLFlowLogger(
        experiment_name=experiment, tracking_uri=store_uri, log_model=log_model, artifact_location=_artifacts(tmp_path)
    )
    fit(logger, tmp_path, enable_checkpointing=True)
    artifacts = sorted(a.path for a in client.list_artifacts(logger.run_id))
    assert artifacts == uploads
    assert [a.path for a in client.list_artifacts(logger.run_id, uploads[-1])] == [f"{uploads[-1]}/{uploads[-1]}.ckpt"]


def test_the_default_store_is_lightnings_file_store_and_nothing_is_made_before_use(tmp_path: Path) -> None:
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))
    assert logger.save_dir == str(tmp_path / "mlruns") and not (tmp_path / "mlruns").exists()
    with pytest.raises(surge.SurgeError, match=r"log_model='best'.*False.*True.*'all'"):
        MLFlowLogger(log_model="best")  # type: ignore[arg-type]
