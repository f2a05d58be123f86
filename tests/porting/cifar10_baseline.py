"""Lightning's "PyTorch Lightning CIFAR10 ~94% Baseline Tutorial",
https://lightning.ai/docs/pytorch/stable/notebooks/lightning_examples/cifar10-baseline.html
(source: Lightning-AI/tutorials, lightning_examples/cifar10-baseline/baseline.py).

Kept: ``pl.seed_everything(7)`` under ``import lightning.pytorch as pl``; ``LitResnet(lr=0.05)`` with
``save_hyperparameters()``, ``self.log("train_loss", loss)``, an ``evaluate`` shared by ``validation_step`` and
``test_step`` that logs ``{stage}_loss``/``{stage}_acc`` (``torchmetrics.functional.accuracy``) with ``prog_bar=True``;
SGD with momentum and weight decay and a ``OneCycleLR`` sized from ``self.trainer.max_epochs`` with ``"interval":
"step"``; ``Trainer(max_epochs=..., accelerator="auto", devices=1, logger=CSVLogger(save_dir="logs/"), callbacks=[
LearningRateMonitor(logging_interval="step")])``, ``fit(model, train_dataloaders=..., val_dataloaders=...)``,
``test(model, dataloaders=...)``, ``metrics.csv`` read back from ``trainer.logger.log_dir``; then ``SWAResnet(
LitResnet)``, whose ``__init__`` calls ``super().__init__()`` (the base's ``save_hyperparameters()``) and then
``save_hyperparameters("lr")``, averages the trained network with ``torch.optim.swa_utils.AveragedModel`` in
``on_train_epoch_end`` and is fitted and tested by a second Trainer. A two-layer convolutional network stands in for
ResNet-18, 3x8x8 images of ten classes for CIFAR-10; the tutorial's learning rates, batch size and splits (80/20 with
the generator seeded 42), 2 epochs where it has 5.
"""

import os

import lightning.pytorch as pl
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger
from torch.optim.lr_scheduler import OneCycleLR
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics.functional import accuracy

PATH_DATASETS = os.environ.get("PATH_DATASETS", ".")
BATCH_SIZE = 256 if torch.cuda.is_available() else 64
NUM_WORKERS = 0  # the tutorial: int(os.cpu_count() / 2)
TRAIN_SIZE = 640  # the tutorial's CIFAR-10 training set has 50000 images


def small_cifar(n, seed):
    """Ten classes of 3x8x8 images (a pattern per class plus noise): a stand-in for CIFAR-10."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(10, (n,), generator=generator)
    prototypes = torch.randn(10, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    return TensorDataset(prototypes[labels] + 0.8 * torch.randn(n, 3, 8, 8, generator=generator), labels)


def split_dataset(dataset, val_split=0.2, train=True):
    """Splits the dataset into train and validation set."""
    splits = get_splits(len(dataset), val_split)
    dataset_train, dataset_val = random_split(dataset, splits, generator=torch.Generator().manual_seed(42))
    return dataset_train if train else dataset_val


def get_splits(len_dataset, val_split):
    """Computes split lengths for train and validation set."""
    if isinstance(val_split, int):
        return [len_dataset - val_split, val_split]
    if isinstance(val_split, float):
        val_len = int(val_split * len_dataset)
        return [len_dataset - val_len, val_len]
    raise ValueError(f"Unsupported type {type(val_split)}")


def create_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


class LitResnet(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model()

    def forward(self, x):
        out = self.model(x)
        return F.log_softmax(out, dim=1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        self.log("train_loss", loss)
        return loss

    def evaluate(self, batch, stage=None):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        preds = torch.argmax(logits, dim=1)
        acc = accuracy(preds, y, task="multiclass", num_classes=10)
        if stage:
            self.log(f"{stage}_loss", loss, prog_bar=True)
            self.log(f"{stage}_acc", acc, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self.evaluate(batch, "val")

    def test_step(self, batch, batch_idx):
        self.evaluate(batch, "test")

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
        steps_per_epoch = TRAIN_SIZE * 9 // 10 // BATCH_SIZE  # the tutorial's 45000 // BATCH_SIZE
        scheduler_dict = {
            "scheduler": OneCycleLR(optimizer, 0.1, epochs=self.trainer.max_epochs, steps_per_epoch=steps_per_epoch),
            "interval": "step",
        }
        return {"optimizer": optimizer, "lr_scheduler": scheduler_dict}


class SWAResnet(LitResnet):
    def __init__(self, trained_model, lr=0.01):
        super().__init__()
        self.save_hyperparameters("lr")
        self.model = trained_model
        self.swa_model = AveragedModel(self.model)

    def forward(self, x):
        out = self.swa_model(x)
        return F.log_softmax(out, dim=1)

    def on_train_epoch_end(self):
        self.swa_model.update_parameters(self.model)

    def validation_step(self, batch, batch_idx, stage=None):
        x, y = batch
        logits = F.log_softmax(self.model(x), dim=1)
        loss = F.nll_loss(logits, y)
        preds = torch.argmax(logits, dim=1)
        acc = accuracy(preds, y, task="multiclass", num_classes=10)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)


def main(root_dir, max_epochs=2):
    pl.seed_everything(7)
    dataset_train = split_dataset(small_cifar(TRAIN_SIZE, seed=1))
    dataset_val = split_dataset(small_cifar(TRAIN_SIZE, seed=1), train=False)
    dataset_test = small_cifar(128, seed=2)
    train_dataloader = DataLoader(dataset_train, batch_size=BATCH_SIZE, shuffle=True, num_workers=NUM_WORKERS)
    val_dataloader = DataLoader(dataset_val, batch_size=BATCH_SIZE, shuffle=False, num_workers=NUM_WORKERS)
    test_dataloader = DataLoader(dataset_test, batch_size=BATCH_SIZE, shuffle=False, num_workers=NUM_WORKERS)

    model = LitResnet(lr=0.05)
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        accelerator="auto",
        devices=1,
        logger=CSVLogger(save_dir="logs/"),
        callbacks=[LearningRateMonitor(logging_interval="step")],
    )
    trainer.fit(model, train_dataloaders=train_dataloader, val_dataloaders=val_dataloader)
    fit_metrics = dict(trainer.callback_metrics)
    tested = trainer.test(model, dataloaders=test_dataloader)
    metrics = pd.read_csv(f"{trainer.logger.log_dir}/metrics.csv")
    del metrics["step"]
    metrics.set_index("epoch", inplace=True)
    resnet = {name: value.clone() for name, value in model.state_dict().items()}

    swa_model = SWAResnet(model.model, lr=0.01)
    swa_trainer = pl.Trainer(
        max_epochs=max_epochs,
        accelerator="auto",
        devices=1,
        logger=CSVLogger(save_dir="logs/"),
    )
    swa_trainer.fit(swa_model, train_dataloaders=train_dataloader, val_dataloaders=val_dataloader)
    swa_fit_metrics = dict(swa_trainer.callback_metrics)
    swa_tested = swa_trainer.test(swa_model, dataloaders=test_dataloader)
    return {
        "model": swa_model,
        "trainer": swa_trainer,
        "fit_metrics": swa_fit_metrics,
        "resnet": resnet,
        "resnet_trainer": trainer,
        "resnet_fit_metrics": fit_metrics,
        "tested": tested,
        "swa_tested": swa_tested,
        "metrics": metrics.dropna(axis=1, how="all"),
        "swa_hparams": dict(swa_model.hparams),
        "log_dirs": [trainer.logger.log_dir, swa_trainer.logger.log_dir],
    }
