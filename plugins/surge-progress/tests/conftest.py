"""Shared pieces of the surge-progress tests: modules that log to the progress bar, a short fit, and a
counter of ``trainer.progress_bar_metrics`` reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class Logged(TinyModule):
    """Logs ``loss`` per step and ``val_loss``/``test_loss`` per epoch, all with ``prog_bar=True``."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch), prog_bar=True)


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(plugins=None, model=None, datamodule=None, **trainer_kwargs)``: a short real fit writing into
    ``tmp_path``: 2 epochs of 4 training and 2 validation batches, no logger, no checkpoints, no model summary
    unless given."""

    def run(plugins: Any = None, model: surge.Module | None = None, datamodule: Any = None, **kwargs: Any):
        kwargs.setdefault("default_root_dir", str(tmp_path))
        kwargs.setdefault("max_epochs", 2)
        kwargs.setdefault("limit_train_batches", 4)
        kwargs.setdefault("limit_val_batches", 2)
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_checkpointing", False)
        kwargs.setdefault("enable_model_summary", False)
        trainer = surge.Trainer(plugins=plugins, **kwargs)
        torch.manual_seed(0)
        trainer.fit(model or Logged(), datamodule=datamodule or TinyDataModule())
        return trainer

    return run


@pytest.fixture
def metric_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts reads of ``Trainer.progress_bar_metrics`` (each copies the values to the host): one entry per
    read, holding ``trainer.state.total_batches`` at that moment."""
    reads: list[int] = []
    original = surge.Trainer.progress_bar_metrics

    def counted(self: surge.Trainer) -> dict[str, float]:
        reads.append(self.state.total_batches)
        return original.fget(self)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(surge.Trainer, "progress_bar_metrics", property(counted))
    return reads
