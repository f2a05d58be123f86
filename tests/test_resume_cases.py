"""Resume as a continuation, case by case: each way a run can stop, each thing a checkpoint can be written
after, gives a resumed run equal to the uninterrupted one, or a documented warning or error.

Run A trains uninterrupted; run B stops, is saved, and a fresh Trainer, after another global seed and a newly
initialised model, resumes it with A's budget. The model has dropout, Adam, a per-step and a per-epoch
scheduler and validation; the cases are the ones the property matrix (test_resume_matrix.py) found, each
written out so its failure reads plainly.
"""

from __future__ import annotations

import os
import random
import signal
from typing import Any

import numpy as np
import pytest
import surge
import torch
from loguru import logger
from surge import checkpoint
from surge.errors import CheckpointError, CheckpointSaveError
from surge.testing import tiny_dataset
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

N_TRAIN, BATCH = 80, 4  # 20 batches an epoch


class Net(surge.Module):
    def __init__(self, plateau: bool = False) -> None:
        super().__init__()
        self.plateau = plateau
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 1))
        self.val_losses: list[tuple[int, float]] = []
        self.fail_at: tuple[int, int] | None = None  # (epoch, batch_idx): raise after backward there

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def on_after_backward(self) -> None:
        if self.fail_at == (self.trainer.current_epoch, self.trainer.state.batch_idx):
            raise RuntimeError("injected failure after backward")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and "val_loss" in self.trainer.callback_metrics:
            self.val_losses.append((self.trainer.current_epoch, float(self.trainer.callback_metrics["val_loss"])))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        per_step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.9)
        if self.plateau:
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
            return [optimizer], [
                {"scheduler": per_step, "interval": "step"},
                {"scheduler": plateau, "monitor": "val_loss"},
            ]
        per_epoch = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)
        return [optimizer], [{"scheduler": per_step, "interval": "step"}, {"scheduler": per_epoch}]


class NumpySampler(Sampler[int]):
    """Draws each epoch's order from numpy's global RNG."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter(np.random.permutation(self.n).tolist())


class RandomBuffer(IterableDataset):
    """Shuffles a buffer with python's ``random`` as it goes, drawing while it is iterated."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self) -> Any:
        buffer: list[Any] = []
        for i in range(len(self.base)):
            buffer.append(self.base[i])
            if len(buffer) == 8:
                yield buffer.pop(random.randrange(len(buffer)))
        while buffer:
            yield buffer.pop(random.randrange(len(buffer)))


def loaders(kind: str = "shuffle") -> tuple[DataLoader, DataLoader]:
    train_set: Dataset = tiny_dataset(N_TRAIN, seed=1)
    val = DataLoader(tiny_dataset(16, seed=2), batch_size=BATCH)
    if kind == "numpy":
        return DataLoader(train_set, batch_size=BATCH, sampler=NumpySampler(N_TRAIN)), val
    if kind == "python":
        return DataLoader(RandomBuffer(train_set), batch_size=BATCH), val
    return DataLoader(train_set, batch_size=BATCH, shuffle=True), val


def trainer(tmp_path: Any, plugins: list[Any] = (), **flags: Any) -> surge.Trainer:
    flags = {"max_epochs": 2, "num_sanity_val_steps": 0, **flags}
    return surge.Trainer(
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=list(plugins),
        **flags,
    )


def state_of(t: surge.Trainer, model: surge.Module) -> dict[str, Any]:
    return {
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizers": [o.state_dict() for o in t.optimizers],
        "schedulers": [c.scheduler.state_dict() for c in t.lr_scheduler_configs],
        "global_step": t.global_step,
        "epoch": t.current_epoch,
    }


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def uninterrupted(tmp_path: Any, data: str = "shuffle", model_args: dict[str, Any] | None = None, **flags: Any) -> Any:
    surge.seed_everything(0)
    model = Net(**(model_args or {}))
    t = trainer(tmp_path / "a", **flags)
    t.fit(model, *loaders(data))
    return state_of(t, model), model


def resumed(
    tmp_path: Any, path: str, data: str = "shuffle", model_args: dict[str, Any] | None = None, **flags: Any
) -> Any:
    surge.seed_everything(999)  # another seed and another initialisation: everything must come from the file
    model = Net(**(model_args or {}))
    t = trainer(tmp_path / "c", **flags)
    t.fit(model, *loaders(data), ckpt_path=path)
    return state_of(t, model), model


class StopAt:
    """Requests a stop after one training batch (as the Timer or any plugin would)."""

    surge_name = "stop_at"

    def __init__(self, epoch: int, batch_idx: int) -> None:
        self.epoch, self.batch_idx = epoch, batch_idx

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if (event.trainer.current_epoch, event.batch_idx) == (self.epoch, self.batch_idx):
            event.trainer.request_stop("a plugin asked")


class CtrlC:
    """Presses Ctrl-C after one training batch, or during the validation that follows it."""

    surge_name = "ctrl_c"

    def __init__(self, epoch: int, batch_idx: int, in_validation: bool = False) -> None:
        self.epoch, self.batch_idx, self.in_validation = epoch, batch_idx, in_validation

    def _here(self, trainer: surge.Trainer) -> bool:
        return (trainer.current_epoch, trainer.state.batch_idx) == (self.epoch, self.batch_idx)

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if not self.in_validation and self._here(event.trainer):
            os.kill(os.getpid(), signal.SIGINT)

    @surge.hookimpl
    def validation_batch_end(self, event: Any) -> None:
        trainer = event.trainer
        if self.in_validation and not trainer.sanity_checking and self._here(trainer) and event.batch_idx == 1:
            os.kill(os.getpid(), signal.SIGINT)


# -- 1. a stop in the middle of an epoch is not the end of the epoch -------------------------------------


@pytest.mark.parametrize("how", ["max_steps", "request_stop"])
def test_a_mid_epoch_stop_resumes_the_rest_of_the_epoch(tmp_path, how):
    ref, _ = uninterrupted(tmp_path, accumulate_grad_batches=2)
    surge.seed_everything(0)
    model = Net()
    ends: list[int] = []
    model.on_train_epoch_end = lambda: ends.append(model.trainer.current_epoch)  # type: ignore[method-assign]
    if how == "max_steps":
        t = trainer(tmp_path / "b", accumulate_grad_batches=2, max_steps=7)  # 14 of 20 batches of epoch 0
    else:
        t = trainer(tmp_path / "b", [StopAt(0, 13)], accumulate_grad_batches=2)
    t.fit(model, *loaders())
    # what the user sees is Lightning's: the cut-short epoch ends (its hooks run) and current_epoch goes up
    assert ends == [0] and t.current_epoch == 1 and t.global_step == 7
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    saved = checkpoint.load(path)
    # what the checkpoint records is the truth: epoch 0, 14 batches done
    assert saved["epoch"] == 0 and saved["loops"]["epoch_batches"] == 14 and not saved["loops"]["epoch_loop_done"]
    got, _ = resumed(tmp_path, path, accumulate_grad_batches=2)
    assert got["global_step"] == 20  # 40 batches / 2, not 27
    assert_same(got, ref)


def test_last_ckpt_written_at_a_cut_short_epoch_end_resumes_exactly(tmp_path):
    from surge_checkpoint import ModelCheckpoint

    ref, _ = uninterrupted(tmp_path)
    surge.seed_everything(0)
    dirpath = str(tmp_path / "ckpts")
    t = trainer(tmp_path / "b", [ModelCheckpoint(dirpath=dirpath, save_last=True, save_top_k=0)], max_steps=7)
    t.fit(Net(), *loaders())
    last = os.path.join(dirpath, "last.ckpt")
    assert checkpoint.load(last)["loops"]["epoch_batches"] == 7
    got, _ = resumed(tmp_path, last)
    assert_same(got, ref)


def test_a_stop_inside_an_accumulation_window_leaves_the_window_unstepped_for_the_resume(tmp_path):
    ref, _ = uninterrupted(tmp_path, accumulate_grad_batches=3)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", [StopAt(0, 7)], accumulate_grad_batches=3)  # 8 batches: 2 steps and 2 of 3
    t.fit(Net(), *loaders())
    assert t.global_step == 2
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    assert "accumulated_grads" in checkpoint.load(path)
    got, _ = resumed(tmp_path, path, accumulate_grad_batches=3)
    assert_same(got, ref)


# -- 2. python's and numpy's RNG drive the data order: restored mid-epoch ---------------------------------


@pytest.mark.parametrize("data", ["numpy", "python"])
def test_data_order_from_numpy_or_python_rng_is_restored_mid_epoch(tmp_path, data):
    ref, _ = uninterrupted(tmp_path, data)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", max_steps=25)  # epoch 1, batch 5
    t.fit(Net(), *loaders(data))
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    got, _ = resumed(tmp_path, path, data)
    assert_same(got, ref)


# -- 3. Ctrl-C during validation: that validation did not happen ------------------------------------------


def test_ctrl_c_during_validation_reruns_it_on_resume(tmp_path):
    ref, ref_model = uninterrupted(tmp_path, model_args={"plateau": True}, val_check_interval=0.5)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", [CtrlC(1, 9, in_validation=True)], val_check_interval=0.5)
    t.fit(Net(plateau=True), *loaders())
    assert t.interrupted
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    assert checkpoint.load(path)["loops"]["validated"] is False
    got, model = resumed(tmp_path, path, model_args={"plateau": True}, val_check_interval=0.5)
    assert model.val_losses == ref_model.val_losses[-len(model.val_losses) :]
    assert model.val_losses[0][0] == 1 and len(model.val_losses) == 2  # the interrupted one, then the last
    assert_same(got, ref)


# -- 4. manual optimization: gradients left after the user's step are not a window of the loop's -----------


class Manual(Net):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        first, second = self.optimizers()
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        first.zero_grad()
        second.zero_grad()
        self.manual_backward(loss)
        first.step()
        second.step()  # the gradients stay on the parameters: the user zeroes them at the next step

    def configure_optimizers(self) -> Any:
        first = torch.optim.Adam(self.net[0].parameters(), lr=0.01)
        second = torch.optim.SGD(self.net[3].parameters(), lr=0.05)
        return [first, second]


def test_manual_optimization_resumes_without_an_extra_step(tmp_path):
    surge.seed_everything(0)
    model = Manual()
    t = trainer(tmp_path / "a")
    t.fit(model, *loaders())
    ref = state_of(t, model)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", [StopAt(0, 10)])
    t.fit(Manual(), *loaders())
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    surge.seed_everything(5)
    model = Manual()
    t = trainer(tmp_path / "c")
    t.fit(model, *loaders(), ckpt_path=path)
    assert t.global_step == ref["global_step"] == 80  # two optimizers, 40 batches
    assert_same(state_of(t, model), ref)


# -- 5. a checkpoint saved after a failed step records the position before it --------------------------------


def test_a_checkpoint_after_a_failed_step_resumes_before_it(tmp_path):
    ref, _ = uninterrupted(tmp_path)
    surge.seed_everything(0)
    model = Net()
    model.fail_at = (1, 4)
    t = trainer(tmp_path / "b")
    with pytest.raises(RuntimeError, match="injected failure"):
        t.fit(model, *loaders())
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    saved = checkpoint.load(path)
    assert saved["loops"]["epoch_batches"] == 4 and "accumulated_grads" not in saved
    got, _ = resumed(tmp_path, path)
    assert_same(got, ref)


def test_a_checkpoint_after_a_failed_step_inside_an_accumulation_window_is_refused(tmp_path):
    surge.seed_everything(0)
    model = Net()
    model.fail_at = (0, 4)  # the second micro-batch of the window 3, 4, 5
    t = trainer(tmp_path / "b", accumulate_grad_batches=3)
    with pytest.raises(RuntimeError, match="injected failure"):
        t.fit(model, *loaders())
    with pytest.raises(CheckpointSaveError, match="accumulation window"):
        t.save_checkpoint(str(tmp_path / "b.ckpt"))
    assert not os.path.exists(tmp_path / "b.ckpt")


def test_terminate_on_nan_leaves_no_nan_gradients_in_the_checkpoint(tmp_path):
    from surge_callbacks import NonFiniteError

    class Poisoned(Net):
        poison = True

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            if self.poison and (self.trainer.current_epoch, batch_idx) == (0, 6):
                loss = loss * float("nan")
            return loss

    ref, _ = uninterrupted(tmp_path)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", terminate_on_nan=True)
    with pytest.raises(NonFiniteError):
        t.fit(Poisoned(), *loaders())
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    saved = checkpoint.load(path)
    assert "accumulated_grads" not in saved
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values())
    # the cause fixed, the resume goes on, and equals the run that never met the NaN
    surge.seed_everything(3)
    model = Poisoned()
    model.poison = False
    t = trainer(tmp_path / "c", terminate_on_nan=True)
    t.fit(model, *loaders(), ckpt_path=path)
    assert_same(state_of(t, model), ref)


def test_a_failed_step_that_drew_from_python_rng_is_resumed_with_a_warning(tmp_path):
    messages: list[str] = []
    handle = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        surge.seed_everything(0)
        model = Net()
        model.fail_at = (0, 4)
        t = trainer(tmp_path / "b")
        with pytest.raises(RuntimeError):
            t.fit(model, *loaders("python"))  # the data pipeline draws from python's random every batch
        path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
        resumed(tmp_path, path, "python")
    finally:
        logger.remove(handle)
    assert sum("python's global RNG moved" in m for m in messages) == 2  # at the save and at the resume


# -- 6. a weights-only checkpoint cannot continue a run ---------------------------------------------------


def test_fit_from_a_weights_only_checkpoint_is_refused(tmp_path):
    surge.seed_everything(0)
    t = trainer(tmp_path / "a", max_epochs=1)
    t.fit(Net(), *loaders())
    path = t.save_checkpoint(str(tmp_path / "w.ckpt"), weights_only=True)
    with pytest.raises(CheckpointError, match="weights only.*load_from_checkpoint"):
        trainer(tmp_path / "b").fit(Net(), *loaders(), ckpt_path=path)
    assert Net.load_from_checkpoint(path) is not None  # loading the weights alone is fine


# -- 9. a second fit on the same Trainer -------------------------------------------------------------------


def test_a_second_fit_after_ctrl_c_continues_exactly(tmp_path):
    ref, _ = uninterrupted(tmp_path, accumulate_grad_batches=2)
    surge.seed_everything(0)
    model = Net()
    t = trainer(tmp_path / "b", [CtrlC(0, 12)], accumulate_grad_batches=2)
    t.fit(model, *loaders())
    assert t.interrupted and t.global_step == 6  # 13 batches: 6 steps and one micro-batch of the 7th
    t.fit(model, *loaders())
    assert t.state.status == "finished"
    assert_same(state_of(t, model), ref)


def test_a_second_fit_after_a_finished_one_is_refused(tmp_path):
    surge.seed_everything(0)
    model = Net()
    t = trainer(tmp_path / "b", max_epochs=1)
    t.fit(model, *loaders())
    with pytest.raises(surge.SurgeError, match="already finished.*ckpt_path"):
        t.fit(model, *loaders())
    with pytest.raises(surge.SurgeError, match="already ran fit"):
        t.fit(Net(), *loaders())


# -- 11. the sanity check changes no number --------------------------------------------------------------


def test_the_sanity_check_does_not_change_the_numbers(tmp_path):
    def run(sanity: int) -> dict[str, Any]:
        surge.seed_everything(0)
        model = Net()
        train, _ = loaders()
        val = DataLoader(tiny_dataset(16, seed=2), batch_size=BATCH, shuffle=True)  # draws from torch's RNG
        t = trainer(tmp_path / str(sanity), num_sanity_val_steps=sanity)
        t.fit(model, train, val)
        return state_of(t, model)

    assert_same(run(2), run(0))


# -- RNG objects of the data pipeline's own -------------------------------------------------------------


class OwnRngSampler(Sampler[int]):
    """Draws each epoch's order from a numpy Generator it holds (the usual seeded-sampler pattern)."""

    def __init__(self, n: int) -> None:
        self.n, self.rng = n, np.random.default_rng(3)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter(self.rng.permutation(self.n).tolist())


class OwnRngBuffer(RandomBuffer):
    """Shuffles with a ``random.Random`` instance of its own."""

    def __init__(self, base: Any) -> None:
        super().__init__(base)
        self.rng = random.Random(4)

    def __iter__(self) -> Any:
        order = list(range(len(self.base)))
        self.rng.shuffle(order)
        return (self.base[i] for i in order)


@pytest.mark.parametrize("kind", ["sampler_generator", "dataset_random"])
def test_rng_objects_held_by_the_sampler_or_dataset_are_restored_mid_epoch(tmp_path, kind):
    def data() -> tuple[DataLoader, DataLoader]:
        base = tiny_dataset(N_TRAIN, seed=1)
        _, val = loaders()
        if kind == "sampler_generator":
            return DataLoader(base, batch_size=BATCH, sampler=OwnRngSampler(N_TRAIN)), val
        return DataLoader(OwnRngBuffer(base), batch_size=BATCH), val

    surge.seed_everything(0)
    model = Net()
    t = trainer(tmp_path / "a")
    t.fit(model, *data())
    ref = state_of(t, model)
    surge.seed_everything(0)
    t = trainer(tmp_path / "b", max_steps=25)
    t.fit(Net(), *data())
    path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    assert checkpoint.load(path)["rng"]["objects"][0]["kind"] in ("generator", "random")
    surge.seed_everything(9)
    model = Net()
    t = trainer(tmp_path / "c")
    t.fit(model, *data(), ckpt_path=path)
    assert_same(state_of(t, model), ref)


def test_weights_changed_after_a_stop_are_reported_as_not_exact(tmp_path):
    """EMA's apply_at_end writes the average into the Module at train_end, after the stop was recorded."""
    from surge_swa import ExponentialMovingAverage as EMA

    messages: list[str] = []
    handle = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        surge.seed_everything(0)
        t = trainer(tmp_path / "b", [EMA(decay=0.9, apply_at_end=True)], max_steps=7)
        t.fit(Net(), *loaders())
        path = t.save_checkpoint(str(tmp_path / "b.ckpt"))
    finally:
        logger.remove(handle)
    assert "weights changed after the stop" in checkpoint.load(path)["loops"]["inexact"]
    assert any("weights changed after the stop" in m for m in messages)
