"""The LightningModule hooks Lightning's loops call that Surge calls too, side by side with Lightning 2.6: one
Module overriding every such hook with Lightning's signature records each call (what it got, and the epoch and step
it came at) through fit, validate from a checkpoint, test and predict; each hook's test compares its calls. The
inventory (``surge_lightning/inventory/lightning.toml``) names these tests for the hooks it classifies as
implemented. (The hooks of the Module's steps, ``optimizer_step`` and the others, have tests/test_module_steps.py.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as lightning
import pytest
import surge_lightning.pytorch as surge_lightning
import torch
from surge_lightning import inventory
from torch.utils.data import DataLoader, TensorDataset

FRAMEWORKS = {"lightning": lightning, "surge": surge_lightning}


def _summary(value: Any) -> Any:
    """What a hook got, comparable across the two frameworks."""
    if isinstance(value, torch.Tensor):
        return ["Tensor", list(value.shape)]
    if isinstance(value, dict):
        return {k: _summary(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_summary(v) for v in value]
    if isinstance(value, torch.optim.Optimizer):
        return type(value).__name__
    return getattr(value, "value", value)  # Lightning's stage is a string enum equal to its value


def _program(framework: Any, root: Path) -> list[tuple[Any, ...]]:
    """fit (a sanity check of one batch, two epochs of three, validation of two, a checkpoint per epoch),
    validate from the last checkpoint, test and predict, each on the Module's own loaders."""
    L = framework
    run = ["fit"]

    def loader() -> DataLoader:
        x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)
            self.calls: list[tuple[Any, ...]] = []

        def _record(self, hook: str, *args: Any) -> None:
            try:
                trainer = self.trainer
            except Exception:  # not attached: both raise
                trainer = None
            where = (run[0], trainer.current_epoch, trainer.global_step, trainer.sanity_checking) if trainer else None
            self.calls.append((hook, where, *map(_summary, args)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
            self.log("val_loss", loss)
            return loss

        def test_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self(batch[0]), batch[1])}

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

        # -- the hooks --------------------------------------------------------------------------------------------
        def prepare_data(self) -> None:
            self._record("prepare_data")

        def setup(self, stage: str) -> None:
            self._record("setup", stage)

        def teardown(self, stage: str) -> None:
            self._record("teardown", stage)

        def train_dataloader(self) -> DataLoader:
            self._record("train_dataloader")
            return loader()

        def val_dataloader(self) -> DataLoader:
            self._record("val_dataloader")
            return loader()

        def test_dataloader(self) -> DataLoader:
            self._record("test_dataloader")
            return loader()

        def predict_dataloader(self) -> DataLoader:
            self._record("predict_dataloader")
            return loader()

        def on_fit_start(self) -> None:
            self._record("on_fit_start")

        def on_fit_end(self) -> None:
            self._record("on_fit_end")

        def on_train_start(self) -> None:
            self._record("on_train_start")

        def on_train_end(self) -> None:
            self._record("on_train_end")

        def on_train_epoch_start(self) -> None:
            self._record("on_train_epoch_start")

        def on_train_epoch_end(self) -> None:
            self._record("on_train_epoch_end")

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            self._record("on_train_batch_start", batch, batch_idx)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._record("on_train_batch_end", outputs, batch, batch_idx)

        def on_before_backward(self, loss: torch.Tensor) -> None:
            self._record("on_before_backward", loss)

        def on_after_backward(self) -> None:
            self._record("on_after_backward")

        def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
            self._record("on_before_optimizer_step", optimizer)

        def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
            self._record("on_before_zero_grad", optimizer)

        def on_validation_start(self) -> None:
            self._record("on_validation_start")

        def on_validation_end(self) -> None:
            self._record("on_validation_end")

        def on_validation_epoch_start(self) -> None:
            self._record("on_validation_epoch_start")

        def on_validation_epoch_end(self) -> None:
            self._record("on_validation_epoch_end")

        def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_validation_batch_start", batch, batch_idx, dataloader_idx)

        def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_validation_batch_end", outputs, batch, batch_idx, dataloader_idx)

        def on_test_start(self) -> None:
            self._record("on_test_start")

        def on_test_end(self) -> None:
            self._record("on_test_end")

        def on_test_epoch_start(self) -> None:
            self._record("on_test_epoch_start")

        def on_test_epoch_end(self) -> None:
            self._record("on_test_epoch_end")

        def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_test_batch_start", batch, batch_idx, dataloader_idx)

        def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_test_batch_end", outputs, batch, batch_idx, dataloader_idx)

        def on_predict_start(self) -> None:
            self._record("on_predict_start")

        def on_predict_end(self) -> None:
            self._record("on_predict_end")

        def on_predict_epoch_start(self) -> None:
            self._record("on_predict_epoch_start")

        def on_predict_epoch_end(self) -> None:
            self._record("on_predict_epoch_end")

        def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_predict_batch_start", batch, batch_idx, dataloader_idx)

        def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._record("on_predict_batch_end", outputs, batch, batch_idx, dataloader_idx)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["mine"] = self.global_step
            self._record("on_save_checkpoint", checkpoint["mine"])

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self._record("on_load_checkpoint", checkpoint["mine"])

    trainer = L.Trainer(
        max_epochs=2, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=1, accelerator="cpu",
        devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
    )  # fmt: skip
    model = Model()
    trainer.fit(model)
    run[0] = "validate"
    trainer.validate(model, ckpt_path=trainer.checkpoint_callback.best_model_path, verbose=False)
    run[0] = "test"
    trainer.test(model, verbose=False)
    run[0] = "predict"
    trainer.predict(model)
    return model.calls


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    here = Path.cwd()
    for name, framework in FRAMEWORKS.items():
        root = tmp_path_factory.mktemp(name)
        os.chdir(root)
        try:
            out[name] = _program(framework, root)
        finally:
            os.chdir(here)
    return out


HOOKS = sorted(
    name
    for name, entry in inventory.load().sections["lightning.pytorch.LightningModule"].items()
    if any("test_module_hook_as_lightning" in test for test in entry.tests)
)
"""The hooks the inventory says these tests compare."""

KNOWN = {
    "val_dataloader": lambda call: (*call[:1], call[1][:3]),
}
"""What Surge does otherwise than Lightning, left out of the comparison (each has `differs` in the inventory):
whether ``val_dataloader`` is called inside the sanity check."""


def test_every_hook_the_inventory_names_is_compared() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    defined = {name for name in HOOKS if f'self._record("{name}"' in source}
    assert HOOKS and defined == set(HOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("hook", HOOKS)
def test_module_hook_as_lightning(calls: dict[str, list[tuple[Any, ...]]], hook: str) -> None:
    ours = [c for c in calls["surge"] if c[0] == hook]
    theirs = [c for c in calls["lightning"] if c[0] == hook]
    if hook in KNOWN:
        assert inventory.load().entry("lightning.pytorch.LightningModule", hook).differs
        ours, theirs = [KNOWN[hook](c) for c in ours], [KNOWN[hook](c) for c in theirs]
    assert ours, f"{hook} was not called"
    assert ours == theirs
