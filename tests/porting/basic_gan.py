"""Lightning's "PyTorch Lightning Basic GAN Tutorial",
https://lightning.ai/docs/pytorch/stable/notebooks/lightning_examples/basic-gan.html
(source: Lightning-AI/tutorials, lightning_examples/basic-gan/gan.py).

Kept: an ``MNISTDataModule`` (``prepare_data``, ``setup(stage)`` with ``random_split``, ``dims``), ``GAN(*dm.dims)``
with ``**kwargs``, ``save_hyperparameters()``, ``automatic_optimization = False``, ``example_input_array``, a
``training_step(self, batch)`` that toggles two optimizers, logs ``g_loss``/``d_loss`` with ``prog_bar=True`` and
writes the generated images with ``self.logger.experiment.add_image(...)`` (the default logger's), an empty
``validation_step``, ``configure_optimizers`` returning ``[opt_g, opt_d], []``, ``on_validation_epoch_end`` adding
the images of a fixed noise, and ``Trainer(accelerator="auto", devices=1, max_epochs=...)`` then ``trainer.fit(model,
dm)``. The tutorial's latent size (100), learning rate and betas; 8x8 images (random blobs) stand in for MNIST's
28x28, generator layers of 16 to 128 units for 128 to 1024, a small grid helper for ``torchvision.utils.make_grid``,
no loader workers, 2 epochs where it has 5.
"""

import os

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

PATH_DATASETS = os.environ.get("PATH_DATASETS", ".")
BATCH_SIZE = 256 if torch.cuda.is_available() else 64
NUM_WORKERS = 0  # the tutorial: int(os.cpu_count() / 2)


def make_grid(images, nrow=8, padding=2):
    """The images (N, C, H, W) side by side in one (C, H', W') image, as torchvision's ``make_grid`` lays them."""
    n, c, h, w = images.shape
    ncol = min(nrow, n)
    rows = (n + ncol - 1) // ncol
    grid = torch.zeros(c, rows * (h + padding) + padding, ncol * (w + padding) + padding)
    for i in range(n):
        top, left = (i // ncol) * (h + padding) + padding, (i % ncol) * (w + padding) + padding
        grid[:, top : top + h, left : left + w] = images[i]
    return grid


def blobs(n, seed):
    """Stands in for MNIST: a bright square at a random place in an 8x8 image, scaled to [-1, 1]."""
    generator = torch.Generator().manual_seed(seed)
    images = -torch.ones(n, 1, 8, 8)
    corners = torch.randint(0, 5, (n, 2), generator=generator)
    for i, (row, col) in enumerate(corners.tolist()):
        images[i, 0, row : row + 4, col : col + 4] = 1.0
    return TensorDataset(images, torch.zeros(n, dtype=torch.long))


class MNISTDataModule(L.LightningDataModule):
    def __init__(self, data_dir: str = PATH_DATASETS, batch_size: int = BATCH_SIZE, num_workers: int = NUM_WORKERS):
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.dims = (1, 8, 8)
        self.num_classes = 10

    def prepare_data(self):
        # where the tutorial downloads MNIST: make the data set once
        path = os.path.join(self.data_dir, "blobs.pt")
        if not os.path.exists(path):
            train, test = blobs(576, seed=1), blobs(128, seed=2)
            torch.save({"train": train.tensors, "test": test.tensors}, path)

    def setup(self, stage=None):
        saved = torch.load(os.path.join(self.data_dir, "blobs.pt"))
        if stage == "fit" or stage is None:
            full = TensorDataset(*saved["train"])
            self.mnist_train, self.mnist_val = random_split(full, [512, 64])
        if stage == "test" or stage is None:
            self.mnist_test = TensorDataset(*saved["test"])

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size, num_workers=self.num_workers)


class Generator(nn.Module):
    def __init__(self, latent_dim, img_shape):
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.01, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, 16, normalize=False),
            *block(16, 32),
            *block(32, 64),
            *block(64, 128),
            nn.Linear(128, int(np.prod(img_shape))),
            nn.Tanh(),
        )

    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(int(np.prod(img_shape)), 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(32, 1),
            nn.Sigmoid(),
        )

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


class GAN(L.LightningModule):
    def __init__(
        self,
        channels,
        width,
        height,
        latent_dim: int = 100,
        lr: float = 0.0002,
        b1: float = 0.5,
        b2: float = 0.999,
        batch_size: int = BATCH_SIZE,
        **kwargs,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False

        data_shape = (channels, width, height)
        self.generator = Generator(latent_dim=self.hparams.latent_dim, img_shape=data_shape)
        self.discriminator = Discriminator(img_shape=data_shape)
        self.validation_z = torch.randn(8, self.hparams.latent_dim)
        self.example_input_array = torch.zeros(2, self.hparams.latent_dim)

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch):
        imgs, _ = batch
        optimizer_g, optimizer_d = self.optimizers()

        z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)

        # the generator's turn
        self.toggle_optimizer(optimizer_g)
        self.generated_imgs = self(z)
        grid = make_grid(self.generated_imgs[:6])
        self.logger.experiment.add_image("train/generated_images", grid, self.current_epoch)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)  # what the generator wants: all judged real
        g_loss = self.adversarial_loss(self.discriminator(self.generated_imgs), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # the discriminator's turn: real images as real, generated ones as fake
        self.toggle_optimizer(optimizer_d)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
        fake_loss = self.adversarial_loss(self.discriminator(self.generated_imgs.detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        lr = self.hparams.lr
        b1 = self.hparams.b1
        b2 = self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def on_validation_epoch_end(self):
        z = self.validation_z.type_as(self.generator.model[0].weight)
        sample_imgs = self(z)
        grid = make_grid(sample_imgs)
        self.logger.experiment.add_image("validation/generated_images", grid, self.current_epoch)


def main(root_dir, max_epochs=2):
    L.seed_everything(1234)
    dm = MNISTDataModule(data_dir=root_dir)
    model = GAN(*dm.dims)
    trainer = L.Trainer(accelerator="auto", devices=1, max_epochs=max_epochs)
    trainer.fit(model, dm)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "logger": trainer.logger,
        "log_dir": trainer.log_dir,
    }
