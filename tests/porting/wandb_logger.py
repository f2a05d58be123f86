"""Weights & Biases as Lightning's "Weights & Biases" logging page uses it: a ``WandbLogger(project=...,
offline=True, save_dir=...)`` passed as the Trainer's logger, config added through
``wandb_logger.experiment.config`` before training, ``self.save_hyperparameters()`` as the run's config,
``self.log`` metrics plotted against ``trainer/global_step``, a table of samples with ``self.logger.log_text``, and
``wandb.finish()`` at the end. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
import wandb
from lightning.pytorch.loggers import WandbLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitRegressor(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 16):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.samples = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        predictions = self(x)
        self.log("val_loss", F.mse_loss(predictions, y))
        if batch_idx == 0:
            self.samples = [[f"{float(p):.4f}", f"{float(t):.4f}"] for p, t in zip(predictions[:3], y[:3])]

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.logger.log_text(key="samples", columns=["prediction", "target"], data=self.samples)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def linear_data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    w = torch.linspace(-1, 1, 8)[:, None]
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=generator))


def main(root_dir, max_epochs=3):
    L.seed_everything(0)
    wandb_logger = WandbLogger(project="porting", offline=True, save_dir=root_dir)
    wandb_logger.experiment.config.update({"batch_size": 16})
    model = LitRegressor()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, logger=wandb_logger, log_every_n_steps=4)
    trainer.fit(
        model,
        DataLoader(linear_data(128, seed=1), batch_size=16, shuffle=True),
        DataLoader(linear_data(32, seed=2), batch_size=16),
    )
    result = {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "run_id": wandb_logger.version,
        "project": wandb_logger.name,
        "save_dir": wandb_logger.save_dir,
        "checkpoint": trainer.checkpoint_callback.best_model_path,
    }
    wandb.finish()
    return result
