"""self.log / self.log_dict and the trainer's three metric views."""

from __future__ import annotations

import sys
import uuid

import pytest
import surge
import torch
from loguru import logger
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from torch.utils.data import DataLoader, TensorDataset


def uneven_loader(n: int = 20, batch_size: int = 8) -> DataLoader:
    """Batches of 8, 8 and 4 samples (sequential)."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(n, 8, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


class Logs(TinyModule):
    """Logs ``value(batch_idx)`` under ``name`` with ``options`` from training (and validation if asked)."""

    def __init__(self, name="m", value=float, where=("train",), **options) -> None:
        super().__init__()
        self.name, self.value, self.where, self.options = name, value, where, options

    def training_step(self, batch, batch_idx):
        if "train" in self.where:
            self.log(self.name, self.value(batch_idx), **self.options)
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        if "val" in self.where:
            self.log(self.name, self.value(batch_idx), **self.options)
        else:
            super().validation_step(batch, batch_idx)  # val_loss


def fit_uneven(make_trainer, model, **flags):
    flags.setdefault("num_sanity_val_steps", 0)
    trainer = make_trainer(max_epochs=1, **flags)
    trainer.fit(model, train_dataloaders=uneven_loader(), val_dataloaders=uneven_loader())
    return trainer


# -- on_step / on_epoch and the three dicts ---------------------------------------------------------------


def test_training_defaults_to_on_step(make_trainer):
    trainer = fit_uneven(make_trainer, Logs(), log_every_n_steps=1)
    assert set(trainer.callback_metrics) == {"m", "val_loss"}
    assert trainer.callback_metrics["m"] == 2.0  # the last step's value
    assert set(trainer.logged_metrics) == {"m", "val_loss"}
    assert trainer.progress_bar_metrics == {}


def test_validation_defaults_to_on_epoch_weighted_mean(make_trainer):
    trainer = fit_uneven(make_trainer, Logs(where=("val",)))
    # batches of 8, 8 and 4 samples logging 0, 1, 2: (0*8 + 1*8 + 2*4) / 20
    assert trainer.callback_metrics["m"].item() == pytest.approx(0.8)
    assert set(trainer.logged_metrics) == {"m"}


@pytest.mark.parametrize(
    "reduce_fx, expected",
    [("mean", 0.8), ("sum", 3.0), ("max", 2.0), ("min", 0.0), (lambda t: t.pow(2).sum(), 5.0), (torch.median, 1.0)],
    ids=["mean", "sum", "max", "min", "lambda", "torch.median"],
)
def test_reduce_fx(make_trainer, reduce_fx, expected):
    trainer = fit_uneven(make_trainer, Logs(on_step=False, on_epoch=True, reduce_fx=reduce_fx))
    assert trainer.callback_metrics["m"].item() == pytest.approx(expected)


def test_explicit_batch_size_weights_the_mean(make_trainer):
    trainer = fit_uneven(make_trainer, Logs(on_step=False, on_epoch=True, batch_size=1))
    assert trainer.callback_metrics["m"].item() == pytest.approx(1.0)


def test_batch_size_is_inferred_from_dict_batches(make_trainer):
    class DictBatches(TinyModule):
        def training_step(self, batch, batch_idx):
            self.log("m", float(batch_idx), on_step=False, on_epoch=True)
            return self._loss((batch["x"], batch["y"]))

    base = uneven_loader()
    loader = DataLoader(
        [{"x": x, "y": y} for x, y in base.dataset],
        batch_size=8,  # type: ignore[attr-defined]
    )
    trainer = make_trainer(max_epochs=1)
    trainer.fit(DictBatches(), train_dataloaders=loader)
    assert trainer.callback_metrics["m"].item() == pytest.approx(0.8)


def test_on_step_and_on_epoch_get_suffixes(make_trainer):
    trainer = fit_uneven(make_trainer, Logs(on_step=True, on_epoch=True, prog_bar=True), log_every_n_steps=1)
    cb = trainer.callback_metrics
    assert set(cb) == {"m", "m_step", "m_epoch", "val_loss"}
    assert cb["m_step"].item() == 2.0
    assert cb["m_epoch"].item() == pytest.approx(0.8)
    assert cb["m"].item() == pytest.approx(0.8)  # after the epoch, the plain name holds the epoch value
    assert set(trainer.logged_metrics) == {"m_step", "m_epoch", "val_loss"}
    assert set(trainer.progress_bar_metrics) == {"m_step", "m_epoch"}


def test_plain_name_holds_the_step_value_during_the_epoch(make_trainer):
    seen: list[float] = []

    class Watch(Logs):
        def on_train_batch_end(self) -> None:
            seen.append(self.trainer.callback_metrics["m"].item())

    fit_uneven(make_trainer, Watch(on_step=True, on_epoch=True))
    assert seen == [0.0, 1.0, 2.0]


def test_prog_bar_and_logger_switches(make_trainer):
    class Several(TinyModule):
        def training_step(self, batch, batch_idx):
            self.log("shown", 1.0, prog_bar=True)
            self.log("hidden", 2.0, logger=False)
            self.log("both", 3.0, prog_bar=True, logger=False)
            return self._loss(batch)

    trainer = make_trainer(max_epochs=1, log_every_n_steps=1)
    trainer.fit(Several(), train_dataloaders=uneven_loader())
    assert set(trainer.callback_metrics) == {"shown", "hidden", "both"}
    assert set(trainer.progress_bar_metrics) == {"shown", "both"}
    assert set(trainer.logged_metrics) == {"shown"}


def test_log_dict(make_trainer):
    class Dict(TinyModule):
        def training_step(self, batch, batch_idx):
            self.log_dict(
                {"a": float(batch_idx), "b": torch.tensor(2.0 * batch_idx)},
                on_epoch=True,
                on_step=False,
                reduce_fx="sum",
            )
            return self._loss(batch)

    trainer = fit_uneven(make_trainer, Dict())
    assert trainer.callback_metrics["a"].item() == 3.0
    assert trainer.callback_metrics["b"].item() == 6.0


def test_metrics_logged_in_epoch_end_hooks(make_trainer):
    class EpochEnd(TinyModule):
        def on_train_epoch_end(self) -> None:
            self.log("from_train_epoch_end", 4.0)

        def on_validation_epoch_end(self) -> None:
            self.log("from_val_epoch_end", 5.0)

    trainer = fit_uneven(make_trainer, EpochEnd())
    assert trainer.callback_metrics["from_train_epoch_end"].item() == 4.0
    assert trainer.callback_metrics["from_val_epoch_end"].item() == 5.0
    assert {"from_train_epoch_end", "from_val_epoch_end"} <= set(trainer.logged_metrics)


def test_train_epoch_metric_spans_the_whole_epoch_despite_mid_epoch_validation(make_trainer):
    model = Logs(on_step=False, on_epoch=True, reduce_fx="sum")
    trainer = make_trainer(max_epochs=1, val_check_interval=0.25, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=TinyDataModule())
    assert trainer.callback_metrics["m"].item() == sum(range(8))
    assert "val_loss" in trainer.callback_metrics


def test_each_epoch_starts_a_new_reduction(make_trainer):
    epoch_values: list[float] = []

    class Grab:
        surge_name = "grab"

        @surge.hookimpl
        def train_epoch_end(self, event) -> None:
            epoch_values.append(event.trainer.callback_metrics["m"].item())

    model = Logs(on_step=False, on_epoch=True, reduce_fx="sum")
    trainer = make_trainer(max_epochs=3, num_sanity_val_steps=0, plugins=[Grab()])
    trainer.fit(model, datamodule=TinyDataModule())
    assert epoch_values == [sum(range(8))] * 3


def test_sanity_check_metrics_are_discarded(make_trainer):
    at_train_start: dict[str, dict] = {}

    class Snapshot:
        surge_name = "snapshot"

        @surge.hookimpl
        def train_start(self, event) -> None:
            t = event.trainer
            at_train_start.update(
                cb=dict(t.callback_metrics), logged=dict(t.logged_metrics), bar=dict(t.progress_bar_metrics)
            )

    model = Logs(name="v", where=("val",), reduce_fx="sum", prog_bar=True)
    trainer = make_trainer(max_epochs=1, num_sanity_val_steps=2, limit_train_batches=1, plugins=[Snapshot()])
    trainer.fit(model, datamodule=TinyDataModule())
    assert at_train_start == {"cb": {}, "logged": {}, "bar": {}}
    assert trainer.callback_metrics["v"].item() == 0 + 1 + 2 + 3  # the sanity batches 0 and 1 are not added


def test_values_stay_tensors_and_are_detached(make_trainer):
    class Tensors(TinyModule):
        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("loss_step_only", loss)
            self.log("loss_both", loss, on_epoch=True)
            self.log("python_number", 3)
            return loss

    trainer = make_trainer(max_epochs=1, log_every_n_steps=1)
    trainer.fit(Tensors(), train_dataloaders=uneven_loader())
    for view in (trainer.callback_metrics, trainer.logged_metrics):
        for key, value in view.items():
            assert isinstance(value, torch.Tensor), key
            assert not value.requires_grad, key
            assert value.device == torch.device("cpu"), key
    assert trainer.callback_metrics["python_number"].item() == 3.0


def test_logging_never_reads_values_back_to_the_host(make_trainer, monkeypatch):
    """No .item(), float(), .tolist() or .cpu() on logged tensors by Surge's core during fit (a logger or
    progress bar plugin may read values when it writes them; they are switched off here)."""
    calls: list[str] = []

    def spy(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if (caller == "surge" or caller.startswith("surge.")) and not caller.startswith("surge.testing"):
                calls.append(f"{caller}: Tensor.{name}")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)

    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "cpu"):
        spy(name)
    model = Logs(
        on_step=True, on_epoch=True, prog_bar=True, where=("train", "val"), value=lambda i: torch.tensor(float(i))
    )
    trainer = make_trainer(max_epochs=2, log_every_n_steps=1, logger=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=TinyDataModule())
    assert calls == []
    trainer.validate(model, datamodule=TinyDataModule())  # returns Python floats: the spy sees that
    assert any("Tensor.item" in call for call in calls)


# -- log_every_n_steps --------------------------------------------------------------------------------------


class LoggedProbe:
    """The steps at which the loss was written to the loggers, and those at which it reached logged_metrics and
    callback_metrics."""

    surge_name = "logged_probe"

    def __init__(self) -> None:
        self.written_steps: list[int] = []
        self.logged_steps: list[int] = []
        self.callback_steps: list[int] = []

    @surge.hookimpl
    def log_metrics(self, event) -> None:
        if "train_loss" in event.metrics:
            self.written_steps.append(event.step)

    @surge.hookimpl
    def train_batch_end(self, event) -> None:
        t, loss = event.trainer, event.outputs
        if torch.equal(t.logged_metrics["train_loss"], loss):
            self.logged_steps.append(t.global_step)
        if torch.equal(t.callback_metrics["train_loss"], loss):
            self.callback_steps.append(t.global_step)


@pytest.mark.parametrize("every, expected", [(3, [3, 6, 9, 12, 15]), (1, list(range(1, 17))), (50, [])])
def test_log_every_n_steps(make_trainer, every, expected):
    probe = LoggedProbe()
    trainer = make_trainer(max_epochs=2, log_every_n_steps=every, plugins=[probe], num_sanity_val_steps=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert probe.written_steps == expected
    # as in Lightning, logged_metrics holds every step's value, written or not (callbacks see every step)
    assert probe.logged_steps == probe.callback_steps == list(range(1, 17))


def test_log_every_n_steps_does_not_hold_back_epoch_metrics(make_trainer):
    trainer = make_trainer(max_epochs=1, log_every_n_steps=50, num_sanity_val_steps=0)
    trainer.fit(Logs(on_step=False, on_epoch=True), datamodule=TinyDataModule())
    assert {"m", "val_loss"} <= set(trainer.logged_metrics)


def test_should_log(make_trainer):
    flags: list[bool] = []

    class Watch:
        surge_name = "watch"

        @surge.hookimpl
        def train_batch_end(self, event) -> None:
            flags.append(event.trainer.should_log)

    make_trainer(max_epochs=1, log_every_n_steps=4, plugins=[Watch()]).fit(TinyModule(), datamodule=TinyDataModule())
    assert flags == [False, False, False, True, False, False, False, True]


# -- move_metrics_to_cpu ---------------------------------------------------------------------------------------


class Tracked(torch.Tensor):
    """A CPU tensor that notes when someone moves it to the CPU (this machine may have no GPU)."""

    moves = 0

    def cpu(self, *args, **kwargs):  # type: ignore[override]
        Tracked.moves += 1
        return super().cpu(*args, **kwargs)


@pytest.mark.parametrize("move", [False, True])
def test_move_metrics_to_cpu_moves_published_values(make_trainer, move):
    Tracked.moves = 0
    model = Logs(value=lambda i: torch.tensor(float(i)).as_subclass(Tracked), on_step=True, on_epoch=True)
    # no logger or progress bar plugin: they may move values themselves when they write them
    trainer = make_trainer(
        max_epochs=1, move_metrics_to_cpu=move, log_every_n_steps=1, logger=False, enable_progress_bar=False
    )
    trainer.fit(model, train_dataloaders=uneven_loader())
    assert (Tracked.moves > 0) is move
    assert trainer.callback_metrics["m_epoch"].item() == pytest.approx(0.8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("move, device_type", [(False, "cuda"), (True, "cpu")])
def test_move_metrics_to_cpu_on_cuda(make_trainer, move, device_type):
    trainer = make_trainer(accelerator="cuda", devices=1, max_epochs=1, move_metrics_to_cpu=move, log_every_n_steps=1)
    trainer.fit(
        Logs(value=lambda i: torch.tensor(float(i), device="cuda"), on_step=True, on_epoch=True),
        train_dataloaders=uneven_loader(),
    )
    for view in (trainer.callback_metrics, trainer.logged_metrics):
        assert {v.device.type for v in view.values()} == {device_type}


# -- mistakes ---------------------------------------------------------------------------------------------


def test_log_with_unknown_reduce_fx(make_trainer):
    with pytest.raises(surge.SurgeError, match="reduce_fx='median'"):
        fit_uneven(make_trainer, Logs(reduce_fx="median"))


def test_log_of_a_non_number(make_trainer):
    with pytest.raises(surge.SurgeError, match="got str"):
        fit_uneven(make_trainer, Logs(value=str))


def test_log_outside_a_step(make_trainer):
    class Early(TinyModule):
        def on_fit_start(self) -> None:
            self.log("early", 1.0)

    with pytest.raises(surge.SurgeError, match="outside a training, validation, test or predict step"):
        fit_uneven(make_trainer, Early())


def test_log_on_an_unattached_module_is_ignored(make_trainer):
    """No trainer: no error, one warning per name that says why, and nothing kept for a later run."""
    model, name = TinyModule(), f"unattached_{uuid.uuid4().hex}"  # warned once per process: a name of its own
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m).strip()), level="WARNING", format="{message}")
    try:
        model.log(name, 1.0)
        model.log_dict({name: 2.0})
    finally:
        logger.remove(sink)
    assert warnings == [f"self.log({name!r}) ignored: the module is not attached to a running Trainer"]
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, **quiet_trainer_args())
    trainer.fit(model, datamodule=TinyDataModule())
    assert name not in trainer.callback_metrics and name not in trainer.logged_metrics


def test_validate_and_test_return_epoch_metrics(make_trainer):
    model = Logs(name="v", where=("val",), reduce_fx="max")
    trainer = make_trainer()
    (result,) = trainer.validate(model, dataloaders=uneven_loader())
    assert result == {"v": 2.0}
    assert isinstance(result["v"], float)
    (result,) = trainer.test(TinyModule(), dataloaders=uneven_loader())
    assert set(result) == {"test_loss"}
    assert result["test_loss"] == pytest.approx(trainer.callback_metrics["test_loss"].item())


def test_a_failed_run_leaves_no_half_reduced_epoch_metric_behind(make_trainer):
    class FailsOnce(TinyModule):
        failed = False

        def training_step(self, batch, batch_idx):
            self.log("m", 1.0, on_step=False, on_epoch=True, reduce_fx="sum")
            if batch_idx == 3 and not self.failed:
                FailsOnce.failed = True
                raise RuntimeError("transient")
            return self._loss(batch)

    trainer = make_trainer(max_epochs=1, num_sanity_val_steps=0)
    model = FailsOnce()
    with pytest.raises(RuntimeError, match="transient"):
        trainer.fit(model, datamodule=TinyDataModule())
    trainer.fit(model, datamodule=TinyDataModule())
    assert trainer.callback_metrics["m"].item() == 8.0  # the second run's 8 batches, not 8 + the 4 before the failure


def test_log_in_on_train_epoch_end_defaults_to_per_epoch(make_trainer):
    class EpochEndLogger(TinyModule):
        def on_train_epoch_end(self):
            self.log("epoch_marker", float(self.current_epoch + 1))

    trainer = make_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(EpochEndLogger(), datamodule=TinyDataModule())
    assert float(trainer.callback_metrics["epoch_marker"]) == 2.0
    assert "epoch_marker" in trainer.logged_metrics and "epoch_marker_step" not in trainer.logged_metrics


def test_sync_dist_reduces_step_and_epoch_values_through_the_strategy(make_trainer):
    """``sync_dist=True`` hands each published value to ``strategy.reduce`` (a collective under DDP; here a
    stand-in that records its calls and multiplies by 10), with the metric's own reduction as the op."""
    calls: list[str] = []
    trainer = make_trainer(max_epochs=1, num_sanity_val_steps=0, log_every_n_steps=1)

    def reduce(tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        calls.append(op)
        return tensor * 10

    trainer.strategy.reduce = reduce  # type: ignore[method-assign]
    model = Logs(on_step=True, on_epoch=True, reduce_fx="max", sync_dist=True)
    trainer.fit(model, train_dataloaders=uneven_loader(), val_dataloaders=uneven_loader())
    assert trainer.callback_metrics["m_step"] == 20.0  # the last step's 2.0, reduced
    assert trainer.callback_metrics["m_epoch"] == 20.0  # max of 0, 1, 2, reduced once
    assert calls == ["max"] * 4  # three steps and the epoch
    assert trainer.callback_metrics["val_loss"] == trainer.logged_metrics["val_loss"]  # not synced: untouched
