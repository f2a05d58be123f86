"""The UvA Deep Learning course's Tutorial 9, "Deep Autoencoders" (Phillip Lippe),
https://uvadlc-notebooks.readthedocs.io/en/latest/tutorial_notebooks/tutorial9/AE_CIFAR10.html
(in Lightning's tutorials as https://lightning.ai/docs/pytorch/stable/notebooks/course_UvA-DL/08-deep-autoencoders.html).

Kept: ``Autoencoder`` with the encoder and decoder *classes* as ``__init__`` arguments (``save_hyperparameters()``
records them), ``example_input_array``, ``configure_optimizers`` returning ``{"optimizer", "lr_scheduler":
ReduceLROnPlateau(...), "monitor": "val_loss"}``; a ``GenerateCallback`` that writes reconstructions with
``trainer.logger.experiment.add_image(..., global_step=trainer.global_step)`` in ``on_train_epoch_end``; ``Trainer(
default_root_dir=..., accelerator="auto", devices=1, max_epochs=..., callbacks=[ModelCheckpoint(save_weights_only=True),
GenerateCallback(...), LearningRateMonitor("epoch")])``, ``trainer.logger._log_graph = True`` and
``trainer.logger._default_hp_metric = None`` on the default logger, then ``trainer.test(model, dataloaders=...,
verbose=False)`` on the validation and the test loader, once for each latent size. The tutorial's optimizer and
plateau schedule, batch size (256) and ``drop_last``; 3x8x8 images stand in for CIFAR-10's 3x32x32 (so two
down-sampling convolutions with 4 base channels where it has three with 32, latent sizes 8 and 16 where it has 64 to
384, a small grid helper for ``torchvision.utils.make_grid``), images every epoch and 2 epochs where it has every 10
and 500.
"""

import os

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint

CHECKPOINT_PATH = os.environ.get("PATH_CHECKPOINT", "saved_models/tutorial9")


def make_grid(images, nrow=8, padding=2, normalize=False, value_range=None):
    """The images (N, C, H, W) side by side in one (C, H', W') image, as torchvision's ``make_grid`` lays them."""
    if normalize:
        low, high = value_range if value_range is not None else (float(images.min()), float(images.max()))
        images = (images.clamp(low, high) - low) / max(high - low, 1e-5)
    n, c, h, w = images.shape
    ncol = min(nrow, n)
    rows = (n + ncol - 1) // ncol
    grid = torch.zeros(c, rows * (h + padding) + padding, ncol * (w + padding) + padding)
    for i in range(n):
        top, left = (i // ncol) * (h + padding) + padding, (i % ncol) * (w + padding) + padding
        grid[:, top : top + h, left : left + w] = images[i]
    return grid


def small_cifar(n, seed):
    """3x8x8 images in [-1, 1] (smooth colour gradients), in place of CIFAR-10 normalised with (0.5, 0.5)."""
    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(n, 3, 2, 2, generator=generator) * 2 - 1
    images = F.interpolate(corners, size=(8, 8), mode="bilinear", align_corners=True)
    return data.TensorDataset(images, torch.zeros(n, dtype=torch.long))


class Encoder(nn.Module):
    def __init__(self, num_input_channels: int, base_channel_size: int, latent_dim: int, act_fn: object = nn.GELU):
        super().__init__()
        c_hid = base_channel_size
        self.net = nn.Sequential(
            nn.Conv2d(num_input_channels, c_hid, kernel_size=3, padding=1, stride=2),  # 8x8 => 4x4
            act_fn(),
            nn.Conv2d(c_hid, c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.Conv2d(c_hid, 2 * c_hid, kernel_size=3, padding=1, stride=2),  # 4x4 => 2x2
            act_fn(),
            nn.Flatten(),
            nn.Linear(2 * 4 * c_hid, latent_dim),
        )

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self, num_input_channels: int, base_channel_size: int, latent_dim: int, act_fn: object = nn.GELU):
        super().__init__()
        c_hid = base_channel_size
        self.linear = nn.Sequential(nn.Linear(latent_dim, 2 * 4 * c_hid), act_fn())
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * c_hid, c_hid, kernel_size=3, output_padding=1, padding=1, stride=2),  # 2x2 => 4x4
            act_fn(),
            nn.Conv2d(c_hid, c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.ConvTranspose2d(c_hid, num_input_channels, kernel_size=3, output_padding=1, padding=1, stride=2),
            nn.Tanh(),  # the images are in [-1, 1]
        )

    def forward(self, x):
        x = self.linear(x)
        x = x.reshape(x.shape[0], -1, 2, 2)
        return self.net(x)


class Autoencoder(L.LightningModule):
    def __init__(
        self,
        base_channel_size: int,
        latent_dim: int,
        encoder_class: object = Encoder,
        decoder_class: object = Decoder,
        num_input_channels: int = 3,
        width: int = 8,
        height: int = 8,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = encoder_class(num_input_channels, base_channel_size, latent_dim)
        self.decoder = decoder_class(num_input_channels, base_channel_size, latent_dim)
        self.example_input_array = torch.zeros(2, num_input_channels, width, height)

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def _get_reconstruction_loss(self, batch):
        x, _ = batch
        x_hat = self.forward(x)
        loss = F.mse_loss(x, x_hat, reduction="none")
        return loss.sum(dim=[1, 2, 3]).mean(dim=[0])

    def configure_optimizers(self):
        optimizer = optim.Adam(self.parameters(), lr=1e-3)
        scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.2, patience=20, min_lr=5e-5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "val_loss"}

    def training_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("val_loss", loss)

    def test_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("test_loss", loss)


class GenerateCallback(Callback):
    def __init__(self, input_imgs, every_n_epochs=1):
        super().__init__()
        self.input_imgs = input_imgs  # images to reconstruct during training
        self.every_n_epochs = every_n_epochs  # only every N epochs, so that TensorBoard stays small

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch % self.every_n_epochs == 0:
            input_imgs = self.input_imgs.to(pl_module.device)
            with torch.no_grad():
                pl_module.eval()
                reconst_imgs = pl_module(input_imgs)
                pl_module.train()
            imgs = torch.stack([input_imgs, reconst_imgs], dim=1).flatten(0, 1)
            grid = make_grid(imgs, nrow=2, normalize=True, value_range=(-1, 1))
            trainer.logger.experiment.add_image("Reconstructions", grid, global_step=trainer.global_step)


def train_cifar(latent_dim, loaders, get_train_images, max_epochs):
    train_loader, val_loader, test_loader = loaders
    trainer = L.Trainer(
        default_root_dir=os.path.join(CHECKPOINT_PATH, f"cifar10_{latent_dim}"),
        accelerator="auto",
        devices=1,
        max_epochs=max_epochs,
        callbacks=[
            ModelCheckpoint(save_weights_only=True),
            GenerateCallback(get_train_images(8), every_n_epochs=1),
            LearningRateMonitor("epoch"),
        ],
    )
    trainer.logger._log_graph = True  # the computation graph in TensorBoard
    trainer.logger._default_hp_metric = None

    pretrained_filename = os.path.join(CHECKPOINT_PATH, f"cifar10_{latent_dim}.ckpt")
    if os.path.isfile(pretrained_filename):
        model = Autoencoder.load_from_checkpoint(pretrained_filename)
    else:
        model = Autoencoder(base_channel_size=4, latent_dim=latent_dim)
        trainer.fit(model, train_loader, val_loader)
    fit_metrics = dict(trainer.callback_metrics)
    val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
    return model, {"test": test_result, "val": val_result}, trainer, fit_metrics


def main(root_dir, max_epochs=2):
    L.seed_everything(42)
    train_dataset = small_cifar(1024 + 128, seed=1)
    L.seed_everything(42)
    train_set, val_set = torch.utils.data.random_split(train_dataset, [1024, 128])
    test_set = small_cifar(256, seed=2)
    train_loader = data.DataLoader(train_set, batch_size=256, shuffle=True, drop_last=True)
    val_loader = data.DataLoader(val_set, batch_size=256, shuffle=False, drop_last=False)
    test_loader = data.DataLoader(test_set, batch_size=256, shuffle=False, drop_last=False)

    def get_train_images(num):
        return torch.stack([train_dataset[i][0] for i in range(num)], dim=0)

    model_dict = {}
    for latent_dim in [8, 16]:
        model, result, trainer, fit_metrics = train_cifar(
            latent_dim, (train_loader, val_loader, test_loader), get_train_images, max_epochs
        )
        model_dict[latent_dim] = {"model": model, "result": result, "trainer": trainer, "fit_metrics": fit_metrics}
    last = model_dict[16]
    return {
        "model": last["model"],
        "trainer": last["trainer"],
        "fit_metrics": last["fit_metrics"],
        "runs": model_dict,
        "val_scores": [model_dict[k]["result"]["val"][0]["test_loss"] for k in sorted(model_dict)],
        "log_dirs": [run["trainer"].log_dir for run in model_dict.values()],
    }
