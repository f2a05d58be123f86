"""Prediction as Lightning's "Deploy models into production" page writes it: a ``predict_step`` without
``batch_idx``, ``model.freeze()`` before inference, ``trainer.predict(model, dataloaders=...)`` returning one
output per batch, and a ``Callback`` that collects what ``on_predict_batch_end`` receives (the way
``BasePredictionWriter`` does). ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class CollectPredictions(Callback):
    def __init__(self):
        self.batches = []
        self.epochs_ended = 0

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.batches.append((batch_idx, outputs))

    def on_predict_epoch_end(self, trainer, pl_module):
        self.epochs_ended += 1


class LitClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def predict_step(self, batch):
        x, _ = batch
        return self(x).softmax(dim=-1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


def three_classes(n, seed):
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    x = torch.randn(n, 4, generator=generator) + 3 * F.one_hot(y, 4).float()
    return TensorDataset(x, y)


def main(root_dir, max_epochs=4):
    L.seed_everything(8)
    model = LitClassifier()
    collector = CollectPredictions()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, callbacks=[collector])
    trainer.fit(model, train_dataloaders=DataLoader(three_classes(96, seed=1), batch_size=12, shuffle=True))
    fit_metrics = dict(trainer.callback_metrics)

    model.freeze()
    test_set = three_classes(30, seed=2)
    predictions = trainer.predict(model, dataloaders=DataLoader(test_set, batch_size=8))
    accuracy = (torch.cat(predictions).argmax(dim=1) == test_set.tensors[1]).float().mean().item()
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "predictions": predictions,
        "collected": collector.batches,
        "predict_epochs": collector.epochs_ended,
        "accuracy": accuracy,
    }
