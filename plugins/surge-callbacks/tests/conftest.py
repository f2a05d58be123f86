"""Shared pieces of the surge-callbacks tests: a short real fit writing into the test's directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(plugins=None, model=None, datamodule=None, ckpt_path=None, **trainer_kwargs)``: a real fit of 4
    training and 2 validation batches per epoch, 2 epochs, no sanity check, no logger, no default
    checkpoints, progress bar or summary unless given; returns the Trainer."""

    def run(
        plugins: Any = None,
        model: surge.Module | None = None,
        datamodule: Any = None,
        ckpt_path: str | None = None,
        **kwargs: Any,
    ) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path))
        kwargs.setdefault("max_epochs", 2)
        kwargs.setdefault("limit_train_batches", 4)
        kwargs.setdefault("limit_val_batches", 2)
        kwargs.setdefault("num_sanity_val_steps", 0)
        trainer = surge.Trainer(plugins=plugins, **quiet_trainer_args(**kwargs))
        torch.manual_seed(0)
        trainer.fit(model or TinyModule(), datamodule=datamodule or TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run
