"""Shared pieces of the surge-wandb tests: wandb in offline mode with every directory under the test's
tmp_path, a short fit with the ``wandb`` plugin, and the runs wandb wrote to disk, read back from their ``.wandb``
transaction logs by :mod:`surge_wandb.offline`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from loguru import logger
from surge.testing import EventRecorder, PluginEnv, TinyDataModule, TinyModule
from surge_wandb.offline import OfflineRun, read_runs


@pytest.fixture(autouse=True)
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb offline and quiet, its caches, staging area and settings under tmp_path, no credentials."""
    home = tmp_path / "wandb-home"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")  # leave stdout and stderr to pytest
    monkeypatch.setenv("WANDB__DISABLE_STATS", "true")  # no system-metrics sampler on a shared machine
    for name, sub in [("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config")]:
        monkeypatch.setenv(name, str(home / sub))
    monkeypatch.setenv("WANDB_ARTIFACT_DIR", str(home / "artifacts"))
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(name, raising=False)


# -- reading what wandb wrote -------------------------------------------------------------------------------


@pytest.fixture
def wandb_runs() -> Callable[[str | Path], list[OfflineRun]]:
    """``wandb_runs(directory)``: the offline runs wandb wrote under ``directory``, oldest first."""
    return read_runs


# -- fits ---------------------------------------------------------------------------------------------------


def _build_trainer(settings: Mapping[str, Any] | None, extras: Iterable[Any] = (), **kwargs: Any) -> surge.Trainer:
    """A Trainer with the ``wandb`` plugin (``settings``) and ``extras``, objects made discoverable for the time
    of construction, so that they can join a run whose plugins are given as a dict of settings."""
    plugins: dict[str, Any] = {} if settings is None else {"wandb": dict(settings)}
    kwargs.setdefault("max_epochs", 1)
    kwargs.setdefault("limit_train_batches", 4)
    kwargs.setdefault("limit_val_batches", 2)
    kwargs.setdefault("num_sanity_val_steps", 0)
    kwargs.setdefault("log_every_n_steps", 1)
    kwargs.setdefault("enable_progress_bar", False)
    kwargs.setdefault("enable_model_summary", False)
    with PluginEnv() as env:
        for obj in extras:
            env.add(surge.Plugin(name=obj.surge_name, kind=obj.surge_kind, factory=lambda obj=obj: obj))
            plugins[obj.surge_name] = True
        return surge.Trainer(plugins=plugins, **kwargs)


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(settings=None, model=None, extras=(), ckpt_path=None, **trainer_kwargs)``: a short real fit with the
    ``wandb`` plugin, under ``tmp_path / "root"`` unless ``default_root_dir`` is given. 4 training batches and 2
    validation batches per epoch, metrics written every step, no checkpoints unless asked for."""

    def run(
        settings: Mapping[str, Any] | None = None,
        model: surge.Module | None = None,
        extras: Iterable[Any] = (),
        ckpt_path: str | None = None,
        **kwargs: Any,
    ) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path / "root"))
        kwargs.setdefault("logger", "wandb")
        kwargs.setdefault("enable_checkpointing", False)
        trainer = _build_trainer(dict(settings or {}), extras, **kwargs)
        torch.manual_seed(0)
        trainer.fit(model or TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run


@pytest.fixture
def make() -> Callable[..., surge.Trainer]:
    """``make(settings, extras=(), **trainer_kwargs)``: the Trainer ``fit`` builds, not yet fitted."""
    return _build_trainer


@pytest.fixture
def recorder() -> EventRecorder:
    """An observer that records every event (``surge_kind="observer"``)."""
    return EventRecorder("recorder", kind="observer")


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    yield messages
    logger.remove(sink)
