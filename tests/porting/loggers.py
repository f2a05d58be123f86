"""Loggers as Lightning's "Logging" pages use them: ``TensorBoardLogger`` and ``CSVLogger`` objects passed in
``Trainer(logger=[...])``, ``self.logger.experiment`` (TensorBoard's ``SummaryWriter``) for what ``self.log``
does not cover (a histogram of the weights), ``self.loggers`` to reach every logger, and
``self.logger.log_hyperparams``. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitRegressor(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(8, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def on_train_epoch_end(self):
        # the logger's own object: TensorBoard's SummaryWriter
        tensorboard = self.logger.experiment
        tensorboard.add_histogram("weights", self.layer.weight, self.current_epoch)
        for logger in self.loggers:
            logger.log_metrics({"weight_norm": self.layer.weight.norm().item()}, step=self.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def linear_data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    w = torch.linspace(-1, 1, 8)[:, None]
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=generator))


def main(root_dir, max_epochs=3):
    L.seed_everything(0)
    tensorboard = TensorBoardLogger(save_dir=root_dir)
    csv = CSVLogger(save_dir=root_dir)
    model = LitRegressor()
    trainer = L.Trainer(
        max_epochs=max_epochs, default_root_dir=root_dir, logger=[tensorboard, csv], log_every_n_steps=4
    )
    trainer.fit(
        model,
        DataLoader(linear_data(128, seed=1), batch_size=16, shuffle=True),
        DataLoader(linear_data(32, seed=2), batch_size=16),
    )
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "tensorboard_dir": tensorboard.log_dir,
        "csv_dir": csv.log_dir,
    }
