"""Open events: a plugin declares the events it publishes (``surge.Plugin(events=[...])``), emits them with
``trainer.emit``, and other plugins subscribe by name, with filters, ordering, tracing and profiler spans as
for the core's events (docs/events.md, "Events of plugins")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import surge
from loguru import logger
from surge.errors import PluginConflictError, PluginError, SurgeError
from surge.events import Event, span_of
from surge.testing import TinyDataModule, TinyModule


@dataclass(frozen=True, slots=True)
class ScoreStart(Event):
    """Before the scorer scores a batch. May change: nothing."""

    name: ClassVar[str] = "score_start"
    batch_idx: int


@dataclass(frozen=True, slots=True)
class ScoreEnd(Event):
    """After the scorer scored a batch; ``score`` is the batch's loss. May change: nothing."""

    name: ClassVar[str] = "score_end"
    batch_idx: int
    score: float


@dataclass(frozen=True, slots=True)
class ScoreImproved(Event):
    """When a batch scores better than every batch before it in the run (a point event). May change: nothing."""

    name: ClassVar[str] = "score_improved"
    score: float


class Scorer:
    """Publishes score_start/score_end around each batch's scoring, and score_improved."""

    def __init__(self) -> None:
        self.best = float("inf")

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        run = event.trainer
        run.emit(ScoreStart(run, event.batch_idx))
        score = float(event.outputs["loss"] if isinstance(event.outputs, dict) else event.outputs)
        run.emit(ScoreEnd(run, event.batch_idx, score))
        if score < self.best:
            self.best = score
            run.emit(ScoreImproved(run, score))


class Listener:
    """A third party's subscriber to the scorer's events, one handler filtered."""

    surge_name = "listener"

    def __init__(self) -> None:
        self.ends: list[tuple[int, int]] = []
        self.improved: list[float] = []
        self.starts = 0

    @surge.hookimpl
    def score_start(self, event: ScoreStart) -> None:
        self.starts += 1

    @surge.hookimpl(every_n_steps=2)
    def score_end(self, event: ScoreEnd) -> None:
        self.ends.append((event.trainer.global_step, event.batch_idx))

    @surge.hookimpl(after="scorer")
    def score_improved(self, event: ScoreImproved) -> None:
        self.improved.append(event.score)


def _scorer_plugin(**overrides: Any) -> surge.Plugin:
    fields: dict[str, Any] = {
        "name": "scorer",
        "kind": "participant",
        "factory": Scorer,
        "default": True,
        "events": [ScoreStart, ScoreEnd, ScoreImproved],
    }
    return surge.Plugin(**{**fields, **overrides})


@pytest.fixture
def scorer_env(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    plugin_env.add(_scorer_plugin(), distribution="surge-scorer")
    return plugin_env


def _trainer(tmp_path: Any, **kwargs: Any) -> surge.Trainer:
    return surge.Trainer(
        max_epochs=1, limit_train_batches=6, limit_val_batches=0, default_root_dir=str(tmp_path), **kwargs
    )


def test_a_plugin_publishes_and_another_subscribes_with_a_filter(scorer_env: Any, tmp_path: Any) -> None:
    listener = Listener()
    trainer = _trainer(tmp_path, plugins=[listener])
    assert trainer.event_order("score_end") == ["listener"]  # known before the run, like the core's events
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert listener.starts == 6
    assert listener.ends == [(2, 1), (4, 3), (6, 5)]  # every second optimizer step
    assert listener.improved and listener.improved == sorted(listener.improved, reverse=True)
    assert trainer.event_order("score_improved") == ["listener"]


def test_trace_and_profiler_timing_cover_plugin_events(
    scorer_env: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans: list[tuple[str, str]] = []

    class Profiler:
        surge_name = "span_profiler"

        def handler_timer(self, event: str, name: str, start: float, end: float) -> None:
            spans.append((event, name))

        @surge.hookimpl
        def fit_start(self, event: Any) -> None: ...

    monkeypatch.setenv("SURGE_TRACE_PLUGINS", "1")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), format="{message}", level="INFO")
    try:
        trainer = _trainer(tmp_path, plugins=[Listener()], profiler=Profiler())
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
    finally:
        logger.remove(sink)
    assert ("score_start", "listener") in spans and ("score_improved", "listener") in spans
    assert len([line for line in lines if line.startswith("surge trace: score_start")]) == 6
    assert span_of("score_start") == ("score", "start") and span_of("score_improved") is None


def test_an_event_of_a_plugin_that_is_not_installed(plugin_env: Any, tmp_path: Any) -> None:
    # the listener's handlers name events no installed plugin declares: refused, unless marked optional
    plugin_env.hide_installed()
    with pytest.raises(PluginError, match=r"unknown hook 'score_start'.*optional=True"):
        _trainer(tmp_path, plugins=[Listener()])

    class Optional:
        surge_name = "optional_listener"
        calls = 0

        @surge.hookimpl(optional=True)
        def score_end(self, event: Any) -> None:
            Optional.calls += 1

    _trainer(tmp_path, plugins=[Optional()]).fit(TinyModule(), datamodule=TinyDataModule())
    assert Optional.calls == 0
    plugin_env.add(_scorer_plugin(), distribution="surge-scorer")
    _trainer(tmp_path, plugins=[Optional()]).fit(TinyModule(), datamodule=TinyDataModule())
    assert Optional.calls == 6


def test_an_inactive_plugins_instance_publishes_its_events(scorer_env: Any, tmp_path: Any) -> None:
    # the scorer plugin is installed but switched off; an instance of its class passed in still publishes
    listener = Listener()
    trainer = _trainer(tmp_path, plugins=[listener, Scorer(), {"scorer": False}])
    assert "scorer" not in trainer.plugin_names and "score_end" in trainer.event_names
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert listener.starts == 6


def test_only_declared_events_are_emitted(scorer_env: Any, tmp_path: Any) -> None:
    @dataclass(frozen=True, slots=True)
    class Undeclared(Event):
        """Declared by nobody."""

        name: ClassVar[str] = "nobody_declares_this"

    trainer = _trainer(tmp_path)
    with pytest.raises(SurgeError, match="declared by no installed plugin"):
        trainer.emit(Undeclared(trainer))
    with pytest.raises(SurgeError, match="'train_batch_end' is a core event"):
        trainer.emit(surge.events.TrainBatchEnd(trainer, None, None, 0))


def test_two_plugins_declaring_one_event_conflict(scorer_env: Any, tmp_path: Any) -> None:
    @dataclass(frozen=True, slots=True)
    class OtherImproved(Event):
        """Another plugin's event of the same name. May change: nothing."""

        name: ClassVar[str] = "score_improved"
        score: float

    scorer_env.add(
        surge.Plugin(name="rival", kind="participant", factory=Scorer, default=True, events=[OtherImproved]),
        distribution="surge-rival",
    )
    with pytest.raises(
        PluginConflictError, match=r"surge-rival.*surge-scorer.*both declare the event 'score_improved'"
    ):
        _trainer(tmp_path)


@dataclass(frozen=True, slots=True)
class _CoreName(Event):
    """Takes a core name."""

    name: ClassVar[str] = "train_batch_end"


@dataclass(frozen=True, slots=True)
class _OneWord(Event):
    """One word."""

    name: ClassVar[str] = "scored"


@dataclass(frozen=True, slots=True)
class _Undocumented(Event):
    name: ClassVar[str] = "quiet_event"


@dataclass(frozen=True, slots=True)
class _NoContract(Event):
    """When something happens, with no word of what a handler may change."""

    name: ClassVar[str] = "vague_event"


class _Mutable(Event):  # a subclass that is no dataclass of its own: its fields would not be declared
    """Not a dataclass."""

    name: ClassVar[str] = "mutable_event"


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([ScoreStart], "event 'score_start' opens or closes the span 'score'; declare 'score_end' with it"),
        ([_CoreName], "takes the name 'train_batch_end' of a core event"),
        ([_OneWord], "in snake_case with at least two words"),
        ([_Undocumented], "has no docstring"),
        (
            [_NoContract],
            "its docstring does not say what a handler may change; end it with a paragraph 'May change: ...'",
        ),
        ([_Mutable], "must be a frozen dataclass"),
        ([dict], "is not a subclass of surge.events.Event"),
        ("score_end", "`events` must be a list"),
    ],
)
def test_bad_event_declarations_are_refused_when_declared(events: Any, message: str) -> None:
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _scorer_plugin(events=events)
