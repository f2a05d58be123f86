"""A PyTorch Lightning 1.x program, as the 1.x documentation and a great deal of published code write it:
``import pytorch_lightning as pl``, the 1.x Trainer arguments (``gpus``, ``progress_bar_refresh_rate``,
``weights_summary``, ``checkpoint_callback``), step methods that return dicts, and the removed
``training_epoch_end(outputs)`` / ``validation_epoch_end(outputs)`` hooks that receive every step's output.
Lightning 2 refuses it; ``tests/test_porting.py`` checks that, rewrites the imports, and runs it under Surge.
"""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(10, 2)
        self.epoch_outputs = []

    def forward(self, x):
        return self.l1(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        return {"loss": loss, "n": len(y)}

    def training_epoch_end(self, outputs):
        avg_loss = torch.stack([x["loss"] for x in outputs]).mean()
        self.epoch_outputs.append(len(outputs))
        self.log("train_epoch_loss", avg_loss)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        return {"val_loss": F.cross_entropy(logits, y), "correct": (logits.argmax(dim=1) == y).sum(), "n": len(y)}

    def validation_epoch_end(self, outputs):
        avg_loss = torch.stack([x["val_loss"] for x in outputs]).mean()
        accuracy = sum(x["correct"] for x in outputs) / sum(x["n"] for x in outputs)
        self.log("avg_val_loss", avg_loss)
        self.log("val_acc", accuracy)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


def main(root_dir, max_epochs=3):
    pl.seed_everything(12)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(120, 10, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[96:], y[96:]), batch_size=8)
    trainer = pl.Trainer(
        gpus=0,
        max_epochs=max_epochs,
        progress_bar_refresh_rate=0,
        weights_summary=None,
        checkpoint_callback=False,
        default_root_dir=root_dir,
    )
    model = LitModel()
    trainer.fit(model, train, val)
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics)}
