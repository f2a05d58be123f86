"""``lightning.pytorch.demos.transformer``: the language model of Lightning's docs (an embedding, a positional
encoding, ``nn.Transformer``, a linear decoder), written for Surge with Lightning's constructor arguments and its
layers made in the same order, so that under the same seed the weights and the training are Lightning's, bit for
bit; and ``WikiText2``, read from a file already on disk (Surge downloads nothing)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import MultiheadAttention
from torch.utils.data import DataLoader, Dataset

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.core.module import LightningModule

__all__ = [
    "Dictionary",
    "LightningTransformer",
    "MultiheadAttention",
    "PositionalEncoding",
    "Transformer",
    "WikiText2",
    "tokenize",
]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class Transformer(nn.Module):
    """An encoder-decoder language model: ``forward(inputs, target)`` returns the log-probabilities of the next
    token at each position of ``target``, one row per token (``(batch * length, vocab_size)``), the decoder seeing
    only earlier positions (a causal mask, or ``mask``)."""

    def __init__(
        self,
        vocab_size: int = 33278,
        ninp: int = 200,
        nhead: int = 2,
        nhid: int = 200,
        nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        # the order the weights are drawn in is Lightning's: the same seed gives the same model
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp,
            nhead=nhead,
            num_encoder_layers=nlayers,
            num_decoder_layers=nlayers,
            dim_feedforward=nhid,
            dropout=dropout,
            batch_first=True,
        )
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask: Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """``size`` x ``size``: 0 on and below the diagonal, ``-inf`` above it (a position sees no later one)."""
        return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        length = inputs.shape[1]
        if self.src_mask is None or self.src_mask.size(0) != length:
            self.src_mask = self.generate_square_subsequent_mask(length).to(inputs.device)  # kept, as Lightning's
        if mask is None:
            mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        scale = math.sqrt(self.ninp)
        src = self.pos_encoder(self.embedding(inputs) * scale)
        tgt = self.pos_encoder(self.embedding(target) * scale)
        output = self.decoder(self.transformer(src, tgt, tgt_mask=mask))
        return F.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Adds a sinusoidal position encoding, then dropout. As Lightning's demo does, every position of a sequence of
    length ``L`` gets the encoding of position ``L`` (kept so that results are Lightning's); the table (``pe``,
    ``max_len`` positions) is made at the first call, on the input's device, and is not a buffer."""

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.pe is None:
            self.pe = self._init_pos_encoding(device=x.device)
        return self.dropout(x + self.pe[:, x.size(1)])

    def _init_pos_encoding(self, device: torch.device) -> Tensor:
        position = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        pe = torch.zeros(self.max_len, self.dim, device=device)
        pe[:, 0::2] = torch.sin(position * frequency)
        pe[:, 1::2] = torch.cos(position * frequency)
        return pe.unsqueeze(0)


class WikiText2(Dataset):
    """WikiText-2's training text as ``(inputs, target)`` blocks of ``block_size`` token ids, the target shifted by
    one token; read from ``data_dir / "wikitext-2.txt"``. Lightning's downloads the file when it is missing; Surge
    downloads nothing: ``download=True`` (the default) with no file there raises, saying where to put it."""

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        return self.data[start : start + self.block_size], self.data[start + 1 : start + self.block_size + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Nothing to do when ``destination`` exists; otherwise raises: Surge fetches no data sets."""
        if os.path.exists(destination):
            return
        raise FileNotFoundError(
            f"WikiText2: {destination} does not exist, and surge_lightning downloads no data sets (Lightning's "
            "demo downloads it). Put WikiText-2's train.txt (the PyTorch examples' word_language_model/data/"
            f"wikitext-2/train.txt) there as {Path(destination).name}, or pass data_dir= a folder that has it"
        )


class Dictionary:
    """Words to ids, in the order first seen."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """The ids of the file's words (whitespace-separated, ``<eos>`` ending each line), and their dictionary."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenize: {path} does not exist; pass the path of a text file")
    dictionary = Dictionary()
    with open(path, encoding="utf8") as file:
        ids = [dictionary.add_word(word) for line in file for word in [*line.split(), "<eos>"]]
    return torch.tensor(ids, dtype=torch.int64), dictionary


class LightningTransformer(LightningModule):
    """:class:`Transformer` trained on :class:`WikiText2` (read from ``./data``) with SGD at 0.1."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())
