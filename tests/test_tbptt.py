"""Truncated back-propagation through time (``Module.truncated_bptt_steps``): each batch is cut along time,
each piece is one optimizer step, and the hidden state is carried across pieces with its graph cut; checked
against the same training written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = quiet_trainer_args()


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(12, 10, 3, generator=generator)  # 12 sequences of 10 steps, batch-first
    y = x.cumsum(dim=1).sum(dim=2, keepdim=True)  # a running sum: needs the hidden state
    return TensorDataset(x, y)


class Recurrent(surge.Module):
    truncated_bptt_steps = 4

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.GRU(3, 8, batch_first=True)
        self.head = nn.Linear(8, 1)
        self.seen: list[tuple[int, int, bool]] = []  # (batch_idx, split length, hiddens given)

    def training_step(self, batch: Any, batch_idx: int, hiddens: Any = None) -> dict[str, Any]:
        x, y = batch
        self.seen.append((batch_idx, x.shape[1], hiddens is not None))
        if hiddens is not None:
            assert not hiddens.requires_grad  # the graph is cut between pieces
        out, hiddens = self.rnn(x, hiddens)
        loss = nn.functional.mse_loss(self.head(out), y)
        return {"loss": loss, "hiddens": hiddens}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _by_hand(epochs: int) -> tuple[Recurrent, list[float]]:
    model = Recurrent()
    optimizer = model.configure_optimizers()
    losses = []
    for _ in range(epochs):
        for x, y in DataLoader(_data(), batch_size=4):
            hiddens = None
            for start in range(0, x.shape[1], 4):
                out, hiddens = model.rnn(x[:, start : start + 4], hiddens)
                loss = nn.functional.mse_loss(model.head(out), y[:, start : start + 4])
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                hiddens = hiddens.detach()
                losses.append(loss.item())
    return model, losses


def test_each_time_split_is_one_step_with_the_hidden_state_carried(tmp_path: Path) -> None:
    expected, _ = _by_hand(epochs=2)
    model = Recurrent()
    trainer = surge.Trainer(
        max_epochs=2, accelerator="cpu", num_sanity_val_steps=0, default_root_dir=str(tmp_path), **QUIET
    )
    trainer.fit(model, train_dataloaders=DataLoader(_data(), batch_size=4))
    assert trainer.global_step == 2 * 3 * 3  # 2 epochs x 3 batches x 3 pieces (4 + 4 + 2 steps)
    assert model.seen[:3] == [(0, 4, False), (0, 4, True), (0, 2, True)]
    for name, tensor in expected.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_split_batch_can_be_overridden_and_bad_layouts_are_explained() -> None:
    model = Recurrent()
    pieces = model.tbptt_split_batch({"x": torch.zeros(2, 5, 1), "mask": torch.zeros(2)}, 2)
    assert [p["x"].shape[1] for p in pieces] == [2, 2, 1] and all(p["mask"].shape == (2,) for p in pieces)
    with pytest.raises(surge.SurgeError, match="time lengths"):
        model.tbptt_split_batch((torch.zeros(2, 5, 1), torch.zeros(2, 6, 1)), 2)


def test_cannot_be_combined_with_gradient_accumulation(tmp_path: Path) -> None:
    trainer = surge.Trainer(
        max_epochs=1, accelerator="cpu", accumulate_grad_batches=2, default_root_dir=str(tmp_path), **QUIET
    )
    with pytest.raises(surge.SurgeError, match="accumulate_grad_batches=2"):
        trainer.fit(Recurrent(), train_dataloaders=DataLoader(_data(), batch_size=4))
