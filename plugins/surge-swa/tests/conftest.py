"""Shared pieces of the surge-swa tests: a module with batch norm and an epoch scheduler, data in a fixed
order, a plugin that saves a checkpoint at one point and crashes (all through the ``kit`` fixture), and a
short fit (the ``fit`` fixture)."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader

BATCHES = 4  # training batches per epoch in every test


class BNModule(TinyModule):
    """TinyModule with a batch-norm layer, SGD with momentum and a per-epoch StepLR that halves the rate."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class FixedOrder(TinyDataModule):
    """TinyDataModule without shuffling, so a hand-written loop sees the batches the Trainer saw."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size)


def fixed_batches() -> Iterator[Any]:
    """The first ``BATCHES`` training batches of :class:`FixedOrder`, as every epoch of a test sees them."""
    data = FixedOrder()
    data.setup("fit")
    return itertools.islice(iter(data.train_dataloader()), BATCHES)


class Killed(Exception):
    """Ends a run right after its checkpoint, as a crash would."""


class SaveAt:
    """Saves a checkpoint at ``train_batch_end`` of (epoch, batch_idx), or at ``train_epoch_end`` of epoch
    when batch_idx is None, then raises :class:`Killed`."""

    surge_name = "save_at"

    def __init__(self, epoch: int, batch_idx: int | None, path: str) -> None:
        self.epoch, self.batch_idx, self.path = epoch, batch_idx, path

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if (event.trainer.current_epoch, event.batch_idx) == (self.epoch, self.batch_idx):
            event.trainer.save_checkpoint(self.path)
            raise Killed

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        if self.batch_idx is None and event.epoch == self.epoch:
            event.trainer.save_checkpoint(self.path)
            raise Killed


def float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Clones of a module's parameters and floating-point buffers, by name."""
    named = itertools.chain(module.named_parameters(), module.named_buffers())
    return {name: t.detach().clone() for name, t in named if t.is_floating_point()}


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(plugins, model=None, datamodule=None, ckpt_path=None, **trainer_kwargs)``: a short real fit in
    ``tmp_path``: 3 epochs of 4 training and 2 validation batches, no logger, checkpoint plugin, progress or
    summary; the model is a :class:`BNModule` made after ``torch.manual_seed(0)``."""

    def run(
        plugins: Any,
        model: surge.Module | None = None,
        datamodule: surge.DataModule | None = None,
        ckpt_path: str | None = None,
        **kwargs: Any,
    ) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path / "root"))
        kwargs.setdefault("max_epochs", 3)
        kwargs.setdefault("limit_train_batches", BATCHES)
        kwargs.setdefault("limit_val_batches", 2)
        trainer = surge.Trainer(plugins=plugins, **quiet_trainer_args(**kwargs))
        if model is None:
            torch.manual_seed(0)
            model = BNModule()
        torch.manual_seed(1)
        trainer.fit(model, datamodule=datamodule or TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run


def plugin_of(trainer: surge.Trainer, name: str) -> Any:
    """The active plugin object called ``name``."""
    return trainer.plugin(name)


@pytest.fixture
def kit() -> types.SimpleNamespace:
    """This file's helpers: ``BATCHES``, ``BNModule``, ``FixedOrder``, ``fixed_batches``, ``Killed``,
    ``SaveAt``, ``float_state`` and ``plugin_of``."""
    return types.SimpleNamespace(
        BATCHES=BATCHES,
        BNModule=BNModule,
        FixedOrder=FixedOrder,
        fixed_batches=fixed_batches,
        Killed=Killed,
        SaveAt=SaveAt,
        float_state=float_state,
        plugin_of=plugin_of,
    )
