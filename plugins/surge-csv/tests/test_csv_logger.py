"""The CSV logger, read back with the ``csv`` module (and ``yaml`` for the hyper-parameters)."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
import yaml
from surge.testing import ChildLines, TinyDataModule, TinyModule
from surge_csv import read_metrics
from surge_csv._file import MetricsFile

CHILD = Path(__file__).with_name("_child.py")


class Rows:
    """Records what every ``log_metrics`` event carried, as the rows the CSV file should hold."""

    surge_name = "rows"
    surge_kind = "observer"

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    @surge.hookimpl
    def log_metrics(self, event: Any) -> None:
        self.rows.append({"step": event.step, "epoch": event.epoch, **event.metrics})


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _fit(make_trainer: Any, model: TinyModule | None = None, **kwargs: Any) -> surge.Trainer:
    kwargs = {
        "max_epochs": 2,
        "limit_train_batches": 4,
        "limit_val_batches": 2,
        "log_every_n_steps": 2,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **kwargs,
    }
    trainer = make_trainer(**kwargs)
    trainer.fit(model or TinyModule(), datamodule=TinyDataModule())
    return trainer


def test_every_write_is_one_row_read_back_exactly(make_trainer):
    rows = Rows()
    trainer = _fit(make_trainer, plugins=[rows])
    header, written = _csv(Path(trainer.run_dir) / "metrics.csv")
    assert header == ["step", "epoch", "train_loss", "val_loss"]
    assert len(written) == len(rows.rows) == 6  # steps 2 and 4 of each epoch, one validation row each
    for line, expected in zip(written, rows.rows, strict=True):
        assert {k: float(v) for k, v in line.items() if v != ""} == pytest.approx(expected, abs=0, rel=0)
    last_val = [r for r in written if r["val_loss"]][-1]
    assert float(last_val["val_loss"]) == float(trainer.logged_metrics["val_loss"])  # float repr round-trips
    assert yaml.safe_load((Path(trainer.run_dir) / "hparams.yaml").read_text()) == dict(trainer.module.hparams)


def test_a_new_metric_name_widens_the_header_and_keeps_every_row(make_trainer):
    class Late(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.current_epoch == 1:
                self.log("late", torch.tensor(1.5))
            return super().training_step(batch, batch_idx)

    rows = Rows()
    trainer = _fit(make_trainer, Late(), plugins=[rows])
    header, written = _csv(Path(trainer.run_dir) / "metrics.csv")
    assert header == ["step", "epoch", "train_loss", "val_loss", "late"]
    assert [r["late"] for r in written] == ["", "", "", "1.5", "1.5", ""]
    assert [float(r["step"]) for r in written] == [r["step"] for r in rows.rows]
    assert not list(Path(trainer.run_dir).glob("*.tmp-*"))


def test_validate_and_test_after_fit_append_to_the_same_file(make_trainer):
    trainer = _fit(make_trainer, max_epochs=1)
    trainer.validate(datamodule=TinyDataModule())
    trainer.test(datamodule=TinyDataModule())
    header, written = _csv(Path(trainer.run_dir) / "metrics.csv")
    assert "test_loss" in header
    assert [r for r in written if r["val_loss"]][-1]["step"] == "4"
    assert read_metrics(trainer.run_dir)[-1]["test_loss"] == pytest.approx(float(trainer.logged_metrics["test_loss"]))


@pytest.mark.parametrize("switch", [{"logger": False}, {"plugins": {"csv": False}}, {"logger": []}])
def test_switched_off(make_trainer, switch):
    trainer = _fit(make_trainer, max_epochs=1, **switch)
    assert not (Path(trainer.run_dir) / "metrics.csv").exists()


def test_silent_on_other_ranks(make_trainer, monkeypatch):
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: False))
    trainer = _fit(make_trainer, max_epochs=1)
    assert trainer.run_dir is None  # only rank zero creates the run directory
    assert not list(Path(trainer.default_root_dir).rglob("metrics.csv"))


def test_a_partial_last_line_is_dropped_before_appending(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,epoch,loss\n1,0,0.5\n2,0,0.2")  # the second row was cut short
    file = MetricsFile(str(path))
    file.append({"step": 3, "epoch": 0, "loss": 0.125})
    file.close()
    assert path.read_text() == "step,epoch,loss\n1,0,0.5\n3,0,0.125\n"


def test_an_fsspec_run_directory(make_trainer):
    import fsspec

    trainer = _fit(make_trainer, max_epochs=1, default_root_dir="memory://csv-logger-test")
    fs = fsspec.filesystem("memory")
    text = fs.cat_file(f"{trainer.run_dir.removeprefix('memory://')}/metrics.csv").decode()
    assert text.startswith("step,epoch,train_loss,val_loss\n") and text.count("\n") == 4
    fs.rm("/csv-logger-test", recursive=True)


# -- real child processes ---------------------------------------------------------------------------------


def _child(root: Path, max_epochs: int, resume: bool = False, **kwargs: Any) -> subprocess.Popen[str]:
    args = [sys.executable, str(CHILD), str(root), str(max_epochs), *(["last"] if resume else [])]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, **kwargs)


def _complete_rows(path: Path) -> list[dict[str, str]]:
    text = path.read_text()
    assert text.endswith("\n"), "a partial row"
    _header, rows = _csv(path)
    for row in rows:
        assert None not in row and all(v is not None for v in row.values()), f"ragged row {row}"
    return rows


@pytest.mark.slow
def test_sigkill_then_resume_appends_without_duplicate_steps(tmp_path):
    killed = _child(tmp_path, max_epochs=4, stderr=subprocess.DEVNULL)
    lines = ChildLines(killed)
    killed_dir = Path(lines.expect("run "))
    lines.expect("ready")
    time.sleep(random.uniform(0, 0.3))  # somewhere inside epoch 2, after its first row
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(30)
    old = killed_dir / "metrics.csv"
    before = old.read_bytes()
    old_rows = _complete_rows(old)  # the killed run's file parses, with no partial row
    assert any(r["epoch"] == "2" for r in old_rows), "the kill came before any row of epoch 2"
    assert not any(r["epoch"] == "3" and r["val_loss"] for r in old_rows), "the kill came after the last epoch"

    resumed = _child(tmp_path, max_epochs=4, resume=True, stderr=subprocess.PIPE)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    runs = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("run ")]
    assert runs, f"the resumed run did not train: {out}\n{err[-2000:]}"
    new_dir = Path(runs[0])
    assert new_dir != killed_dir
    rows = _complete_rows(new_dir / "metrics.csv")
    train = [int(r["step"]) for r in rows if r["train_loss"]]
    assert train == list(range(1, 33)), "every step once, in order"
    val = [int(r["step"]) for r in rows if r["val_loss"]]
    assert val == [8, 16, 24, 32]
    # the history up to the checkpoint (end of epoch 1) is the killed run's, byte for byte per row
    kept = [r for r in old_rows if int(r["epoch"]) < 2]
    assert rows[: len(kept)] == kept
    assert old.read_bytes() == before, "the killed run's own file is never changed"
