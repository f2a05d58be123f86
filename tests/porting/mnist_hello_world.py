"""Lightning's "Introduction to PyTorch Lightning" (the MNIST hello world),
https://lightning.ai/docs/pytorch/stable/notebooks/lightning_examples/mnist-hello-world.html
(source: Lightning-AI/tutorials, lightning_examples/mnist-hello-world/hello-world.py).

Kept: a ``Config`` dataclass; first the simplest model (``training_step(self, batch, batch_nb)``, Adam at 0.02)
fitted on a loader with ``Trainer(accelerator=..., devices=..., max_epochs=...)``; then ``LitMNIST``, which holds its
own data (``prepare_data``, ``setup(stage)`` with ``random_split``, the three ``*_dataloader`` methods) and logs
TorchMetrics ``Accuracy`` objects it updates itself (``self.val_accuracy.update(...)``, ``self.log("val_acc",
self.val_accuracy, prog_bar=True)``), trained with ``logger=CSVLogger(save_dir=config.save_dir)``: ``trainer.fit(
model)``, ``trainer.test(ckpt_path="best")``, ``trainer.fit(model)`` again on the same Trainer, then ``metrics.csv``
read back from ``trainer.logger.log_dir`` with pandas. scikit-learn's 8x8 digits stand in for MNIST (so the first
layer has 64 inputs where the tutorial's has 784); the tutorial's hidden size, learning rates, batch size and
epochs.
"""

import os
from dataclasses import dataclass

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.loggers import CSVLogger
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import Accuracy


@dataclass
class Config:
    data_dir: str = os.environ.get("PATH_DATASETS", ".")
    save_dir: str = "logs/"
    batch_size: int = 256 if torch.cuda.is_available() else 64
    max_epochs: int = 3
    accelerator: str = "auto"
    devices: int = 1


config = Config()


def digits(data_dir, train):
    """Stands in for ``MNIST(data_dir, train=...)``: the first 1500 of scikit-learn's digits to train, the rest to
    test, as (1, 8, 8) images in [0, 1] (``transforms.ToTensor()``)."""
    path = os.path.join(data_dir, "digits.pt")
    if not os.path.exists(path):  # "download"
        images, labels = load_digits(return_X_y=True)
        torch.save((torch.tensor(images / 16.0, dtype=torch.float32).view(-1, 1, 8, 8), torch.tensor(labels)), path)
    images, labels = torch.load(path)
    part = slice(0, 1500) if train else slice(1500, None)
    return TensorDataset(images[part], labels[part])


class MNISTModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8 * 8, 10)

    def forward(self, x):
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch, batch_nb):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


class LitMNIST(L.LightningModule):
    def __init__(self, data_dir: str = config.data_dir, hidden_size: int = 64, learning_rate: float = 2e-4):
        super().__init__()
        self.data_dir = data_dir
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate

        self.num_classes = 10
        self.dims = (1, 8, 8)
        channels, width, height = self.dims
        self.mean, self.std = 0.3, 0.4  # transforms.Normalize

        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * width * height, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, self.num_classes),
        )
        self.val_accuracy = Accuracy(task="multiclass", num_classes=10)
        self.test_accuracy = Accuracy(task="multiclass", num_classes=10)

    def forward(self, x):
        x = self.model((x - self.mean) / self.std)
        return F.log_softmax(x, dim=1)

    def training_step(self, batch, batch_nb):
        x, y = batch
        logits = self(x)
        return F.nll_loss(logits, y)

    def validation_step(self, batch, batch_nb):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        preds = torch.argmax(logits, dim=1)
        self.val_accuracy.update(preds, y)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", self.val_accuracy, prog_bar=True)

    def test_step(self, batch, batch_nb):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        preds = torch.argmax(logits, dim=1)
        self.test_accuracy.update(preds, y)
        self.log("test_loss", loss, prog_bar=True)
        self.log("test_acc", self.test_accuracy, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)

    def prepare_data(self):
        digits(self.data_dir, train=True)
        digits(self.data_dir, train=False)

    def setup(self, stage=None):
        if stage == "fit" or stage is None:
            full = digits(self.data_dir, train=True)
            self.mnist_train, self.mnist_val = random_split(full, [1300, 200])
        if stage == "test" or stage is None:
            self.mnist_test = digits(self.data_dir, train=False)

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=config.batch_size)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=config.batch_size)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=config.batch_size)


def main(root_dir):
    L.seed_everything(42)
    simple = MNISTModel()
    train_loader = DataLoader(digits(config.data_dir, train=True), batch_size=config.batch_size)
    trainer = L.Trainer(accelerator=config.accelerator, devices=config.devices, max_epochs=config.max_epochs)
    trainer.fit(simple, train_loader)
    simple_trainer = trainer

    model = LitMNIST()
    trainer = L.Trainer(
        accelerator=config.accelerator,
        devices=config.devices,
        max_epochs=config.max_epochs,
        logger=CSVLogger(save_dir=config.save_dir),
    )
    trainer.fit(model)
    fit_metrics = dict(trainer.callback_metrics)
    tested = trainer.test(ckpt_path="best")
    test_metrics = dict(trainer.callback_metrics)
    trainer.fit(model)  # as the tutorial does: the Trainer has finished, so nothing more is trained

    metrics = pd.read_csv(f"{trainer.logger.log_dir}/metrics.csv")
    del metrics["step"]
    metrics.set_index("epoch", inplace=True)
    return {
        "simple": simple,
        "simple_trainer": simple_trainer,
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "test_metrics": test_metrics,
        "tested": tested,
        "metrics": metrics.dropna(axis=1, how="all"),
        "log_dir": trainer.logger.log_dir,
    }
