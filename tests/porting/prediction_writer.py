"""Writing predictions with a ``BasePredictionWriter``, as the API reference of
``lightning.pytorch.callbacks.BasePredictionWriter`` shows it
(https://lightning.ai/docs/pytorch/stable/api/lightning.pytorch.callbacks.BasePredictionWriter.html) and the
"Deploy models into production (intermediate)" page points to it for large data sets
(https://lightning.ai/docs/pytorch/stable/deploy/production_intermediate.html).

Kept: a ``CustomWriter(BasePredictionWriter)`` whose ``__init__(output_dir, write_interval)`` calls
``super().__init__(write_interval)`` and that saves with ``torch.save`` in ``write_on_batch_end(trainer, pl_module,
prediction, batch_indices, batch, batch_idx, dataloader_idx)`` (into a folder per loader) and ``write_on_epoch_end(
trainer, pl_module, predictions, batch_indices)`` (``predictions_{trainer.global_rank}.pt`` and
``batch_indices_{...}.pt``); ``trainer.predict(model, return_predictions=False)`` on the reference's ``BoringModel``
from ``lightning.pytorch.demos.boring_classes`` with an epoch-interval writer, then the same for a small autoencoder,
fitted first, whose ``predict_step`` returns the embeddings, with a batch-interval writer and two prediction loaders.
(The reference passes ``dataloader_idx``, an int, to ``os.path.join``; here it is ``str(dataloader_idx)``.)
"""

import os

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.demos.boring_classes import BoringModel
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class CustomWriter(BasePredictionWriter):
    def __init__(self, output_dir, write_interval):
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        folder = os.path.join(self.output_dir, str(dataloader_idx))
        os.makedirs(folder, exist_ok=True)
        torch.save(prediction, os.path.join(folder, f"{batch_idx}.pt"))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        # one file per process, with the predictions of its rank, and the indices of the samples they came from
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt"))
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{trainer.global_rank}.pt"))


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 16))

    def training_step(self, batch, batch_idx):
        x, _ = batch
        x_hat = self.decoder(self.encoder(x))
        loss = nn.functional.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        return self.encoder(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def tensors(n, seed):
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 16, generator=generator), torch.zeros(n))


def main(root_dir):
    L.seed_everything(0)
    epoch_dir = os.path.join(root_dir, "pred_path")
    os.makedirs(epoch_dir, exist_ok=True)
    pred_writer = CustomWriter(output_dir=epoch_dir, write_interval="epoch")
    trainer = L.Trainer(callbacks=[pred_writer])
    boring = BoringModel()
    returned = trainer.predict(boring, return_predictions=False)

    autoencoder = LitAutoEncoder()
    fit_trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False)
    fit_trainer.fit(autoencoder, DataLoader(tensors(64, seed=1), batch_size=16, shuffle=True))

    batch_dir = os.path.join(root_dir, "batch_path")
    batch_writer = CustomWriter(output_dir=batch_dir, write_interval="batch")
    predict_trainer = L.Trainer(callbacks=[batch_writer], logger=False)
    loaders = [DataLoader(tensors(40, seed=2), batch_size=16), DataLoader(tensors(20, seed=3), batch_size=8)]
    autoencoder_returned = predict_trainer.predict(autoencoder, dataloaders=loaders, return_predictions=False)
    return {
        "model": autoencoder,
        "trainer": fit_trainer,
        "fit_metrics": dict(fit_trainer.callback_metrics),
        "boring": boring,
        "returned": returned,
        "autoencoder_returned": autoencoder_returned,
        "epoch_dir": epoch_dir,
        "batch_dir": batch_dir,
    }
