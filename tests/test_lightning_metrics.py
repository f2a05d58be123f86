"""Metrics as Lightning keeps them (issue 17): torchmetrics objects in ``self.log``/``self.log_dict``, the
metric dicts per stage, the loggers' rows (one per evaluation batch for ``on_step`` values), a run directory
only when something is written into it, and the warning for validation data without ``validation_step``.

The same module runs under Surge and, where Lightning is installed (the ``bench`` extra), under Lightning
with the same seed and data; both sides' ``callback_metrics``, ``logged_metrics`` and CSV rows are compared.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import surge
import surge.checkpoint
import torch
from loguru import logger
from surge.errors import SurgeError
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from surge_csv import read_metrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torchmetrics: Any = pytest.importorskip("torchmetrics")  # the test extra has it; it stays optional for users

EPOCHS = 2
QUIET = quiet_trainer_args()


def classifier(base: type) -> Any:
    """A Lightning-style classifier on ``base`` (``surge.Module`` or ``lightning.LightningModule``): a metric
    object logged per step and epoch, one updated with ``update()`` and logged per epoch, a
    ``MetricCollection`` through ``log_dict``, and a tensor logged per validation batch."""

    class Classifier(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
            self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
            self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
            self.val_scores = torchmetrics.MetricCollection(
                {
                    "precision": torchmetrics.classification.MulticlassPrecision(num_classes=3),
                    "recall": torchmetrics.classification.MulticlassRecall(num_classes=3),
                },
                prefix="val_",  # precision and recall share a compute group: one state, read by both
            )
            self.test_mse = torchmetrics.MeanSquaredError()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            logits = self.net(x)
            loss = nn.functional.cross_entropy(logits, y)
            self.train_acc(logits, y)
            self.log("train_acc", self.train_acc, on_step=True, on_epoch=True, prog_bar=True)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self.net(x)
            self.val_acc.update(logits, y)
            self.log("val_acc", self.val_acc)
            self.log("val_loss", nn.functional.cross_entropy(logits, y), on_step=True)
            self.val_scores(logits, y)
            self.log_dict(self.val_scores)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.test_mse(self.net(x).softmax(-1)[:, 0], (y == 0).float())
            self.log("test_mse", self.test_mse, on_step=True, on_epoch=True)

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).argmax(-1)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.5)

    return Classifier


def loader() -> DataLoader:
    """Five batches of 8 (no shuffling: neither side draws from a data RNG)."""
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(40, 4, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()), batch_size=8)


Numbers = dict[str, float]


def numbers(metrics: dict[str, torch.Tensor]) -> Numbers:
    return {name: float(value) for name, value in metrics.items()}


def run(trainer: Any, model: Any) -> dict[str, Any]:
    """fit, validate, test and predict on one trainer; the metric dicts after each, and what they return."""
    seen: dict[str, Any] = {}
    trainer.fit(model, loader(), loader())
    seen["fit"] = (numbers(trainer.callback_metrics), numbers(trainer.logged_metrics))
    seen["validate_result"] = trainer.validate(model, loader())
    seen["validate"] = (numbers(trainer.callback_metrics), numbers(trainer.logged_metrics))
    seen["test_result"] = trainer.test(model, loader())
    seen["test"] = (numbers(trainer.callback_metrics), numbers(trainer.logged_metrics))
    trainer.predict(model, loader())
    seen["predict"] = (numbers(trainer.callback_metrics), numbers(trainer.logged_metrics))
    return seen


def surge_side(root: Path) -> tuple[dict[str, Any], list[dict[str, float | None]]]:
    surge.seed_everything(0)
    model = classifier(surge.Module)()
    trainer = surge.Trainer(
        default_root_dir=str(root), max_epochs=EPOCHS, log_every_n_steps=2, **quiet_trainer_args(logger=True)
    )
    seen = run(trainer, model)
    return seen, read_metrics(trainer.run_dir)  # type: ignore[arg-type]


def lightning_side(root: Path) -> tuple[dict[str, Any], list[dict[str, float | None]]]:
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    lightning.seed_everything(0)
    model = classifier(lightning.LightningModule)()
    csv_logger = CSVLogger(str(root))
    trainer = lightning.Trainer(
        default_root_dir=str(root), max_epochs=EPOCHS, log_every_n_steps=2, **quiet_trainer_args(logger=csv_logger)
    )
    trainer.validate = _quiet(trainer.validate)  # type: ignore[method-assign]  # no results tables
    trainer.test = _quiet(trainer.test)  # type: ignore[method-assign]
    seen = run(trainer, model)
    with open(Path(csv_logger.log_dir) / "metrics.csv", newline="") as f:
        rows = [{k: float(v) if v != "" else None for k, v in row.items()} for row in csv.DictReader(f)]
    return seen, rows


def _quiet(method: Any) -> Any:
    return lambda *args: method(*args, verbose=False)


Row = tuple[int, int | None, Numbers]


def rows_of(rows: list[dict[str, float | None]]) -> list[Row]:
    """(step, epoch, metrics) per row; ``epoch`` is None where Lightning leaves it empty."""
    out = []
    for row in rows:
        values = {k: v for k, v in row.items() if v is not None and k not in ("step", "epoch")}
        epoch = row.get("epoch")
        out.append((int(row["step"]), None if epoch is None else int(epoch), values))  # type: ignore[arg-type]
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return surge_side(tmp_path_factory.mktemp("surge")), lightning_side(tmp_path_factory.mktemp("lightning"))


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    yield messages
    logger.remove(sink)


# -- side by side with Lightning -----------------------------------------------------------------------------


def test_metric_dicts_equal_lightnings_after_each_stage(both: tuple[Any, Any]) -> None:
    """torchmetrics objects per step and epoch, the MetricCollection, and the dicts holding the current stage's
    values only (predict: none): the same names and, to the bit, the same numbers as Lightning's."""
    (surge_seen, _), (lightning_seen, _) = both
    for stage in ("fit", "validate", "test", "predict"):
        assert surge_seen[stage] == lightning_seen[stage], stage
    callback, logged = surge_seen["fit"]
    assert {"train_acc", "train_acc_step", "train_acc_epoch", "val_acc", "val_precision", "val_recall"} <= set(callback)
    assert "val_loss_step" in logged and "val_loss_step" not in callback  # Lightning's rule for evaluation steps
    assert set(surge_seen["test"][0]) == {"test_mse", "test_mse_epoch"}
    assert surge_seen["predict"] == ({}, {})
    assert surge_seen["validate_result"] == lightning_seen["validate_result"]
    assert surge_seen["test_result"] == lightning_seen["test_result"]


def test_csv_rows_equal_lightnings(both: tuple[Any, Any]) -> None:
    """The loggers get what Lightning's get: every training row, a row per evaluation batch for ``on_step``
    values (steps counted per dataloader across the fit's validations, as Lightning counts them), and the
    epoch rows, with the same names and values. Surge's training and epoch rows during fit are at
    ``global_step`` (optimizer steps done), Lightning's at the index of the step just taken, one less."""
    (_, surge_rows), (_, lightning_rows) = both
    ours, theirs = rows_of(surge_rows), rows_of(lightning_rows)
    assert len(ours) == len(theirs)
    assert [values for _, _, values in ours] == [values for _, _, values in theirs]
    per_batch = [i for i, (_, _, values) in enumerate(theirs) if set(values) <= {"val_loss_step", "test_mse_step"}]
    assert len(per_batch) == 5 * EPOCHS + 5 + 5  # the fit's validations, then validate() and test()
    fit_rows = 1 + max(i for i, (_, _, values) in enumerate(theirs) if "train_acc_epoch" in values)
    for i, ((step, epoch, _), (lightning_step, lightning_epoch, _)) in enumerate(zip(ours, theirs, strict=True)):
        if i in per_batch:  # Lightning leaves their epoch empty; Surge's rows always carry one
            assert step == lightning_step and lightning_epoch is None, i
        elif i < fit_rows:  # written during fit
            assert (step - 1, epoch) == (lightning_step, lightning_epoch), i
        else:  # validate() and test() after the fit: at the global step, on both sides
            assert (step, epoch) == (lightning_step, lightning_epoch), i
    validation_steps = [step for step, _, values in ours if "val_loss_step" in values]
    assert validation_steps == list(range(5 * EPOCHS)) + list(range(5))  # validate() counts from 0 again


def two_loader_run(base: type, trainer: Any) -> tuple[Numbers, Numbers]:
    class TwoLoaders(classifier(base)):  # type: ignore[misc]
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("v", self.net(batch[0]).mean(), on_step=True)

    surge.seed_everything(0)
    trainer.fit(TwoLoaders(), loader(), [loader(), loader()])
    return numbers(trainer.callback_metrics), numbers(trainer.logged_metrics)


def test_several_validation_loaders_name_and_number_rows_as_lightning(tmp_path: Path) -> None:
    """``v_step/dataloader_idx_1`` (the suffix after the fork), and each loader's rows counted from 0."""
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path), max_epochs=1, num_sanity_val_steps=0, **quiet_trainer_args(logger=True)
    )
    ours = two_loader_run(surge.Module, trainer)
    assert {"v_epoch/dataloader_idx_1", "v_step/dataloader_idx_1"} <= set(ours[1])
    rows = rows_of(read_metrics(trainer.run_dir))  # type: ignore[arg-type]
    for idx in (0, 1):
        assert [step for step, _, values in rows if f"v_step/dataloader_idx_{idx}" in values] == list(range(5))
    lightning = installed("lightning")
    if lightning is not None:
        reference = lightning.Trainer(default_root_dir=str(tmp_path), max_epochs=1, **QUIET)
        assert two_loader_run(lightning.LightningModule, reference) == ours


def test_sanity_check_updates_of_a_metric_object_are_reset_as_in_lightning(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    results = []
    for base, trainer_class in ((surge.Module, surge.Trainer), (lightning.LightningModule, lightning.Trainer)):
        surge.seed_everything(0)
        model = classifier(base)()
        trainer = trainer_class(default_root_dir=str(tmp_path), max_epochs=1, num_sanity_val_steps=2, **QUIET)
        trainer.fit(model, loader(), loader())
        results.append(numbers(trainer.callback_metrics))
    assert results[0] == results[1]
    surge.seed_everything(0)
    without_sanity = surge.Trainer(default_root_dir=str(tmp_path), max_epochs=1, **QUIET)
    without_sanity.fit(classifier(surge.Module)(), loader(), loader())
    assert numbers(without_sanity.callback_metrics)["val_acc"] == results[0]["val_acc"]


# -- torchmetrics objects under Surge ------------------------------------------------------------------------


class Counted(torchmetrics.MeanMetric):
    """A mean that counts its computes and resets."""

    def __init__(self) -> None:
        super().__init__()
        self.computes = self.resets = 0

    def compute(self) -> torch.Tensor:
        self.computes += 1
        return super().compute()

    def reset(self) -> None:
        self.resets += 1
        super().reset()


class LogsAMetric(TinyModule):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.mean = Counted()
        self.options = options
        self.seen_in_epoch_end: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.mean.update(torch.tensor(float(batch_idx)))  # update() only: no per-step value to log
        self.log("m", self.mean, **self.options)
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        self.seen_in_epoch_end.append(float(self.mean.compute()))  # not reset yet, as in Lightning


def test_a_metric_is_computed_once_per_epoch_and_reset_after_the_epoch_end_hooks(make_trainer: Any) -> None:
    model = LogsAMetric(on_step=True, on_epoch=True)
    trainer = make_trainer(max_epochs=2, **QUIET)
    trainer.fit(model, datamodule=TinyDataModule())  # 8 batches an epoch
    assert float(trainer.callback_metrics["m"]) == float(trainer.callback_metrics["m_epoch"]) == 3.5
    assert "m_step" not in trainer.callback_metrics  # update() alone has no forward result to log per step
    assert model.seen_in_epoch_end == [3.5, 3.5]  # each epoch's own batches: reset between them
    assert model.mean.resets == 2
    assert model.mean.computes == 2  # once per epoch: the hook's read is the metric's cached value


def test_sync_dist_leaves_a_metric_to_sync_itself(make_trainer: Any) -> None:
    """A metric syncs across processes in its own ``compute()``; ``sync_dist=True`` must not reduce it again."""
    trainer = make_trainer(max_epochs=1, **QUIET)
    calls: list[str] = []

    def reduce(tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        calls.append(op)
        return tensor * 10

    trainer.strategy.reduce = reduce  # type: ignore[method-assign]
    trainer.fit(LogsAMetric(on_epoch=True, sync_dist=True), datamodule=TinyDataModule())
    assert float(trainer.callback_metrics["m"]) == 3.5 and calls == []


@pytest.mark.slow
def test_under_ddp_a_metric_syncs_itself_and_sync_dist_does_not_reduce_it_again(tmp_path: Path) -> None:
    """2 gloo processes, each validating on half the data: the metric's ``compute()`` gathers both halves,
    and its ``reduce_fx="sum", sync_dist=True`` is not applied on top (which would double it)."""
    pytest.importorskip("surge_ddp")  # the child trains with strategy="ddp"
    import _metrics_ddp_child as child
    from surge.testing import launch_workers

    done = launch_workers(Path(child.__file__), [str(tmp_path)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    net = child.net()
    net.load_state_dict(ranks[0]["weights"])
    x, y = child.data().tensors
    with torch.no_grad():
        accuracy = float((net(x).argmax(-1) == y).float().mean())  # over all 40 samples
    assert ranks[0]["metrics"]["val_acc"] == ranks[1]["metrics"]["val_acc"] == pytest.approx(accuracy, abs=1e-6)
    assert ranks[0]["metrics"]["val_loss"] != ranks[1]["metrics"]["val_loss"]  # each rank's half: not synced


def test_a_failed_batch_says_its_metric_updates_stay(make_trainer: Any, warnings: list[str]) -> None:
    """Logged tensors of a batch that raised are taken back; a metric's own state cannot be (docs/resume.md)."""

    class FailsAtBatch3(LogsAMetric):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            if batch_idx == 3:
                raise RuntimeError("boom")
            return loss

    trainer = make_trainer(max_epochs=1, **QUIET)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(FailsAtBatch3(on_epoch=True), datamodule=TinyDataModule())
    (message,) = [m for m in warnings if "torchmetrics" in m]
    assert message.startswith("the failed batch's updates of the torchmetrics objects logged as m cannot be taken")


def test_a_metric_collection_or_a_non_tensor_compute_in_self_log_says_what_to_do(make_trainer: Any) -> None:
    class LogsACollection(TinyModule):
        def __init__(self, value: Any) -> None:
            super().__init__()
            self.value = value

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.value.update(torch.tensor(1.0))
            self.log("metrics", self.value, on_epoch=True)
            return super().training_step(batch, batch_idx)

    trainer = make_trainer(max_epochs=1, **QUIET)
    collection = torchmetrics.MetricCollection({"mean": torchmetrics.MeanMetric()})
    with pytest.raises(SurgeError, match=r"self.log\('metrics'\) got a MetricCollection; .*self.log_dict"):
        trainer.fit(LogsACollection(collection), datamodule=TinyDataModule())

    class Pair(torchmetrics.MeanMetric):
        def compute(self) -> Any:
            return (super().compute(), 0)

    trainer = make_trainer(max_epochs=1, **QUIET)
    with pytest.raises(SurgeError, match=r"self.log\('metrics', Pair\): its compute\(\) returned tuple"):
        trainer.fit(LogsACollection(Pair()), datamodule=TinyDataModule())


# -- the run directory -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        {"logger": False, "enable_checkpointing": False, "max_epochs": 1},
        {"fast_dev_run": True},
    ],
    ids=["nothing-to-write", "fast_dev_run"],
)
def test_a_run_that_writes_nothing_leaves_nothing_on_disk(tmp_path: Path, flags: dict[str, Any]) -> None:
    trainer = surge.Trainer(default_root_dir=str(tmp_path), enable_progress_bar=False, **flags)
    model, data = TinyModule(), TinyDataModule()
    trainer.fit(model, datamodule=data)
    trainer.validate(model, datamodule=data)
    trainer.test(model, datamodule=data)
    assert list(tmp_path.iterdir()) == []
    lightning = installed("lightning")
    if lightning is not None and "logger" in flags:  # Lightning writes nothing either
        reference = lightning.Trainer(default_root_dir=str(tmp_path / "lightning"), **{**QUIET, **flags})
        reference.fit(classifier(lightning.LightningModule)(), loader(), loader())
        assert not (tmp_path / "lightning").exists()


def test_the_first_writer_makes_the_run_directory_with_its_plugin_set(tmp_path: Path) -> None:
    """A run that writes nothing takes no version number. The next run's checkpoint makes ``version_0`` with
    ``plugins.json`` (and the checkpoint holds the same plugin set); reading ``log_dir`` makes one too."""
    quiet = surge.Trainer(default_root_dir=str(tmp_path), logger=False, enable_checkpointing=False, max_epochs=1)
    quiet.fit(TinyModule(), datamodule=TinyDataModule())
    trainer = surge.Trainer(default_root_dir=str(tmp_path), logger=False, max_epochs=1, enable_progress_bar=False)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    run_dir = tmp_path / "surge_runs" / "version_0"
    assert trainer.run_dir == str(run_dir)
    assert json.loads((run_dir / "plugins.json").read_text()) == trainer.plugin_set()
    (checkpoint,) = (run_dir / "checkpoints").glob("*.ckpt")
    assert surge.checkpoint.load(str(checkpoint))["plugin_set"] == trainer.plugin_set()
    assert not (run_dir / "metrics.csv").exists()
    assert quiet.log_dir == str(tmp_path / "surge_runs" / "version_1")  # asked for: made, with its plugin set
    assert json.loads((tmp_path / "surge_runs/version_1/plugins.json").read_text()) == quiet.plugin_set()


def installed(name: str) -> Any:
    """The module ``name`` when it is installed (Lightning: the ``bench`` extra), else None."""
    return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None


# -- validation data without validation_step -----------------------------------------------------------------


class NoValidationStep(TinyModule):
    validation_step = surge.Module.validation_step  # type: ignore[assignment]


class OwnValData(NoValidationStep):
    def train_dataloader(self) -> DataLoader:
        data = TinyDataModule()
        data.setup("fit")
        return data.train_dataloader()

    def val_dataloader(self) -> DataLoader:
        raise AssertionError("the warning must not build the loader")


@pytest.mark.parametrize("where", ["datamodule", "loaders", "module"])
def test_validation_data_without_validation_step_warns(
    make_trainer: Any, warnings: list[str], where: str, tmp_path: Path
) -> None:
    trainer = make_trainer(max_epochs=1, **QUIET)
    if where == "datamodule":
        trainer.fit(NoValidationStep(), datamodule=TinyDataModule())
        source = "TinyDataModule.val_dataloader()"
    elif where == "loaders":
        data = TinyDataModule()
        data.setup("fit")
        trainer.fit(NoValidationStep(), data.train_dataloader(), data.val_dataloader())
        source = "val_dataloaders"
    else:
        trainer.fit(OwnValData())
        source = "OwnValData.val_dataloader()"
    expected = f"fit() has validation data ({source}) but {'OwnValData' if where == 'module' else 'NoValidationStep'}"
    (message,) = [m for m in warnings if "validation_step" in m]
    assert message.startswith(expected) and "validation is skipped" in message
    assert "val_loss" not in trainer.callback_metrics
    lightning = installed("lightning")
    if lightning is not None and where == "datamodule":  # Lightning warns for a DataModule's too

        class Data(lightning.LightningDataModule):  # type: ignore[name-defined]
            def train_dataloader(self) -> DataLoader:
                return loader()

            def val_dataloader(self) -> DataLoader:
                return loader()

        class NoValidation(classifier(lightning.LightningModule)):  # type: ignore[misc]
            validation_step = lightning.LightningModule.validation_step

        reference = lightning.Trainer(default_root_dir=str(tmp_path), max_epochs=1, **QUIET)
        with pytest.warns(UserWarning, match="You passed in a `val_dataloader` but have no `validation_step`"):
            reference.fit(NoValidation(), datamodule=Data())
