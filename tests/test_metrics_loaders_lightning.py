"""``validate()``/``test()`` with several loaders (issue 25, item 3): which result dict a logged value goes to.

Lightning's result collection files a value under the loader that was running when it was logged, whatever
its name: dict *i* holds loader *i*'s values (names with the ``/dataloader_idx_i`` suffix and names logged with
``add_dataloader_idx=False``, such as ``f"acc_{dataloader_idx}"``), and every dict holds what was logged outside
the loaders' batches (``on_validation_epoch_end``/``on_test_epoch_end``). One name logged with
``add_dataloader_idx=False`` from two loaders is refused. The same programs run under Surge and Lightning 2.6
(installed by the test set-up) and what they return and keep is compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.errors import SurgeError
from surge.testing import quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

lightning: Any = pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra)
torchmetrics: Any = pytest.importorskip("torchmetrics")


def loader(seed: int, size: int = 24) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 4, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def loaders() -> list[DataLoader]:
    return [loader(1), loader(2, size=20), loader(3, size=16)]


def numbers(metrics: Any) -> dict[str, float]:
    return {name: float(value) for name, value in metrics.items()}


def evaluator(base: type, same_name_everywhere: bool = False) -> Any:
    """Logs, in ``validation_step`` and ``test_step`` alike: a per-loader name (``add_dataloader_idx=False``),
    per step and epoch; a name on every loader with the suffix; a name only loader 1 logs, without the suffix;
    a torchmetrics object per loader under a per-loader name; and in the epoch-end hooks, a value of no loader.
    ``same_name_everywhere`` adds one name logged from every loader with ``add_dataloader_idx=False``."""

    class Evaluator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            self.net = nn.Linear(4, 2)
            with torch.no_grad():
                self.net.weight.copy_(torch.randn(2, 4, generator=generator))
                self.net.bias.zero_()
            self.accuracies = nn.ModuleList(torchmetrics.Accuracy(task="multiclass", num_classes=2) for _ in range(3))

        def evaluate(self, batch: Any, dataloader_idx: int) -> None:
            x, y = batch
            logits = self.net(x)
            loss = nn.functional.cross_entropy(logits, y)
            self.log(f"loss_{dataloader_idx}", loss, on_step=True, on_epoch=True, add_dataloader_idx=False)
            self.log("mean_logit", logits.mean())  # suffixed: mean_logit/dataloader_idx_i
            if dataloader_idx == 1:
                self.log("only_one", logits.max(), reduce_fx="max", add_dataloader_idx=False)
            accuracy = self.accuracies[dataloader_idx]
            accuracy(logits, y)
            self.log(f"acc_{dataloader_idx}", accuracy, add_dataloader_idx=False)
            if same_name_everywhere:
                self.log("loss", loss, add_dataloader_idx=False)

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.evaluate(batch, dataloader_idx)

        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.evaluate(batch, dataloader_idx)

        def on_validation_epoch_end(self) -> None:
            self.log("weight_norm", self.net.weight.norm())

        def on_test_epoch_end(self) -> None:
            self.log("weight_norm", self.net.weight.norm())
            self.log("bias_sum", self.net.bias.sum(), add_dataloader_idx=False)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Evaluator()


def run(framework: str, root: Path, **options: Any) -> dict[str, Any]:
    if framework == "surge":
        surge.seed_everything(0)
        trainer: Any = surge.Trainer(default_root_dir=str(root), max_epochs=1, **quiet_trainer_args())
        model = evaluator(surge.Module, **options)
        quiet: dict[str, Any] = {}
    else:
        lightning.seed_everything(0)
        trainer = lightning.Trainer(default_root_dir=str(root), max_epochs=1, **quiet_trainer_args())
        model = evaluator(lightning.LightningModule, **options)
        quiet = {"verbose": False}
    seen: dict[str, Any] = {}
    seen["validate"] = trainer.validate(model, loaders(), **quiet)
    seen["validate_metrics"] = numbers(trainer.callback_metrics), numbers(trainer.logged_metrics)
    seen["test"] = trainer.test(model, loaders(), **quiet)
    seen["test_metrics"] = numbers(trainer.callback_metrics), numbers(trainer.logged_metrics)
    trainer.fit(model, loader(4), loaders())
    seen["fit_metrics"] = numbers(trainer.callback_metrics), numbers(trainer.logged_metrics)
    return seen


def test_each_result_dict_holds_its_loaders_values_as_in_lightning(tmp_path: Path) -> None:
    ours, theirs = run("surge", tmp_path / "surge"), run("lightning", tmp_path / "lightning")
    assert ours == theirs
    validate, test = ours["validate"], ours["test"]
    assert set(validate[1]) == {
        "loss_1_epoch",
        "mean_logit/dataloader_idx_1",
        "only_one",
        "acc_1",
        "weight_norm",
    }
    assert set(test[0]) == {"loss_0_epoch", "mean_logit/dataloader_idx_0", "acc_0", "weight_norm", "bias_sum"}
    assert test[2]["weight_norm"] == test[0]["weight_norm"]  # logged in on_test_epoch_end: in every dict


def test_one_name_from_several_loaders_without_the_suffix_is_refused_as_in_lightning(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"self.log\(loss, \.\.\.\)` twice in `validation_step`"):
        lightning.Trainer(default_root_dir=str(tmp_path), **quiet_trainer_args()).validate(
            evaluator(lightning.LightningModule, same_name_everywhere=True), loaders(), verbose=False
        )
    trainer = surge.Trainer(default_root_dir=str(tmp_path), **quiet_trainer_args())
    message = (
        r"self.log\('loss', \.\.\., add_dataloader_idx=False\) during validation on dataloader 1: dataloader 0 "
        r"logged 'loss' too, .* Log one name per dataloader \(f'loss_\{dataloader_idx\}'\), or leave "
        r"add_dataloader_idx=True"
    )
    with pytest.raises(SurgeError, match=message):
        trainer.validate(evaluator(surge.Module, same_name_everywhere=True), loaders())
