"""Shared pieces of the surge-tensorboard tests: a short real fit (``fit``), and the run's event files read
back with TensorBoard's own reader (``tb``)."""

from __future__ import annotations

import struct
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def f32(value: float) -> float:
    """``value`` as TensorBoard stores a scalar (float32)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def event_files(directory: str | Path) -> list[Path]:
    """Every TensorBoard event file below ``directory``."""
    return sorted(Path(directory).rglob("events.out.tfevents.*"))


class Run:
    """One TensorBoard run (a directory of event files) as TensorBoard reads it."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        assert event_files(self.directory), f"no event file in {self.directory}"
        # size_guidance 0: keep every record (TensorBoard samples long series by default)
        self.acc = EventAccumulator(str(self.directory), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
        self.acc.Reload()

    def tags(self, kind: str) -> list[str]:
        return list(self.acc.Tags()[kind])

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """``{tag: [(step, value), ...]}`` in write order."""
        return {tag: [(e.step, e.value) for e in self.acc.Scalars(tag)] for tag in self.tags("scalars")}

    def points(self) -> list[tuple[str, int]]:
        """Every ``(tag, step)`` written, duplicates kept."""
        return [(tag, step) for tag, series in self.scalars().items() for step, _ in series]

    def histogram_steps(self, tag: str) -> list[int]:
        return [e.step for e in self.acc.Histograms(tag)]

    def hparams(self) -> dict[str, Any]:
        """The hparams plugin's records by tag: ``session_start_info`` / ``session_end_info`` messages."""
        try:
            contents = self.acc.PluginTagToContent("hparams")
        except KeyError:  # no hparams record at all
            return {}
        out: dict[str, Any] = {}
        for tag, content in contents.items():
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            out[tag.split("/")[-1]] = getattr(data, data.WhichOneof("data"))
        return out


def logged_writes(recorder: EventRecorder) -> dict[tuple[str, int], float]:
    """What the ``log_metrics`` events carried, as ``{(tag, step): value}``."""
    return {(tag, e.step): value for e in recorder.of("log_metrics") for tag, value in e.metrics.items()}


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """``fit(model=None, ckpt_path=None, **trainer_kwargs)``: a short real fit with the TensorBoard logger,
    writing into ``tmp_path / "root"``; 4 training and 2 validation batches per epoch, metrics written at
    every step, no sanity check, progress bar, model summary or checkpointing unless asked for."""

    def run(model: surge.Module | None = None, ckpt_path: str | None = None, **kwargs: Any) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path / "root"))
        kwargs.setdefault("logger", "tensorboard")
        kwargs.setdefault("max_epochs", 1)
        kwargs.setdefault("limit_train_batches", 4)
        kwargs.setdefault("limit_val_batches", 2)
        kwargs.setdefault("log_every_n_steps", 1)
        kwargs.setdefault("num_sanity_val_steps", 0)
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
        kwargs.setdefault("enable_checkpointing", False)
        trainer = surge.Trainer(**kwargs)
        torch.manual_seed(0)
        trainer.fit(model or TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)
        return trainer

    return run


def with_settings(**settings: Any) -> dict[str, Any]:
    """Trainer arguments selecting the TensorBoard logger, and only it, with ``settings``."""
    return {"logger": "tensorboard", "plugins": {"tensorboard": settings}}


@pytest.fixture
def tb() -> types.SimpleNamespace:
    """The readers: ``tb.Run(dir)``, ``tb.files(dir)``, ``tb.f32(x)``, ``tb.writes(recorder)`` and
    ``tb.settings(**settings)`` (Trainer arguments)."""
    return types.SimpleNamespace(Run=Run, files=event_files, f32=f32, writes=logged_writes, settings=with_settings)
