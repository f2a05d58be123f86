"""What the Hydra configs of ``tests/test_hydra_lightning.py`` name in ``_target_`` (Hydra imports them by
their dotted path, as a project's ``configs/`` name its own modules): a callback that counts epochs and a
Module whose ``__init__`` takes omegaconf containers, each for Surge and for Lightning."""

from __future__ import annotations

import itertools
from typing import Any

import lightning
import surge
import torch
from surge.compat import Callback  # moved by lightning-move
from torch import nn


def _counter(base: type) -> type:
    class EpochCounter(base):  # type: ignore[misc,valid-type]
        def __init__(self, tag: str) -> None:
            self.tag = tag
            self.epochs = 0

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.epochs += 1

    return EpochCounter


SurgeEpochCounter = _counter(Callback)
LightningEpochCounter = _counter(lightning.pytorch.Callback)


def _model(base: type) -> type:
    class Net(base):  # type: ignore[misc,valid-type]
        """``hidden`` and ``tags`` arrive as ``ListConfig``, ``optim`` as a ``DictConfig`` holding a list."""

        def __init__(self, hidden: Any, optim: Any, tags: Any = ()) -> None:
            super().__init__()
            self.save_hyperparameters()
            sizes = [4, *hidden, 1]
            self.net = nn.Sequential(*(nn.Linear(a, b) for a, b in itertools.pairwise(sizes)))
            self.lr = optim["lr"]

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    return Net


SurgeNet = _model(surge.Module)
LightningNet = _model(lightning.LightningModule)
