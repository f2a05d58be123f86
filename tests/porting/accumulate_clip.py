"""Gradient accumulation and clipping as Lightning's "Effective training techniques" page writes them:
``Trainer(accumulate_grad_batches=4, gradient_clip_val=0.5, gradient_clip_algorithm="norm")``, and the
gradient norms logged in ``on_before_optimizer_step`` with ``lightning.pytorch.utilities.grad_norm`` (what
Lightning 2 offers in place of ``track_grad_norm``; it sees the gradients before clipping).
``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import grad_norm
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def on_before_optimizer_step(self, optimizer):
        # Compute the 2-norm for each layer
        # If using mixed precision, the gradients are already unscaled here
        norms = grad_norm(self.layer, norm_type=2)
        self.log_dict(norms)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root_dir, max_epochs=2):
    L.seed_everything(3)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(160, 12, generator=generator)
    y = 5 * x[:, :1] * x[:, 1:2] + torch.randn(160, 1, generator=generator)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        default_root_dir=root_dir,
        accumulate_grad_batches=4,
        gradient_clip_val=0.5,
        gradient_clip_algorithm="norm",
        log_every_n_steps=1,
    )
    model = LitModel()
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True))
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics)}
