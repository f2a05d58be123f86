"""The starter example of Lightning's "LightningModule" page,
https://lightning.ai/docs/pytorch/stable/common/lightning_module.html: a language model built on Lightning's demo
``Transformer``.

Kept: ``from lightning.pytorch.demos import Transformer`` (the page also imports ``WikiText2``, which downloads its
text: random token sequences stand in for it), ``LightningTransformer(vocab_size)`` with ``forward(inputs, target)``,
``training_step`` taking the negative log-likelihood of the model's output, the page's "Train Epoch-level Metrics"
``self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)``, SGD at 0.1, and
``L.Trainer(fast_dev_run=...)`` then ``trainer.fit(model=model, train_dataloaders=dataloader)``; fast_dev_run 4 where
the page has 100, a small vocabulary and model (``ninp``/``nhid`` 32, one layer).
"""

import lightning as L
import torch
from lightning.pytorch.demos import Transformer
from torch.utils.data import DataLoader, Dataset


class RandomTokens(Dataset):
    """Sequences of 16 tokens and their next tokens, like ``WikiText2``'s items."""

    def __init__(self, vocab_size=50, n=64, block_size=16):
        self.vocab_size = vocab_size
        self.data = torch.randint(vocab_size, (n, block_size + 1), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index, :-1], self.data[index, 1:]


class LightningTransformer(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=32, nlayers=1)

    def forward(self, inputs, target):
        return self.model(inputs, target)

    def training_step(self, batch, batch_idx):
        inputs, target = batch
        output = self(inputs, target)
        loss = torch.nn.functional.nll_loss(output, target.view(-1))
        # the value at each step, and the epoch's mean, to the progress bar and the logger
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.1)


def main(root_dir):
    L.seed_everything(0)
    dataset = RandomTokens()
    dataloader = DataLoader(dataset, batch_size=8)
    model = LightningTransformer(vocab_size=dataset.vocab_size)

    trainer = L.Trainer(fast_dev_run=4)
    trainer.fit(model=model, train_dataloaders=dataloader)
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics)}
