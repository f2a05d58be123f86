"""``pytorch``: ``torch.profiler`` on a schedule, with a range per span, exported for Perfetto and TensorBoard."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
from typing import Any, Literal

import fsspec
import surge
import torch
from fsspec.implementations.local import LocalFileSystem
from pydantic import Field
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from surge_profilers._base import EventProfiler, ProfilerConfig, validated

__all__ = ["PyTorchProfiler", "PyTorchProfilerConfig"]


class PyTorchProfilerConfig(ProfilerConfig):
    """Settings of :class:`PyTorchProfiler`: the schedule is ``torch.profiler.schedule``'s, in training batches."""

    wait: int = Field(1, ge=0)
    """Batches skipped at the start of each cycle."""
    warmup: int = Field(1, ge=0)
    """Batches traced but thrown away (the profiler warms up)."""
    active: int = Field(3, ge=1)
    """Batches recorded per cycle; each cycle writes one trace."""
    repeat: int = Field(1, ge=0)
    """Cycles; 0: until the run ends."""
    skip_first: int = Field(0, ge=0)
    """Batches skipped once, before the first cycle."""
    activities: list[Literal["cpu", "cuda"]] | None = None
    """``None``: the CPU, and CUDA when it is available."""
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    chrome_trace: bool = True
    """Write ``profile-pytorch-trace-<cycle>.json`` (``export_chrome_trace``: Perfetto, chrome://tracing)."""
    tensorboard: bool = True
    """Write the TensorBoard plugin's format (``tensorboard_trace_handler``) into ``profile-pytorch-tb/``."""
    row_limit: int = Field(20, ge=1)
    """Rows of the operator table (``key_averages``) in ``profile-pytorch.txt`` and the printed report."""
    sort_by: str = "self_cpu_time_total"
    """Column the operator table is sorted by (``self_cuda_time_total`` on a GPU, for example)."""


class PyTorchProfiler(EventProfiler):
    """``torch.profiler.profile`` from ``setup`` to ``teardown``, stepped after each ``train_batch_end``
    (so ``wait``/``warmup``/``active`` count training batches), with a ``record_function`` range for every
    span (``train_batch``, ``forward``, ``backward``, ``optimizer_step``, ``validation_batch``, ...).

    Each recorded cycle writes a Chrome trace and a TensorBoard trace into the run directory, and its
    operator table (``key_averages``) into ``profile-pytorch.txt``; the last table is printed. A run directory
    that is a URL gets the files copied there when the run ends. Global rank zero only: the other processes
    have no run directory and run unprofiled.
    """

    kind = "pytorch"

    def __init__(self, **settings: Any) -> None:
        config = validated(PyTorchProfilerConfig, settings)
        super().__init__(config)
        self.config: PyTorchProfilerConfig = config
        self.traces: list[str] = []
        """Chrome trace files written in the current run."""
        self.tables: list[str] = []
        self._profiler: profile | None = None
        self._ranges: list[Any] = []  # parallel to self.spans.stack
        self._local: str | None = None  # where torch writes (the run directory, or a temporary one)

    def _activities(self) -> list[ProfilerActivity]:
        names = self.config.activities
        if names is None:
            names = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        return [ProfilerActivity.CUDA if name == "cuda" else ProfilerActivity.CPU for name in names]

    def _setup(self, trainer: surge.Trainer) -> None:
        self.traces, self.tables = [], []
        run_dir = trainer.run_dir
        if run_dir is None:
            return
        fs, path = fsspec.core.url_to_fs(run_dir)
        self._local = path if isinstance(fs, LocalFileSystem) else tempfile.mkdtemp(prefix="surge-profile-")
        c = self.config
        self._profiler = profile(
            activities=self._activities(),
            schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=c.repeat, skip_first=c.skip_first),
            on_trace_ready=self._trace_ready,
            record_shapes=c.record_shapes,
            profile_memory=c.profile_memory,
            with_stack=c.with_stack,
        )
        self._profiler.start()

    def _open(self, span: str, event: str, now: float) -> None:
        scope = record_function(span)
        scope.__enter__()
        self._ranges.append(scope)

    def _close(self, span: str, event: str, now: float) -> None:
        self._ranges.pop().__exit__(None, None, None)
        if span == "train_batch" and self._profiler is not None:
            self._profiler.step()  # between the batch's range and the next one (data_fetch opens after)

    def _trace_ready(self, prof: profile) -> None:
        assert self._local is not None
        stage = self.stage or "fit"
        name = self._file_name(stage, f"-trace-{len(self.traces)}.json")
        chrome = os.path.join(self._local, name)
        if self.config.tensorboard:  # a trace is saved once: TensorBoard's file, then a copy under our name
            board = os.path.join(self._local, self._file_name(stage, "-tb"))
            worker = f"{socket.gethostname()}_{os.getpid()}_cycle{len(self.tables)}"
            tensorboard_trace_handler(board, worker_name=worker)(prof)
            if self.config.chrome_trace:
                written = max(glob.glob(os.path.join(glob.escape(board), f"{worker}.*.pt.trace.json*")))
                shutil.copyfile(written, chrome)
        elif self.config.chrome_trace:
            prof.export_chrome_trace(chrome)
        if self.config.chrome_trace:
            self.traces.append(name)
        table = prof.key_averages().table(sort_by=self.config.sort_by, row_limit=self.config.row_limit)
        self.tables.append(f"Cycle {len(self.tables)} (step {prof.step_num}):\n{table}")

    def _report(self, trainer: surge.Trainer, stage: str) -> str:
        if self._profiler is not None:
            self._profiler.stop()  # a cycle still recording is written now
            self._profiler = None
        if self._local is None:
            return ""
        local, self._local = self._local, None
        text = "\n".join(self.tables) or "no cycle was recorded: the run had fewer batches than the schedule waits"
        with open(os.path.join(local, self._file_name(stage, ".txt")), "w") as f:
            f.write(text)
        run_dir = trainer.run_dir
        assert run_dir is not None
        fs, path = fsspec.core.url_to_fs(run_dir)
        if not isinstance(fs, LocalFileSystem):
            fs.put(f"{local}/", path, recursive=True)
        self.files = [
            f"{run_dir.rstrip('/')}/{name}" for name in sorted(os.listdir(local)) if name.startswith("profile-pytorch")
        ]
        head = f"PyTorch profiler: {stage}; traces and tables in {run_dir}: {', '.join(self.traces) or 'none'}"
        return f"{head}\n{self.tables[-1] if self.tables else text}"
