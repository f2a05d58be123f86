"""Lightning's ``CSVLogger`` (``surge_lightning.pytorch.loggers.CSVLogger``, from ``surge_csv.lightning``): its directories,
``metrics.csv`` columns and rows and ``hparams.yaml`` in real fits. Its side-by-side comparison with Lightning's is
``tests/test_porting.py``'s ``loggers.py``."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

import surge
from surge.testing import TinyDataModule, TinyModule
from surge_lightning.pytorch.loggers import CSVLogger


def rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def trainer_for(logger: Any, tmp_path: Path, **kwargs: Any) -> surge.Trainer:
    return surge.Trainer(
        logger=logger,
        default_root_dir=str(tmp_path),
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        log_every_n_steps=2,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **kwargs,
    )


def test_metrics_csv_and_hparams_yaml_as_lightnings(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, name="exp", prefix="run")
    trainer = trainer_for(logger, tmp_path)
    model, data = TinyModule(), TinyDataModule()
    trainer.fit(model, datamodule=data)
    assert logger.log_dir == str(tmp_path / "exp" / "version_0") == trainer.log_dir
    columns, written = rows(Path(logger.log_dir) / "metrics.csv")
    assert columns == ["run-epoch", "run-train_loss", "run-val_loss", "step"]  # sorted, as Lightning's
    assert [(r["step"], r["run-epoch"]) for r in written] == [("2", "0"), ("4", "0"), ("4", "0"), ("6", "1"), ("8", "1"), ("8", "1")]  # fmt: skip
    assert (Path(logger.log_dir) / "hparams.yaml").read_text() == "in_features: 8\nhidden: 16\nlr: 0.05\n"

    trainer.validate(model, datamodule=data, verbose=False)  # the same logger: the same file, one more row
    _, after = rows(Path(logger.log_dir) / "metrics.csv")
    assert after[:-1] == written and after[-1]["run-val_loss"] and after[-1]["step"] == "8"


def test_without_a_name_versions_go_in_save_dir_and_count_on(tmp_path: Path) -> None:
    (tmp_path / "version_4").mkdir()
    logger = CSVLogger(tmp_path, name=None)
    assert logger.name == "" and logger.version == 5 and logger.log_dir == str(tmp_path / "version_5")


def test_direct_writes_default_to_the_row_count_and_a_given_version_replaces_its_file(tmp_path: Path) -> None:
    old = tmp_path / "lightning_logs" / "mine" / "metrics.csv"
    old.parent.mkdir(parents=True)
    old.write_text("step,stale\n0,1\n")
    logger = CSVLogger(tmp_path, version="mine")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logger.log_metrics({"a": 1.0})
        logger.log_metrics({"b": 2.0}, step=10)
        logger.log_metrics({"a": 3.0})
    assert any("exists and is not empty" in str(w.message) for w in caught)
    logger.log_hyperparams({"depth": 3})
    logger.finalize("success")
    columns, written = rows(old)
    assert columns == ["a", "b", "step"]
    assert written == [{"a": "1.0", "b": "", "step": "0"}, {"a": "", "b": "2.0", "step": "10"}, {"a": "3.0", "b": "", "step": "2"}]  # fmt: skip
    assert (old.parent / "hparams.yaml").read_text() == "depth: 3\n"
