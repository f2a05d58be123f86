"""Providers take settings like every plugin (issue 18): ``plugins={"devices": {...}}`` from the Trainer, a run
config, ``SURGE_TRAINER_PLUGINS`` or the command line reaches the accelerator the plugin provides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import surge
import torch
from surge.cli import main
from surge.errors import ConfigError, PluginError
from surge.testing import TinyDataModule, TinyModule


class ThreadProbe(TinyModule):
    seen: ClassVar[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ThreadProbe.seen.append(torch.get_num_threads())
        return super().training_step(batch, batch_idx)


def _fit(tmp_path: Path, **kwargs: Any) -> list[int]:
    ThreadProbe.seen = []
    trainer = surge.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        **kwargs,
    )
    trainer.fit(ThreadProbe(), datamodule=TinyDataModule())
    return ThreadProbe.seen


def test_cpu_threads_apply_during_the_run_and_are_put_back(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    assert _fit(tmp_path, plugins={"devices": {"cpu_threads": target}}) == [target, target]
    assert torch.get_num_threads() == before
    assert _fit(tmp_path) == [before, before]  # no setting: torch's own choice


def test_the_environment_layer_reaches_the_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    monkeypatch.setenv("SURGE_TRAINER_PLUGINS", json.dumps({"devices": {"cpu_threads": target}}))
    assert _fit(tmp_path) == [target, target]


def test_a_bad_setting_is_refused_with_its_path_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trainer\.plugins\.devices\.cpu_threads"):
        surge.Trainer(accelerator="cpu", plugins={"devices": {"cpu_threads": 0}}, default_root_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"trainer\.plugins\.devices\.cpu_thread"):
        surge.Trainer(accelerator="cpu", plugins={"devices": {"cpu_thread": 2}}, default_root_dir=str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_a_run_config_checks_provider_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("plugins:\n  devices:\n    cpu_threads: -3\n")
    assert main(["fit", "-c", str(config), "--print-config"]) == 2
    assert "plugins.devices.cpu_threads" in capsys.readouterr().err


def test_a_provider_declaring_settings_needs_configure(plugin_env: Any, tmp_path: Path) -> None:
    from pydantic import BaseModel

    class Settings(BaseModel):
        level: int = 1

    class Bare(surge.Accelerator):
        name: ClassVar[str] = "bare"
        device_type: ClassVar[str] = "cpu"

        @classmethod
        def is_available(cls) -> bool:
            return True

    plugin_env.add(
        surge.Plugin(name="bare", kind="provider", provides={"accelerator": {"bare": Bare}}, config=Settings),
        distribution="surge-bare",
    )
    with pytest.raises(
        PluginError, match=r"declares settings \(config=Settings\) but its provider object .*Bare has no configure"
    ):
        surge.Trainer(accelerator="bare", default_root_dir=str(tmp_path))
