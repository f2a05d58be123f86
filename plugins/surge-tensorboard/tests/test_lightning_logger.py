"""Lightning's ``TensorBoardLogger`` (``surge_lightning.pytorch.loggers.TensorBoardLogger``, from ``surge_tensorboard.lightning``):
its directories, arguments and records in real fits, read back with TensorBoard's reader. Its side-by-side
comparison with Lightning's is ``tests/test_porting.py``'s ``loggers.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.plugins.hparams import api_pb2


class WithExample(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.zeros(2, 8)


def fit(logger: Any, model: surge.Module | None = None, **kwargs: Any) -> surge.Trainer:
    trainer = surge.Trainer(
        logger=logger,
        max_epochs=1,
        limit_train_batches=4,
        limit_val_batches=2,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(model or TinyModule(), datamodule=TinyDataModule())
    return trainer


def test_directories_prefix_and_hparams_as_lightnings(tmp_path: Path, tb: Any) -> None:
    logger = TensorBoardLogger(
        tmp_path, name="exp", version="run_a", sub_dir="tb", prefix="p", default_hp_metric=False, flush_secs=5
    )
    trainer = fit(logger, default_root_dir=str(tmp_path / "elsewhere"))
    assert logger.log_dir == str(tmp_path / "exp" / "run_a" / "tb") and logger.root_dir == str(tmp_path / "exp")
    run = tb.Run(logger.log_dir)
    assert {"p-train_loss", "p-val_loss", "p-epoch"} == set(run.tags("scalars"))
    assert run.hparams() == {}  # without a metric, Lightning's logger writes no hparams record: hparams.yaml only
    assert (tmp_path / "exp" / "run_a" / "tb" / "hparams.yaml").read_text() == "in_features: 8\nhidden: 16\nlr: 0.05\n"
    # the first logger's version directory is the run's, as Lightning's trainer.log_dir and checkpoints
    assert trainer.log_dir == str(tmp_path / "exp" / "run_a")
    assert [p.name for p in (tmp_path / "exp" / "run_a" / "checkpoints").glob("*.ckpt")] == ["epoch=0-step=4.ckpt"]
    assert not (tmp_path / "elsewhere").exists()


def test_versions_count_on_and_hp_metric_is_the_placeholder(tmp_path: Path, tb: Any) -> None:
    for taken in ("version_0", "version_2", "version_x"):
        (tmp_path / "lightning_logs" / taken).mkdir(parents=True)
    logger = TensorBoardLogger(save_dir=tmp_path)
    fit(logger, enable_checkpointing=False)
    assert logger.version == 3 and logger.log_dir == str(tmp_path / "lightning_logs" / "version_3")
    run = tb.Run(logger.log_dir)
    assert run.scalars()["hp_metric"] == [(0, -1.0)]
    assert set(run.hparams()["session_start_info"].hparams) == {"in_features", "hidden", "lr"}
    assert run.hparams()["session_end_info"].status == api_pb2.STATUS_SUCCESS


def test_a_failed_run_is_recorded_as_failed(tmp_path: Path, tb: Any) -> None:
    class Failing(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 2:
                raise RuntimeError("bad batch")
            return super().training_step(batch, batch_idx)

    logger = TensorBoardLogger(tmp_path)
    with pytest.raises(RuntimeError, match="bad batch"):
        fit(logger, Failing(), enable_checkpointing=False)
    run = tb.Run(logger.log_dir)
    assert [step for step, _ in run.scalars()["train_loss"]] == [1, 2]  # every write before the failure is there
    assert run.hparams()["session_end_info"].status == api_pb2.STATUS_FAILURE


def test_log_graph_traces_the_example_input(tmp_path: Path, tb: Any) -> None:
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    fit(logger, WithExample(), enable_checkpointing=False)
    assert tb.Run(logger.log_dir).acc.Graph() is not None


def test_experiment_is_the_summary_writer_in_the_steps(tmp_path: Path, tb: Any) -> None:
    class Images(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.logger.experiment.add_histogram("inputs", batch[0], self.global_step)
            self.logger.log_metrics({"direct": float(batch_idx)}, step=self.global_step)
            return super().training_step(batch, batch_idx)

    logger = TensorBoardLogger(tmp_path)
    fit(logger, Images(), enable_checkpointing=False)
    run = tb.Run(logger.log_dir)
    assert run.histogram_steps("inputs") == [0, 1, 2, 3]
    assert run.scalars()["direct"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]


def test_summary_writer_arguments_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(surge.SurgeError, match=r"flush_sec.*SummaryWriter \(flush_secs"):
        TensorBoardLogger(tmp_path / "logs", flush_sec=5)
    assert not (tmp_path / "logs").exists()
