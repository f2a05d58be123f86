"""An image classifier and its LightningDataModule, written the way Lightning's documentation writes them
(the LightningModule and LightningDataModule pages): ``save_hyperparameters``, ``self.log`` with
``prog_bar``/``on_epoch``, ``self.log_dict``, validation, test and predict steps, and a scheduler that
monitors ``val_loss``. Synthetic blobs stand in for MNIST: ``prepare_data`` "downloads" them by writing a
file, and ``setup`` reads it back. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import os

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class BlobsDataModule(pl.LightningDataModule):
    def __init__(self, data_dir: str = "./", batch_size: int = 32):
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.save_hyperparameters()

    def prepare_data(self):
        # download (here: write four Gaussian blobs in 8 * 8 pixels to disk, once)
        path = os.path.join(self.data_dir, "blobs.pt")
        if not os.path.exists(path):
            generator = torch.Generator().manual_seed(0)
            centers = 3 * torch.randn(4, 64, generator=generator)
            y = torch.arange(400) % 4
            x = centers[y] + torch.randn(400, 64, generator=generator)
            torch.save({"x": x.view(400, 1, 8, 8), "y": y}, path)

    def setup(self, stage: str):
        data = torch.load(os.path.join(self.data_dir, "blobs.pt"))
        full = TensorDataset(data["x"], data["y"])
        # Assign train/val datasets for use in dataloaders
        if stage == "fit":
            self.blobs_train, self.blobs_val, _ = random_split(
                full, [256, 64, 80], generator=torch.Generator().manual_seed(42)
            )
        # Assign test dataset for use in dataloader(s)
        if stage == "test":
            _, _, self.blobs_test = random_split(full, [256, 64, 80], generator=torch.Generator().manual_seed(42))
        if stage == "predict":
            _, _, self.blobs_predict = random_split(full, [256, 64, 80], generator=torch.Generator().manual_seed(42))

    def train_dataloader(self):
        return DataLoader(self.blobs_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.blobs_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.blobs_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.blobs_predict, batch_size=self.batch_size)


class LitClassifier(pl.LightningModule):
    def __init__(self, hidden_dim: int = 32, num_classes: int = 4, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(8 * 8, self.hparams.hidden_dim)
        self.l2 = nn.Linear(self.hparams.hidden_dim, self.hparams.num_classes)
        self.example_input_array = torch.zeros(2, 1, 8, 8)
        self.epoch_train_losses = []

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True)
        return loss

    def on_train_epoch_end(self):
        # what a callback or the module itself reads at the end of an epoch
        self.epoch_train_losses.append(
            (self.current_epoch, self.global_step, self.trainer.callback_metrics["train_loss_epoch"].item())
        )

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        acc = (y_hat.argmax(dim=1) == y).float().mean()
        self.log_dict({"val_loss": loss, "val_acc": acc}, prog_bar=True, on_epoch=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        acc = (y_hat.argmax(dim=1) == y).float().mean()
        self.log("test_acc", acc)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        return self(x).argmax(dim=1)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


def main(root_dir, max_epochs=4):
    pl.seed_everything(42)
    dm = BlobsDataModule(data_dir=root_dir)
    model = LitClassifier()
    trainer = pl.Trainer(
        max_epochs=max_epochs, accelerator="auto", devices="auto", default_root_dir=root_dir, log_every_n_steps=1
    )
    trainer.fit(model, datamodule=dm)
    validated = trainer.validate(model, datamodule=dm)
    tested = trainer.test(model, datamodule=dm)
    predictions = trainer.predict(model, datamodule=dm)
    return {
        "model": model,
        "datamodule": dm,
        "trainer": trainer,
        "validated": validated,
        "tested": tested,
        "predictions": predictions,
    }
