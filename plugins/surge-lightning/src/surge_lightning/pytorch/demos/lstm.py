"""``lightning.pytorch.demos.lstm``: the LSTM language model of Lightning's demos, written for Surge with Lightning's
constructor arguments, layers and initialization in the same order (the same seed gives the same weights), and its
sampler of contiguous sequences."""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.core.module import LightningModule
from surge_lightning.pytorch.demos.transformer import WikiText2

__all__ = ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class SimpleLSTM(nn.Module):
    """Embedding, dropout, a ``batch_first`` LSTM, dropout, a linear decoder; ``forward(input, hidden)`` returns
    the next token's log-probabilities (one row per token) and the new hidden state."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4, dropout: float = 0.2
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers = nlayers
        self.nhid = nhid
        self.init_weights()

    def init_weights(self) -> None:
        """The embedding and the decoder's weight uniform in [-0.1, 0.1], the decoder's bias zero."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero hidden and cell states for ``batch_size`` sequences, on the model's device and dtype."""
        weight = next(self.parameters())
        shape = (self.nlayers, batch_size, self.nhid)
        return weight.new_zeros(shape), weight.new_zeros(shape)


class SequenceSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` items, item ``j`` of batch ``i`` being ``i + j * (len(dataset) // batch_size)``:
    each position of a batch reads its own contiguous stretch of the data, so a hidden state carries over."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(self.dataset) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        n = len(self.dataset)
        for i in range(self.chunk_size):
            yield list(range(i, n - (n % self.batch_size), self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(LightningModule):
    """:class:`SimpleLSTM` trained on :class:`WikiText2` (read from ``./data``) with SGD at 20, the hidden state
    carried from batch to batch (detached) and reset at each epoch's end."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        input, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(input.size(0))
        hidden = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(input, hidden)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=20.0)
