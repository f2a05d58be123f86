"""The Tuner as Lightning's "Effective training techniques" page uses it: ``Tuner(trainer).scale_batch_size``
on a model whose ``train_dataloader`` reads ``self.hparams.batch_size``, then ``Tuner(trainer).lr_find``, its
``suggestion()``, and the suggestion set on ``model.hparams`` before ``fit``. ``tests/test_porting.py``
rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.tuner import Tuner
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self, learning_rate: float = 1e-3, batch_size: int = 2):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(16, 1)
        generator = torch.Generator().manual_seed(3)
        x = torch.randn(512, 16, generator=generator)
        self.dataset = TensorDataset(x, x @ torch.linspace(-3, 3, 16)[:, None])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.hparams.batch_size, shuffle=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


def main(root_dir, max_epochs=5):
    L.seed_everything(0)
    model = LitModel()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir)
    tuner = Tuner(trainer)

    # Auto-scale batch size by growing it exponentially (default)
    batch_size = tuner.scale_batch_size(model, mode="power", max_trials=4)

    # Run learning rate finder
    lr_finder = tuner.lr_find(model, min_lr=1e-4, max_lr=1.0)

    # Pick point based on plot, or get suggestion
    new_lr = lr_finder.suggestion()

    # update hparams of the model
    model.hparams.learning_rate = new_lr

    trainer.fit(model)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "batch_size": batch_size,
        "lr_finder": lr_finder,
        "suggestion": new_lr,
    }
