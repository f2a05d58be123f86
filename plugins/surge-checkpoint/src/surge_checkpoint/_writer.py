"""Asynchronous saving: a snapshot of the checkpoint off the live tensors, and one background writer."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable

from surge.checkpoint import CheckpointError

WRITER_NICENESS = 10
"""How much nicer than training the writer thread is (Linux): it takes the CPU time training leaves."""


def _lower_priority() -> None:
    """Make the calling thread nicer, so that serialising, hashing and writing yield to the training
    threads when the CPU is busy (on Linux a thread has its own nice value; elsewhere nothing happens)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + WRITER_NICENESS))


class WriteError(CheckpointError):
    """A background checkpoint write failed; the message names the file (a ``surge.checkpoint.CheckpointError``,
    so a ``surge.SurgeError``)."""


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
