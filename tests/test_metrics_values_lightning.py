"""What ``self.log`` accepts as a value (issue 27, deliver 6): a tensor of more than one element is refused at
the call, naming the key and the shape and saying what to log instead, as Lightning refuses it (it used to show
in ``callback_metrics`` and be left out of every logger without a word). A one-element tensor of any shape is
that number, as in Lightning (which squeezes it). Side by side with Lightning 2.6 (installed by the test set-up).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.errors import LoggedValueError
from surge.testing import quiet_trainer_args
from surge_csv import read_metrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

lightning: Any = pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra)


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(16, 3, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def logging_model(base: type, where: str, value: Any) -> Any:
    """Logs ``value(batch_output)`` (under ``"x"``, or among good keys through ``log_dict``) in ``where``."""

    class Logs(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def _log(self, out: torch.Tensor) -> None:
            if where.endswith("log_dict"):
                self.log_dict({"fine": out.mean(), "x": value(out), "also_fine": 1.0})
            else:
                self.log("x", value(out))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            out = self.layer(batch[0])
            if where.startswith("training_step"):
                self._log(out.detach())
            return nn.functional.mse_loss(out, batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if where.startswith("validation_step"):
                self._log(self.layer(batch[0]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Logs()


@pytest.mark.parametrize(
    ("where", "value", "shape"),
    [
        ("training_step", lambda out: out.flatten()[:3], (3,)),
        ("training_step/log_dict", lambda out: out.reshape(2, 4), (2, 4)),
        ("validation_step", lambda out: out.squeeze(1), (8,)),
    ],
    ids=["vector", "log_dict-matrix", "validation"],
)
def test_a_tensor_of_several_elements_is_refused_at_the_call_as_in_lightning(
    tmp_path: Path, where: str, value: Any, shape: tuple[int, ...]
) -> None:
    reference = lightning.Trainer(
        default_root_dir=str(tmp_path), max_epochs=1, num_sanity_val_steps=0, **quiet_trainer_args()
    )
    with pytest.raises(ValueError, match=r"(?s)`self.log\(x, .*the tensor must have a single element"):
        reference.fit(logging_model(lightning.LightningModule, where, value), loader(), loader())

    seen: list[str] = []

    class Watch:
        @surge.hookimpl
        def train_batch_end(self, event: Any) -> None:
            seen.append("batch")

    trainer = surge.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=1,
        num_sanity_val_steps=0,
        callbacks=[Watch()],
        **quiet_trainer_args(),
    )
    size = 1
    for n in shape:
        size *= n
    expected = (
        rf"self.log\('x', <tensor of shape {re.escape(str(shape))}>\): a logged value is one number, and this tensor has "
        rf"{size} elements .* Log a scalar, such as its .mean\(\) or .sum\(\), or one key per element: "
        r"self.log_dict\(\{f'x_\{i\}': v for i, v in enumerate\(tensor.flatten\(\)\)\}\)"
    )
    with pytest.raises(LoggedValueError, match=expected):
        trainer.fit(logging_model(surge.Module, where, value), loader(), loader())
    assert "x" not in trainer.callback_metrics and "x" not in trainer.logged_metrics
    # refused at the first call: in training_step, before the batch ended; in validation, after the epoch's batches
    assert seen == ([] if where.startswith("training_step") else ["batch", "batch"])


def test_a_one_element_tensor_of_any_shape_is_its_number_as_in_lightning(tmp_path: Path) -> None:
    """``[1]`` and ``[1, 1]`` tensors: the same values as Lightning in the metric dicts (as 0-d tensors) and in
    the CSV rows, per step and per epoch."""

    class OneElement:
        @staticmethod
        def shapes(out: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"flat": out.mean().reshape(1), "square": out.max().reshape(1, 1), "plain": out.min()}

    def make(base: type) -> Any:
        class Logs(logging_model(base, "", None).__class__):  # type: ignore[misc]
            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                out = self.layer(batch[0])
                self.log_dict(OneElement.shapes(out.detach()), on_step=True, on_epoch=True)
                return nn.functional.mse_loss(out, batch[1])

        return Logs()

    results = []
    for framework in ("surge", "lightning"):
        root = tmp_path / framework
        if framework == "surge":
            surge.seed_everything(0)
            trainer: Any = surge.Trainer(
                default_root_dir=str(root), max_epochs=2, log_every_n_steps=1, **quiet_trainer_args(logger=True)
            )
            model = make(surge.Module)
        else:
            from lightning.pytorch.loggers import CSVLogger

            lightning.seed_everything(0)
            trainer = lightning.Trainer(
                default_root_dir=str(root),
                max_epochs=2,
                log_every_n_steps=1,
                **quiet_trainer_args(logger=CSVLogger(str(root))),
            )
            model = make(lightning.LightningModule)
        trainer.fit(model, loader())
        shapes = {name: tuple(value.shape) for name, value in trainer.callback_metrics.items()}
        values = {name: float(value) for name, value in trainer.callback_metrics.items()}
        logged = {name: float(value) for name, value in trainer.logged_metrics.items()}
        rows = read_metrics(trainer.run_dir if framework == "surge" else trainer.logger.log_dir)
        rows = [{k: v for k, v in row.items() if v is not None and k not in ("step", "epoch")} for row in rows]
        results.append((shapes, values, logged, rows))
    assert results[0] == results[1]
    shapes, values, _, rows = results[0]
    assert set(shapes.values()) == {()} and {"flat_step", "square_epoch", "plain"} <= set(values)
    assert len(rows) == 6 and all({"flat_step", "square_step", "plain_step"} <= set(row) for row in rows[:2])
