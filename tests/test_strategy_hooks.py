"""The core's seams for distributed strategies: the training-step wrapper, the accumulation context, and the
agreement of stop, Ctrl-C and checkpoint requests across ranks at a step boundary."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class _CPU(surge.Accelerator):
    name: ClassVar[str] = "test-cpu"
    device_type: ClassVar[str] = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True


class Recording(surge.Strategy):
    """One process pretending to be rank 0 of ``world``; ``others`` plays the other ranks' flags."""

    def __init__(self, world: int = 1, others: Callable[[int], list[int]] | None = None) -> None:
        super().__init__(_CPU(), [0])
        self.world, self.others = world, others
        self.syncs: list[bool] = []
        self.wrapped_calls = 0
        self.flag_reductions = 0

    @property
    def world_size(self) -> int:
        return self.world

    def wrap_training_step(self, module: torch.nn.Module) -> Callable[..., Any]:
        def call(batch: Any, batch_idx: int) -> Any:
            self.wrapped_calls += 1
            return module.training_step(batch, batch_idx)  # type: ignore[operator]

        return call

    def accumulation_context(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        self.syncs.append(sync)
        return contextlib.nullcontext()

    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if op == "max" and tensor.shape == (3,) and self.others is not None:  # the step-boundary flags
            self.flag_reductions += 1
            return torch.maximum(tensor, torch.tensor(self.others(self.flag_reductions)))
        return tensor


def _trainer(tmp_path: Any, strategy: surge.Strategy, **kwargs: Any) -> surge.Trainer:
    return surge.Trainer(
        strategy=strategy,
        accelerator=_CPU(),
        default_root_dir=str(tmp_path),
        plugins={"progress": False, "checkpoint": False},
        **kwargs,
    )


def test_the_loop_calls_the_wrapped_step_and_marks_micro_batches_that_need_no_sync(tmp_path: Any) -> None:
    strategy = Recording()
    model = TinyModule()
    trainer = _trainer(tmp_path, strategy, max_epochs=1, accumulate_grad_batches=3, limit_val_batches=0)
    trainer.fit(model, datamodule=TinyDataModule())  # 8 batches: steps after batches 3, 6 and 8
    assert trainer.module is model
    assert strategy.wrapped_calls == 8
    assert strategy.syncs == [False, False, True, False, False, True, False, True]
    assert trainer.global_step == 3


def test_without_accumulation_no_context_is_asked_for(tmp_path: Any) -> None:
    strategy = Recording()
    _trainer(tmp_path, strategy, max_epochs=1, limit_val_batches=0).fit(TinyModule(), datamodule=TinyDataModule())
    assert strategy.syncs == [] and strategy.wrapped_calls == 8


def test_a_single_process_makes_no_agreement_collective(tmp_path: Any) -> None:
    strategy = Recording(world=1, others=lambda n: [0, 0, 0])
    _trainer(tmp_path, strategy, max_epochs=1, limit_val_batches=0).fit(TinyModule(), datamodule=TinyDataModule())
    assert strategy.flag_reductions == 0


def _every(strategy: Recording, interval: int) -> Recording:
    strategy.agreement_interval = interval
    return strategy


# The flags of an agreement are [interrupted, should_stop, holds no checkpoint request]; ``others(n)`` answers for
# the other rank in the n-th agreement. TinyDataModule has 8 training batches an epoch; with an interval of 2 the
# ranks start an agreement after batches 2, 4, 6 and 8 of the run (applied one batch later) and agree at once at
# every epoch's end.


def test_a_stop_decided_on_another_rank_stops_this_one_at_the_same_step(tmp_path: Any) -> None:
    # the other rank asks to stop before its 4th batch ends: the agreement started after batch 4 carries it,
    # overlaps batch 5 and is applied after it, on every rank alike
    strategy = _every(Recording(world=2, others=lambda n: [0, int(n == 2), 1]), 2)
    trainer = _trainer(tmp_path, strategy, max_epochs=2, limit_val_batches=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 5 and trainer.should_stop
    assert trainer.state.stop_reason == "stop requested on another process"
    assert strategy.flag_reductions == 3  # after batches 2 and 4, at the cut epoch's end; none later


def test_no_collective_of_its_own_on_every_step(tmp_path: Any) -> None:
    # the default interval (16): over 2 epochs of 8 batches, one agreement after batch 16 and one per epoch end,
    # where one per batch boundary (18) was made before
    strategy = Recording(world=2, others=lambda n: [0, 0, 1])
    trainer = _trainer(tmp_path, strategy, max_epochs=2, limit_val_batches=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 16 and strategy.agreement_interval == 16
    assert strategy.flag_reductions == 3


def test_a_stop_of_this_rank_waits_for_the_agreement(tmp_path: Any) -> None:
    # this rank alone asks to stop in its 3rd batch: it trains on, as the other rank does, until the
    # agreement started after batch 4 is applied after batch 5; the reason it gave stays
    class Stopping(TinyModule):
        def on_train_batch_end(self, trainer: surge.Trainer) -> None:
            if trainer.global_step == 3:
                trainer.request_stop("enough")

    strategy = _every(Recording(world=2, others=lambda n: [0, 0, 1]), 2)
    trainer = _trainer(tmp_path, strategy, max_epochs=2, limit_val_batches=0)
    trainer.fit(Stopping(), datamodule=TinyDataModule())
    assert trainer.global_step == 5 and trainer.should_stop and trainer.state.stop_reason == "enough"


def test_a_stop_decided_at_an_epoch_end_holds_before_the_next_batch(tmp_path: Any) -> None:
    # as EarlyStopping does after an epoch's validation, on every rank: the epoch-end agreement is waited for
    class Stopping(TinyModule):
        def on_train_epoch_end(self, trainer: surge.Trainer) -> None:
            trainer.request_stop("plateau")

    strategy = Recording(world=2, others=lambda n: [0, 1, 1])
    trainer = _trainer(tmp_path, strategy, max_epochs=3, limit_val_batches=0)
    trainer.fit(Stopping(), datamodule=TinyDataModule())
    assert trainer.global_step == 8 and trainer.current_epoch == 1 and trainer.should_stop


def test_ctrl_c_on_another_rank_interrupts_this_one(tmp_path: Any) -> None:
    strategy = _every(Recording(world=2, others=lambda n: [int(n == 1), 0, 1]), 2)
    trainer = _trainer(tmp_path, strategy, max_epochs=1, limit_val_batches=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.interrupted and trainer.state.status == "interrupted" and trainer.global_step == 3


def test_checkpoint_requests_wait_until_every_rank_holds_one(tmp_path: Any) -> None:
    # this rank asks after batch 1; the other holds a request from the agreement after batch 6 on (the third):
    # that agreement finds every rank holding one, and all serve theirs after batch 7
    strategy = _every(Recording(world=2, others=lambda n: [0, 0, 0 if n >= 3 else 1]), 2)
    served: list[int] = []

    class Asking(TinyModule):
        def on_train_batch_end(self, trainer: surge.Trainer) -> None:
            if trainer.global_step == 1 and not served:
                trainer.request_checkpoint(lambda t: served.append(t.global_step), "test")

    _trainer(tmp_path, strategy, max_epochs=1, limit_val_batches=0).fit(Asking(), datamodule=TinyDataModule())
    assert served == [7]


def test_a_strategy_or_accelerator_can_decline_inference_mode(tmp_path: Any) -> None:
    """``inference_mode_ok = False`` on the strategy (fsdp) or the accelerator (XLA): evaluation runs under
    ``torch.no_grad``, not ``torch.inference_mode``, whatever ``Trainer(inference_mode=...)`` says."""

    class Probe(TinyModule):
        def __init__(self) -> None:
            super().__init__()
            self.modes: list[tuple[bool, bool]] = []  # (inference mode, grad enabled) in validation_step

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))

    class NoInference(surge.Strategy):
        inference_mode_ok: ClassVar[bool] = False

    class NoInferenceDevice(_CPU):
        inference_mode_ok: ClassVar[bool] = False

    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "default_root_dir": tmp_path}
    for strategy, expected in (
        (surge.Strategy(_CPU(), [0]), (True, False)),
        (NoInference(_CPU(), [0]), (False, False)),
        (surge.Strategy(NoInferenceDevice(), [0]), (False, False)),
    ):
        probe = Probe()
        surge.Trainer(strategy=strategy, **quiet).validate(probe, datamodule=TinyDataModule())
        assert probe.modes and set(probe.modes) == {expected}, type(strategy).__name__
