"""torchmetrics objects logged with ``self.log`` during the sanity check (issue 28, item 7): as in Lightning,
``on_validation_epoch_end`` and ``on_validation_end`` read what the sanity batches put in them (no "compute
before update" warning, no empty value), nothing of it reaches the metric dicts, and they are reset before
training. The same holds after every evaluation: a logged metric object is reset once the stage's ``*_end``
handlers ran, as Lightning resets its results. Side by side with Lightning 2.6 (installed by the test set-up),
warnings recorded with ``simplefilter("always")``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

lightning: Any = pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra)
torchmetrics: Any = pytest.importorskip("torchmetrics")


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(40, 4, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def classifier(base: type) -> Any:
    """Logs an ``Accuracy`` updated by its forward (per step and epoch), a ``MeanMetric`` updated with
    ``update()`` (per epoch) and a ``MetricCollection``; records what the hooks read of them."""

    class Classifier(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            self.net = nn.Linear(4, 2)
            with torch.no_grad():
                self.net.weight.copy_(torch.randn(2, 4, generator=generator))
                self.net.bias.zero_()
            self.acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
            self.loss_mean = torchmetrics.MeanMetric()
            self.scores = torchmetrics.MetricCollection(
                {"precision": torchmetrics.classification.MulticlassPrecision(num_classes=2)}, prefix="val_"
            )
            self.seen: list[tuple[Any, ...]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def _evaluate(self, batch: Any) -> None:
            x, y = batch
            logits = self.net(x)
            self.acc(logits, y)
            self.log("acc", self.acc, on_step=True, on_epoch=True)
            self.loss_mean.update(nn.functional.cross_entropy(logits, y))
            self.log("loss_mean", self.loss_mean)
            self.scores(logits, y)
            self.log_dict(self.scores)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self._evaluate(batch)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self._evaluate(batch)

        def _read(self, hook: str) -> None:
            metrics = (self.acc, self.loss_mean, self.scores["precision"])
            counts = tuple(int(m._update_count) for m in metrics)
            values = tuple(round(float(m.compute()), 6) for m in metrics)  # as a program reads them
            self.seen.append((hook, self.trainer.sanity_checking, counts, values))

        def on_validation_epoch_end(self) -> None:
            self._read("on_validation_epoch_end")

        def on_validation_end(self) -> None:
            self._read("on_validation_end")

        def on_test_epoch_end(self) -> None:
            self._read("on_test_epoch_end")

        def on_train_start(self) -> None:  # after the sanity check: its metrics reset, nothing of it published
            counts = (int(self.acc._update_count), int(self.loss_mean._update_count))
            self.seen.append(("on_train_start", counts, dict(self.trainer.callback_metrics)))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Classifier()


def run(framework: str, root: Path) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if framework == "surge":
            surge.seed_everything(0)
            model = classifier(surge.Module)
            trainer: Any = surge.Trainer(
                default_root_dir=str(root), max_epochs=2, num_sanity_val_steps=2, **quiet_trainer_args()
            )
            trainer.fit(model, loader(), loader())
            after_fit = {name: float(value) for name, value in trainer.callback_metrics.items()}
            tested = trainer.test(model, loader())
        else:
            lightning.seed_everything(0)
            model = classifier(lightning.LightningModule)
            trainer = lightning.Trainer(
                default_root_dir=str(root), max_epochs=2, num_sanity_val_steps=2, **quiet_trainer_args()
            )
            trainer.fit(model, loader(), loader())
            after_fit = {name: float(value) for name, value in trainer.callback_metrics.items()}
            tested = trainer.test(model, loader(), verbose=False)
    about_metrics = sorted({str(w.message) for w in caught if "torchmetrics" in w.filename})
    state = {
        name: int(metric._update_count) for name, metric in model.named_modules() if hasattr(metric, "_update_count")
    }
    return {"seen": model.seen, "after_fit": after_fit, "tested": tested, "warnings": about_metrics, "state": state}


def test_metric_objects_during_the_sanity_check_and_after_each_evaluation_as_in_lightning(tmp_path: Path) -> None:
    ours, theirs = run("surge", tmp_path / "surge"), run("lightning", tmp_path / "lightning")
    assert ours == theirs
    sanity = [entry for entry in ours["seen"] if entry[1:2] == (True,)]
    assert [entry[0] for entry in sanity] == ["on_validation_epoch_end", "on_validation_end"]
    assert all(entry[2] == (2, 2, 2) for entry in sanity)  # the two sanity batches, not reset yet
    assert ("on_train_start", (0, 0), {}) in ours["seen"]  # reset before training, and nothing published
    assert ours["warnings"] == []
    assert set(ours["state"].values()) == {0}  # reset after test() too
