"""The Module's overridable steps (issue 25, deliverable 2): ``optimizer_step``, ``optimizer_zero_grad``,
``backward``, ``lr_scheduler_step``, ``configure_gradient_clipping``, ``transfer_batch_to_device``,
``on_before_batch_transfer`` and ``on_after_batch_transfer`` change what runs, where, and with the arguments
Lightning uses.

Side by side with Lightning 2.6: one model body (:class:`Body`) mixed into a ``lightning.pytorch.LightningModule``
and into a ``surge.Module``, plus one recording mixin per overridden step (each records its call and then does
what its base does, or what the test's Lightning program does); both are trained by their own Trainer with the
same arguments and data, and must record the same calls with the same arguments (epoch, batch_idx, which
optimizer, dataloader_idx, loss and metric values) and end with the same weights, bit for bit. The documented
difference (``optimizer_zero_grad`` runs after the step in Surge, before the next window's backward in
Lightning) is asserted as documented. Surge alone: ``16-mixed`` with its gradient scaler (Lightning runs
``bf16-mixed`` on the CPU), truncated back-propagation through time (gone from Lightning 2), a mid-epoch resume,
and that a Module overriding nothing never calls the steps (the loops' inlined steps run instead).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import surge
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from loguru import logger
from surge.testing import launch_workers, quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = quiet_trainer_args()
FRAMEWORKS = ("lightning", "surge")
HERE = Path(__file__).parent


# -- data ------------------------------------------------------------------------------------------------------


def dataset(n: int = 16, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


class Batch:
    """A batch of a class of its own, which no framework knows how to move."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y


def to_batch(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
    return Batch(torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples]))


def loader(n: int = 16, seed: int = 0, batch_size: int = 2, custom: bool = False) -> DataLoader:
    return DataLoader(dataset(n, seed), batch_size=batch_size, collate_fn=to_batch if custom else None)


def unpack(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return (batch.x, batch.y) if isinstance(batch, Batch) else (batch[0], batch[1])


# -- the model, written once for both frameworks -------------------------------------------------------------


class Halving:
    """A learning-rate schedule that is not a torch scheduler: ``step(epoch)`` halves the rate every epoch
    (Lightning needs ``lr_scheduler_step`` overridden for it)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.base = optimizer, [group["lr"] for group in optimizer.param_groups]

    def step(self, epoch: int) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base, strict=True):
            group["lr"] = base * 0.5 ** (epoch + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base = state["base"]


class Body:
    """The model: an MLP trained with SGD (or LBFGS), logging ``val_loss``; ``calls`` holds what the mixins and
    the steps record. ``options``: ``scheduler`` ('step', 'plateau', 'custom'), ``optimizer`` ('sgd', 'lbfgs'),
    ``manual`` (manual optimization), ``scale`` ({batch_idx: factor} multiplying that batch's loss)."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.calls: list[tuple[Any, ...]] = []
        self.options = options
        self.configured: torch.optim.Optimizer | None = None
        if options.get("manual"):
            self.automatic_optimization = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = unpack(batch)
        return nn.functional.mse_loss(self(x).float(), y)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.calls.append(("training_step", self.current_epoch, batch_idx))
        loss = self.loss(batch) * self.options.get("scale", {}).get(batch_idx, 1.0)
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss, retain_graph=True)
        optimizer.step()
        return None

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_loss", self.loss(batch), batch_size=len(unpack(batch)[0]))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("test_loss", self.loss(batch), batch_size=len(unpack(batch)[0]))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(unpack(batch)[0])

    def configure_optimizers(self) -> Any:
        if self.options.get("optimizer") == "lbfgs":
            optimizer: torch.optim.Optimizer = torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=3)
        else:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        self.configured = optimizer
        kind = self.options.get("scheduler")
        if kind == "step":
            step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
            return [optimizer], [{"scheduler": step, "interval": "step"}]
        if kind == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0, threshold=10.0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}
        if kind == "custom":
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": Halving(optimizer), "interval": "epoch"}}
        return optimizer

    def which(self, optimizer: Any) -> str:
        """Which optimizer a step got: the one ``configure_optimizers`` made, or the framework's wrapper of it
        (Lightning's ``LightningOptimizer``, Surge's ``ManualOptimizer``)."""
        if optimizer is self.configured:
            return "the optimizer"
        if getattr(optimizer, "optimizer", None) is self.configured:
            return "wrapped"
        return f"another: {type(optimizer).__name__}"


def value(tensor: Any) -> float | None:
    return None if tensor is None else float(tensor.detach())


# One mixin per overridable step: it records the call, then does what the base class does.


class OptimizerStep:
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(
            ("optimizer_step", epoch, batch_idx, self.which(optimizer), callable(optimizer_closure), self.global_step)
        )
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)


class ZeroGrad:
    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append(("optimizer_zero_grad", epoch, batch_idx, self.which(optimizer)))
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)


class Backward:
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("backward", value(loss), args, sorted(kwargs.items())))
        super().backward(loss, *args, **kwargs)


class SchedulerStep:
    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls.append(("lr_scheduler_step", type(scheduler).__name__, value(metric), self.global_step))
        super().lr_scheduler_step(scheduler, metric)


class Clipping:
    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        algorithm = getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm)  # Lightning's is an enum
        self.calls.append(("configure_gradient_clipping", self.which(optimizer), gradient_clip_val, algorithm))
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


class Transfer:
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.calls.append(("transfer_batch_to_device", type(batch).__name__, str(device), dataloader_idx))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


class BeforeTransfer:
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(("on_before_batch_transfer", type(batch).__name__, dataloader_idx))
        return super().on_before_batch_transfer(batch, dataloader_idx)


class AfterTransfer:
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(("on_after_batch_transfer", type(batch).__name__, dataloader_idx))
        return super().on_after_batch_transfer(batch, dataloader_idx)


MIXINS = {
    "optimizer_step": OptimizerStep,
    "optimizer_zero_grad": ZeroGrad,
    "backward": Backward,
    "lr_scheduler_step": SchedulerStep,
    "configure_gradient_clipping": Clipping,
    "transfer_batch_to_device": Transfer,
    "on_before_batch_transfer": BeforeTransfer,
    "on_after_batch_transfer": AfterTransfer,
}


def build(framework: str, *mixins: type, **options: Any) -> Any:
    """The model of ``framework`` ('lightning' or 'surge') with ``mixins`` overriding its steps."""
    base = pl.LightningModule if framework == "lightning" else surge.Module
    return type(f"{framework.title()}Model", (*mixins, Body, base), {})(**options)


def make_trainer(framework: str, **args: Any) -> Any:
    trainer = pl.Trainer if framework == "lightning" else surge.Trainer
    return trainer(**{"accelerator": "cpu", "devices": 1, **QUIET, **args})


def run(
    framework: str,
    mixins: tuple[type, ...],
    options: dict[str, Any] | None = None,
    stages: tuple[str, ...] = (),
    custom: bool = False,
    val_loaders: int = 1,
    **trainer_args: Any,
) -> Any:
    """Fit (then run ``stages``: validate, test, predict, each on two loaders) and return the model."""
    model = build(framework, *mixins, **(options or {}))
    trainer = make_trainer(framework, **trainer_args)
    vals = [loader(8, seed=1 + i, batch_size=4, custom=custom) for i in range(val_loaders)]
    trainer.fit(model, loader(custom=custom), vals if val_loaders > 1 else vals[0])
    for stage in stages:
        getattr(trainer, stage)(model, [loader(4, seed=5 + i, batch_size=2, custom=custom) for i in range(2)])
    model.trainer_ = trainer
    return model


def both(*mixins: type, **kwargs: Any) -> tuple[Any, Any]:
    return run("lightning", mixins, **kwargs), run("surge", mixins, **kwargs)


def assert_same_weights(lightning_model: Any, surge_model: Any) -> None:
    expected = lightning_model.state_dict()
    for name, tensor in surge_model.state_dict().items():
        assert torch.equal(tensor, expected[name]), f"{name} differs from Lightning's"


def calls(model: Any, *names: str) -> list[tuple[Any, ...]]:
    return [call for call in model.calls if call[0] in names]


def without(model: Any, *names: str) -> list[tuple[Any, ...]]:
    return [call for call in model.calls if call[0] not in names]


# -- optimizer_step ----------------------------------------------------------------------------------------------


class WarmUp:
    """The transformer tutorials' warm-up, stepped inside ``optimizer_step``."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(("optimizer_step", epoch, batch_idx, self.which(optimizer), self.global_step))
        optimizer.step(closure=optimizer_closure)
        scale = min(1.0, (self.trainer.global_step + 1) / 3)
        for group in optimizer.param_groups:
            group["lr"] = scale * 0.05
        self.calls.append(("lr", optimizer.param_groups[0]["lr"]))


def test_a_warm_up_in_optimizer_step_runs_as_in_lightning() -> None:
    lightning_model, surge_model = both(WarmUp, max_epochs=2, limit_train_batches=4)
    steps = calls(surge_model, "optimizer_step")
    assert [c[1:3] for c in steps] == [(e, b) for e in (0, 1) for b in range(4)]
    assert {c[3] for c in steps} == {"wrapped"} and [c[4] for c in steps] == list(range(8))
    assert surge_model.calls == lightning_model.calls  # training_step inside each optimizer_step, the same lrs
    assert_same_weights(lightning_model, surge_model)
    assert surge_model.configured.param_groups[0]["lr"] == 0.05
    assert surge_model.trainer_.global_step == lightning_model.trainer_.global_step == 8


class Alternate:
    """Steps on even batches only; the odd ones compute their gradients (the closure) and drop them."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(("optimizer_step", epoch, batch_idx))
        if batch_idx % 2 == 0:
            optimizer.step(closure=optimizer_closure)
        else:
            optimizer_closure()


def test_an_optimizer_step_that_steps_every_other_batch() -> None:
    lightning_model, surge_model = both(Alternate, Backward, Clipping, max_steps=6, gradient_clip_val=0.5)
    assert surge_model.calls == lightning_model.calls
    # the clipping runs inside optimizer.step only: on the even batches
    assert [c for c in surge_model.calls if c[0] == "configure_gradient_clipping"] == [
        ("configure_gradient_clipping", "the optimizer", 0.5, None)
    ] * 3
    assert_same_weights(lightning_model, surge_model)
    assert surge_model.trainer_.global_step == lightning_model.trainer_.global_step == 6


class SkipsTheClosure:
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(("optimizer_step", epoch, batch_idx))
        if batch_idx < 2:
            optimizer.step(closure=optimizer_closure)


def test_an_optimizer_step_that_never_runs_the_closure_is_an_error_as_in_lightning() -> None:
    models = {}
    for framework, error in (("lightning", MisconfigurationException), ("surge", surge.SurgeError)):
        model = build(framework, SkipsTheClosure)
        with pytest.raises(error) as info:
            make_trainer(framework, max_steps=6).fit(model, loader())
        models[framework] = (model, str(info.value))
    (lightning_model, _), (surge_model, message) = models["lightning"], models["surge"]
    assert surge_model.calls == lightning_model.calls  # training_step ran for batches 0 and 1 only
    assert surge_model.calls[-1] == ("optimizer_step", 0, 2)
    assert message.startswith(
        "SurgeModel.optimizer_step(epoch=0, batch_idx=2, ...) returned without running optimizer_closure, so "
        "training_step did not run for this batch"
    )
    assert "optimizer.step(closure=optimizer_closure), or call optimizer_closure()" in message
    assert_same_weights(lightning_model, surge_model)


def test_accumulation_calls_optimizer_step_on_the_window_s_last_batch() -> None:
    mixins = (OptimizerStep, ZeroGrad, Backward)
    lightning_model, surge_model = both(*mixins, max_epochs=2, limit_train_batches=5, accumulate_grad_batches=2)
    # windows (0, 1), (2, 3) and the epoch's last batch 4 alone, each epoch
    steps = [(e, b) for e in (0, 1) for b in (1, 3, 4)]
    assert [c[1:3] for c in calls(surge_model, "optimizer_step")] == steps
    assert without(surge_model, "optimizer_zero_grad") == without(lightning_model, "optimizer_zero_grad")
    assert_same_weights(lightning_model, surge_model)
    # documented difference: Lightning zeroes before the backward of a window's first batch, Surge after the step
    lightning_zero = [c[1:] for c in calls(lightning_model, "optimizer_zero_grad")]
    surge_zero = [c[1:] for c in calls(surge_model, "optimizer_zero_grad")]
    assert lightning_zero == [(e, b, "the optimizer") for e in (0, 1) for b in (0, 2, 4)]
    assert surge_zero == [(e, b, "the optimizer") for e, b in steps]


def test_lbfgs_gets_its_closure_as_in_lightning() -> None:
    """LBFGS evaluates the closure several times per step (each from zero gradients), with or without an
    ``optimizer_step`` override."""
    for mixins in ((), (OptimizerStep, ZeroGrad)):
        lightning_model, surge_model = both(*mixins, options={"optimizer": "lbfgs"}, max_steps=3)
        assert len(calls(surge_model, "training_step")) > 3  # evaluated again within a step
        # the zero-grad calls are the same, in other places (documented): before each evaluation in Lightning;
        # after the step, and before each further evaluation within it, in Surge
        assert without(surge_model, "optimizer_zero_grad") == without(lightning_model, "optimizer_zero_grad")
        assert calls(surge_model, "optimizer_zero_grad") == calls(lightning_model, "optimizer_zero_grad")
        assert len(calls(surge_model, "optimizer_zero_grad")) == (
            len(calls(surge_model, "training_step")) if mixins else 0
        )
        assert_same_weights(lightning_model, surge_model)


# -- backward, optimizer_zero_grad -----------------------------------------------------------------------------


class ScaledBackward:
    """A backward of its own: the gradients of half the loss."""

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("backward", value(loss)))
        (loss * 0.5).backward(*args, **kwargs)


class ZeroGradToZeros:
    """Zeroes the gradients in place instead of dropping them."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append(("optimizer_zero_grad", epoch, batch_idx))
        optimizer.zero_grad(set_to_none=False)


def test_backward_and_optimizer_zero_grad_overrides_change_the_training() -> None:
    lightning_model, surge_model = both(ScaledBackward, ZeroGradToZeros, max_epochs=2, limit_train_batches=3)
    assert len(calls(surge_model, "backward")) == 6 and calls(surge_model, "backward") == calls(
        lightning_model, "backward"
    )
    # without accumulation both zero once per step with the stepping batch's index (the places differ, documented)
    assert calls(surge_model, "optimizer_zero_grad") == calls(lightning_model, "optimizer_zero_grad")
    assert [c[1:] for c in calls(surge_model, "optimizer_zero_grad")] == [(e, b) for e in (0, 1) for b in range(3)]
    assert_same_weights(lightning_model, surge_model)
    for param in surge_model.parameters():  # zeroed in place, not dropped
        assert param.grad is not None and not param.grad.any()
    plain = run("surge", ())
    assert not all(torch.equal(a, b) for a, b in zip(plain.parameters(), surge_model.parameters(), strict=True))


def test_manual_backward_calls_the_overridden_backward_with_its_arguments() -> None:
    lightning_model, surge_model = both(Backward, options={"manual": True}, max_steps=4)
    backward = calls(surge_model, "backward")
    assert len(backward) == 4 and backward[0][2:] == ((), [("retain_graph", True)])
    assert surge_model.calls == lightning_model.calls
    assert_same_weights(lightning_model, surge_model)
    assert surge_model.trainer_.global_step == lightning_model.trainer_.global_step == 4


# -- configure_gradient_clipping -------------------------------------------------------------------------------


class FirstLayerByValue:
    """Clips the first layer's gradients by value, then everything as the Trainer says."""

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        self.calls.append(("configure_gradient_clipping", self.which(optimizer), gradient_clip_val))
        torch.nn.utils.clip_grad_value_(self.net[0].parameters(), 0.01)
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )


@pytest.mark.parametrize(
    "clip",
    [{}, {"gradient_clip_val": 0.05}, {"gradient_clip_val": 0.02, "gradient_clip_algorithm": "value"}],
    ids=["no-clip-value", "norm", "value"],
)
def test_configure_gradient_clipping_gets_the_trainer_s_values(clip: dict[str, Any]) -> None:
    lightning_model, surge_model = both(Clipping, max_epochs=2, limit_train_batches=2, **clip)
    expected = (clip.get("gradient_clip_val"), clip.get("gradient_clip_algorithm"))
    assert [c[1:] for c in calls(surge_model, "configure_gradient_clipping")] == [("the optimizer", *expected)] * 4
    assert surge_model.calls == lightning_model.calls
    assert_same_weights(lightning_model, surge_model)


def test_a_custom_configure_gradient_clipping_clips_as_in_lightning() -> None:
    lightning_model, surge_model = both(
        FirstLayerByValue, max_epochs=2, limit_train_batches=3, accumulate_grad_batches=2, gradient_clip_val=0.05
    )
    assert (
        calls(surge_model, "configure_gradient_clipping")
        == [("configure_gradient_clipping", "the optimizer", 0.05)] * 4
    )
    assert surge_model.calls == lightning_model.calls
    assert_same_weights(lightning_model, surge_model)
    unclipped = run("surge", (), max_epochs=2, limit_train_batches=3, accumulate_grad_batches=2, gradient_clip_val=0.05)
    assert not torch.equal(unclipped.net[0].weight, surge_model.net[0].weight)


# -- lr_scheduler_step -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["step", "plateau", "custom"])
def test_lr_scheduler_step_is_called_as_in_lightning(scheduler: str) -> None:
    """A step-interval StepLR (after every step), ReduceLROnPlateau on ``val_loss`` (at each epoch's end, with
    the metric), and a scheduler of another API (``step(epoch)``), which needs the override."""

    class EpochArgument:
        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            self.calls.append(("lr_scheduler_step", type(scheduler).__name__, value(metric), self.current_epoch))
            scheduler.step(epoch=self.current_epoch)

    mixin = EpochArgument if scheduler == "custom" else SchedulerStep
    lightning_model, surge_model = both(mixin, options={"scheduler": scheduler}, max_epochs=3, limit_train_batches=3)
    recorded = calls(surge_model, "lr_scheduler_step")
    assert len(recorded) == {"step": 9, "plateau": 3, "custom": 3}[scheduler]
    if scheduler == "plateau":
        assert all(isinstance(c[2], float) for c in recorded)  # the monitored val_loss
    else:
        assert {c[2] for c in recorded} == {None}
    assert surge_model.calls == lightning_model.calls
    assert surge_model.configured.param_groups[0]["lr"] == lightning_model.configured.param_groups[0]["lr"]
    assert surge_model.configured.param_groups[0]["lr"] < 0.05
    assert_same_weights(lightning_model, surge_model)


# -- the batch-transfer steps --------------------------------------------------------------------------------------


class MovesItsBatch:
    """``transfer_batch_to_device`` for a batch class of its own; ``on_before_batch_transfer`` makes it from
    the loader's list, ``on_after_batch_transfer`` rescales it (an augmentation on the device)."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(("on_before_batch_transfer", type(batch).__name__, dataloader_idx, self.stage()))
        return Batch(*batch) if isinstance(batch, list) else batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.calls.append(("transfer_batch_to_device", type(batch).__name__, str(device), dataloader_idx))
        assert isinstance(batch, Batch)
        return Batch(batch.x.to(device), batch.y.to(device))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(("on_after_batch_transfer", type(batch).__name__, dataloader_idx))
        return Batch(batch.x * 2, batch.y)

    def stage(self) -> str:
        return "sanity" if self.trainer.sanity_checking else "train" if self.training else "eval"


def test_the_batch_transfer_steps_run_in_every_stage_as_in_lightning() -> None:
    lightning_model, surge_model = both(
        MovesItsBatch,
        stages=("validate", "test", "predict"),
        val_loaders=2,
        num_sanity_val_steps=1,
        max_epochs=1,
        limit_train_batches=4,
    )
    before = calls(surge_model, "on_before_batch_transfer")
    stages = [c[3] for c in before]
    # the sanity check (a batch of each validation loader), 4 training batches, then 2 batches of each of two
    # loaders: fit's validation, validate, test, predict
    assert (stages.count("sanity"), stages.count("train"), stages.count("eval")) == (2, 4, 4 * 4)
    assert [c[2] for c in before if c[3] == "eval"] == [0, 0, 1, 1] * 4
    assert surge_model.calls == lightning_model.calls
    assert_same_weights(lightning_model, surge_model)
    plain = run("surge", (), max_epochs=1, limit_train_batches=4)
    assert not torch.equal(plain.net[0].weight, surge_model.net[0].weight)  # the augmentation counted


@pytest.mark.parametrize(
    "hooks", [("transfer_batch_to_device",), ("on_before_batch_transfer", "on_after_batch_transfer")]
)
def test_a_batch_of_its_own_class_reaches_the_steps(hooks: tuple[str, ...]) -> None:
    mixins = tuple(MIXINS[name] for name in hooks)
    lightning_model, surge_model = both(*mixins, custom=True, stages=("validate",), max_steps=4)
    assert {c[1] for c in surge_model.calls if c[0] in hooks} == {"Batch"}
    assert surge_model.calls == lightning_model.calls
    assert_same_weights(lightning_model, surge_model)


def _datamodule(framework: str) -> Any:
    base = pl.LightningDataModule if framework == "lightning" else surge.DataModule

    class Data(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[Any, ...]] = []

        def train_dataloader(self) -> DataLoader:
            return loader()

        def val_dataloader(self) -> DataLoader:
            return loader(8, seed=1, batch_size=4)

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            self.calls.append(("datamodule.on_after_batch_transfer", dataloader_idx))
            return [batch[0] + 1, batch[1]]

    return Data()


def test_a_datamodule_s_batch_transfer_steps_win_as_in_lightning() -> None:
    models, datas, warnings = {}, {}, []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        for framework in FRAMEWORKS:
            model, data = build(framework, AfterTransfer, BeforeTransfer), _datamodule(framework)
            make_trainer(framework, max_steps=3, num_sanity_val_steps=1).fit(model, datamodule=data)
            models[framework], datas[framework] = model, data
    finally:
        logger.remove(sink)
    assert datas["surge"].calls == datas["lightning"].calls and len(datas["surge"].calls) == 1 + 3  # sanity, 3 steps
    assert calls(models["surge"], "on_after_batch_transfer") == []  # the DataModule's is used
    assert len(calls(models["surge"], "on_before_batch_transfer")) == 1 + 3  # the Module's: none in the DataModule
    assert models["surge"].calls == models["lightning"].calls
    assert_same_weights(models["lightning"], models["surge"])
    assert any("both define on_after_batch_transfer: the DataModule's is used" in w for w in warnings), warnings


# -- any combination -----------------------------------------------------------------------------------------------

OPTIMIZATION = ("optimizer_step", "optimizer_zero_grad", "backward", "configure_gradient_clipping", "lr_scheduler_step")
CLIPS = {
    "none": {},
    "norm": {"gradient_clip_val": 0.05},
    "value": {"gradient_clip_val": 0.02, "gradient_clip_algorithm": "value"},
}


def _combination(accumulate: int, clip: str, precision: str, hooks: frozenset[str]) -> dict[str, Any]:
    return {
        "options": {"scheduler": "step"},
        "max_epochs": 2,
        "limit_train_batches": 5,
        "accumulate_grad_batches": accumulate,
        "precision": precision,
        **CLIPS[clip],
    }


@pytest.mark.slow
@settings(derandomize=True, max_examples=12, deadline=None)
@given(
    accumulate=st.sampled_from([1, 2, 3]),
    clip=st.sampled_from(sorted(CLIPS)),
    precision=st.sampled_from(["32-true", "bf16-mixed"]),
    hooks=st.frozensets(st.sampled_from(sorted(MIXINS)), min_size=1),
)
def test_any_combination_matches_lightning(accumulate: int, clip: str, precision: str, hooks: frozenset[str]) -> None:
    mixins = tuple(MIXINS[name] for name in sorted(hooks))
    lightning_model, surge_model = both(*mixins, **_combination(accumulate, clip, precision, hooks))
    assert without(surge_model, "optimizer_zero_grad") == without(lightning_model, "optimizer_zero_grad")
    # documented: Lightning zeroes before the backward of each window's first batch, Surge after the window's step
    starts = [(epoch, b) for epoch in (0, 1) for b in range(0, 5, accumulate)]
    ends = [(epoch, min(b + accumulate - 1, 4)) for epoch, b in starts]
    if "optimizer_zero_grad" in hooks:
        assert [c[1:3] for c in calls(lightning_model, "optimizer_zero_grad")] == starts
        assert [c[1:3] for c in calls(surge_model, "optimizer_zero_grad")] == ends
    assert_same_weights(lightning_model, surge_model)


@settings(derandomize=True, max_examples=10, deadline=None)
@given(
    accumulate=st.sampled_from([1, 2, 3]),
    clip=st.sampled_from(sorted(CLIPS)),
    precision=st.sampled_from(["32-true", "bf16-mixed", "16-mixed"]),
    hooks=st.frozensets(st.sampled_from(OPTIMIZATION), min_size=1),
)
def test_overriding_with_the_default_behaviour_changes_nothing(
    accumulate: int, clip: str, precision: str, hooks: frozenset[str]
) -> None:
    """Surge alone, ``16-mixed`` included (its scaler skips the step of batch 2, whose loss overflows float16):
    overrides that only record and call the base's method train exactly as the loops' inlined steps."""
    mixins = tuple(MIXINS[name] for name in sorted(hooks))
    args = _combination(accumulate, clip, precision, hooks)
    args["options"] = {**args["options"], "scale": {2: 1e8} if precision == "16-mixed" else {}}
    hooked, inlined = run("surge", mixins, **args), run("surge", (), **args)
    assert {call[0] for call in hooked.calls} >= hooks  # every override was called
    assert_same_weights(inlined, hooked)
    assert hooked.trainer_.global_step == inlined.trainer_.global_step
    assert without(hooked, *OPTIMIZATION) == inlined.calls
    plugin, reference = hooked.trainer_.precision_plugin, inlined.trainer_.precision_plugin
    assert plugin.state_dict() == reference.state_dict()
    if precision == "16-mixed":
        assert plugin.skipped_steps == reference.skipped_steps >= 1


# -- precision: 16-mixed ------------------------------------------------------------------------------------------


def test_under_16_mixed_backward_gets_the_scaled_loss() -> None:
    model = run("surge", (Backward,), precision="16-mixed", max_steps=2)
    unscaled = run("surge", (Backward,), max_steps=1)
    first = calls(model, "backward")[0][1]
    assert first == pytest.approx(65536.0 * calls(unscaled, "backward")[0][1], rel=1e-2)  # the initial scale


def test_the_optimizer_of_optimizer_step_steps_through_the_gradient_scaler() -> None:
    """Steps whose gradients overflow float16 (batch 1's loss is scaled by 1e8) are skipped by the scaler, as
    without the override, and the step-interval scheduler does not step after them."""
    options = {"scale": {1: 1e8}, "scheduler": "step"}
    hooked = run("surge", (OptimizerStep, SchedulerStep), options=options, precision="16-mixed", max_steps=4)
    inlined = run("surge", (), options=options, precision="16-mixed", max_steps=4)
    skipped = hooked.trainer_.precision_plugin.skipped_steps
    assert skipped == inlined.trainer_.precision_plugin.skipped_steps >= 1
    assert hooked.trainer_.precision_plugin.state_dict() == inlined.trainer_.precision_plugin.state_dict()
    assert len(calls(hooked, "optimizer_step")) == 4 and len(calls(hooked, "lr_scheduler_step")) == 4 - skipped
    schedulers = [model.trainer_.lr_scheduler_configs[0].scheduler for model in (hooked, inlined)]
    assert schedulers[0].state_dict() == schedulers[1].state_dict() and schedulers[0].last_epoch == 4 - skipped
    assert_same_weights(inlined, hooked)


# -- truncated back-propagation through time (Surge only: Lightning 2 has none) -----------------------------------


class Recurrent(surge.Module):
    truncated_bptt_steps = 2

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.GRU(3, 4, batch_first=True)
        self.head = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int, hiddens: Any = None) -> dict[str, Any]:
        out, hiddens = self.rnn(batch[0], hiddens)
        return {"loss": nn.functional.mse_loss(self.head(out), batch[1]), "hiddens": hiddens}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class RecordedRecurrent(Recurrent):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(("optimizer_step", epoch, batch_idx, self.global_step))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("backward",))
        super().backward(loss, *args, **kwargs)


def test_truncated_bptt_calls_optimizer_step_once_per_time_split() -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(8, 6, 3, generator=generator)
    data = TensorDataset(x, x.cumsum(dim=1).sum(dim=2, keepdim=True))
    models = []
    for cls in (RecordedRecurrent, Recurrent):
        model = cls()
        make_trainer("surge", max_epochs=2).fit(model, DataLoader(data, batch_size=4))
        models.append(model)
    hooked, inlined = models
    steps = [c for c in hooked.calls if c[0] == "optimizer_step"]
    assert [c[1:3] for c in steps] == [(e, b) for e in (0, 1) for b in (0, 1) for _ in range(3)]  # 3 splits each
    assert [c[3] for c in steps] == list(range(12)) and len(hooked.calls) == 24
    assert_same_weights(inlined, hooked)


# -- resume --------------------------------------------------------------------------------------------------------


class Dropping:
    """A Body with dropout (the resumed run must restore torch's RNG) and every optimization step overridden."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.net.insert(1, nn.Dropout(0.2))


class StopAt:
    surge_name = "stop_at"

    def __init__(self, epoch: int, batch_idx: int) -> None:
        self.at = (epoch, batch_idx)

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if (event.trainer.current_epoch, event.batch_idx) == self.at:
            event.trainer.request_stop("the test stops here")


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_mid_epoch_resume_with_overrides_is_exact(tmp_path: Path, accumulate: int) -> None:
    """Stopped after batch 4 of epoch 1 (with ``accumulate_grad_batches=3`` inside a window: batch 3 accumulated),
    saved, resumed in a fresh Trainer from another seed: the same weights, optimizer and scheduler state and
    step count as the run that did not stop, and the overrides called for the rest as in that run."""
    mixins = (WarmUp, ZeroGrad, Backward, SchedulerStep, Clipping, AfterTransfer, Dropping)
    args = {"max_epochs": 2, "limit_train_batches": 7, "accumulate_grad_batches": accumulate, "gradient_clip_val": 0.5}
    options = {"scheduler": "step"}

    def fit(model: Any, plugins: list[Any], ckpt_path: str | None = None) -> Any:
        trainer = surge.Trainer(
            accelerator="cpu", plugins=plugins, num_sanity_val_steps=0, default_root_dir=str(tmp_path), **QUIET, **args
        )
        trainer.fit(model, loader(28), loader(8, seed=1, batch_size=4), ckpt_path=ckpt_path)
        return trainer

    surge.seed_everything(0)
    reference = build("surge", *mixins, **options)
    whole = fit(reference, [])
    surge.seed_everything(0)
    stopped = build("surge", *mixins, **options)
    path = fit(stopped, [StopAt(1, 4)]).save_checkpoint(str(tmp_path / "stopped.ckpt"))
    surge.seed_everything(12345)
    resumed = build("surge", *mixins, **options)
    trainer = fit(resumed, [], ckpt_path=path)
    assert stopped.calls[-1][0] == ("backward" if accumulate > 1 else "lr_scheduler_step") and len(resumed.calls) > 10
    assert stopped.calls + resumed.calls == reference.calls
    assert trainer.global_step == whole.global_step == 2 * (7 if accumulate == 1 else 3)
    assert_same_weights(reference, resumed)
    assert_same_state(trainer.optimizers[0].state_dict(), whole.optimizers[0].state_dict())
    assert_same_state(
        trainer.lr_scheduler_configs[0].scheduler.state_dict(), whole.lr_scheduler_configs[0].scheduler.state_dict()
    )


def assert_same_state(actual: Any, expected: Any, where: str = "state") -> None:
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert set(actual) == set(expected), where
        for key in expected:
            assert_same_state(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
            assert_same_state(a, b, f"{where}[{i}]")
    else:
        assert actual == expected, where


# -- refusals, and the cost of not overriding ------------------------------------------------------------------------


def test_a_step_that_cannot_take_the_loop_s_arguments_is_refused_before_the_run(tmp_path: Path) -> None:
    class LightningOneX:  # Lightning 1.x's signature
        def optimizer_step(  # type: ignore[no-untyped-def]
            self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu, using_native_amp, using_lbfgs
        ):
            raise AssertionError("never called")

    model = build("surge", LightningOneX)
    trainer = surge.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), **quiet_trainer_args(logger=["csv"]))
    with pytest.raises(surge.SurgeError) as info:
        trainer.fit(model, loader())
    message = str(info.value)
    assert message.startswith("SurgeModel.optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure")
    assert "cannot take the arguments the loop passes" in message
    assert "write it as `def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None)`" in message
    assert list(tmp_path.iterdir()) == []  # before anything was written
    assert len(make_trainer("surge").predict(model, loader(4))) == 2  # predict calls no optimizer_step

    class OldTransfer:  # before Lightning 1.4 it took no dataloader_idx
        def transfer_batch_to_device(self, batch: Any, device: torch.device) -> Any:
            raise AssertionError("never called")

    with pytest.raises(surge.SurgeError, match=r"SurgeModel.transfer_batch_to_device\(batch, device\) cannot take"):
        make_trainer("surge", default_root_dir=str(tmp_path)).validate(build("surge", OldTransfer), loader(4))
    assert list(tmp_path.iterdir()) == []


def test_a_precision_plugin_that_cannot_call_the_module_s_backward_is_refused(tmp_path: Path) -> None:
    class OldPrecision(surge.Precision):
        def backward(self, loss: torch.Tensor) -> None:  # type: ignore[override]
            loss.backward()

    model = build("surge", Backward)
    trainer = surge.Trainer(accelerator="cpu", precision=OldPrecision(), default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(
        surge.SurgeError, match="SurgeModel overrides backward, but the precision plugin .*OldPrecision"
    ):
        trainer.fit(model, loader())
    assert list(tmp_path.iterdir()) == []
    plain = build("surge")  # without the override the old plugin still works
    surge.Trainer(
        accelerator="cpu", precision=OldPrecision(), max_steps=2, default_root_dir=str(tmp_path), **QUIET
    ).fit(plain, loader())


def test_a_module_that_overrides_nothing_never_calls_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not overriding costs nothing: the loops run their inlined steps and call none of the eight."""
    called: list[str] = []
    for name in MIXINS:
        default = getattr(surge.Module, name)

        def counting(self: Any, *args: Any, __name: str = name, __default: Any = default, **kwargs: Any) -> Any:
            called.append(__name)
            return __default(self, *args, **kwargs)

        monkeypatch.setattr(surge.Module, name, counting)
    model = run(
        "surge", (), options={"scheduler": "step"}, stages=("validate", "predict"), gradient_clip_val=0.5, max_steps=4
    )
    assert model.trainer_.global_step == 4 and len(calls(model, "training_step")) == 4
    assert called == []


# -- DDP: two gloo processes, side by side with Lightning's DDP ------------------------------------------------------


@pytest.mark.slow
def test_overrides_under_ddp_match_lightning(tmp_path: Path) -> None:
    """Lightning's and Surge's ``ddp`` on 2 gloo processes (``launch_workers``: torchrun's variables, no agent), accumulating over 2 batches (the first
    micro-batch of each window skips the gradient all-reduce): the same calls on each rank, the same weights on
    both ranks and in both frameworks."""
    results = {}
    for framework in FRAMEWORKS:
        out = tmp_path / framework
        out.mkdir()
        done = launch_workers(HERE / "_module_steps_ddp_child.py", [framework, str(out)], timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        results[framework] = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for rank in (0, 1):
        lightning_run, surge_run = results["lightning"][rank], results["surge"][rank]
        assert surge_run["calls"] == lightning_run["calls"], rank
        assert len([c for c in surge_run["calls"] if c[0] == "optimizer_step"]) == 4
        for name, tensor in lightning_run["weights"].items():
            assert torch.equal(surge_run["weights"][name], tensor), f"rank {rank}: {name}"
    for name, tensor in results["surge"][0]["weights"].items():
        assert torch.equal(results["surge"][1]["weights"][name], tensor), f"the replicas differ in {name}"
