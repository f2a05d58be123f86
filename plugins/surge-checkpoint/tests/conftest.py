"""Shared pieces of the surge-checkpoint tests: a module whose monitored metric follows a script, and a
short fit with given checkpoint plugins."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class Scored(TinyModule):
    """Logs ``score`` once per validation epoch (and at the end of every training epoch), taken from
    ``scores`` by epoch, so that a test knows which checkpoints rank."""

    def __init__(self, scores: Sequence[float] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scores = list(scores)

    def _score(self) -> torch.Tensor:
        epoch = self.trainer.current_epoch
        return torch.tensor(float(self.scores[epoch]) if epoch < len(self.scores) else 0.0)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self.log("score", self._score())

    def on_train_epoch_end(self) -> None:
        self.log("train_score", self._score())


def checkpoint_names(directory: str | os.PathLike[str]) -> list[str]:
    """The committed checkpoint files of a directory (markers and temp files left out)."""
    path = Path(directory)
    if not path.exists():
        return []
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".ckpt") and not p.name.startswith("."))


@pytest.fixture
def scored() -> type[Scored]:
    """The :class:`Scored` module class."""
    return Scored


@pytest.fixture
def names() -> Callable[[str | os.PathLike[str]], list[str]]:
    """:func:`checkpoint_names`."""
    return checkpoint_names


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(plugins, model=None, ckpt_path=None, **trainer_kwargs)``: a short real fit writing into
    ``tmp_path / "root"``; 4 training and 2 validation batches per epoch, no sanity check, no other default plugins
    but the checkpoint plugin."""

    def run(plugins: Any = None, model: surge.Module | None = None, ckpt_path: str | None = None, **kwargs: Any):
        kwargs.setdefault("default_root_dir", str(tmp_path / "root"))
        kwargs.setdefault("max_epochs", 1)
        kwargs.setdefault("limit_train_batches", 4)
        kwargs.setdefault("limit_val_batches", 2)
        kwargs.setdefault("num_sanity_val_steps", 0)
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
        trainer = surge.Trainer(plugins=plugins, **kwargs)
        torch.manual_seed(0)
        trainer.fit(model or TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run
