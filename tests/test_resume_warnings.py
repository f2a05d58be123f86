"""Every inexact resume docs/resume.md lists says so when the run resumes, naming the cause (issue 27), and the
same set-ups without the cause resume exactly and say nothing.

* Several train loaders in ``max_size_cycle`` mode, saved mid-epoch after the shorter one restarted: the replay
  of the epoch's first batches restarts it from other RNG states than the training steps left in the original
  run. Not when it has not restarted yet, nor when its order comes from a generator of its own.
* ``persistent_workers=True``: the original run's workers were started and seeded once; the resumed run starts
  new ones. Not with ``persistent_workers=False``.
* A training-epoch value logged with a callable ``reduce_fx``, saved mid-epoch: the checkpoint cannot hold the
  callable. Not with a named reduction.

Run A trains uninterrupted; run B stops (a plugin's ``request_stop``), is saved, and a fresh Trainer with another
global seed resumes it with A's budget (as in test_resume_cases.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import surge
import torch
from loguru import logger
from surge.testing import tiny_dataset
from torch import nn
from torch.utils.data import DataLoader

BATCH = 4


class Net(surge.Module):
    """Dropout and Adam; a batch is one ``(x, y)`` or a dict of them (several loaders)."""

    def __init__(self, reduce_fx: Any = "mean") -> None:
        super().__init__()
        self.reduce_fx = reduce_fx
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        pairs = list(batch.values()) if isinstance(batch, dict) else [batch]
        loss = sum(nn.functional.mse_loss(self.net(x), y) for x, y in pairs)
        self.log("train_loss", loss, on_step=False, on_epoch=True, reduce_fx=self.reduce_fx)
        return loss  # type: ignore[return-value]

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def largest(values: torch.Tensor) -> torch.Tensor:
    """A callable ``reduce_fx``."""
    return values.max()


class StopAt:
    surge_name = "stop_at"

    def __init__(self, epoch: int, batch_idx: int) -> None:
        self.epoch, self.batch_idx = epoch, batch_idx

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if (event.trainer.current_epoch, event.batch_idx) == (self.epoch, self.batch_idx):
            event.trainer.request_stop("the test stops here")


def data(kind: str) -> Any:
    """``combined``: loaders 'a' (15 batches) and 'b' (5 batches, restarted twice an epoch), both shuffled from the
    global RNG; ``combined_generator``: 'b' shuffled by a generator of its own; ``persistent``/``workers``: one
    loader with 2 worker processes, kept across epochs or not."""
    if kind.startswith("combined"):
        b_generator = torch.Generator().manual_seed(7) if kind == "combined_generator" else None
        return {
            "a": DataLoader(tiny_dataset(60, seed=1), batch_size=BATCH, shuffle=True),
            "b": DataLoader(tiny_dataset(20, seed=2), batch_size=BATCH, shuffle=True, generator=b_generator),
        }
    if kind in ("persistent", "workers"):
        return DataLoader(
            tiny_dataset(40, seed=1),
            batch_size=BATCH,
            shuffle=True,
            num_workers=2,
            persistent_workers=kind == "persistent",
        )
    return DataLoader(tiny_dataset(40, seed=1), batch_size=BATCH, shuffle=True)


def trainer(root: Any, plugins: list[Any] = ()) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=str(root),
        max_epochs=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=list(plugins),
    )


def state(t: surge.Trainer, model: surge.Module) -> dict[str, Any]:
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()}, "step": t.global_step}


def run(tmp_path: Any, kind: str, stop: tuple[int, int], reduce_fx: Any = "mean") -> tuple[bool, list[str]]:
    """Whether the resumed run equals the uninterrupted one, and the warnings of the resume."""
    surge.seed_everything(0)
    model = Net(reduce_fx)
    a = trainer(tmp_path / "a")
    a.fit(model, data(kind))
    expected = state(a, model)

    surge.seed_everything(0)
    b = trainer(tmp_path / "b", [StopAt(*stop)])
    b.fit(Net(reduce_fx), data(kind))
    path = b.save_checkpoint(str(tmp_path / "b.ckpt"))

    surge.seed_everything(123)
    model = Net(reduce_fx)
    c = trainer(tmp_path / "c")
    with captured() as messages:
        c.fit(model, data(kind), ckpt_path=path)
    got = state(c, model)
    same = got["step"] == expected["step"] and all(
        torch.equal(got["weights"][k], v) for k, v in expected["weights"].items()
    )
    return same, messages


class captured:
    def __enter__(self) -> list[str]:
        self.messages: list[str] = []
        self.sink = logger.add(lambda m: self.messages.append(str(m)), level="WARNING")
        return self.messages

    def __exit__(self, *exc: object) -> None:
        logger.remove(self.sink)


def _matching(messages: list[str], *parts: str) -> list[str]:
    return [m for m in messages if all(part in m for part in parts)]


def test_a_restarted_shorter_loader_resumed_mid_epoch_warns_naming_it(tmp_path: Any) -> None:
    same, messages = run(tmp_path, "combined", stop=(0, 7))  # 'b' restarted after batch 4
    warned = _matching(messages, "b.ckpt", "the training loader 'b'", "restarted", "generator of its own")
    assert len(warned) == 1, messages
    assert not _matching(messages, "the training loader 'a'")  # the longer one was not restarted
    assert not same  # the warning is due: the resumed run does differ


@pytest.mark.parametrize(("kind", "stop"), [("combined", (0, 3)), ("combined_generator", (0, 7))])
def test_several_loaders_resume_exactly_and_quietly_otherwise(tmp_path: Any, kind: str, stop: tuple[int, int]) -> None:
    """Stopped before 'b' restarted, or 'b' restarted from a generator of its own."""
    same, messages = run(tmp_path, kind, stop)
    assert same
    assert not _matching(messages, "had been restarted"), messages


def test_persistent_workers_warn_at_a_resume_after_their_start(tmp_path: Any) -> None:
    same, messages = run(tmp_path, "persistent", stop=(0, 9))  # the end of epoch 0: resumed at epoch 1
    warned = _matching(messages, "b.ckpt", "persistent_workers=True", "2 worker processes")
    assert len(warned) == 1, messages
    assert not same


def test_workers_that_are_not_persistent_resume_an_epoch_boundary_exactly_and_quietly(tmp_path: Any) -> None:
    same, messages = run(tmp_path, "workers", stop=(0, 9))
    assert same
    assert not _matching(messages, "persistent_workers=True"), messages


def test_a_callable_reduce_fx_saved_mid_epoch_warns_naming_the_value(tmp_path: Any) -> None:
    _, messages = run(tmp_path, "plain", stop=(0, 4), reduce_fx=largest)
    assert len(_matching(messages, "b.ckpt", "'train_loss'", "callable reduce_fx")) == 1, messages


def test_a_named_reduce_fx_saved_mid_epoch_resumes_exactly_and_quietly(tmp_path: Any) -> None:
    same, messages = run(tmp_path, "plain", stop=(0, 4), reduce_fx="max")
    assert same
    assert not _matching(messages, "callable reduce_fx"), messages
