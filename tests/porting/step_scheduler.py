"""A learning-rate schedule stepped every optimizer step, as Lightning's ``configure_optimizers`` reference
writes it: ``OneCycleLR`` sized by ``self.trainer.estimated_stepping_batches``, returned in an
``lr_scheduler`` dict with ``"interval": "step"``, and a ``LearningRateMonitor(logging_interval="step")``
callback. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self, max_lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
        self.lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def on_train_batch_start(self, batch, batch_idx):
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.max_lr / 25, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.max_lr, total_steps=self.trainer.estimated_stepping_batches
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir, max_epochs=3):
    L.seed_everything(21)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(192, 20, generator=generator)
    y = x[:, :5].argmax(dim=1)
    train = DataLoader(TensorDataset(x[:160], y[:160]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[160:], y[160:]), batch_size=16)
    lr_monitor = LearningRateMonitor(logging_interval="step")
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, callbacks=[lr_monitor], log_every_n_steps=5)
    model = LitModel()
    trainer.fit(model, train, val)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "lrs": model.lrs,
        "scheduler": trainer.lr_scheduler_configs[0].scheduler,
    }
