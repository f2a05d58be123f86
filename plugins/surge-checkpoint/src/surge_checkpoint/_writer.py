"""Asynchronous saving: a snapshot of the checkpoint off the live tensors, and one background writer."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import surge
import torch


def snapshot(obj: Any) -> Any:
    """A copy of a checkpoint dict that the training loop can no longer change: every tensor is copied to
    CPU memory (storage by storage, so tensors that share memory still share it, as ``torch.save`` keeps
    them), every container is rebuilt. Numbers and strings are immutable and kept."""
    storages: dict[tuple[int, str], torch.UntypedStorage] = {}

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _copy_tensor(value, storages)
        if isinstance(value, dict):
            items = [(k, copy(v)) for k, v in value.items()]
            try:
                out = dict(items) if type(value) is dict else type(value)(items)
            except TypeError:  # a dict subclass with another constructor (defaultdict)
                out = dict(items)
            if hasattr(value, "_metadata"):  # Module.state_dict's version records, which torch.save keeps
                out._metadata = copy(value._metadata)  # type: ignore[attr-defined]
            return out
        if isinstance(value, list):
            return [copy(v) for v in value]
        if isinstance(value, tuple):
            items = [copy(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return value

    return copy(obj)


def _copy_tensor(tensor: torch.Tensor, storages: dict[tuple[int, str], torch.UntypedStorage]) -> torch.Tensor:
    tensor = tensor.detach()
    if tensor.layout is not torch.strided or tensor.is_quantized or type(tensor) is not torch.Tensor:
        return tensor.to("cpu", copy=True)  # rare kinds: a plain copy, without storage sharing
    storage = tensor.untyped_storage()
    key = (storage.data_ptr(), str(tensor.device))
    copied = storages.get(key)
    if copied is None:
        # One copy per storage; from an accelerator this is the device-to-host copy of the snapshot.
        copied = storage.clone() if tensor.device.type == "cpu" else storage.cpu()
        storages[key] = copied
    out = torch.empty(0, dtype=tensor.dtype, device="cpu")
    out.set_(copied, tensor.storage_offset(), tensor.size(), tensor.stride())
    return out


WRITER_NICENESS = 10
"""How much nicer than training the writer thread is (Linux): it takes the CPU time training leaves."""


def _lower_priority() -> None:
    """Make the calling thread nicer, so that serialising, hashing and writing yield to the training
    threads when the CPU is busy (on Linux a thread has its own nice value; elsewhere nothing happens)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + WRITER_NICENESS))


class WriteError(surge.SurgeError):
    """A background checkpoint write failed; the message names the file."""


class AsyncWriter:
    """Runs one save at a time on a background thread.

    ``submit`` waits for the save in flight first (so at most one is in flight) and re-raises its error;
    ``check`` re-raises the error of a finished save without waiting (the loop calls it every step);
    ``wait`` blocks until the save in flight is done.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._target = ""

    @property
    def pending(self) -> bool:
        """A save was submitted and its outcome not yet collected."""
        return self._thread is not None

    def submit(self, job: Callable[[], None], target: str) -> None:
        self.wait()
        self._target = target
        self._thread = threading.Thread(target=self._run, args=(job,), name="surge-checkpoint-writer", daemon=True)
        self._thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        _lower_priority()
        try:
            job()
        except BaseException as exc:  # surfaces on the training thread at its next step
            self._error = exc

    def check(self) -> None:
        if self._thread is not None and not self._thread.is_alive():
            self.wait()

    def wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.join()
        error, self._error = self._error, None
        if error is not None:
            if isinstance(error, WriteError):
                raise error
            raise WriteError(
                f"the asynchronous checkpoint save to {self._target} failed: {type(error).__name__}: {error}"
            ) from error
