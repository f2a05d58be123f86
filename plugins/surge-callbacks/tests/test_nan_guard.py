"""The ``nan_guard`` plugin: it names what went non-finite, where, and keeps it out of every checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.checkpoint import load
from surge.testing import TinyModule
from surge_callbacks import NaNGuard, NonFiniteError, first_non_finite
from surge_checkpoint import ModelCheckpoint

BAD_BATCH = 3


class PoisonedGradient(TinyModule):
    """After backward of batch ``BAD_BATCH``, one gradient entry of ``net.2.bias`` becomes NaN."""

    def on_after_backward(self) -> None:
        if self.trainer.state.batch_idx == BAD_BATCH:
            self.net[2].bias.grad[0] = float("nan")


class PoisonedLoss(TinyModule):
    """The loss of batch ``BAD_BATCH`` is infinite."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * float("inf") if batch_idx == BAD_BATCH else loss


def checkpoints(directory: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Every checkpoint in ``directory``: global step -> weights."""
    found = {}
    for path in directory.glob("*.ckpt"):
        checkpoint = load(str(path))
        found[checkpoint["global_step"]] = checkpoint["state_dict"]
    return found


def all_finite(weights: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in weights.values() if t.is_floating_point())


def every_step(directory: Path) -> ModelCheckpoint:
    return ModelCheckpoint(dirpath=directory, every_n_train_steps=1, save_top_k=-1)


def test_a_nan_gradient_is_named_and_never_reaches_a_checkpoint(fit, tmp_path):
    directory = tmp_path / "guarded"
    with pytest.raises(NonFiniteError) as info:
        fit([NaNGuard(), every_step(directory)], model=PoisonedGradient(), max_epochs=1, limit_val_batches=0)
    error = info.value
    assert (error.what, error.kind, error.global_step, error.epoch, error.batch_idx) == (
        "net.2.bias",
        "gradient",
        BAD_BATCH,
        0,
        BAD_BATCH,
    )
    assert "gradient of 'net.2.bias' is not finite (1 NaN) at global step 3 (epoch 0, batch 3)" in str(error)
    saved = checkpoints(directory)
    assert sorted(saved) == list(range(1, BAD_BATCH + 1))  # one per step taken before the bad one
    assert all(all_finite(weights) for weights in saved.values())

    # without the guard, the step is taken and the next checkpoint holds NaN weights
    directory = tmp_path / "unguarded"
    fit([every_step(directory)], model=PoisonedGradient(), max_epochs=1, limit_val_batches=0)
    assert not all_finite(checkpoints(directory)[BAD_BATCH + 1])


def test_a_non_finite_loss_names_the_batch_of_its_accumulation_window(fit):
    with pytest.raises(NonFiniteError) as info:
        fit({"nan_guard": {}}, model=PoisonedLoss(), max_epochs=1, accumulate_grad_batches=2, limit_val_batches=0)
    error = info.value
    assert (error.what, error.kind, error.batch_idx) == ("loss", "loss", BAD_BATCH)
    # batches 2 and 3 make the second step: global step 1 when it is about to be taken
    assert "the loss is not finite at global step 1 (epoch 0, batch 3); first in the micro-batch 3" in str(error)


def test_terminate_on_nan_requests_the_guard(fit):
    with pytest.raises(NonFiniteError, match="net.2.bias"):
        fit(model=PoisonedGradient(), terminate_on_nan=True, max_epochs=1, limit_val_batches=0)


class PoisonedWeight(TinyModule):
    """After optimizer step ``BAD_BATCH``, one weight is set to inf (as an overflowing update would)."""

    def on_after_optimizer_step(self) -> None:
        if self.trainer.state.batch_idx == BAD_BATCH:
            with torch.no_grad():
                self.net[0].weight[0, 0] = float("inf")


def test_a_checkpoint_with_non_finite_weights_is_refused(fit, tmp_path):
    with pytest.raises(NonFiniteError, match="refusing to save a checkpoint at global step 4 .* 'net.0.weight'"):
        fit([NaNGuard(), every_step(tmp_path)], model=PoisonedWeight(), max_epochs=1, limit_val_batches=0)
    saved = checkpoints(tmp_path)
    assert sorted(saved) == list(range(1, BAD_BATCH + 1))
    assert all(all_finite(weights) for weights in saved.values())


def test_switched_off_checks_leave_their_handlers_out(fit):
    trainer = fit([NaNGuard(check_loss=False, check_checkpoints=False)], max_epochs=1)
    assert "nan_guard" not in trainer.event_order("after_backward")
    assert "nan_guard" not in trainer.event_order("before_checkpoint_save")
    assert "nan_guard" in trainer.event_order("before_optimizer_step")


def test_at_most_one_host_sync_per_step(fit, monkeypatch):
    """Every way a tensor's value reaches Python is counted; the guard adds at most one per optimizer step."""
    counts = {"n": 0}
    for method in ("__bool__", "item", "tolist", "__int__", "__float__", "__index__"):
        original = getattr(torch.Tensor, method)

        def counted(self: torch.Tensor, *args: Any, _original: Any = original) -> Any:
            counts["n"] += 1
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, method, counted)

    def syncs(plugins: list[Any]) -> tuple[int, int]:
        counts["n"] = 0
        trainer = fit(plugins, max_epochs=2, limit_val_batches=0, accumulate_grad_batches=2)
        return counts["n"], trainer.global_step

    without, steps = syncs([])
    with_guard, _ = syncs([NaNGuard(check_checkpoints=False)])
    assert steps == 4
    assert 0 < with_guard - without <= steps


def test_first_non_finite_mixed_dtypes():
    tensors = [torch.ones(3), torch.ones(2, dtype=torch.float64), torch.tensor([1.0, float("-inf")]), torch.ones(1)]
    assert first_non_finite(tensors) == 2
    tensors[1][0] = float("nan")
    assert first_non_finite(tensors) == 1
    assert first_non_finite([torch.ones(2)]) is None
    assert first_non_finite([]) is None


def test_bad_settings_are_config_errors():
    with pytest.raises(surge.ConfigError, match="trainer.plugins.nan_guard.check_nan"):
        surge.Trainer(plugins={"nan_guard": {"check_nan": True}}, logger=False)
