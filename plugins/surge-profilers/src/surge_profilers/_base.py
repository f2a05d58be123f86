"""What the three profilers share: spans from event names, a handler for every event, settings, files."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar, Literal, TypeVar

import fsspec
import surge
from pydantic import BaseModel, ConfigDict, ValidationError
from surge.config import format_validation_error
from surge.events import EVENTS, Event, span_of

__all__ = ["EventProfiler", "PassThroughProfiler", "ProfilerConfig", "Spans"]

CUSTOM = "profile"
"""The event name the spans of :meth:`EventProfiler.profile` open and close with (no event of the bus)."""

# Phases of the training loop that no event pair names: they lie between events. ``data_fetch`` is the
# loop getting the next batch (from the end of ``train_epoch_start`` or of the previous batch's
# ``train_batch_end`` to ``train_batch_start``; a validation or a checkpoint save in between is a span
# nested in it); ``forward`` runs from ``train_batch_start`` to ``before_backward`` (to ``train_batch_end``
# when there is no backward).
DERIVED_OPENS: dict[str, tuple[str, ...]] = {
    "train_epoch_start": ("data_fetch",),
    "train_batch_end": ("data_fetch",),
    "train_batch_start": ("forward",),
}
DERIVED_CLOSES: dict[str, tuple[str, ...]] = {
    "train_batch_start": ("data_fetch",),
    "train_epoch_end": ("data_fetch",),
    "before_backward": ("forward",),
    "train_batch_end": ("forward",),
}


class Spans:
    """The open spans, innermost last, driven by event names alone.

    :meth:`transitions` maps an event name to the spans it closes and opens, in that order: the derived
    phases above and every pair of the event grammar (:func:`surge.events.span_of`), so an event named by
    the grammar (``<scope>_start``/``<scope>_end``, ``before_<op>``/``after_<op>``) is a span with no code
    for it. Closing a span closes the spans opened inside it first (spans always nest); closing one that
    is not open does nothing.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []

    def transitions(self, event_name: str) -> list[tuple[bool, str]]:
        """``(opening, span)`` pairs for ``event_name``, in the order they happen."""
        ops: list[tuple[bool, str]] = []
        span = span_of(event_name)
        for name in DERIVED_CLOSES.get(event_name, ()):
            ops += self.close(name)
        if span is not None and span[1] == "end":
            ops += self.close(span[0])
        if span is not None and span[1] == "start":
            ops.append(self.open(span[0]))
        for name in DERIVED_OPENS.get(event_name, ()):
            ops.append(self.open(name))
        return ops

    def open(self, name: str) -> tuple[bool, str]:
        self.stack.append(name)
        return True, name

    def close(self, name: str) -> list[tuple[bool, str]]:
        if name not in self.stack:
            return []
        depth = len(self.stack) - 1 - self.stack[::-1].index(name)
        closed = [(False, self.stack.pop()) for _ in range(len(self.stack) - depth)]
        return closed

    def close_all(self) -> list[tuple[bool, str]]:
        return [(False, self.stack.pop()) for _ in range(len(self.stack))]


class ProfilerConfig(BaseModel):
    """Settings every profiler takes."""

    model_config = ConfigDict(extra="forbid")

    stream: Literal["stderr", "stdout"] | None = "stderr"
    """Where the report is printed when a run ends (global rank zero); ``None``: files only."""
    filename: str | None = None
    """Lightning's: write the report to ``<dirpath>/<stage>-<filename>.txt`` (appended to) instead of printing it."""
    dirpath: str | None = None
    """Lightning's: the directory (or fsspec URL) of ``filename``'s file; ``None``: the run directory."""


C = TypeVar("C", bound=BaseModel)


def validated(model: type[C], settings: Mapping[str, Any]) -> C:
    """``model(**settings)``, a :class:`surge.ConfigError` naming ``trainer.profiler.<field>`` otherwise."""
    try:
        return model(**settings)
    except ValidationError as exc:
        raise surge.ConfigError(format_validation_error(exc, "trainer.profiler", model=model)) from None


class EventProfiler:
    """Base of the profilers: a ``tryfirst`` handler for every event, feeding :meth:`event`.

    The Trainer registers a profiler in the provider tier, so ``tryfirst`` makes its handler the first of
    each dispatch: a span closes when its end event is dispatched, before the other handlers of that event
    run. Subclasses implement :meth:`_open`, :meth:`_close` and :meth:`_report`.
    """

    surge_name = "profiler"
    kind: ClassVar[str] = ""
    """The provider name, used in file names (``profile-<kind>.txt``)."""

    def __init__(self, config: ProfilerConfig) -> None:
        self.config = config
        """The settings, validated (:class:`ProfilerConfig` or a subclass's)."""
        self.spans = Spans()
        self.stage: str | None = None
        self._in_run = False  # from setup to the report at teardown: when profile() records
        self.files: list[str] = []
        """The files the last report wrote (URLs or paths in the run directory)."""

    def event(self, name: str, payload: Event | None = None) -> None:
        """Open and close the spans ``name`` marks. Every handler calls this; so may a test or a plugin that
        dispatches an event of its own."""
        now = time.perf_counter()
        self._enter(now)
        for opening, span in self.spans.transitions(name):
            if opening:
                self._open(span, name, now)
            else:
                self._close(span, name, now)
        if name == "setup" and payload is not None:
            self.stage = getattr(payload, "stage", None)
            self._setup(payload.trainer)
            self._in_run = True
        elif name == "teardown" and payload is not None:
            for _, span in self.spans.close_all():
                self._close(span, name, now)
            self._in_run = False
            self._finish(payload.trainer, getattr(payload, "stage", None) or "fit")
        self._leave()

    # -- actions of your own (Lightning's profiler API) ------------------------------------------------
    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[None]:
        """Lightning's ``profiler.profile(name)``: the block is an action of its own, ``action_name``, in
        the report (nested in the span around it). Outside a run the block just runs."""
        self.start(action_name)
        try:
            yield
        finally:
            self.stop(action_name)

    def start(self, action_name: str) -> None:
        """Open the action ``action_name`` (Lightning's ``profiler.start``); :meth:`stop` closes it."""
        if self._in_run:
            _, span = self.spans.open(action_name)
            self._open(span, CUSTOM, time.perf_counter())

    def stop(self, action_name: str) -> None:
        """Close the action ``action_name`` and any opened inside it."""
        if self._in_run:
            now = time.perf_counter()
            for _, span in self.spans.close(action_name):
                self._close(span, CUSTOM, now)

    # -- what subclasses implement ------------------------------------------------------------------
    def _enter(self, now: float) -> None:
        """First thing in every handler."""

    def _leave(self) -> None:
        """Last thing in every handler."""

    def _setup(self, trainer: surge.Trainer) -> None:
        """A run (``fit``, ``validate``, ``test``, ``predict``) starts: forget the previous run's data."""

    def _open(self, span: str, event: str, now: float) -> None:
        raise NotImplementedError

    def _close(self, span: str, event: str, now: float) -> None:
        raise NotImplementedError

    def _report(self, trainer: surge.Trainer, stage: str) -> str:
        """Write the run's files with :meth:`_write`; return the text printed to the stream."""
        raise NotImplementedError

    # -- reports ----------------------------------------------------------------------------------------
    def _finish(self, trainer: surge.Trainer, stage: str) -> None:
        self.files = []
        text = self._report(trainer, stage)
        config = self.config
        if config.filename is not None and trainer.is_global_zero and text:  # Lightning's report file
            directory = config.dirpath or trainer.run_dir
            if directory is not None:
                url = f"{directory.rstrip('/')}/{stage}-{config.filename}.txt"
                fs, path = fsspec.core.url_to_fs(url)
                fs.makedirs(fs._parent(path), exist_ok=True)
                with fs.open(path, "a") as f:
                    f.write(text if text.endswith("\n") else f"{text}\n")
                self.files.append(url)
        elif config.stream is not None and trainer.is_global_zero and text:
            out: IO[str] = sys.stdout if config.stream == "stdout" else sys.stderr
            out.write(text if text.endswith("\n") else f"{text}\n")
            out.flush()

    def _file_name(self, stage: str, suffix: str) -> str:
        """``profile-<kind><suffix>`` for ``fit``; ``profile-<kind>-<stage><suffix>`` for the other runs."""
        return f"profile-{self.kind}{'' if stage == 'fit' else f'-{stage}'}{suffix}"

    def _write(self, trainer: surge.Trainer, name: str, data: str | bytes) -> None:
        """Write ``name`` into the run directory (global rank zero only: the others have none)."""
        run_dir = trainer.run_dir
        if run_dir is None:
            return
        url = f"{run_dir.rstrip('/')}/{name}"
        with fsspec.open(url, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        self.files.append(url)


class PassThroughProfiler:
    """Lightning's profiler that records nothing, for code that takes a profiler when none is given:
    ``profile(name)`` runs the block, ``start``/``stop`` do nothing."""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[None]:
        yield

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass


def _handler(event_name: str) -> Any:
    def handler(self: EventProfiler, event: Event) -> None:
        self.event(event_name, event)

    handler.__name__ = event_name
    return surge.hookimpl(tryfirst=True)(handler)


for _name in EVENTS:
    setattr(EventProfiler, _name, _handler(_name))
