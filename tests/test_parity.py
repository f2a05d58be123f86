"""Surge's training is a plain PyTorch loop: same seed, same per-step losses and weights, bit for bit (CPU)."""

from __future__ import annotations

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader

SEED = 1234
EPOCHS = 3


class LossRecorder:
    """Keeps the loss each training_step returned (before any division for accumulation)."""

    surge_name = "loss_recorder"

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.steps = 0

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        self.losses.append(event.outputs.detach().clone())

    @surge.hookimpl
    def after_optimizer_step(self, event: surge.events.AfterOptimizerStep) -> None:
        self.steps += 1


def surge_run(tmp_path, *, datamodule: bool, **flags) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], int]:
    torch.manual_seed(SEED)
    model = TinyModule()
    data = TinyDataModule()
    recorder = LossRecorder()
    # quiet: no default plugin writes files or prints, parity is about the loop alone
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path), max_epochs=EPOCHS, plugins=[recorder], **quiet_trainer_args(**flags)
    )
    if datamodule:
        trainer.fit(model, datamodule=data)
    else:
        data.setup("fit")
        trainer.fit(model, train_dataloaders=data.train_dataloader())
    assert trainer.global_step == recorder.steps
    return recorder.losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, trainer.global_step


def hand_run(
    *,
    accumulate: int = 1,
    clip: float | None = None,
    clip_algorithm: str = "norm",
    validate: bool = False,
    sanity_steps: int = 0,
    isolate_sanity: bool = True,
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], int]:
    """The loop a PyTorch user would write, iterating the same loaders in the same order as Surge."""
    torch.manual_seed(SEED)
    model = TinyModule()
    data = TinyDataModule()
    data.setup("fit")
    train_loader = data.train_dataloader()
    val_loader = data.val_dataloader() if validate else None
    optimizer = torch.optim.SGD(model.parameters(), lr=model.lr)

    def run_validation(limit: int | None = None) -> None:
        model.eval()
        with torch.inference_mode():
            for i, (x, y) in enumerate(val_loader):  # iter() draws from the global RNG, as in Surge
                if limit is not None and i >= limit:
                    break
                nn.functional.mse_loss(model(x), y)
        model.train()

    if validate and sanity_steps:
        if isolate_sanity:  # the sanity check changes no number: the RNG it draws from is put back (as Lightning)
            with torch.random.fork_rng():
                run_validation(sanity_steps)
        else:
            run_validation(sanity_steps)
    losses: list[torch.Tensor] = []
    steps = 0
    n = len(train_loader)
    for _ in range(EPOCHS):
        model.train()
        for batch_idx, (x, y) in enumerate(train_loader):
            loss = nn.functional.mse_loss(model(x), y)
            losses.append(loss.detach().clone())
            (loss / accumulate if accumulate > 1 else loss).backward()
            if (batch_idx + 1) % accumulate == 0 or batch_idx + 1 == n:
                if clip is not None:
                    if clip_algorithm == "norm":
                        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                    else:
                        torch.nn.utils.clip_grad_value_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
        if validate:
            run_validation()
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, steps


def assert_same(surge_result, hand_result) -> None:
    s_losses, s_weights, s_steps = surge_result
    h_losses, h_weights, h_steps = hand_result
    assert s_steps == h_steps
    assert len(s_losses) == len(h_losses) == EPOCHS * 8
    for i, (a, b) in enumerate(zip(s_losses, h_losses)):
        assert torch.equal(a, b), f"step {i}: surge {a.item()!r} != hand {b.item()!r}"
    assert s_weights.keys() == h_weights.keys()
    for key in s_weights:
        assert torch.equal(s_weights[key], h_weights[key]), key


def test_losses_equal_a_hand_written_loop_with_shuffling(tmp_path):
    surge_result = surge_run(tmp_path, datamodule=False, num_sanity_val_steps=0)
    hand_result = hand_run()
    assert_same(surge_result, hand_result)
    # shuffling is on: the epochs see different orders, so a loop that ignored the sampler would not match
    assert not torch.equal(surge_result[0][0], surge_result[0][8])


def test_parity_with_validation_and_sanity_check_mirrored(tmp_path):
    surge_result = surge_run(tmp_path, datamodule=True, num_sanity_val_steps=2)
    assert_same(surge_result, hand_run(validate=True, sanity_steps=2))


def test_parity_fails_when_the_loaders_are_iterated_differently(tmp_path):
    """Guards the test itself: an extra loader iteration (an RNG draw) is visible in the comparison."""
    surge_result = surge_run(tmp_path, datamodule=True, num_sanity_val_steps=2)
    hand = hand_run(validate=True, sanity_steps=2, isolate_sanity=False)
    assert not all(torch.equal(a, b) for a, b in zip(surge_result[0], hand[0]))


def test_parity_with_gradient_accumulation(tmp_path):
    surge_result = surge_run(tmp_path, datamodule=False, num_sanity_val_steps=0, accumulate_grad_batches=3)
    assert surge_result[2] == EPOCHS * 3  # 8 batches: steps after batches 3, 6 and the last one
    assert_same(surge_result, hand_run(accumulate=3))


@pytest.mark.parametrize("algorithm, value", [("norm", 0.05), ("value", 0.01)])
def test_parity_with_gradient_clipping(tmp_path, algorithm, value):
    surge_result = surge_run(
        tmp_path, datamodule=False, num_sanity_val_steps=0, gradient_clip_val=value, gradient_clip_algorithm=algorithm
    )
    assert_same(surge_result, hand_run(clip=value, clip_algorithm=algorithm))
    # the clip is small enough to change the trajectory: without it the weights differ
    unclipped = hand_run()
    assert not all(torch.equal(surge_result[1][k], unclipped[1][k]) for k in unclipped[1])


def test_parity_with_accumulation_and_clipping(tmp_path):
    surge_result = surge_run(
        tmp_path, datamodule=False, num_sanity_val_steps=0, accumulate_grad_batches=2, gradient_clip_val=0.05
    )
    assert_same(surge_result, hand_run(accumulate=2, clip=0.05))


def test_seed_everything_gives_identical_runs(tmp_path):
    def run(seed: int) -> list[torch.Tensor]:
        assert surge.seed_everything(seed) == seed
        model = TinyModule()
        recorder = LossRecorder()
        trainer = surge.Trainer(
            default_root_dir=str(tmp_path), max_epochs=2, plugins=[recorder], **quiet_trainer_args()
        )
        trainer.fit(model, datamodule=TinyDataModule())
        return recorder.losses

    first, second, other = run(7), run(7), run(8)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_loader_built_from_module_method_matches_datamodule(tmp_path):
    """Data from the module's own train_dataloader() runs the same loop."""

    class WithLoader(TinyModule):
        def train_dataloader(self) -> DataLoader:
            data = TinyDataModule()
            data.setup("fit")
            return data.train_dataloader()

    torch.manual_seed(SEED)
    model = WithLoader()
    recorder = LossRecorder()
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=EPOCHS,
        plugins=[recorder],
        **quiet_trainer_args(num_sanity_val_steps=0),
    )
    trainer.fit(model)
    assert_same((recorder.losses, model.state_dict(), trainer.global_step), hand_run())
