"""A classifier measured with TorchMetrics, as TorchMetrics' "Integration with Lightning" page writes it:
metric objects as module attributes, ``self.log("name", metric)`` with the object itself (computed and reset
by the loop at the epoch's end), a metric updated in ``validation_step`` and logged on step and epoch, and a
``MetricCollection`` whose computed values go to ``self.log_dict``. Gaussian blobs stand in for a data set.
``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassPrecision, MulticlassRecall


class LitClassifier(L.LightningModule):
    def __init__(self, num_classes: int = 3, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, num_classes))
        self.train_acc = torchmetrics.classification.Accuracy(task="multiclass", num_classes=num_classes)
        self.valid_acc = torchmetrics.classification.Accuracy(task="multiclass", num_classes=num_classes)
        metrics = MetricCollection(
            [
                MulticlassAccuracy(num_classes=num_classes),
                MulticlassPrecision(num_classes=num_classes),
                MulticlassRecall(num_classes=num_classes),
            ]
        )
        self.test_metrics = metrics.clone(prefix="test_")

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        preds = self(x)
        loss = F.cross_entropy(preds, y)
        self.train_acc(preds, y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.valid_acc.update(logits, y)
        self.log("valid_acc", self.valid_acc, on_step=True, on_epoch=True)
        self.log("valid_loss", F.cross_entropy(logits, y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_metrics.update(self(x), y)

    def on_test_epoch_end(self):
        output = self.test_metrics.compute()
        self.log_dict(output)
        self.test_metrics.reset()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def blobs(n, seed):
    generator = torch.Generator().manual_seed(seed)
    centers = 1.5 * torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 3, (n,), generator=generator)
    return TensorDataset(centers[y] + torch.randn(n, 10, generator=generator), y)


def main(root_dir, max_epochs=3):
    L.seed_everything(42)
    model = LitClassifier()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, log_every_n_steps=2)
    train = DataLoader(blobs(240, seed=1), batch_size=24, shuffle=True)
    val = DataLoader(blobs(60, seed=2), batch_size=20)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    fit_metrics = dict(trainer.callback_metrics)
    tested = trainer.test(model, dataloaders=DataLoader(blobs(60, seed=3), batch_size=20))
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "tested": tested,
        "test_metrics": dict(trainer.callback_metrics),
    }
