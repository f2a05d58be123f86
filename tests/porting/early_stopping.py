"""Early stopping and checkpointing as Lightning's "Early Stopping" and "Checkpointing" pages write them: a
``LightningDataModule`` passed positionally (``trainer.fit(model, dm)``), ``EarlyStopping`` and a
``ModelCheckpoint`` with a ``filename`` template and ``save_last``, the best checkpoint read from
``trainer.checkpoint_callback``, the stopping epoch from ``trainer.early_stopping_callback``, the model
reloaded with ``load_from_checkpoint``, and ``trainer.test(..., ckpt_path="best", verbose=False)``.
``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class NoisyDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str):
        generator = torch.Generator().manual_seed(11)
        x = torch.randn(300, 6, generator=generator)
        y = (x[:, 0] - x[:, 1] + 0.8 * torch.randn(300, generator=generator) > 0).long()
        self.train_set, self.val_set, self.test_set = random_split(
            TensorDataset(x, y), [200, 50, 50], generator=torch.Generator().manual_seed(0)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)


class LitModel(L.LightningModule):
    def __init__(self, hidden: int = 64, lr: float = 0.3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main(root_dir, max_epochs=40):
    L.seed_everything(5)
    dm = NoisyDataModule()
    model = LitModel()
    early_stop_callback = EarlyStopping(monitor="val_loss", min_delta=0.00, patience=3, verbose=False, mode="min")
    checkpoint_callback = ModelCheckpoint(
        dirpath=root_dir + "/checkpoints",
        filename="sample-{epoch:02d}-{val_loss:.2f}",
        monitor="val_loss",
        mode="min",
        save_top_k=1,
        save_last=True,
    )
    trainer = L.Trainer(
        max_epochs=max_epochs, default_root_dir=root_dir, callbacks=[early_stop_callback, checkpoint_callback]
    )
    trainer.fit(model, dm)
    fit_metrics = dict(trainer.callback_metrics)
    stopped_epoch = trainer.early_stopping_callback.stopped_epoch
    best_model_path = trainer.checkpoint_callback.best_model_path
    best = LitModel.load_from_checkpoint(best_model_path)
    tested = trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "stopped_epoch": stopped_epoch,
        "best_model_path": best_model_path,
        "last_model_path": trainer.checkpoint_callback.last_model_path,
        "best_model_score": trainer.checkpoint_callback.best_model_score,
        "best": best,
        "tested": tested,
    }
