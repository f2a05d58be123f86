"""Lightning's autoencoder example (``examples/pytorch/basics/autoencoder.py``) as it is written there: a
``LightningCLI(Model, DataModule, seed_everything_default=..., save_config_kwargs=..., run=False)`` whose
``cli.trainer``, ``cli.model`` and ``cli.datamodule`` then fit, test from the best checkpoint and predict,
and ``cli_lightning_logo()`` in the script's entry point. Synthetic images stand in for MNIST.
``tests/test_porting.py`` rewrites the Lightning imports, nothing else, and passes the command line as
``args``.
"""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule, cli_lightning_logo
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class LitAutoEncoder(LightningModule):
    """
    >>> LitAutoEncoder()  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    LitAutoEncoder(
      (encoder): ...
      (decoder): ...
    )
    """

    def __init__(self, hidden_dim: int = 64, learning_rate: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(16 * 16, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 16 * 16))

    def forward(self, x):
        z = self.encoder(x)
        return self.decoder(z)

    def training_step(self, batch, batch_idx):
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        x = self._prepare_batch(batch)
        return self(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch):
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch, batch_idx, stage: str):
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        # stands in for MNIST(..., download=True, transform=transforms.ToTensor())
        generator = torch.Generator().manual_seed(0)
        codes = torch.randn(320, 3, generator=generator)
        images = torch.sigmoid(codes @ torch.randn(3, 16 * 16, generator=generator)).view(320, 1, 16, 16)
        dataset = TensorDataset(images, torch.zeros(320, dtype=torch.long))
        self.mnist_test, self.mnist_train, self.mnist_val = random_split(
            dataset, [64, 192, 64], generator=torch.Generator().manual_seed(42)
        )
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def cli_main(args=None):
    cli = LightningCLI(
        LitAutoEncoder,
        MyDataModule,
        seed_everything_default=1234,
        save_config_kwargs={"overwrite": True},
        run=False,
        args=args,
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    print(predictions[0])
    return cli, predictions


def main(root_dir, args=()):
    cli, predictions = cli_main([f"--trainer.default_root_dir={root_dir}", "--trainer.max_epochs=2", *args])
    return {"cli": cli, "model": cli.model, "trainer": cli.trainer, "predictions": predictions}


if __name__ == "__main__":
    cli_lightning_logo()
    cli_main()
