"""configure_optimizers forms, schedulers, accumulation, clipping, manual optimization, and training_step returns."""

from __future__ import annotations

import math

import pytest
import surge
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule

TRAIN_BATCHES = 8


class OptimizerProbe:
    """The optimizer index at each optimizer step; the gradient norms a handler sees before the step
    (unclipped, as in Lightning) and the ones the step applied (still present at after_optimizer_step)."""

    surge_name = "optimizer_probe"

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.after: list[int] = []
        self.total_norms: list[float] = []
        self.max_abs: list[float] = []
        self.norms_before: list[float] = []
        self.backwards = 0

    @staticmethod
    def _grads(optimizer):
        return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]

    @surge.hookimpl
    def before_optimizer_step(self, event: surge.events.BeforeOptimizerStep) -> None:
        self.indices.append(event.optimizer_idx)
        grads = self._grads(event.optimizer)
        self.norms_before.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    @surge.hookimpl
    def after_optimizer_step(self, event: surge.events.AfterOptimizerStep) -> None:
        self.after.append(event.optimizer_idx)
        grads = self._grads(event.optimizer)
        if grads:
            self.total_norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
            self.max_abs.append(max(float(g.abs().max()) for g in grads))

    @surge.hookimpl
    def after_backward(self, event) -> None:
        self.backwards += 1


def fit(make_trainer, model, *, plugins=(), **flags):
    probe = OptimizerProbe()
    flags.setdefault("num_sanity_val_steps", 0)
    trainer = make_trainer(plugins=[probe, *plugins], **flags)
    trainer.fit(model, datamodule=TinyDataModule())
    return trainer, probe


class Configured(TinyModule):
    """TinyModule whose configure_optimizers returns whatever ``make(params)`` builds."""

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make
        self.built = None

    def configure_optimizers(self):
        self.built = self._make(list(self.parameters()))
        return self.built


def sgd(params, lr: float = 0.1) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr)


# -- configure_optimizers forms ------------------------------------------------------------------------


def test_single_optimizer(make_trainer):
    model = Configured(sgd)
    trainer, probe = fit(make_trainer, model, max_epochs=1)
    assert trainer.optimizers == [model.built]
    assert trainer.lr_scheduler_configs == []
    assert len(probe.indices) == TRAIN_BATCHES == trainer.global_step


def test_list_with_one_optimizer(make_trainer):
    model = Configured(lambda p: [sgd(p)])
    trainer, _ = fit(make_trainer, model, max_epochs=1)
    assert trainer.optimizers == model.built


def test_optimizers_and_schedulers_tuple_steps_per_epoch(make_trainer):
    def make(params):
        opt = sgd(params, lr=0.8)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    model = Configured(make)
    trainer, _ = fit(make_trainer, model, max_epochs=3)
    (config,) = trainer.lr_scheduler_configs
    assert config.interval == "epoch" and config.frequency == 1
    assert config.scheduler.last_epoch == 3
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1)
    assert model.lr_schedulers() is config.scheduler


def test_scheduler_dict_interval_step_with_frequency(make_trainer):
    def make(params):
        opt = sgd(params)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 3}}

    trainer, _ = fit(make_trainer, Configured(make), max_epochs=2)
    (config,) = trainer.lr_scheduler_configs
    assert trainer.global_step == 16
    assert config.scheduler.last_epoch == 16 // 3  # after global steps 3, 6, ..., 15


def test_scheduler_dict_interval_epoch_with_frequency(make_trainer):
    def make(params):
        opt = sgd(params)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch", "frequency": 2}}

    trainer, _ = fit(make_trainer, Configured(make), max_epochs=5, limit_train_batches=1)
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2  # after epochs 2 and 4


def test_step_scheduler_counts_optimizer_steps_not_batches(make_trainer):
    def make(params):
        opt = sgd(params)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    trainer, _ = fit(make_trainer, Configured(make), max_epochs=1, accumulate_grad_batches=4)
    assert trainer.global_step == 2
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2


class PlateauRecorder(torch.optim.lr_scheduler.ReduceLROnPlateau):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.values: list[float] = []

    def step(self, metrics, epoch=None) -> None:  # type: ignore[override]
        self.values.append(float(metrics))
        super().step(metrics)


class ValLossHistory(TinyModule):
    def __init__(self, make) -> None:
        super().__init__()
        self._make = make
        self.val_losses: list[float] = []

    def configure_optimizers(self):
        return self._make(list(self.parameters()))

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.val_losses.append(float(self.trainer.callback_metrics["val_loss"]))


@pytest.mark.parametrize("where", ["inside", "beside"])
def test_reduce_lr_on_plateau_receives_the_monitored_metric(make_trainer, where):
    def make(params):
        opt = sgd(params)
        sched = PlateauRecorder(opt, mode="max", patience=0, factor=0.5)
        if where == "inside":
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}
        return {"optimizer": opt, "lr_scheduler": sched, "monitor": "val_loss"}  # Lightning's other spelling

    model = ValLossHistory(make)
    trainer, _ = fit(make_trainer, model, max_epochs=3)
    (config,) = trainer.lr_scheduler_configs
    assert config.monitor == "val_loss"
    assert config.scheduler.values == pytest.approx(model.val_losses)
    assert len(model.val_losses) == 3
    # mode="max" while val_loss falls: every epoch after the first is a bad one and halves the lr
    assert model.val_losses[0] > model.val_losses[-1]
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**2)


def test_reduce_lr_on_plateau_without_monitor_is_an_error(make_trainer):
    def make(params):
        opt = sgd(params)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}

    with pytest.raises(surge.SurgeError, match="ReduceLROnPlateau needs a metric"):
        fit(make_trainer, Configured(make), max_epochs=1)


def test_monitored_metric_not_logged(make_trainer):
    def make(strict):
        def build(params):
            opt = sgd(params)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "nope", "strict": strict}}

        return build

    with pytest.raises(surge.SurgeError, match=r"'nope', which was not logged.*train_loss"):
        fit(make_trainer, Configured(make(True)), max_epochs=1, limit_train_batches=2)
    trainer, _ = fit(make_trainer, Configured(make(False)), max_epochs=1, limit_train_batches=2)
    assert trainer.global_step == 2


def test_list_of_dicts_with_one_optimizer(make_trainer):
    def make(params):
        opt = sgd(params)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        return [{"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}]

    trainer, _ = fit(make_trainer, Configured(make), max_epochs=1, limit_train_batches=3)
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda p: [sgd(p), sgd(p)],
        lambda p: [{"optimizer": sgd(p)}, {"optimizer": sgd(p)}],
        lambda p: ([sgd(p), sgd(p)], []),
    ],
    ids=["list", "list-of-dicts", "tuple"],
)
def test_two_optimizers_under_automatic_optimization_is_an_error(make_trainer, make):
    with pytest.raises(surge.SurgeError, match=r"returned 2 optimizers.*automatic_optimization = False"):
        fit(make_trainer, Configured(make), max_epochs=1)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "configure_optimizers returned NoneType"),
        (lambda p: "sgd", "configure_optimizers returned str"),
        (lambda p: [], "must return torch optimizers"),
        (lambda p: {"lr_scheduler": None}, "needs an 'optimizer' entry"),
        (
            lambda p: {
                "optimizer": (o := sgd(p)),
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "interval": "batch"},
            },
            "interval must be",
        ),
        (
            lambda p: {"optimizer": (o := sgd(p)), "lr_scheduler": {"sched": torch.optim.lr_scheduler.StepLR(o, 1)}},
            "needs 'scheduler'",
        ),
    ],
)
def test_malformed_configure_optimizers(make_trainer, make, message):
    with pytest.raises(surge.SurgeError, match=message):
        fit(make_trainer, Configured(make), max_epochs=1)


def test_missing_configure_optimizers(make_trainer):
    class NoOptimizers(surge.Module):
        def training_step(self, batch, batch_idx):
            return None

    with pytest.raises(surge.SurgeError, match="configure_optimizers"):
        make_trainer(max_epochs=1).fit(NoOptimizers(), datamodule=TinyDataModule())


# -- accumulation and clipping ---------------------------------------------------------------------------


@pytest.mark.parametrize("accumulate, per_epoch", [(1, 8), (2, 4), (3, 3), (8, 1), (16, 1)])
def test_accumulate_grad_batches_counts_optimizer_steps(make_trainer, accumulate, per_epoch):
    trainer, probe = fit(make_trainer, TinyModule(), max_epochs=2, accumulate_grad_batches=accumulate)
    assert trainer.global_step == 2 * per_epoch
    assert len(probe.indices) == 2 * per_epoch
    assert probe.backwards == 2 * TRAIN_BATCHES
    assert trainer.estimated_stepping_batches == 2 * per_epoch


def test_accumulated_gradient_is_the_mean_of_the_window(make_trainer):
    """With accumulation the step sees the mean gradient of its batches, as one larger batch would give."""
    grads: dict[str, list[torch.Tensor]] = {"acc": [], "big": []}

    class Grab:
        surge_name = "grab"

        def __init__(self, key: str) -> None:
            self.key = key

        @surge.hookimpl
        def before_optimizer_step(self, event) -> None:
            grads[self.key].append(torch.cat([p.grad.flatten() for p in event.module.parameters()]))

    torch.manual_seed(0)
    model = TinyModule()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    data = TinyDataModule()
    data.setup("fit")
    loader = torch.utils.data.DataLoader(data.train_set, batch_size=8)  # sequential
    make_trainer(max_steps=1, accumulate_grad_batches=2, plugins=[Grab("acc")]).fit(model, train_dataloaders=loader)
    model.load_state_dict(state)
    big = torch.utils.data.DataLoader(data.train_set, batch_size=16)
    make_trainer(max_steps=1, plugins=[Grab("big")]).fit(model, train_dataloaders=big)
    assert torch.allclose(grads["acc"][0], grads["big"][0], atol=1e-6)


def test_manual_accumulation_is_refused(make_trainer):
    class Manual(TinyModule):
        automatic_optimization = False

    with pytest.raises(surge.ConfigError, match="accumulate_grad_batches"):
        make_trainer(accumulate_grad_batches=2).fit(Manual(), datamodule=TinyDataModule())


def test_gradient_clip_norm(make_trainer):
    _, unclipped = fit(make_trainer, TinyModule(), max_epochs=1)
    assert min(unclipped.total_norms) > 0.05  # the clip below bites on every step
    _, probe = fit(make_trainer, TinyModule(), max_epochs=1, gradient_clip_val=0.05)
    assert len(probe.total_norms) == TRAIN_BATCHES
    assert all(norm <= 0.05 * (1 + 1e-5) for norm in probe.total_norms)
    assert max(probe.total_norms) == pytest.approx(0.05, rel=1e-4)
    # before_optimizer_step sees the gradients before clipping (Lightning's order), e.g. for norm tracking
    assert min(probe.norms_before) > 0.05


def test_gradient_clip_value(make_trainer):
    _, unclipped = fit(make_trainer, TinyModule(), max_epochs=1, gradient_clip_algorithm="value")
    assert min(unclipped.max_abs) > 0.01
    _, probe = fit(make_trainer, TinyModule(), max_epochs=1, gradient_clip_val=0.01, gradient_clip_algorithm="value")
    assert all(value <= 0.01 for value in probe.max_abs)
    assert max(probe.max_abs) == pytest.approx(0.01)


def test_gradient_clip_with_accumulation_clips_the_accumulated_gradient(make_trainer):
    _, probe = fit(make_trainer, TinyModule(), max_epochs=1, accumulate_grad_batches=4, gradient_clip_val=0.05)
    assert len(probe.total_norms) == 2
    assert all(norm <= 0.05 * (1 + 1e-5) for norm in probe.total_norms)


def test_gradient_clip_algorithm_is_validated(make_trainer):
    with pytest.raises(surge.ConfigError, match=r"gradient_clip_algorithm.*'norm' or 'value'"):
        make_trainer(gradient_clip_algorithm="l2")


# -- manual optimization ---------------------------------------------------------------------------------


class ManualGAN(TinyModule):
    """Two optimizers stepped by hand, one per half of the network."""

    automatic_optimization = False

    def configure_optimizers(self):
        first = torch.optim.SGD(self.net[0].parameters(), lr=0.1)
        second = torch.optim.SGD(self.net[2].parameters(), lr=0.1)
        return [first, second], [torch.optim.lr_scheduler.StepLR(first, 1)]

    def training_step(self, batch, batch_idx):
        first, second = self.optimizers()
        for opt in (first, second):
            loss = self._loss(batch)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        self.log("train_loss", loss)


def test_manual_optimization_with_two_optimizers(make_trainer):
    recorder = EventRecorder()
    model = ManualGAN()
    trainer, probe = fit(make_trainer, model, max_epochs=2, limit_train_batches=3, plugins=[recorder])
    assert trainer.global_step == 2 * 3 * 2  # every opt.step() counts
    assert probe.indices == [0, 1] * 6 and probe.after == [0, 1] * 6
    assert probe.backwards == 12
    assert len(recorder.of("before_backward")) == 12
    assert model.lr_schedulers().last_epoch == 0  # schedulers are the user's business in manual mode
    assert "train_loss" in trainer.callback_metrics


def test_manual_optimization_matches_automatic(make_trainer):
    class Manual(TinyModule):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self._loss(batch)
            self.manual_backward(loss)
            opt.step()
            opt.zero_grad()

    def run(model):
        torch.manual_seed(5)
        trainer = make_trainer(max_epochs=2, num_sanity_val_steps=0)
        trainer.fit(model, datamodule=TinyDataModule())
        return trainer.global_step, model.state_dict()

    torch.manual_seed(0)
    manual = Manual()
    torch.manual_seed(0)
    automatic = TinyModule()
    (manual_steps, manual_state), (auto_steps, auto_state) = run(manual), run(automatic)
    assert manual_steps == auto_steps == 16
    assert all(torch.equal(manual_state[k], auto_state[k]) for k in auto_state)


def test_manual_step_hooks_are_removed_after_fit(make_trainer):
    class Manual(TinyModule):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self._loss(batch))
            opt.step()
            opt.zero_grad()

    model = Manual()
    trainer, _ = fit(make_trainer, model, max_epochs=1, limit_train_batches=2)
    assert trainer.global_step == 2
    trainer.optimizers[0].step()  # outside fit, a step no longer counts
    assert trainer.global_step == 2


# -- what training_step returns -----------------------------------------------------------------------------


def test_training_step_returning_none_skips_the_batch(make_trainer):
    class SkipOdd(TinyModule):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return None if batch_idx % 2 else loss

    trainer, probe = fit(make_trainer, SkipOdd(), max_epochs=1)
    assert trainer.global_step == 4
    assert probe.backwards == 4


def test_training_step_returning_a_dict_with_loss(make_trainer):
    outputs: list = []

    class DictLoss(TinyModule):
        def training_step(self, batch, batch_idx):
            return {"loss": self._loss(batch), "extra": batch_idx}

    class Keep:
        surge_name = "keep"

        @surge.hookimpl
        def train_batch_end(self, event) -> None:
            outputs.append(event.outputs)

    model = DictLoss()
    before = [p.clone() for p in model.parameters()]
    trainer, _ = fit(make_trainer, model, max_epochs=1, limit_train_batches=2, plugins=[Keep()])
    assert trainer.global_step == 2
    assert [o["extra"] for o in outputs] == [0, 1]
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("bad", [1.5, (1, 2), {"not_loss": 1}])
def test_training_step_returning_something_else_is_an_error(make_trainer, bad):
    class Bad(TinyModule):
        def training_step(self, batch, batch_idx):
            return bad

    with pytest.raises(surge.SurgeError, match="return the loss tensor"):
        fit(make_trainer, Bad(), max_epochs=1)


# -- hyper-parameters --------------------------------------------------------------------------------------


def test_save_hyperparameters(make_trainer, tmp_path):
    class WithHParams(TinyModule):
        def __init__(self, hidden: int = 16, lr: float = 0.05, note: str = "x", big: object = None, **extra) -> None:
            super().__init__(hidden=hidden, lr=lr)
            self.save_hyperparameters(ignore=["big"])

    model = WithHParams(hidden=4, note="hello", big=object(), depth=3)
    # TinyModule's in_features beside the subclass's own (less ignore=), as Lightning records them
    assert dict(model.hparams) == {"in_features": 8, "hidden": 4, "lr": 0.05, "note": "hello", "depth": 3}
    assert model.hparams.hidden == 4
    with pytest.raises(AttributeError, match="no hyper-parameter 'nope'"):
        _ = model.hparams.nope
    trainer, _ = fit(make_trainer, model, max_epochs=1, limit_train_batches=1)
    assert trainer.dump_checkpoint()["hparams"] == dict(model.hparams)


def test_tiny_module_saves_its_hyperparameters():
    assert dict(TinyModule(hidden=3, lr=0.5).hparams) == {"in_features": 8, "hidden": 3, "lr": 0.5}


def test_estimated_stepping_batches(make_trainer):
    trainer, _ = fit(make_trainer, TinyModule(), max_epochs=3, accumulate_grad_batches=3)
    assert trainer.estimated_stepping_batches == 9
    trainer, _ = fit(make_trainer, TinyModule(), max_steps=5)
    assert trainer.estimated_stepping_batches == 5
    assert not math.isinf(trainer.estimated_stepping_batches)
