"""Handwritten digits (scikit-learn's 8x8 images, shipped inside scikit-learn) with a small MLP.

The embedded default of ``surge fit``: 1,797 real images, trains to about 95% validation accuracy in a few
seconds on one CPU core.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge

_FILE = ("datasets", "data", "digits.csv.gz")
"""Where scikit-learn keeps the data set inside its package: one line per image, its 64 pixels and its digit."""


@functools.cache
def load() -> tuple[torch.Tensor, torch.Tensor]:
    """The 1,797 images (pixels scaled to 0..1) and their digits, read from scikit-learn's own file without
    importing scikit-learn (a second or more of every ``surge fit``); once per process."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise surge.SurgeError(
            "the digits example needs scikit-learn, which ships the data set: `pip install scikit-learn` "
            "(or `pip install 'surge[examples]'`)"
        )
    path = Path(spec.origin).parent.joinpath(*_FILE)
    if not path.is_file():  # a scikit-learn that keeps it elsewhere: its own loader finds it
        from sklearn.datasets import load_digits

        x_np, y_np = load_digits(return_X_y=True)
        return torch.tensor(x_np, dtype=torch.float32) / 16.0, torch.tensor(y_np, dtype=torch.long)
    with gzip.open(path, "rt") as f:
        table = torch.tensor([[int(float(v)) for v in line.split(",")] for line in f if line.strip()])
    return table[:, :-1].float() / 16.0, table[:, -1].long()


class DigitsDataModule(surge.DataModule):
    """80/20 split of scikit-learn's digits; pixel intensities (0..16) scaled to 0..1."""

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size, self.val_fraction, self.seed = batch_size, val_fraction, seed

    def setup(self, stage: str) -> None:
        x, y = load()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = int(len(x) * self.val_fraction)
        val_idx, train_idx = order[:n_val], order[n_val:]
        self.train_set = TensorDataset(x[train_idx], y[train_idx])
        self.val_set = TensorDataset(x[val_idx], y[val_idx])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()  # the held-out images: `surge predict` saves their predicted digits


class DigitsClassifier(surge.Module):
    """64 pixels -> 128 hidden units -> 10 classes, Adam with a cosine schedule."""

    def __init__(self, hidden: int = 128, lr: float = 3e-3, max_epochs: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0]).argmax(-1)  # the predicted digit of each image

    def _evaluate(self, batch: Any, prefix: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{prefix}_loss", nn.functional.cross_entropy(logits, y))
        self.log(f"{prefix}_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.hparams.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
