"""Lightning's quick-start example: the LitAutoEncoder of Lightning's README, as its documentation writes it.

Only the data differs: small synthetic images (a 3-dimensional signal in 28 * 28 pixels) instead of MNIST,
so nothing is downloaded. ``tests/test_porting.py`` rewrites the Lightning imports below, and nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def forward(self, x):
        # in lightning, forward defines the prediction/inference actions
        embedding = self.encoder(x)
        return embedding

    def training_step(self, batch, batch_idx):
        # training_step defines the train loop. It is independent of forward
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        val_loss = F.mse_loss(x_hat, x)
        self.log("val_loss", val_loss)

    def test_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        test_loss = F.mse_loss(x_hat, x)
        self.log("test_loss", test_loss)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer


def synthetic_images(n, seed):
    """Stands in for ``MNIST(os.getcwd(), download=True, transform=transforms.ToTensor())``."""
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.randn(3, 28 * 28, generator=torch.Generator().manual_seed(0))
    codes = torch.randn(n, 3, generator=generator)
    images = torch.sigmoid(codes @ mixing).view(n, 1, 28, 28)
    return TensorDataset(images, torch.zeros(n, dtype=torch.long))


def main(root_dir, max_epochs=3):
    L.seed_everything(42)
    dataset = synthetic_images(320, seed=1)
    train, val = random_split(dataset, [256, 64])

    autoencoder = LitAutoEncoder()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, log_every_n_steps=1)
    trainer.fit(autoencoder, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=32))
    validated = trainer.validate(autoencoder, dataloaders=DataLoader(val, batch_size=32))
    tested = trainer.test(autoencoder, dataloaders=DataLoader(synthetic_images(64, seed=2), batch_size=32))

    # embed 4 fake images!
    fake_image_batch = torch.rand(4, 28 * 28, device=autoencoder.device)
    embeddings = autoencoder.encoder(fake_image_batch)
    predictions = trainer.predict(autoencoder, dataloaders=DataLoader(fake_image_batch, batch_size=2))
    return {
        "model": autoencoder,
        "trainer": trainer,
        "validated": validated,
        "tested": tested,
        "embeddings": embeddings,
        "predictions": predictions,
    }
