"""Lightning's "Barlow Twins Tutorial" (self-supervised learning with an online linear probe),
https://lightning.ai/docs/pytorch/stable/notebooks/lightning_examples/barlow-twins.html
(source: Lightning-AI/tutorials, lightning_examples/barlow-twins/barlow_twins.py).

Kept: the ``BarlowTwins`` module (cross-correlation loss, projection head, ``self.log("train_loss", on_step=True,
on_epoch=False)``, ``self.log("val_loss", on_step=False, on_epoch=True)``), a ``LambdaLR`` linear warm-up with
``"interval": "step"``, and the ``OnlineFineTuner`` callback: it adds a linear probe to the module in
``on_fit_start``, trains it with its own optimizer in ``on_train_batch_end`` and logs ``online_train_acc``/
``online_train_loss`` there with ``pl_module.log(..., on_step=True, on_epoch=False)``, and logs ``online_val_acc``/
``online_val_loss`` from ``on_validation_batch_end`` (``on_epoch=True, sync_dist=True``); ``ModelCheckpoint(
every_n_epochs=100, save_top_k=-1, save_last=True)``, ``Trainer(max_epochs=..., accelerator="auto", devices=1,
callbacks=[...])`` with the default logger. Small 3x8x8 images of ten classes with random flips and noise stand in for
CIFAR-10 and its augmentations, a two-layer convolutional encoder for ResNet-18 (encoder_out_dim 16, z_dim 32); the
tutorial's batch size (32), lambda and learning rate, 2 epochs where it has 200.
"""

from functools import partial

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, Dataset
from torchmetrics.functional import accuracy

batch_size = 32
num_workers = 0
max_epochs = 2
z_dim = 32


class SmallImages(Dataset):
    """Ten classes of 3x8x8 images (a colour per class plus noise): a stand-in for CIFAR-10."""

    def __init__(self, n, seed, train=True):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(10, (n,), generator=generator)
        prototypes = torch.randn(10, 3, 1, 1, generator=torch.Generator().manual_seed(0))
        self.images = prototypes[self.labels] + 0.5 * torch.randn(n, 3, 8, 8, generator=generator)
        self.transform = BarlowTwinsTransform(train=train)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.transform(self.images[idx]), self.labels[idx]


class BarlowTwinsTransform:
    """Two augmented views for the Barlow Twins loss and a third one for the online fine-tuner, as the tutorial's
    transform returns them (a flip and noise here, where the tutorial crops, flips and jitters colours)."""

    def __init__(self, train=True, noise=0.1):
        self.train = train
        self.noise = noise

    def augment(self, image):
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return image + self.noise * torch.randn_like(image)

    def __call__(self, sample):
        finetune_view = self.augment(sample) if self.train else sample
        return self.augment(sample), self.augment(sample), finetune_view


class BarlowTwinsLoss(nn.Module):
    def __init__(self, batch_size, lambda_coeff=5e-3, z_dim=128):
        super().__init__()
        self.z_dim = z_dim
        self.batch_size = batch_size
        self.lambda_coeff = lambda_coeff

    def off_diagonal_ele(self, x):
        n, m = x.shape
        assert n == m
        return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()  # every element but the diagonal

    def forward(self, z1, z2):
        z1_norm = (z1 - torch.mean(z1, dim=0)) / torch.std(z1, dim=0)
        z2_norm = (z2 - torch.mean(z2, dim=0)) / torch.std(z2, dim=0)
        cross_corr = torch.matmul(z1_norm.T, z2_norm) / self.batch_size
        on_diag = torch.diagonal(cross_corr).add_(-1).pow_(2).sum()
        off_diag = self.off_diagonal_ele(cross_corr).pow_(2).sum()
        return on_diag + self.lambda_coeff * off_diag


def small_encoder():
    """In place of the tutorial's ResNet-18 with a 3x3 first convolution and no max-pooling."""
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


class ProjectionHead(nn.Module):
    def __init__(self, input_dim=2048, hidden_dim=2048, output_dim=128):
        super().__init__()
        self.projection_head = nn.Sequential(
            nn.Linear(input_dim, hidden_dim, bias=True),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, output_dim, bias=False),
        )

    def forward(self, x):
        return self.projection_head(x)


def fn(warmup_steps, step):
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    return 1.0


def linear_warmup_decay(warmup_steps):
    return partial(fn, warmup_steps)


class BarlowTwins(L.LightningModule):
    def __init__(
        self,
        encoder,
        encoder_out_dim,
        num_training_samples,
        batch_size,
        lambda_coeff=5e-3,
        z_dim=128,
        learning_rate=1e-4,
        warmup_epochs=10,
        max_epochs=200,
    ):
        super().__init__()
        self.encoder = encoder
        self.projection_head = ProjectionHead(input_dim=encoder_out_dim, hidden_dim=encoder_out_dim, output_dim=z_dim)
        self.loss_fn = BarlowTwinsLoss(batch_size=batch_size, lambda_coeff=lambda_coeff, z_dim=z_dim)
        self.learning_rate = learning_rate
        self.warmup_epochs = warmup_epochs
        self.max_epochs = max_epochs
        self.train_iters_per_epoch = num_training_samples // batch_size

    def forward(self, x):
        return self.encoder(x)

    def shared_step(self, batch):
        (x1, x2, _), _ = batch
        z1 = self.projection_head(self.encoder(x1))
        z2 = self.projection_head(self.encoder(x2))
        return self.loss_fn(z1, z2)

    def training_step(self, batch, batch_idx):
        loss = self.shared_step(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self.shared_step(batch)
        self.log("val_loss", loss, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.learning_rate)
        warmup_steps = self.train_iters_per_epoch * self.warmup_epochs
        scheduler = {
            "scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(warmup_steps)),
            "interval": "step",
            "frequency": 1,
        }
        return [optimizer], [scheduler]


class OnlineFineTuner(Callback):
    def __init__(self, encoder_output_dim, num_classes):
        super().__init__()
        self.optimizer: torch.optim.Optimizer
        self.encoder_output_dim = encoder_output_dim
        self.num_classes = num_classes

    def on_fit_start(self, trainer, pl_module):
        # the linear probe and its optimizer, beside the module's own
        pl_module.online_finetuner = nn.Linear(self.encoder_output_dim, self.num_classes).to(pl_module.device)
        self.optimizer = torch.optim.Adam(pl_module.online_finetuner.parameters(), lr=1e-4)

    def extract_online_finetuning_view(self, batch, device):
        (_, _, finetune_view), y = batch
        return finetune_view.to(device), y.to(device)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        x, y = self.extract_online_finetuning_view(batch, pl_module.device)
        with torch.no_grad():
            feats = pl_module(x)
        preds = pl_module.online_finetuner(feats.detach())
        loss = F.cross_entropy(preds, y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

        acc = accuracy(F.softmax(preds, dim=1), y, task="multiclass", num_classes=10)
        pl_module.log("online_train_acc", acc, on_step=True, on_epoch=False)
        pl_module.log("online_train_loss", loss, on_step=True, on_epoch=False)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        x, y = self.extract_online_finetuning_view(batch, pl_module.device)
        with torch.no_grad():
            feats = pl_module(x)
        preds = pl_module.online_finetuner(feats.detach())
        loss = F.cross_entropy(preds, y)

        acc = accuracy(F.softmax(preds, dim=1), y, task="multiclass", num_classes=10)
        pl_module.log("online_val_acc", acc, on_step=False, on_epoch=True, sync_dist=True)
        pl_module.log("online_val_loss", loss, on_step=False, on_epoch=True, sync_dist=True)


def main(root_dir, max_epochs=max_epochs):
    L.seed_everything(1234)
    train_dataset = SmallImages(512, seed=1, train=True)
    val_dataset = SmallImages(128, seed=2, train=False)
    train_loader = DataLoader(
        train_dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True
    )
    val_loader = DataLoader(val_dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, drop_last=True)

    encoder_out_dim = 16
    model = BarlowTwins(
        encoder=small_encoder(),
        encoder_out_dim=encoder_out_dim,
        num_training_samples=len(train_dataset),
        batch_size=batch_size,
        z_dim=z_dim,
        max_epochs=max_epochs,
    )
    online_finetuner = OnlineFineTuner(encoder_output_dim=encoder_out_dim, num_classes=10)
    checkpoint_callback = ModelCheckpoint(every_n_epochs=100, save_top_k=-1, save_last=True)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator="auto",
        devices=1,
        callbacks=[online_finetuner, checkpoint_callback],
    )
    trainer.fit(model, train_loader, val_loader)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "logged_metrics": dict(trainer.logged_metrics),
        "log_dir": trainer.log_dir,
        "last_model_path": checkpoint_callback.last_model_path,
    }
