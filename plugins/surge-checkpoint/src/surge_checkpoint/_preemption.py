"""Preemption signals: the handler only notes the signal; the training loop acts at its next step boundary."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import surge

DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1")
"""SIGTERM (schedulers, ``kill``, Kubernetes) and SIGUSR1 (SLURM's ``--signal=USR1@<seconds>`` warning)."""


class Preempted(surge.SurgeError):
    """The run received a preemption signal, saved a checkpoint at a step boundary, and stopped.

    Raised out of ``Trainer.fit`` so that scripts and ``surge fit`` exit with a non-zero status; resume with
    ``fit(..., ckpt_path="last")``. ``signal`` is the signal's name, ``checkpoint`` the file written.
    """

    def __init__(self, message: str, signal: str = "", checkpoint: str | None = None) -> None:
        super().__init__(message)
        self.signal = signal
        self.checkpoint = checkpoint


def resolve_signal(value: str | int) -> signal.Signals:
    """``"SIGTERM"``, ``"TERM"``, ``"sigterm"`` or ``15`` -> ``signal.SIGTERM``; unknown ones raise ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return signal.Signals(value)
    if isinstance(value, str):
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name in signal.Signals.__members__:
            return signal.Signals[name]
    known = ", ".join(sorted(n for n in signal.Signals.__members__ if not n.startswith("SIG_")))
    raise ValueError(f"{value!r} is not a signal on this platform; signals: {known}")


class PreemptionWatch:
    """Installs handlers for ``signals`` that record the first one received and call ``on_signal`` with
    it (which must only record a request, as ``Trainer.request_checkpoint`` does), and restores the
    previous handlers on :meth:`restore`. Python runs signal handlers on the main thread only, so nothing
    is installed from another thread."""

    def __init__(
        self, signals: Sequence[signal.Signals], on_signal: Callable[[signal.Signals], None] | None = None
    ) -> None:
        self.signals = list(signals)
        self.on_signal = on_signal
        self.received: signal.Signals | None = None
        self.requested = False  # several processes: the save was requested once they agreed on the step
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> bool:
        if self._previous or not self.signals or threading.current_thread() is not threading.main_thread():
            return False
        self.received, self.requested = None, False
        for sig in self.signals:
            previous = signal.signal(sig, self._handle)
            # None: the handler was not set from Python; the default is the closest we can restore.
            self._previous[sig] = signal.SIG_DFL if previous is None else previous
        return True

    def _handle(self, signum: int, frame: Any) -> None:
        # No I/O, no locks, no logging here: only note the signal. The loop saves at its next step boundary.
        if self.received is None:
            self.received = signal.Signals(signum)
            if self.on_signal is not None:
                self.on_signal(self.received)

    def restore(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
