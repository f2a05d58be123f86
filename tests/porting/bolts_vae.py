"""The variational autoencoder of lightning-bolts (``pl_bolts.models.autoencoders.VAE``),
https://github.com/Lightning-Universe/lightning-bolts/blob/master/src/pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py
(documented at https://lightning-bolts.readthedocs.io/en/latest/models/autoencoders.html).

Kept: ``from lightning import LightningModule, Trainer, seed_everything``; ``VAE(input_height, enc_type=...,
first_conv, maxpool1, enc_out_dim, kl_coeff, latent_dim, lr, **kwargs)`` with ``save_hyperparameters()`` (the extra
command-line arguments land in ``**kwargs``), the encoder chosen from a table by ``enc_type``, the reparameterised
sample (``q.rsample()``), a shared ``step`` returning the loss and a dict of logs, ``self.log_dict({f"train_{k}": v
...}, on_step=True, on_epoch=False)`` in training and ``self.log_dict({f"val_{k}": v ...})`` in validation; the
model-specific ``argparse`` arguments (``add_model_specific_args``) parsed and passed as ``VAE(**vars(args))``, and
``seed_everything()`` without a seed, as ``cli_main`` does. ``cli_main``'s ``Trainer.add_argparse_args``/
``from_argparse_args`` are Lightning 1.x, which Lightning 2 refuses; here the Trainer is built with keywords. Small
fully connected encoders/decoders stand in for the ResNet ones, 3x8x8 images for CIFAR-10; the bolts defaults for
``kl_coeff``, ``lr`` and ``enc_out_dim`` are kept (``latent_dim`` 16 where bolts has 256).
"""

from argparse import ArgumentParser

import torch
from lightning import LightningModule, Trainer, seed_everything
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def small_encoder(first_conv, maxpool1, width=32):
    """In place of bolts' ``resnet18_encoder``: image to an ``enc_out_dim`` feature vector."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, width), nn.ReLU(), nn.Linear(width, 512), nn.ReLU())


def small_decoder(latent_dim, input_height, first_conv, maxpool1, width=32):
    """In place of bolts' ``resnet18_decoder``: a latent vector to an image."""
    return nn.Sequential(
        nn.Linear(latent_dim, width),
        nn.ReLU(),
        nn.Linear(width, 3 * input_height * input_height),
        nn.Unflatten(1, (3, input_height, input_height)),
    )


class VAE(LightningModule):
    def __init__(
        self,
        input_height: int,
        enc_type: str = "resnet18",
        first_conv: bool = False,
        maxpool1: bool = False,
        enc_out_dim: int = 512,
        kl_coeff: float = 0.1,
        latent_dim: int = 256,
        lr: float = 1e-4,
        **kwargs,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

        self.lr = lr
        self.kl_coeff = kl_coeff
        self.enc_out_dim = enc_out_dim
        self.latent_dim = latent_dim
        self.input_height = input_height

        valid_encoders = {"resnet18": {"enc": small_encoder, "dec": small_decoder}}
        if enc_type not in valid_encoders:
            self.encoder = small_encoder(first_conv, maxpool1)
            self.decoder = small_decoder(self.latent_dim, self.input_height, first_conv, maxpool1)
        else:
            self.encoder = valid_encoders[enc_type]["enc"](first_conv, maxpool1)
            self.decoder = valid_encoders[enc_type]["dec"](self.latent_dim, self.input_height, first_conv, maxpool1)

        self.fc_mu = nn.Linear(self.enc_out_dim, self.latent_dim)
        self.fc_var = nn.Linear(self.enc_out_dim, self.latent_dim)

    def forward(self, x):
        x = self.encoder(x)
        mu = self.fc_mu(x)
        log_var = self.fc_var(x)
        _p, _q, z = self.sample(mu, log_var)
        return self.decoder(z)

    def _run_step(self, x):
        x = self.encoder(x)
        mu = self.fc_mu(x)
        log_var = self.fc_var(x)
        p, q, z = self.sample(mu, log_var)
        return z, self.decoder(z), p, q

    def sample(self, mu, log_var):
        std = torch.exp(log_var / 2)
        p = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(std))
        q = torch.distributions.Normal(mu, std)
        z = q.rsample()
        return p, q, z

    def step(self, batch, batch_idx):
        x, _y = batch
        _z, x_hat, p, q = self._run_step(x)
        recon_loss = F.mse_loss(x_hat, x, reduction="mean")
        kl = torch.distributions.kl_divergence(q, p).mean() * self.kl_coeff
        loss = kl + recon_loss
        logs = {"recon_loss": recon_loss, "kl": kl, "loss": loss}
        return loss, logs

    def training_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"train_{k}": v for k, v in logs.items()}, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"val_{k}": v for k, v in logs.items()})
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    @staticmethod
    def add_model_specific_args(parent_parser):
        parser = ArgumentParser(parents=[parent_parser], add_help=False)
        parser.add_argument("--enc_type", type=str, default="resnet18", help="resnet18/resnet50")
        parser.add_argument("--first_conv", action="store_true")
        parser.add_argument("--maxpool1", action="store_true")
        parser.add_argument("--lr", type=float, default=1e-4)
        parser.add_argument("--enc_out_dim", type=int, default=512)
        parser.add_argument("--kl_coeff", type=float, default=0.1)
        parser.add_argument("--latent_dim", type=int, default=256)
        parser.add_argument("--batch_size", type=int, default=256)
        parser.add_argument("--num_workers", type=int, default=8)
        parser.add_argument("--data_dir", type=str, default=".")
        return parser


def images(n, seed):
    generator = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 3, 1, 1, generator=generator)
    return TensorDataset(base + 0.1 * torch.randn(n, 3, 8, 8, generator=generator), torch.zeros(n))


def cli_main(root_dir, args=None):
    seed_everything()

    parser = ArgumentParser()
    parser.add_argument("--dataset", default="cifar10", type=str, choices=["cifar10", "stl10", "imagenet"])
    parser = VAE.add_model_specific_args(parser)
    args = parser.parse_args(args)
    args.input_height = 8

    model = VAE(**vars(args))
    trainer = Trainer(max_epochs=2, default_root_dir=root_dir, enable_progress_bar=False)
    train = DataLoader(images(256, seed=1), batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    val = DataLoader(images(64, seed=2), batch_size=args.batch_size, num_workers=args.num_workers)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    return model, trainer


def main(root_dir):
    model, trainer = cli_main(root_dir, ["--latent_dim=16", "--batch_size=32", "--num_workers=0", "--lr=1e-3"])
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "hparams": dict(model.hparams),
    }
