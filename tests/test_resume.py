"""Bit-exact resume: a run saved at any step boundary and continued in a fresh Trainer ends with the same
weights, optimizer and scheduler states, and the same random draws, as a run that was never interrupted.

The run is hard on purpose: shuffling, dropout, gradient accumulation 2, validation twice an epoch, a
per-step and a per-epoch scheduler, and a training step that draws from torch, python and numpy RNGs.
"""

from __future__ import annotations

import functools
import math
import random
import signal
from typing import Any

import numpy as np
import pytest
import surge
import torch
from loguru import logger
from surge import checkpoint
from surge.testing import tiny_dataset
from torch import nn
from torch.utils.data import DataLoader, Dataset

EPOCHS, N_TRAIN, BATCH = 3, 80, 8  # 10 batches an epoch; validation after batches 5 and 10
STEPS_PER_EPOCH = N_TRAIN // BATCH


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
        self.draws: list[tuple[float, float, float]] = []
        self.epoch_means: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.draws.append((torch.rand(()).item(), random.random(), float(np.random.rand())))
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_mse", loss, on_step=False, on_epoch=True)  # an epoch mean across a mid-epoch resume
        return loss

    def on_train_epoch_end(self) -> None:
        if "train_mse" in self.trainer.callback_metrics:
            self.epoch_means.append(float(self.trainer.callback_metrics["train_mse"]))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        per_step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.8)
        per_epoch = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
        return [optimizer], [{"scheduler": per_step, "interval": "step"}, {"scheduler": per_epoch}]


class Counted(Dataset):
    """Counts the samples loaded in this process (the sampler-level skip loads none of the skipped ones)."""

    def __init__(self, base: Any) -> None:
        self.base, self.loaded = base, 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        self.loaded += 1
        return self.base[index]


class Data(surge.DataModule):
    def __init__(self, num_workers: int = 0, generator: bool = False) -> None:
        super().__init__()
        self.num_workers, self.generator = num_workers, generator
        self.train_set = Counted(tiny_dataset(N_TRAIN, seed=1))
        self.val_set = tiny_dataset(24, seed=2)

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(7) if self.generator else None
        return DataLoader(
            self.train_set, batch_size=BATCH, shuffle=True, num_workers=self.num_workers, generator=generator
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=BATCH)


class Stop(Exception):
    """Ends the first run right after its checkpoint, as a crash would."""


class SaveAndStop:
    """Saves a checkpoint at one point of the run and stops it there."""

    surge_name = "save_and_stop"

    def __init__(self, event: str, epoch: int, batch_idx: int | None, path: str) -> None:
        self.event, self.epoch, self.batch_idx, self.path = event, epoch, batch_idx, path
        self.validations = 0

    def _maybe_save(self, trainer: surge.Trainer, batch_idx: int | None) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch_idx:
            trainer.save_checkpoint(self.path)
            raise Stop

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        if self.event == "train_batch_start":
            self._maybe_save(event.trainer, event.batch_idx)

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if self.event == "train_batch_end":
            self._maybe_save(event.trainer, event.batch_idx)

    @surge.hookimpl
    def validation_end(self, event: Any) -> None:
        trainer = event.trainer
        if self.event == "validation_end" and not trainer.sanity_checking:
            self._maybe_save(trainer, trainer.state.batch_idx)

    @surge.hookimpl
    def train_epoch_start(self, event: Any) -> None:
        if self.event == "train_epoch_start":
            self._maybe_save(event.trainer, None)

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        if self.event == "train_epoch_end":
            self._maybe_save(event.trainer, None)


def make_trainer(tmp_path: Any, plugins: list[Any] = (), **flags: Any) -> surge.Trainer:
    flags = {
        "max_epochs": EPOCHS,
        "accumulate_grad_batches": 2,
        "val_check_interval": 0.5,
        "num_sanity_val_steps": 1,
        **flags,
    }
    return surge.Trainer(
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=list(plugins),
        **flags,
    )


class Result:
    def __init__(self, trainer: surge.Trainer, model: Net, data: Data) -> None:
        self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.optimizer = trainer.optimizers[0].state_dict()
        self.schedulers = [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs]
        self.draws = list(model.draws)
        self.epoch_means = list(model.epoch_means)
        self.global_step, self.epoch = trainer.global_step, trainer.current_epoch
        self.loaded = data.train_set.loaded


@functools.cache
def reference(tmp_root: str, num_workers: int = 0, generator: bool = False) -> Result:
    """The uninterrupted run (computed once per configuration)."""
    surge.seed_everything(0)
    model, data = Net(), Data(num_workers, generator)
    trainer = make_trainer(tmp_root)
    trainer.fit(model, datamodule=data)
    return Result(trainer, model, data)


def interrupted_and_resumed(
    tmp_path: Any, event: str, epoch: int, batch_idx: int | None, num_workers: int = 0, generator: bool = False
) -> tuple[Result, Data]:
    path = str(tmp_path / "resume.ckpt")
    surge.seed_everything(0)
    with pytest.raises(Stop):
        make_trainer(tmp_path, [SaveAndStop(event, epoch, batch_idx, path)]).fit(
            Net(), datamodule=Data(num_workers, generator)
        )
    surge.seed_everything(12345)  # a different seed and initialization: all of it must come from the checkpoint
    model, data = Net(), Data(num_workers, generator)
    trainer = make_trainer(tmp_path)
    trainer.fit(model, datamodule=data, ckpt_path=path)
    return Result(trainer, model, data), data


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, b) in enumerate(zip(actual, expected)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert actual == expected, where


def assert_resumed_exactly(resumed: Result, ref: Result) -> None:
    assert (resumed.global_step, resumed.epoch) == (ref.global_step, ref.epoch)
    assert_same(resumed.weights, ref.weights, "weights")
    assert_same(resumed.optimizer, ref.optimizer, "optimizer")
    assert_same(resumed.schedulers, ref.schedulers, "schedulers")
    # every draw after the resume (torch, python, numpy) is the one the uninterrupted run made
    assert resumed.draws == ref.draws[len(ref.draws) - len(resumed.draws) :]
    # the epoch means of logged values include the steps before the resume (the checkpoint holds them)
    assert resumed.epoch_means == ref.epoch_means[len(ref.epoch_means) - len(resumed.epoch_means) :]
    assert resumed.epoch_means


@pytest.mark.parametrize(
    "event, epoch, batch_idx, steps_before",
    [
        ("train_batch_end", 1, 2, 13),  # mid-epoch, inside an accumulation window
        ("train_batch_end", 1, 5, 16),  # mid-epoch, window closed
        ("train_batch_end", 1, 4, 15),  # validation follows this batch: the resumed run must still run it
        ("validation_end", 1, 4, 15),  # saved during that validation: the resumed run must not repeat it
        ("train_batch_start", 2, 3, 23),  # before the batch: it is trained after the resume
        ("train_batch_end", 0, 9, 10),  # the last batch of an epoch
        ("train_epoch_end", 0, None, 10),  # only the epoch's end remains: its scheduler steps on resume
        ("train_epoch_start", 2, None, 20),  # between epochs
    ],
)
def test_resume_continues_exactly(tmp_path, event, epoch, batch_idx, steps_before):
    ref = reference(str(tmp_path.parent / "reference"))
    resumed, _ = interrupted_and_resumed(tmp_path, event, epoch, batch_idx)
    assert len(resumed.draws) == len(ref.draws) - steps_before
    assert_resumed_exactly(resumed, ref)


def test_a_resumed_run_saved_again_resumes_exactly(tmp_path):
    """The second checkpoint is taken in the epoch the first resume continued, and one before the loop even
    reaches the restored position (in ``fit_start``): both carry the original epoch's data order."""
    ref = reference(str(tmp_path.parent / "reference"))
    first, second, third = (str(tmp_path / f"{n}.ckpt") for n in ("first", "second", "third"))
    surge.seed_everything(0)
    with pytest.raises(Stop):
        make_trainer(tmp_path, [SaveAndStop("train_batch_end", 1, 2, first)]).fit(Net(), datamodule=Data())
    surge.seed_everything(1)
    with pytest.raises(Stop):
        make_trainer(tmp_path, [SaveAndStop("train_batch_end", 1, 6, second)]).fit(
            Net(), datamodule=Data(), ckpt_path=first
        )

    class SaveAtFitStart:
        surge_name = "save_at_fit_start"

        @surge.hookimpl
        def fit_start(self, event: Any) -> None:
            event.trainer.save_checkpoint(third)
            raise Stop

    surge.seed_everything(2)
    with pytest.raises(Stop):
        make_trainer(tmp_path, [SaveAtFitStart()]).fit(Net(), datamodule=Data(), ckpt_path=second)
    surge.seed_everything(3)
    model, data = Net(), Data()
    trainer = make_trainer(tmp_path)
    trainer.fit(model, datamodule=data, ckpt_path=third)
    assert_resumed_exactly(Result(trainer, model, data), ref)
    assert len(model.draws) == len(ref.draws) - 17


def test_resume_with_a_seeded_loader_generator(tmp_path):
    ref = reference(str(tmp_path.parent / "reference-generator"), generator=True)
    resumed, _ = interrupted_and_resumed(tmp_path, "train_batch_end", 1, 6, generator=True)
    assert_resumed_exactly(resumed, ref)


def test_skipped_batches_are_never_loaded(tmp_path):
    ref = reference(str(tmp_path.parent / "reference"))
    resumed, data = interrupted_and_resumed(tmp_path, "train_batch_end", 1, 2)
    assert_resumed_exactly(resumed, ref)
    done = 3  # batches 0..2 of epoch 1
    assert data.train_set.loaded == (STEPS_PER_EPOCH - done) * BATCH + STEPS_PER_EPOCH * BATCH  # rest of 1, all of 2


def test_resume_with_worker_processes(tmp_path):
    ref = reference(str(tmp_path.parent / "reference-workers"), num_workers=2)
    resumed, _ = interrupted_and_resumed(tmp_path, "train_batch_end", 1, 2, num_workers=2)
    assert_resumed_exactly(resumed, ref)


def test_without_a_checkpoint_the_rng_draws_differ(tmp_path):
    """Guards the tests above: a resume that did not restore the RNGs would be caught."""
    ref = reference(str(tmp_path.parent / "reference"))
    surge.seed_everything(12345)
    model = Net()
    make_trainer(tmp_path).fit(model, datamodule=Data())
    assert model.draws != ref.draws
    assert not torch.equal(model.state_dict()["net.0.weight"], ref.weights["net.0.weight"])


def test_several_train_loaders_are_replayed_to_the_position(tmp_path):
    """A combined loader has no sampler to skip in: the batches done are drawn again from the epoch-start
    RNG states. (Not exact when a shorter loader restarts mid-epoch in max_size_cycle mode: that restart
    drew its order from the RNG as training had left it; see surge.engine._resume.)"""

    def loaders() -> dict[str, DataLoader]:
        return {
            "a": DataLoader(tiny_dataset(N_TRAIN, seed=1), batch_size=BATCH, shuffle=True),
            "b": DataLoader(tiny_dataset(N_TRAIN, seed=3), batch_size=BATCH, shuffle=True),
        }

    class Two(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch["a"], batch_idx) + nn.functional.l1_loss(
                self(batch["b"][0]), batch["b"][1]
            )

    def run(plugins: list[Any] = (), ckpt_path: str | None = None) -> Two:
        model = Two()
        trainer = make_trainer(tmp_path, plugins, val_check_interval=1.0, num_sanity_val_steps=0)
        trainer.fit(model, train_dataloaders=loaders(), ckpt_path=ckpt_path)
        return model

    surge.seed_everything(0)
    ref = run()
    path = str(tmp_path / "combined.ckpt")
    surge.seed_everything(0)
    with pytest.raises(Stop):
        run([SaveAndStop("train_batch_end", 1, 7, path)])
    surge.seed_everything(9)
    resumed = run(ckpt_path=path)
    assert_same(resumed.state_dict(), ref.state_dict(), "weights")
    assert resumed.draws == ref.draws[18:]


# -- a loader with its own state ----------------------------------------------------------------------------


class StatefulLoader:
    """Shuffles with its own seeded generator per epoch and checkpoints its position (like torchdata's)."""

    def __init__(self) -> None:
        self.dataset = tiny_dataset(N_TRAIN, seed=1)
        self.epoch, self.position = 0, 0
        self.loaded_state: Any = None
        self.yielded: list[int] = []

    def __len__(self) -> int:
        return N_TRAIN // BATCH

    def __iter__(self) -> Any:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(self.epoch))
        while self.position < len(self):
            batch = self.position
            self.position += 1
            self.yielded.append(self.epoch * len(self) + batch)
            yield self.dataset[order[batch * BATCH : (batch + 1) * BATCH]]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loaded_state = dict(state)
        self.epoch, self.position = state["epoch"], state["position"]


def test_a_loader_with_its_own_state_dict_restores_itself(tmp_path):
    def run(**kwargs: Any) -> tuple[Net, StatefulLoader, surge.Trainer]:
        model, loader = Net(), StatefulLoader()
        trainer = make_trainer(tmp_path, kwargs.pop("plugins", []), val_check_interval=1.0)
        trainer.fit(model, train_dataloaders=loader, **kwargs)
        return model, loader, trainer

    surge.seed_everything(0)
    ref_model, ref_loader, _ = run()
    path = str(tmp_path / "stateful.ckpt")
    surge.seed_everything(0)
    with pytest.raises(Stop):
        run(plugins=[SaveAndStop("train_batch_end", 1, 3, path)])
    surge.seed_everything(5)
    model, loader, _ = run(ckpt_path=path)
    assert loader.loaded_state == {"epoch": 1, "position": 4}
    assert loader.yielded == ref_loader.yielded[14:]  # epoch 1 from its 5th batch on, then epoch 2
    assert_same(model.state_dict(), ref_model.state_dict(), "weights")
    assert model.draws == ref_model.draws[14:]


# -- requested checkpoints ----------------------------------------------------------------------------------


def test_request_checkpoint_is_served_at_the_next_step_boundary(tmp_path):
    ref = reference(str(tmp_path.parent / "reference"))
    path = str(tmp_path / "requested.ckpt")
    served: list[tuple[int, int]] = []

    class Requester:
        surge_name = "requester"
        validations = 0

        @surge.hookimpl
        def validation_end(self, event: Any) -> None:
            self.validations += 1

        @surge.hookimpl
        def train_batch_end(self, event: Any) -> None:
            trainer = event.trainer
            if (trainer.current_epoch, event.batch_idx) == (1, 4):  # validation follows this batch
                previous = signal.signal(signal.SIGUSR1, lambda *_: trainer.request_checkpoint(save, "SIGUSR1"))
                try:
                    signal.raise_signal(signal.SIGUSR1)  # requested from a signal handler, served later
                finally:
                    signal.signal(signal.SIGUSR1, previous)
                assert not served

    requester = Requester()

    def save(trainer: surge.Trainer) -> None:
        served.append((trainer.state.total_batches, requester.validations))
        trainer.save_checkpoint(path)
        raise Stop

    surge.seed_everything(0)
    with pytest.raises(Stop):
        make_trainer(tmp_path, [requester]).fit(Net(), datamodule=Data())
    # once, after batch 4 of epoch 1 and after the validation that follows it (sanity check + 2 + 1)
    assert served == [(15, 4)]
    surge.seed_everything(1)
    model, data = Net(), Data()
    trainer = make_trainer(tmp_path)
    trainer.fit(model, datamodule=data, ckpt_path=path)
    assert_resumed_exactly(Result(trainer, model, data), ref)


def test_requests_left_when_the_run_ends_are_dropped_with_a_warning(tmp_path):
    calls: list[int] = []

    class LateRequester:
        surge_name = "late"

        @surge.hookimpl
        def fit_end(self, event: Any) -> None:
            event.trainer.request_checkpoint(lambda t: calls.append(1), "too late")

    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        make_trainer(tmp_path, [LateRequester()], max_epochs=1).fit(Net(), datamodule=Data())
    finally:
        logger.remove(sink)
    assert calls == []
    assert any("not served" in m and "too late" in m for m in messages)


# -- ckpt_path aliases and trusted ----------------------------------------------------------------------------


class Resolver:
    surge_name = "resolver"

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers, self.asked = answers, []

    @surge.hookimpl
    def checkpoint_path(self, event: surge.events.CheckpointPath) -> str | None:
        self.asked.append(event.alias)
        return self.answers.get(event.alias)


def _saved_run(tmp_path: Any) -> tuple[str, surge.Trainer]:
    surge.seed_everything(0)
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(Net(), datamodule=Data())
    path = str(tmp_path / "done.ckpt")
    trainer.save_checkpoint(path)
    return path, trainer


def test_last_and_best_are_resolved_by_the_first_plugin_that_answers(tmp_path):
    path, _ = _saved_run(tmp_path)
    silent, answering = Resolver({}), Resolver({"last": path, "best": path})
    answering.surge_name = "answering"
    trainer = make_trainer(tmp_path, [silent, answering], max_epochs=2)
    trainer.fit(Net(), datamodule=Data(), ckpt_path="last")
    assert silent.asked == ["last"] and answering.asked == ["last"]
    assert trainer.global_step == 2 * math.ceil(STEPS_PER_EPOCH / 2)  # one epoch restored, one trained
    results = trainer.validate(Net(), datamodule=Data(), ckpt_path="best")
    assert "val_loss" in results[0]


def test_an_alias_without_a_resolving_plugin_is_a_clear_error(tmp_path):
    trainer = make_trainer(tmp_path)
    with pytest.raises(surge.SurgeError, match="no active plugin resolves 'last'.*checkpoint plugin"):
        trainer.fit(Net(), datamodule=Data(), ckpt_path="last")


def test_last_with_nothing_saved_yet_starts_from_scratch_but_best_is_an_error(tmp_path):
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        trainer = make_trainer(tmp_path, [Resolver({})], max_epochs=1)
        trainer.fit(Net(), datamodule=Data(), ckpt_path="last")
    finally:
        logger.remove(sink)
    assert trainer.global_step == math.ceil(STEPS_PER_EPOCH / 2)
    assert any("starts from scratch" in m for m in messages)
    with pytest.raises(surge.SurgeError, match="no checkpoint to use.*'best'"):
        trainer.validate(Net(), datamodule=Data(), ckpt_path="best")


def test_a_checkpoint_with_pickled_code_needs_trusted(tmp_path):
    path, _ = _saved_run(tmp_path)
    saved = checkpoint.load(path)
    saved["hook"] = print  # a callable: unpickling it means importing and running code
    checkpoint.save(saved, path)
    with pytest.raises(checkpoint.CheckpointError, match="pickled code.*print.*trusted=True"):
        make_trainer(tmp_path, max_epochs=2).fit(Net(), datamodule=Data(), ckpt_path=path)
    resumed = make_trainer(tmp_path, max_epochs=2)
    resumed.fit(Net(), datamodule=Data(), ckpt_path=path, trusted=True)
    assert resumed.current_epoch == 2


def test_cuda_rng_states_that_cannot_be_restored_are_reported(tmp_path, monkeypatch):
    path, _ = _saved_run(tmp_path)
    saved = checkpoint.load(path)
    saved["rng"]["cuda"] = [torch.zeros(16, dtype=torch.uint8)] * 3  # written on a machine with 3 GPUs
    checkpoint.save(saved, path)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        make_trainer(tmp_path, max_epochs=2).fit(Net(), datamodule=Data(), ckpt_path=path)
    finally:
        logger.remove(sink)
    assert any("RNG states of 3 CUDA device(s)" in m and "not restored" in m for m in messages)
