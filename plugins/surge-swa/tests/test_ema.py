"""The ``ema`` plugin: the same average as ``AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(decay))`` driven
by hand, skipped fp16 steps left out, validation and test on the EMA weights with an exact swap back (also
after a failure), bit-exact resume, and settings errors."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, assert_discovered
from surge_swa import ExponentialMovingAverage
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

EPOCHS = 3


class Skipper:
    """Marks the optimizer steps at the given ``global_step`` values as skipped by the gradient scaler, before
    any other participant's ``after_optimizer_step`` reads it (a stand-in for an fp16 overflow)."""

    surge_name = "skipper"

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps

    @surge.hookimpl(tryfirst=True)
    def after_optimizer_step(self, event: Any) -> None:
        event.trainer.precision_plugin.last_step_skipped = event.trainer.global_step in self.steps


def by_hand(kit: Any, settings: dict[str, Any], skipped: set[int]) -> tuple[surge.Module, AveragedModel]:
    """The Trainer's run written out, with an ``AveragedModel`` updated after the optimizer steps that the
    settings select."""
    torch.manual_seed(0)
    model = kit.BNModule()
    [optimizer], [step_lr] = model.configure_optimizers()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(settings["decay"]), use_buffers=True)
    every = settings.get("update_every_n_steps", 1)
    start_step, start_epoch = settings.get("start_step", 0), settings.get("start_epoch")
    first, step = None, 0
    for epoch in range(EPOCHS):
        model.train()
        for batch in kit.fixed_batches():
            _mse(model, batch).backward()
            optimizer.step()
            if step not in skipped:
                if first is None and (epoch >= start_epoch if start_epoch is not None else step >= start_step):
                    first = step
                if first is not None and (step - first) % every == 0:
                    ema.update_parameters(model)
            optimizer.zero_grad(set_to_none=True)
            step += 1
        step_lr.step()
    return model, ema


@pytest.mark.parametrize(
    ("settings", "skipped"),
    [
        ({"decay": 0.9}, set()),
        ({"decay": 0.8, "update_every_n_steps": 2, "start_step": 3}, set()),
        ({"decay": 0.9, "update_every_n_steps": 3, "start_epoch": 1}, set()),
        ({"decay": 0.9, "update_every_n_steps": 2}, {0, 4, 7}),  # the first due step is skipped: start at 1
    ],
    ids=["every-step", "every-2-from-step-3", "every-3-from-epoch-1", "skipped-steps"],
)
def test_ema_equals_averaged_model_driven_by_hand(
    fit: Any, kit: Any, settings: dict[str, Any], skipped: set[int]
) -> None:
    # Bit-exact (torch.equal): the plugin calls the same get_ema_multi_avg_fn (torch._foreach_lerp_, an
    # elementwise kernel) on the same float32 CPU tensors after the same optimizer steps.
    if skipped:
        plugins: Any = [ExponentialMovingAverage(**settings), Skipper(skipped)]
    else:
        plugins = {"ema": settings}  # through the entry point, as a run config would
    trainer = fit(plugins, datamodule=kit.FixedOrder(), max_epochs=EPOCHS)
    ema = kit.plugin_of(trainer, "ema")
    model, expected = by_hand(kit, settings, skipped)

    assert ema.n_averaged == int(expected.n_averaged) > 1
    averaged = expected.module.state_dict()
    floats = kit.float_state(model)
    assert set(ema.weights) == set(floats)  # parameters and float buffers; num_batches_tracked is not averaged
    for name, value in ema.weights.items():
        assert torch.equal(value, averaged[name]), name
    # validating with the EMA three times (and the sanity check) left the trained weights exactly as they were
    for name, value in floats.items():
        assert torch.equal(trainer.module.state_dict()[name], value), name


class Watch:
    """An observer: the Module's weights before each validation (at the last train_batch_end), during it, and
    after it (at train_epoch_end), with the EMA weights while it ran."""

    surge_name = "watch"
    surge_kind = "observer"

    def __init__(self, ema: ExponentialMovingAverage, float_state: Any) -> None:
        self.ema, self.float_state = ema, float_state
        self.before: dict[str, torch.Tensor] = {}
        self.restored: list[bool] = []
        self.swapped_in: list[bool] = []

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.before = self.float_state(event.trainer.module)

    @surge.hookimpl
    def validation_batch_start(self, event: Any) -> None:
        if not event.trainer.sanity_checking:
            now = self.float_state(event.trainer.module)
            self.swapped_in.append(all(torch.equal(now[k], v) for k, v in self.ema.weights.items()))

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        now = self.float_state(event.trainer.module)
        self.restored.append(all(torch.equal(now[k], v) for k, v in self.before.items()))

    @surge.hookimpl
    def exception(self, event: Any) -> None:  # what a handler saving an emergency checkpoint would read
        now = self.float_state(event.trainer.module)
        self.restored.append(all(torch.equal(now[k], v) for k, v in self.before.items()))


def _val_loss(module: surge.Module, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """The mean validation loss (2 batches) of ``module`` with ``weights`` loaded, in eval mode."""
    data = TinyDataModule()
    data.setup("validate")
    state = {**module.state_dict(), **weights}
    module.load_state_dict(state)
    module.eval()
    with torch.no_grad():
        return torch.stack([_mse(module, b) for b in itertools.islice(data.val_dataloader(), 2)]).mean()


def test_validation_runs_on_the_ema_weights_and_restores_the_model(fit: Any, kit: Any) -> None:
    ema = ExponentialMovingAverage(decay=0.5)
    watch = Watch(ema, kit.float_state)
    trainer = fit([ema, watch], max_epochs=2, limit_test_batches=2)
    assert watch.swapped_in == [True, True, True, True]  # 2 validation batches in each of 2 epochs
    assert watch.restored == [True, True]

    logged = trainer.callback_metrics["val_loss"]
    expected = _val_loss(kit.BNModule(), ema.weights)
    own = _val_loss(kit.BNModule(), kit.float_state(trainer.module))
    # close, not equal: the metric store reduces the batch losses in its own order (sum/count), which may
    # round the last bit differently from this stack().mean(); the tolerance is far below the gap to `own`
    torch.testing.assert_close(logged, expected, rtol=1e-6, atol=0.0)
    assert abs(float(own - logged)) > 1e-3

    results = trainer.test(trainer.module, datamodule=TinyDataModule())  # test uses the EMA weights as well
    assert results[0]["test_loss"] == pytest.approx(float(expected), rel=1e-6)
    assert all(torch.equal(trainer.module.state_dict()[k], v) for k, v in watch.before.items())


def test_a_failing_validation_still_restores_the_model(fit: Any, kit: Any) -> None:
    class FailsInSecondValidation(kit.BNModule):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if self.trainer.current_epoch == 1:
                raise RuntimeError("validation failed")
            super().validation_step(batch, batch_idx)

    ema = ExponentialMovingAverage(decay=0.5)
    watch = Watch(ema, kit.float_state)
    torch.manual_seed(0)
    model = FailsInSecondValidation()
    with pytest.raises(RuntimeError, match="validation failed"):
        fit([ema, watch], model=model, max_epochs=2)
    assert watch.swapped_in == [True, True, True]  # epoch 0: 2 batches on the EMA; epoch 1: swapped in, then failed
    assert watch.restored == [True, True]  # at epoch 0's end, and when the exception event reached the observer
    after = kit.float_state(model)
    assert all(torch.equal(after[k], v) for k, v in watch.before.items())
    assert any(not torch.equal(after[k], v) for k, v in ema.weights.items())  # the EMA is not what it holds


def _ema(**kwargs: Any) -> ExponentialMovingAverage:
    return ExponentialMovingAverage(decay=0.8, update_every_n_steps=2, start_step=1, **kwargs)


def test_resume_mid_averaging_is_bit_exact(fit: Any, kit: Any, tmp_path: Path) -> None:
    reference = fit([_ema()])
    ref = kit.plugin_of(reference, "ema")
    ref_state = reference.module.state_dict()
    # (epoch, batch_idx) of the crash: before the first update, between epochs (train_epoch_end, after the
    # epoch's validation on the EMA) and mid-epoch mid-averaging
    for kill in [(0, 0), (0, None), (1, 2)]:
        path = str(tmp_path / f"kill-{kill[0]}-{kill[1]}.ckpt")
        with pytest.raises(kit.Killed):
            fit([_ema(), kit.SaveAt(*kill, path)])
        torch.manual_seed(123)  # other initial weights: everything must come from the checkpoint
        resumed = fit([_ema()], model=kit.BNModule(), ckpt_path=path)
        res = kit.plugin_of(resumed, "ema")
        assert (res.n_averaged, res.first_step) == (ref.n_averaged, ref.first_step) == (6, 1), kill
        for name, value in ref.weights.items():
            assert torch.equal(res.weights[name], value), (kill, name)
        res_state = resumed.module.state_dict()
        for name, value in ref_state.items():
            assert torch.equal(res_state[name], value), (kill, name)


def test_validate_from_a_checkpoint_uses_its_ema(fit: Any, kit: Any, tmp_path: Path, make_trainer: Any) -> None:
    path = str(tmp_path / "end.ckpt")
    with pytest.raises(kit.Killed):
        fit([_ema(), kit.SaveAt(1, None, path)])
    saved = surge.checkpoint.load(path)
    weights = saved["plugins"]["ema"]["weights"]
    model = kit.BNModule()
    results = make_trainer(plugins=["ema"], logger=False, enable_progress_bar=False, limit_val_batches=2).validate(
        model, datamodule=TinyDataModule(), ckpt_path=path
    )
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved["state_dict"].items())  # swapped back
    assert results[0]["val_loss"] == pytest.approx(float(_val_loss(kit.BNModule(), weights)), rel=1e-6)


def test_apply_at_end_leaves_the_ema_in_the_model(fit: Any, kit: Any) -> None:
    trainer = fit({"ema": {"decay": 0.7, "apply_at_end": True}})
    ema = kit.plugin_of(trainer, "ema")
    final = trainer.module.state_dict()
    assert all(torch.equal(final[k], v) for k, v in ema.weights.items())


def test_is_discovered() -> None:
    assert_discovered("ema", distribution="surge-swa", kind="participant")


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"start_step": 10, "start_epoch": 1}, "trainer.plugins.ema"),
        ({"decay": 1.5}, "trainer.plugins.ema.decay"),
        ({"decay": -0.1}, "trainer.plugins.ema.decay"),
        ({"update_every_n_steps": 0}, "trainer.plugins.ema.update_every_n_steps"),
        ({"start_step": -1}, "trainer.plugins.ema.start_step"),
        ({"validate_with_emma": False}, "trainer.plugins.ema.validate_with_emma"),
    ],
)
def test_bad_settings_name_their_path(make_trainer: Any, settings: dict[str, Any], path: str) -> None:
    with pytest.raises(surge.ConfigError) as info:
        make_trainer(plugins={"ema": settings})
    assert [p for p, _ in info.value.problems] == [path]
    assert path in str(info.value)
    if "start_epoch" in settings:
        assert "exclude each other" in str(info.value)


def test_a_checkpoint_saved_after_validation_holds_the_trained_weights(fit: Any, kit: Any) -> None:
    # The checkpoint plugin saves in validation_end; the EMA must be swapped out before it reads the Module.
    plugins = {"ema": {"decay": 0.5}, "checkpoint": {"save_on_train_epoch_end": False}}
    trainer = fit(plugins, enable_checkpointing=True, max_epochs=1)
    [saved] = list(Path(trainer.run_dir, "checkpoints").glob("*.ckpt"))
    state = surge.checkpoint.load(str(saved))
    final = trainer.module.state_dict()
    assert all(torch.equal(state["state_dict"][k], v) for k, v in final.items())
    ema = kit.plugin_of(trainer, "ema")
    assert all(torch.equal(state["plugins"]["ema"]["weights"][k], v) for k, v in ema.weights.items())


def _mse(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """TinyModule's loss, written out: the reference loop computes it itself."""
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
