"""``surge plot`` (surge-csv's command): metrics.csv to a PNG, with train and validation curves sharing panels."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from surge.cli import main
from surge.testing import TinyDataModule, TinyModule
from surge_csv import plot

CSV = """step,epoch,val_loss,val_acc,train_loss_epoch,train_loss_step
5,0,,,,2.0
10,0,,,,1.0
10,0,1.5,0.5,1.25,
15,1,,,,0.5
20,1,0.75,0.8,0.6,
"""


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_stems_group_stages_and_reductions() -> None:
    assert [plot.stem(n) for n in ("val_loss", "train_loss_epoch", "train_loss_step", "lr-SGD", "val_")] == [
        "loss",
        "loss",
        "loss",
        "lr-SGD",
        "val_",
    ]


def test_panels_points_and_selection(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text(CSV)
    _, series = plot.load(str(tmp_path))
    assert plot.select(series, None) == {
        "loss": ["train_loss_step", "val_loss", "train_loss_epoch"],
        "acc": ["val_acc"],
    }
    assert plot.select(series, ["acc"]) == {"acc": ["val_acc"]}
    assert plot.points(series["train_loss_step"], "step") == ([5.0, 10.0, 15.0], [2.0, 1.0, 0.5])
    assert plot.points(series["train_loss_step"], "epoch") == ([0.0, 1.0], [1.5, 0.5])  # epoch means


def test_a_real_run_plots_to_png(make_trainer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = make_trainer(max_epochs=2, limit_train_batches=4, limit_val_batches=2, log_every_n_steps=1)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    out = tmp_path / "curves.png"
    assert main(["plot", trainer.run_dir, "-o", str(out), "--x", "epoch"]) == 0
    width, height = _png_size(out)
    assert width > 300 and height > 200
    assert "1 panel: loss" in capsys.readouterr().out
    assert main(["plot", trainer.run_dir]) == 0
    assert (Path(trainer.run_dir) / "metrics.png").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plot", "{tmp}/nowhere"], "no such directory"),
        (["plot", "{tmp}"], "no metrics.csv in it"),
        (["plot", "{run}", "--metrics", "los"], "--metrics: no metric 'los'; logged: train_loss_step, val_loss"),
    ],
)
def test_errors_say_what_and_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(CSV)
    assert main([a.format(tmp=tmp_path, run=run) for a in args]) == 1
    assert message in capsys.readouterr().err
