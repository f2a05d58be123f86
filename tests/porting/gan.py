"""Lightning's generative adversarial network example (``examples/pytorch/domain_templates/
generative_adversarial_net.py``) as it is written there: manual optimization with two optimizers,
``toggle_optimizer``/``untoggle_optimizer``, ``self.manual_backward``, a ``training_step`` without
``batch_idx``, and ``self.log`` with ``prog_bar=True``. Points on a noisy ring in 2-D stand in for MNIST's
images, so nothing is downloaded. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import math

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Generator(nn.Module):
    def __init__(self, latent_dim: int = 8, out_dim: int = 2):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, out_dim))

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self, in_dim: int = 2):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(in_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, x):
        return self.model(x)


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = 8, lr: float = 0.0002, b1: float = 0.5, b2: float = 0.999):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False

        # networks
        self.generator = Generator(latent_dim=self.hparams.latent_dim)
        self.discriminator = Discriminator()

        self.validation_z = torch.randn(16, self.hparams.latent_dim)

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch):
        imgs, _ = batch

        optimizer_g, optimizer_d = self.optimizers()

        # sample noise
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim)
        z = z.type_as(imgs)

        # train generator
        # generate images
        self.toggle_optimizer(optimizer_g)
        self.generated_imgs = self(z)

        # ground truth result (ie: all fake)
        # put on GPU because we created this tensor inside training_loop
        valid = torch.ones(imgs.size(0), 1)
        valid = valid.type_as(imgs)

        # adversarial loss is binary cross-entropy
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # train discriminator
        # Measure discriminator's ability to classify real from generated samples
        self.toggle_optimizer(optimizer_d)

        # how well can it label as real?
        valid = torch.ones(imgs.size(0), 1)
        valid = valid.type_as(imgs)

        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)

        # how well can it label as fake?
        fake = torch.zeros(imgs.size(0), 1)
        fake = fake.type_as(imgs)

        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)

        # discriminator loss is the average of these
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def configure_optimizers(self):
        lr = self.hparams.lr
        b1 = self.hparams.b1
        b2 = self.hparams.b2

        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def on_train_epoch_end(self):
        z = self.validation_z.type_as(self.generator.model[0].weight)

        # the radius of the generated samples, where the example logs an image grid
        sample_imgs = self(z)
        self.log("sample_radius", sample_imgs.norm(dim=1).mean())


def ring(n, seed):
    """Stands in for ``MNISTDataModule``: points on a circle of radius 2 with a little noise."""
    generator = torch.Generator().manual_seed(seed)
    angle = 2 * math.pi * torch.rand(n, generator=generator)
    points = 2 * torch.stack([angle.cos(), angle.sin()], dim=1) + 0.05 * torch.randn(n, 2, generator=generator)
    return TensorDataset(points, torch.zeros(n, dtype=torch.long))


def main(root_dir, max_epochs=3):
    L.seed_everything(1234)
    model = GAN(lr=0.002)
    trainer = L.Trainer(accelerator="auto", devices=1, max_epochs=max_epochs, default_root_dir=root_dir)
    trainer.fit(model, DataLoader(ring(256, seed=1), batch_size=32, shuffle=True))
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics)}
