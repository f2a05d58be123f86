"""A ``LightningCLI`` script as Lightning's "Configure hyperparameters from the CLI" pages write it: the
script only builds ``LightningCLI(DemoModel, BoringDataModule)``, and the command line chooses the
subcommand (``fit``, ``validate``, ``test``, ``predict``), a ``--config`` file, and ``--trainer.*``,
``--model.*`` and ``--data.*`` values. The CLI saves the resolved config next to the run.
``tests/test_porting.py`` rewrites the Lightning imports, nothing else, and passes the command line as
``args``.
"""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class DemoModel(LightningModule):
    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(32, out_dim)

    def forward(self, x):
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def predict_step(self, batch, batch_idx):
        x, _ = batch
        return self(x).argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


class BoringDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 16, num_samples: int = 96):
        super().__init__()
        self.batch_size = batch_size
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(num_samples, 32, generator=generator)
        self.dataset = TensorDataset(x, (x[:, :4].sum(dim=1) > 0).long())

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


def cli_main(args=None):
    cli = LightningCLI(DemoModel, BoringDataModule, args=args)
    # note: don't call fit!!
    return cli


def main(root_dir, args=("--trainer.max_epochs=2",)):
    cli = cli_main(["fit", f"--trainer.default_root_dir={root_dir}", *args])
    return {"cli": cli, "model": cli.model, "trainer": cli.trainer, "fit_metrics": dict(cli.trainer.callback_metrics)}


if __name__ == "__main__":
    cli_main()
