"""surge-lightning on the public plugin contract: what runs with it installed, what the core refuses without it
(naming ``pip install surge-lightning``), the Lightning 1.x epoch-end plugin joining only the runs whose Module
asks for it, and the ``surge.compat`` shim. "Without it" is a discovery environment with the installed plugins
hidden (``PluginEnv.hide_installed``), as in a process where only the core and surge-devices are installed."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_lightning.pytorch as pl
import torch
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args

QUIET = quiet_trainer_args()


def _refused(tmp_path: Path, fit: Any = None, **options: Any) -> str:
    with pytest.raises(surge.ConfigError) as info:
        trainer = surge.Trainer(default_root_dir=str(tmp_path), **options)
        if fit is not None:
            trainer.fit(fit, datamodule=TinyDataModule())
    assert not list(tmp_path.iterdir())  # refused before anything was written
    return str(info.value)


# -- Lightning 1.x Trainer arguments --------------------------------------------------------------------------------


def test_without_it_a_lightning_1x_argument_is_refused_naming_the_spelling_and_the_distribution(
    plugin_env: Any, tmp_path: Path
) -> None:
    plugin_env.hide_installed()
    message = _refused(tmp_path, gpus=2, resume_from_checkpoint="last.ckpt", max_epochs=1)
    assert "trainer.gpus: is a Lightning 1.x argument (Lightning 2 removed it); write accelerator='gpu'" in message
    assert "trainer.resume_from_checkpoint:" in message and "trainer.fit(model, ckpt_path=<path>)" in message
    assert message.count("`pip install surge-lightning`") == 2


def test_with_it_the_arguments_are_its_translators(tmp_path: Path) -> None:
    trainer = surge.Trainer(gpus=0, progress_bar_refresh_rate=0, default_root_dir=str(tmp_path), **QUIET)
    assert trainer.config.accelerator == "cpu" and trainer.config.enable_progress_bar is False
    assert "lightning" not in trainer.plugin_names  # nothing left for its object to serve: not active


def test_a_blocked_translator_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "lightning")
    message = _refused(tmp_path, gpus=2)
    assert "plugin 'lightning' (distribution surge-lightning" in message and "SURGE_DISABLE_PLUGINS" in message


def test_what_no_trainer_argument_carries_is_the_lightning_plugins_settings(tmp_path: Path) -> None:
    trainer = surge.Trainer(truncated_bptt_steps=4, default_root_dir=str(tmp_path), **QUIET)
    assert trainer.config.plugins == [{"lightning": {"truncated_bptt_steps": 4}}]
    assert trainer.plugin("lightning").truncated_bptt_steps == 4  # type: ignore[attr-defined]


# -- Lightning 1.x epoch-end hooks ----------------------------------------------------------------------------------


class OldStyle(TinyModule):
    def training_epoch_end(self, outputs: list[Any]) -> None:
        self.outputs = outputs


def test_without_it_a_module_with_a_1x_epoch_end_hook_is_refused(plugin_env: Any, tmp_path: Path) -> None:
    plugin_env.hide_installed()
    message = _refused(tmp_path, fit=OldStyle(), max_epochs=1, **QUIET)
    assert "OldStyle.training_epoch_end: is a Lightning 1.x hook that Lightning 2 removed" in message
    assert "write on_train_epoch_end(self) instead" in message and "`pip install surge-lightning` runs it" in message


def test_the_epoch_end_plugin_joins_only_the_runs_that_need_it(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    orders = {event: trainer.event_order(event) for event in trainer.event_names}
    assert not any("epoch_end_outputs" in names for names in orders.values())  # no handler, no cost per step

    model = OldStyle()
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(model, datamodule=TinyDataModule())
    assert len(model.outputs) == 8 and set(model.outputs[0]) == {"loss"}
    assert trainer.event_order("train_batch_end") == ["epoch_end_outputs", "module"]
    assert trainer.event_order("train_epoch_end")[0] == "epoch_end_outputs"  # first, where the seed called it
    assert "epoch_end_outputs" not in trainer.event_order("validation_batch_end")  # the Module has no such hook
    assert all(type(c).__name__ != "EpochEndOutputs" for c in trainer.callbacks)  # not one of the user's callbacks

    plain = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    plain.validate(model, datamodule=TinyDataModule(), verbose=False)  # the same Module, a stage without its hook
    assert "epoch_end_outputs" not in plain.event_order("validation_batch_end")


# -- objects passed in ----------------------------------------------------------------------------------------------


class DuckTyped:
    """Lightning's hooks without the base class."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epochs.append(trainer.current_epoch)


class Subclassed(pl.Callback):
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epochs.append(trainer.current_epoch)


def test_without_it_a_duck_typed_callback_is_refused_and_a_subclass_still_runs(plugin_env: Any, tmp_path: Path) -> None:
    plugin_env.hide_installed()
    message = _refused(tmp_path, callbacks=[DuckTyped()], **QUIET)
    assert "trainer.callbacks[0]:" in message and "has hook methods (on_train_epoch_end)" in message
    assert "`pip install surge-lightning`" in message
    subclassed = Subclassed()  # its class names its subscriber (__surge_subscriber__): no plugin needed
    trainer = surge.Trainer(max_epochs=2, callbacks=[subclassed], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert subclassed.epochs == [0, 1] and trainer.callbacks == [subclassed]


def test_with_it_the_plugins_adapter_takes_a_duck_typed_callback(tmp_path: Path) -> None:
    duck = DuckTyped()
    trainer = surge.Trainer(max_epochs=2, callbacks=[duck], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert duck.epochs == [0, 1] and trainer.callbacks == [duck]


# -- the surge.compat shim ----------------------------------------------------------------------------------------


def _fresh_import(monkeypatch: pytest.MonkeyPatch, name: str) -> Any:
    for module in [m for m in sys.modules if m == "surge.compat" or m.startswith("surge.compat.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.delattr(surge, "compat", raising=False)
    return importlib.import_module(name)


def test_surge_compat_warns_and_forwards(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(DeprecationWarning, match=r"surge.compat is deprecated: import surge_lightning.pytorch instead"):
        compat = _fresh_import(monkeypatch, "surge.compat")
    assert compat.Trainer is pl.Trainer and compat.LightningModule is pl.LightningModule
    assert compat.Tuner is pl.tuner.Tuner and compat.rank_zero_debug is pl.utilities.rank_zero.rank_zero_debug
    with pytest.warns(DeprecationWarning, match=r"import surge_lightning.pytorch.loggers instead"):
        loggers = _fresh_import(monkeypatch, "surge.compat.loggers")
    assert loggers.Logger is pl.loggers.Logger and loggers.CSVLogger is pl.loggers.CSVLogger


def test_surge_compat_without_it_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in [m for m in sys.modules if m.split(".")[0] == "surge_lightning"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "surge_lightning", None)  # as if surge-lightning were not installed
    with warnings.catch_warnings(), pytest.raises(ImportError, match=r"`pip install surge-lightning`"):
        warnings.simplefilter("ignore", DeprecationWarning)
        _fresh_import(monkeypatch, "surge.compat")


def test_lightnings_trainer_is_what_the_imports_give(tmp_path: Path) -> None:
    trainer = pl.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    model = OldStyle()
    trainer.fit(model, datamodule=TinyDataModule())
    assert isinstance(trainer, surge.Trainer) and len(model.outputs) == 8
    assert torch.is_tensor(model.outputs[0]["loss"])


# -- start-up ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plain_surge_trainer_does_not_import_lightnings_api() -> None:
    """Every ``surge.Trainer()`` imports this distribution's plugin declarations (discovery); Lightning's API and
    the inventory file wait for a program that reads them (they cost tens of milliseconds)."""
    import subprocess

    code = (
        "import sys, surge\n"
        "trainer = surge.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)\n"
        "assert 'surge_lightning.surge_plugins' in sys.modules  # discovery read the declarations\n"
        "print(sorted(m for m in sys.modules if m.startswith('surge_lightning.pytorch')))\n"
        "import surge_lightning as L\n"
        "assert 'surge_lightning.pytorch' not in sys.modules\n"
        "assert L.Trainer is sys.modules['surge_lightning.pytorch'].Trainer\n"
        "from lightning_utilities.core.rank_zero import rank_zero_only\n"
        "print(rank_zero_only.rank)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "0"]  # nothing imported; reading L.Trainer set Lightning's rank
