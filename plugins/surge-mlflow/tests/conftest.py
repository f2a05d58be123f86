"""Shared pieces of the surge-mlflow tests: one real SQLite tracking store for the whole session (creating
MLflow's schema takes a second or two), an experiment per test, and a short fit that logs into it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from loguru import logger
from surge.testing import EventRecorder, PluginEnv, TinyDataModule, TinyModule

# Tests run offline; MLflow would otherwise try to send usage telemetry.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return "sqlite:///" + (tmp_path_factory.mktemp("mlflow-store") / "mlflow.db").as_posix()


@pytest.fixture(scope="session")
def client(store_uri: str) -> Any:
    """An ``MlflowClient`` on the shared store, to read back what the plugin wrote."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=store_uri)


@pytest.fixture
def experiment(request: pytest.FixtureRequest) -> str:
    """An experiment name of this test's own, so that tests sharing the store do not see each other's runs."""
    return re.sub(r"[^\w.-]", "_", request.node.nodeid)[-200:]


def _mlflow_of(trainer: surge.Trainer) -> Any:
    return trainer.plugin("mlflow")


@pytest.fixture
def mlflow_of() -> Callable[[surge.Trainer], Any]:
    """``mlflow_of(trainer)``: the ``MLflowLogger`` the plugin built for ``trainer``."""
    return _mlflow_of


@pytest.fixture
def history() -> Callable[..., list[tuple[int, float]]]:
    """``history(client, run_id, key)``: a metric's ``(step, value)`` pairs in step order."""

    def read(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))

    return read


def _build_trainer(settings: Mapping[str, Any] | None, extras: Iterable[Any] = (), **kwargs: Any) -> surge.Trainer:
    """A Trainer with the ``mlflow`` plugin (``settings``) and ``extras``, objects made discoverable for the
    time of construction, so that they can join a run whose plugins are given as a dict of settings."""
    plugins: dict[str, Any] = {} if settings is None else {"mlflow": dict(settings)}
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
def fit(tmp_path: Path, store_uri: str, experiment: str) -> Callable[..., surge.Trainer]:
    """``fit(settings=None, model=None, extras=(), ckpt_path=None, **trainer_kwargs)``: a short real fit with
    the ``mlflow`` plugin writing into this test's experiment of the shared store. 4 training batches and 2
    validation batches per epoch, metrics written every step, no checkpoints unless asked for."""

    def run(
        settings: Mapping[str, Any] | None = None,
        model: surge.Module | None = None,
        extras: Iterable[Any] = (),
        ckpt_path: str | None = None,
        **kwargs: Any,
    ) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path / "root"))
        kwargs.setdefault("logger", "mlflow")
        kwargs.setdefault("enable_checkpointing", False)
        merged = {"tracking_uri": store_uri, "experiment_name": experiment, **(settings or {})}
        trainer = _build_trainer(merged, extras, **kwargs)
        torch.manual_seed(0)
        trainer.fit(model or TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run


@pytest.fixture
def make() -> Callable[..., surge.Trainer]:
    """``make(settings, extras=(), **trainer_kwargs)``: the Trainer ``fit`` builds, for tests that choose
    the store themselves (``settings`` without ``tracking_uri`` uses the default embedded store)."""
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
