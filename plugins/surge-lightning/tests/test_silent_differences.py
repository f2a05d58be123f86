"""Differences from Lightning 2.6 that were silent (a ported program behaved otherwise, with no word), side by side
with Lightning: each test runs one program under both APIs and compares what it saw. docs/porting.md says what
matches and what is still a (documented) difference."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge_lightning.pytorch as spl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (`make test` installs it)")

FRAMEWORKS = {"lightning": pl, "surge": spl}
QUIET = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def _loader(n: int = 12) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=4)


def _regressor(L: Any, **hooks: Callable[..., Any]) -> Any:
    """A LightningModule of ``L`` whose training and validation steps fit a line, with ``hooks`` as methods."""

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 1)
            self.seen: list[Any] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for name, fn in hooks.items():
        setattr(Regressor, name, fn)
    return Regressor()


def _both(program: Callable[[Any, Path], Any], tmp_path: Path) -> dict[str, Any]:
    """What ``program(framework, root)`` returns under each API, each run in a directory of its own."""
    out, here = {}, Path.cwd()
    for name, framework in FRAMEWORKS.items():
        root = tmp_path / name
        root.mkdir()
        os.chdir(root)
        try:
            out[name] = program(framework, root)
        finally:
            os.chdir(here)
    return out


# -- 1. Lightning's no-op base hooks, reachable through super() ----------------------------------------------------

MODULE_HOOKS: dict[str, tuple[Any, ...]] = {
    "prepare_data": (),
    "setup": ("fit",),
    "teardown": ("fit",),
    "on_fit_start": (),
    "on_fit_end": (),
    "on_train_start": (),
    "on_train_end": (),
    "on_validation_start": (),
    "on_validation_end": (),
    "on_test_start": (),
    "on_test_end": (),
    "on_predict_start": (),
    "on_predict_end": (),
    "on_train_batch_start": (None, 0),
    "on_train_batch_end": (None, None, 0),
    "on_validation_batch_start": (None, 0),
    "on_validation_batch_end": (None, None, 0),
    "on_test_batch_start": (None, 0),
    "on_test_batch_end": (None, None, 0),
    "on_predict_batch_start": (None, 0),
    "on_predict_batch_end": (None, None, 0),
    "on_train_epoch_start": (),
    "on_train_epoch_end": (),
    "on_validation_epoch_start": (),
    "on_validation_epoch_end": (),
    "on_test_epoch_start": (),
    "on_test_epoch_end": (),
    "on_predict_epoch_start": (),
    "on_predict_epoch_end": (),
    "on_before_zero_grad": (None,),
    "on_before_backward": (None,),
    "on_after_backward": (),
    "on_before_optimizer_step": (None,),
    "on_save_checkpoint": ({},),
    "on_load_checkpoint": ({},),
}
"""Lightning's LightningModule hooks that Surge calls, with arguments to call them with."""


@pytest.mark.parametrize("hook", sorted(MODULE_HOOKS))
def test_each_module_hook_has_lightnings_no_op_base(hook: str) -> None:
    for L in FRAMEWORKS.values():
        assert getattr(L.LightningModule, hook)(_regressor(L), *MODULE_HOOKS[hook]) is None, L.__name__


def test_overrides_calling_super_run_as_in_lightning(tmp_path: Path) -> None:
    def program(L: Any, root: Path) -> list[str]:
        def on_train_epoch_end(self: Any) -> None:
            super(type(self), self).on_train_epoch_end()
            self.seen.append(f"epoch {self.current_epoch}")

        def on_train_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            super(type(self), self).on_train_batch_end(outputs, batch, batch_idx)
            self.seen.append(f"batch {batch_idx}")

        def on_fit_start(self: Any) -> None:
            super(type(self), self).on_fit_start()
            self.seen.append("fit")

        model = _regressor(
            L, on_train_epoch_end=on_train_epoch_end, on_train_batch_end=on_train_batch_end, on_fit_start=on_fit_start
        )
        L.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0, **QUIET).fit(model, _loader())
        return model.seen

    seen = _both(program, tmp_path)
    assert (
        seen["surge"] == seen["lightning"] == ["fit", "batch 0", "batch 1", "epoch 0", "batch 0", "batch 1", "epoch 1"]
    )


def test_the_no_op_bases_are_not_overrides() -> None:
    """Lightning's no-op hooks are not overrides (tests/test_lightning_no_op_hooks.py: and handle no event)."""
    import surge

    model = _regressor(spl)
    assert not surge.overrides(model, surge.Module, "prepare_data")
    assert not surge.overrides(model, surge.Module, "on_fit_start")

    def on_fit_start(self: Any) -> None: ...

    assert surge.overrides(_regressor(spl, on_fit_start=on_fit_start), surge.Module, "on_fit_start")


# -- 2. on_train_batch_end's outputs --------------------------------------------------------------------------------


def _summary(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.requires_grad, round(value.item(), 6))
    if isinstance(value, dict):
        return {k: _summary(v) for k, v in sorted(value.items())}
    return value


@pytest.mark.parametrize("returns", ["tensor", "dict", "none", "accumulated", "manual"])
def test_on_train_batch_end_gets_lightnings_outputs(tmp_path: Path, returns: str) -> None:
    """The Module's hook and a Callback's get the same: ``{"loss": detached}`` for a tensor (divided by
    ``accumulate_grad_batches`` in automatic optimization), the dict with its loss detached, ``{}`` for ``None``."""

    def program(L: Any, root: Path) -> list[Any]:
        def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            if returns == "manual":
                self.manual_backward(loss)
                self.optimizers().step()
                self.optimizers().zero_grad()
            if returns == "dict":
                return {"loss": loss, "extra": batch_idx}
            return None if returns == "none" and batch_idx == 1 else loss

        def on_train_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.seen.append(("module", _summary(outputs)))

        class Recorder(L.Callback):
            def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, i: int) -> None:
                pl_module.seen.append(("callback", _summary(outputs)))

        model = _regressor(L, training_step=training_step, on_train_batch_end=on_train_batch_end)
        model.automatic_optimization = returns != "manual"
        accumulate = 2 if returns == "accumulated" else 1
        trainer = L.Trainer(
            max_epochs=1, limit_train_batches=2, accumulate_grad_batches=accumulate, callbacks=[Recorder()], **QUIET
        )
        trainer.fit(model, _loader())
        return model.seen

    seen = _both(program, tmp_path)
    assert seen["surge"] == seen["lightning"]
    assert seen["surge"][1][0] == "module" and isinstance(seen["surge"][1][1], dict)


# -- 3. prepare_data with a DataModule ------------------------------------------------------------------------------


def test_prepare_data_of_the_datamodule_then_the_module(tmp_path: Path) -> None:
    def program(L: Any, root: Path) -> list[str]:
        calls: list[str] = []

        class Data(L.LightningDataModule):
            def prepare_data(self) -> None:
                calls.append("datamodule")

            def train_dataloader(self) -> DataLoader:
                return _loader()

        def prepare_data(self: Any) -> None:
            calls.append("module")

        model = _regressor(L, prepare_data=prepare_data)
        L.Trainer(max_epochs=1, limit_train_batches=1, **QUIET).fit(model, datamodule=Data())
        return calls

    calls = _both(program, tmp_path)
    assert calls["surge"] == calls["lightning"] == ["datamodule", "module"]


# -- 4. the evaluation stages' loaders: Lightning's shape --------------------------------------------------------


def _shape(loaders: Any) -> Any:
    """A stage's loaders as a program sees them: a loader's batch count, a list of them, or ``None``."""
    if isinstance(loaders, list):
        return [_shape(loader) for loader in loaders]
    return None if loaders is None else (type(loaders).__name__, len(loaders))


def test_a_stage_s_loaders_have_lightnings_shape(tmp_path: Path) -> None:
    """One loader given is the loader itself, several a list, as Lightning's ``CombinedLoader.iterables``."""

    def program(L: Any, root: Path) -> dict[str, Any]:
        model = _regressor(
            L,
            validation_step=lambda self, batch, batch_idx, dataloader_idx=0: None,
            test_step=lambda self, batch, batch_idx: None,
            predict_step=lambda self, batch, batch_idx, dataloader_idx=0: 0,
        )
        trainer = L.Trainer(max_epochs=1, limit_train_batches=1, **QUIET)
        trainer.fit(model, _loader(8), val_dataloaders=_loader(12))
        seen = {"fit": _shape(trainer.val_dataloaders)}
        trainer.validate(model, [_loader(12), _loader(4)], verbose=False)
        seen["validate"] = _shape(trainer.val_dataloaders)
        trainer.test(model, _loader(4), verbose=False)
        seen["test"] = _shape(trainer.test_dataloaders)
        trainer.predict(model, [_loader(8), _loader(4)])
        seen["predict"] = _shape(trainer.predict_dataloaders)
        return seen

    seen = _both(program, tmp_path)
    assert (
        seen["surge"]
        == seen["lightning"]
        == {
            "fit": ("DataLoader", 3),
            "validate": [("DataLoader", 3), ("DataLoader", 1)],
            "test": ("DataLoader", 1),
            "predict": [("DataLoader", 2), ("DataLoader", 1)],
        }
    )


# -- 5. callback_metrics during the sanity check -------------------------------------------------------------------


def test_callback_metrics_hold_the_sanity_check_s_values_until_it_ends(tmp_path: Path) -> None:
    """As Lightning's: empty during the check's batches, its epoch values from ``on_validation_epoch_end`` through
    ``on_sanity_check_end`` (where ``sanity_checking`` is still true), gone when training starts; the loggers never
    get them."""

    def program(L: Any, root: Path) -> list[Any]:
        def record(model: Any, where: str) -> None:
            metrics = model.trainer.callback_metrics
            model.seen.append(
                (where, model.trainer.sanity_checking, {k: round(float(v), 5) for k, v in metrics.items()})
            )

        def validation_step(self: Any, batch: Any, batch_idx: int) -> None:
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log("val_loss", loss)
            self.log("val_step", loss, on_step=True, on_epoch=False)

        hooks = {
            "validation_step": validation_step,
            "on_validation_batch_end": lambda self, outputs, batch, batch_idx, dataloader_idx=0: record(
                self, f"batch {batch_idx}"
            ),
            "on_validation_epoch_end": lambda self: record(self, "validation_epoch_end"),
            "on_validation_end": lambda self: record(self, "validation_end"),
            "on_train_start": lambda self: record(self, "train_start"),
        }

        class Checks(L.Callback):
            def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
                record(pl_module, "sanity_check_end")

        model = _regressor(L, **hooks)
        trainer = L.Trainer(
            max_epochs=1, limit_train_batches=1, limit_val_batches=2, num_sanity_val_steps=2, callbacks=[Checks()],
            **{**QUIET, "logger": L.loggers.CSVLogger(str(root))},
        )  # fmt: skip
        trainer.fit(model, _loader(), _loader())
        rows = (Path(trainer.logger.log_dir) / "metrics.csv").read_text().splitlines()
        return [*model.seen, len(rows)]

    seen = _both(program, tmp_path)
    assert seen["surge"] == seen["lightning"]
    assert seen["surge"][4][0] == "sanity_check_end" and seen["surge"][4][1:] == seen["surge"][2][1:]
    assert "val_loss" in seen["surge"][2][2]


# -- 6. what a resumed fit restores, in which order: a documented difference, said once ----------------------------


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lightning Trainer's once-per-process warnings, as in a new process."""
    from surge_lightning.pytorch.trainer import trainer

    monkeypatch.setattr(trainer, "_WARNED", set())


def test_a_resumed_fit_restores_in_the_documented_order_and_says_so(tmp_path: Path, fresh_warnings: None) -> None:
    def program(L: Any, root: Path) -> tuple[list[str], list[str]]:
        calls: list[str] = []

        class Data(L.LightningDataModule):
            def train_dataloader(self) -> DataLoader:
                calls.append("datamodule.train_dataloader")
                return _loader()

            def state_dict(self) -> dict[str, int]:
                return {"seen": 1}

            def load_state_dict(self, state: dict[str, Any]) -> None:
                calls.append("datamodule.load_state_dict")

        class Stateful(L.Callback):
            def state_dict(self) -> dict[str, int]:
                return {"seen": 1}

            def load_state_dict(self, state: dict[str, Any]) -> None:
                calls.append("callback.load_state_dict")

        def on_load_checkpoint(self: Any, checkpoint: dict[str, Any]) -> None:
            calls.append("module.on_load_checkpoint")

        first = L.Trainer(max_epochs=1, limit_train_batches=2, callbacks=[Stateful()], **QUIET)
        first.fit(_regressor(L), datamodule=Data())
        path = str(root / "resume.ckpt")
        first.save_checkpoint(path)
        calls.clear()
        with pytest.warns() as caught:
            warnings.warn("a marker, so that the block records warnings under either API", UserWarning, stacklevel=1)
            L.Trainer(max_epochs=2, limit_train_batches=2, callbacks=[Stateful()], **QUIET).fit(
                _regressor(L, on_load_checkpoint=on_load_checkpoint), datamodule=Data(), ckpt_path=path
            )
        return calls, [str(w.message) for w in caught if "load_state_dict after" in str(w.message)]

    (theirs, _), (ours, said) = _both(program, tmp_path).values()
    assert theirs == [
        "module.on_load_checkpoint",
        "datamodule.load_state_dict",
        "callback.load_state_dict",
        "datamodule.train_dataloader",
    ]
    assert ours == [  # docs/porting.md, Hook order
        "datamodule.train_dataloader",
        "callback.load_state_dict",
        "datamodule.load_state_dict",
        "module.on_load_checkpoint",
    ]
    assert len(said) == 1 and "Data.load_state_dict" in said[0] and "on_load_checkpoint" in said[0]


# -- 7. an epoch-interval scheduler's step: a documented difference, said once -------------------------------------


def test_an_epoch_scheduler_steps_at_the_documented_point_and_says_so(tmp_path: Path, fresh_warnings: None) -> None:
    def program(L: Any, root: Path) -> tuple[list[tuple[str, float]], list[str]]:
        def record(model: Any, where: str) -> None:
            model.seen.append((where, model.optimizers().param_groups[0]["lr"]))

        def configure_optimizers(self: Any) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)}

        model = _regressor(
            L,
            configure_optimizers=configure_optimizers,
            on_train_epoch_start=lambda self: record(self, "train_epoch_start"),
            on_train_batch_end=lambda self, outputs, batch, batch_idx: record(self, f"train_batch_end {batch_idx}"),
            on_validation_start=lambda self: record(self, "validation_start"),
            on_train_epoch_end=lambda self: record(self, "train_epoch_end"),
        )
        trainer = L.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, **QUIET)
        with pytest.warns() as caught:
            warnings.warn("a marker, so that the block records warnings under either API", UserWarning, stacklevel=1)
            trainer.fit(model, _loader(), _loader())
        return model.seen, [str(w.message) for w in caught if "interval 'epoch'" in str(w.message)]

    (theirs, _), (ours, said) = _both(program, tmp_path).values()
    hooks = ["train_epoch_start", "train_batch_end 0", "train_batch_end 1", "validation_start", "train_epoch_end"]
    # Lightning's hooks after the epoch's last step read the next epoch's rate; Surge's the epoch's own
    assert theirs == list(zip(hooks * 2, [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25], strict=True))
    assert ours == list(zip(hooks * 2, [1.0] * 5 + [0.5] * 5, strict=True))  # docs/porting.md, Hook order
    assert len(said) == 1 and "Regressor.on_train_batch_end" in said[0] and "on_train_epoch_start" in said[0]
