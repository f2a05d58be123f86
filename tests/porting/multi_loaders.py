"""Several validation and test loaders, as Lightning's LightningModule API reference writes them
(https://lightning.ai/docs/pytorch/stable/common/lightning_module.html#test-step, "CASE 2: multiple test
dataloaders"; ``self.log``'s ``add_dataloader_idx``), with the loaders returned as a list by a DataModule
(https://lightning.ai/docs/pytorch/stable/data/iterables.html, "Multiple Iterables").

Kept: ``validation_step``/``test_step(self, batch, batch_idx, dataloader_idx=0)`` choosing a loss per loader
(``self.loss0``/``self.loss1``) and computing the accuracy with ``.item()``; validation metrics logged with
``self.log_dict({f"val_loss_{dataloader_idx}": ...})`` (Lightning appends ``/dataloader_idx_N``), test metrics with
``add_dataloader_idx=False`` under per-loader names; ``val_dataloader``/``test_dataloader`` returning lists;
``trainer.fit(model, datamodule=dm)``, ``trainer.validate(datamodule=dm)`` and ``trainer.test(model,
datamodule=dm)``, whose returned list holds one dict per loader.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n, seed, shift=0.0):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(3, (n,), generator=generator)
    centres = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0]])
    return TensorDataset(centres[labels] + shift + torch.randn(n, 2, generator=generator), labels)


class TwoTestSets(L.LightningDataModule):
    def __init__(self, batch_size=16):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        self.train = blobs(192, seed=1)
        self.clean_val, self.shifted_val = blobs(48, seed=2), blobs(32, seed=3, shift=0.5)
        self.clean_test, self.shifted_test = blobs(64, seed=4), blobs(40, seed=5, shift=0.5)

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return [DataLoader(self.clean_val, batch_size=self.batch_size), DataLoader(self.shifted_val, batch_size=8)]

    def test_dataloader(self):
        return [DataLoader(self.clean_test, batch_size=self.batch_size), DataLoader(self.shifted_test, batch_size=8)]


class LitClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
        self.loss0 = nn.CrossEntropyLoss()
        self.loss1 = nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        out = self(x)
        loss = self.loss0(out, y) if dataloader_idx == 0 else self.loss1(out, y)
        labels_hat = torch.argmax(out, dim=1)
        acc = torch.sum(y == labels_hat).item() / (len(y) * 1.0)
        self.log_dict({f"val_loss_{dataloader_idx}": loss, f"val_acc_{dataloader_idx}": acc})

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        out = self(x)
        if dataloader_idx == 0:
            loss = self.loss0(out, y)
        else:
            loss = self.loss1(out, y)
        labels_hat = torch.argmax(out, dim=1)
        acc = torch.sum(y == labels_hat).item() / (len(y) * 1.0)
        name = ["clean", "shifted"][dataloader_idx]
        self.log(f"test_loss_{name}", loss, add_dataloader_idx=False)
        self.log(f"test_acc_{name}", acc, add_dataloader_idx=False)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root_dir, max_epochs=3):
    L.seed_everything(7)
    dm = TwoTestSets()
    model = LitClassifier()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, enable_progress_bar=False)
    trainer.fit(model, datamodule=dm)
    fit_metrics = dict(trainer.callback_metrics)
    validated = trainer.validate(datamodule=dm)
    tested = trainer.test(model, datamodule=dm)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "validated": validated,
        "tested": tested,
        "test_metrics": dict(trainer.callback_metrics),
    }
