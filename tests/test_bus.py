"""The event bus: handler order, the cost of events nobody hears, the exception policy, hook validation.

Installed plugins are hidden (``plugin_env.hide_installed()`` keeps only the device provider) so that only
the subscribers a test names take part.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pluggy
import pytest
import surge
import surge.events as ev
from loguru import logger
from surge.engine import loops
from surge.errors import PluginOrderError
from surge.testing import EventRecorder, TinyDataModule, TinyModule


@pytest.fixture
def hidden(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    return plugin_env


def _fit(trainer: surge.Trainer, model: surge.Module | None = None, data: surge.DataModule | None = None) -> None:
    trainer.fit(model or TinyModule(), datamodule=data or TinyDataModule())


SHORT = {"max_epochs": 1, "limit_train_batches": 1, "limit_val_batches": 0}


# -- handler order ----------------------------------------------------------------------------------------

CALLS: list[str] = []


def _handler(label: str, **marks: Any) -> Any:
    @surge.hookimpl(specname="train_batch_end", **marks)
    def handler(self: Any, event: ev.TrainBatchEnd) -> None:
        CALLS.append(label)

    return handler


def subscriber(name: str, kind: str = "participant", **marks: Any) -> object:
    """An instance plugin named ``name`` with one train_batch_end handler carrying ``marks``."""
    cls = type(name.title(), (), {"surge_name": name, "surge_kind": kind, "train_batch_end": _handler(name, **marks)})
    return cls()


class TracedPrecision(surge.Precision):
    """A provider (passed as ``precision=``) that also handles train_batch_end."""

    def __init__(self, **marks: Any) -> None:
        super().__init__()
        self.train_batch_end = _handler("precision", **marks).__get__(self)


class ModuleWithHook(TinyModule):
    def on_train_batch_end(self) -> None:
        CALLS.append("module")


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def test_tiers_then_tryfirst_trylast_then_registration(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="obs_plugin", kind="observer", factory=lambda: subscriber("obs_plugin")))
    plugins = [
        subscriber("obs_last", kind="observer", trylast=True),
        subscriber("obs", kind="observer"),
        subscriber("late", trylast=True),
        subscriber("plain"),
        subscriber("early", tryfirst=True),
        "obs_plugin",
        subscriber("plain2"),
    ]
    trainer = make_trainer(plugins=plugins, precision=TracedPrecision(trylast=True), **SHORT)
    expected = ["precision", "early", "plain", "plain2", "late", "module", "obs_plugin", "obs", "obs_last"]
    assert trainer.event_order("train_batch_end") == expected  # the Module's place is known before any run

    _fit(trainer, ModuleWithHook())
    assert trainer.event_order("train_batch_end") == expected  # the same after
    assert CALLS == expected  # what event_order says is what happens


def test_surge_plugin_observer_kind_runs_after_module(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="logger_like", kind="observer", factory=lambda: subscriber("x", tryfirst=True)))
    hidden.add(surge.Plugin(name="callback_like", kind="participant", factory=lambda: subscriber("y", trylast=True)))
    trainer = make_trainer(plugins=["logger_like", "callback_like"], **SHORT)
    _fit(trainer, ModuleWithHook())
    assert trainer.event_order("train_batch_end") == ["callback_like", "module", "logger_like"]
    assert CALLS == ["y", "module", "x"]


def test_before_and_after_reorder_across_tiers(hidden: Any, make_trainer: Any) -> None:
    plugins = [
        subscriber("a"),
        subscriber("b", after="obs"),  # a participant pushed behind an observer
        subscriber("obs", kind="observer", before="module"),  # an observer pulled ahead of the Module
        subscriber("c", tryfirst=True, after="a"),  # tryfirst, but a must come first
    ]
    trainer = make_trainer(plugins=plugins, precision=TracedPrecision(after="c"), **SHORT)
    _fit(trainer, ModuleWithHook())
    # A stable topological sort: b only has to follow obs, so it keeps its place before the Module.
    expected = ["a", "c", "precision", "obs", "b", "module"]
    assert trainer.event_order("train_batch_end") == expected
    assert CALLS == expected


def test_constraint_on_an_installed_but_inactive_plugin_is_ignored(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="sleepy", kind="participant", factory=lambda: subscriber("sleepy")))
    trainer = make_trainer(plugins=[subscriber("a", before="sleepy")], **SHORT)
    assert trainer.event_order("train_batch_end") == ["a", "module"]


def test_constraint_may_name_a_provider_plugin(hidden: Any, make_trainer: Any) -> None:
    from surge_devices import CPUAccelerator

    class HookedCPU(CPUAccelerator):
        name = "hooked_cpu"

        @surge.hookimpl
        def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
            CALLS.append("hooked_cpu")

    hidden.add(surge.Plugin(name="hookedacc", kind="provider", provides={"accelerator": {"hooked_cpu": HookedCPU}}))
    trainer = make_trainer(plugins=[subscriber("a", before="hookedacc")], accelerator="hooked_cpu", **SHORT)
    assert trainer.event_order("train_batch_end") == ["a", "hookedacc.accelerator", "module"]
    _fit(trainer)
    assert CALLS == ["a", "hooked_cpu"]


def test_constraint_on_a_plugin_not_installed_is_a_preference(hidden: Any, make_trainer: Any) -> None:
    # "run after wandb if it is there": without wandb installed the handler still runs, in its usual place.
    plugins = [subscriber("b", after=["wandb", "a"]), subscriber("a", before="tensorboard")]
    trainer = make_trainer(plugins=plugins, **SHORT)
    assert trainer.event_order("train_batch_end") == ["a", "b", "module"]  # the installed name still orders
    _fit(trainer)
    assert CALLS == ["a", "b"]


def test_required_constraint_on_a_plugin_not_installed_fails_at_construction(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="csv_logger", kind="observer", factory=lambda: subscriber("csv_logger")))
    with pytest.raises(PluginOrderError) as info:
        make_trainer(plugins=[subscriber("a"), subscriber("b", after="csv_loger!")])
    message = str(info.value)
    assert "'b'" in message and "after 'csv_loger'" in message and "train_batch_end" in message
    assert "did you mean 'csv_logger'?" in message and "known plugins" in message
    assert "drop the '!'" in message


def test_required_constraint_on_an_installed_plugin_orders_like_a_plain_one(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="sleepy", kind="participant", factory=lambda: subscriber("sleepy")))
    trainer = make_trainer(plugins=[subscriber("b", after="a!", before="sleepy!"), subscriber("a")])
    assert trainer.event_order("train_batch_end") == ["a", "b", "module"]  # sleepy is installed, not active


def test_misspelt_preference_is_ignored_with_one_warning(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="csv_logger", kind="observer", factory=lambda: subscriber("csv_logger")))
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        trainer = make_trainer(plugins=[subscriber("typo_author", after="csv_loger")], **SHORT)
        _fit(trainer)  # a run builds its bus again: no second warning
    finally:
        logger.remove(sink)
    warnings = [line for line in lines if "csv_loger" in line]
    assert len(warnings) == 1
    assert "'typo_author'" in warnings[0] and "did you mean 'csv_logger'?" in warnings[0]


def test_constraint_names_must_be_names() -> None:
    with pytest.raises(ValueError, match="plugin names"):
        surge.hookimpl(after=["a", ""])
    with pytest.raises(ValueError, match="plugin names"):
        surge.hookimpl(before="!")


def test_cycle_fails_at_construction_naming_the_plugins(hidden: Any, make_trainer: Any) -> None:
    plugins = [
        subscriber("a", before="b"),
        subscriber("b", before="c"),
        subscriber("c", before="a"),
        subscriber("d", after="c"),  # after the cycle, not on it
        subscriber("e"),
    ]
    with pytest.raises(PluginOrderError) as info:
        make_trainer(plugins=plugins)
    message = str(info.value)
    assert "cycle" in message and "train_batch_end" in message
    assert "['a', 'b', 'c']" in message


def test_cycle_through_the_module_fails_at_construction(hidden: Any, make_trainer: Any) -> None:
    plugins = [subscriber("a", before="module"), subscriber("b", after="module", before="a")]
    # The Module's place is part of the order from the start: no Module needs to be bound to find the cycle.
    with pytest.raises(PluginOrderError, match=r"cycle among plugins \['a', 'b', 'module'\]"):
        make_trainer(plugins=plugins)


@pytest.mark.parametrize("installed", [False, True], ids=["hidden", "installed-defaults"])
def test_event_order_is_the_same_before_and_after_a_run(make_trainer: Any, plugin_env: Any, installed: bool) -> None:
    """One bus per Trainer: every event's order (the Module's place included) is resolved at construction,
    and binding a Module with hooks, or none, at each run changes which handlers are called, not the order."""
    if not installed:
        plugin_env.hide_installed()
    plugins = [subscriber("a", before="module"), subscriber("obs", kind="observer", after="a")]
    trainer = make_trainer(plugins=plugins, **SHORT)
    before = {name: trainer.event_order(name) for name in ev.EVENTS}
    assert all("module" in order for order in before.values())
    _fit(trainer, ModuleWithHook())
    assert {name: trainer.event_order(name) for name in ev.EVENTS} == before
    assert CALLS == ["a", "module", "obs"]
    trainer.validate(TinyModule(), datamodule=TinyDataModule())  # another Module, without the hook
    assert {name: trainer.event_order(name) for name in ev.EVENTS} == before


def test_event_order_of_an_event_nobody_handles(hidden: Any, make_trainer: Any) -> None:
    trainer = make_trainer(plugins=[subscriber("a")])
    assert trainer.event_order("before_backward") == ["module"]  # only the Module's place
    assert trainer.event_order("train_batch_end") == ["a", "module"]


# -- no subscriber, no cost --------------------------------------------------------------------------------


@pytest.fixture
def constructions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts every event payload built, by event name (each event class's ``__init__`` wrapped)."""
    counts: Counter[str] = Counter()
    for name, cls in ev.EVENTS.items():

        def counting(self: Any, *args: Any, _init: Any = cls.__init__, _name: str = name, **kwargs: Any) -> None:
            counts[_name] += 1
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    # the loop builds the per-batch TrainBatchEnd without its __init__ (surge.events._direct_builder): count it too
    build = loops._train_batch_end
    if build is not ev.TrainBatchEnd:  # the class itself: its wrapped __init__ counts it

        def counting_build(*args: Any) -> Any:
            counts["train_batch_end"] += 1
            return build(*args)

        monkeypatch.setattr(loops, "_train_batch_end", counting_build)
    return counts


@pytest.fixture
def pluggy_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = pluggy.HookCaller.__call__

    def counting(self: pluggy.HookCaller, *args: Any, **kwargs: Any) -> Any:
        if self.name in ev.EVENTS:  # pytest's own hooks go through pluggy too
            calls.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pluggy.HookCaller, "__call__", counting)
    return calls


FIT = {"max_epochs": 2, "limit_train_batches": 2, "limit_val_batches": 1}


def test_no_subscriber_builds_no_payload_and_makes_no_call(
    hidden: Any, make_trainer: Any, constructions: Counter[str], pluggy_calls: list[str]
) -> None:
    trainer = make_trainer(**FIT)
    _fit(trainer)
    assert trainer.global_step == 4  # the run did happen
    assert constructions == Counter()
    assert pluggy_calls == []
    for name in ev.EVENTS:
        assert getattr(trainer._bus, name) is None, name


def test_one_subscriber_builds_only_its_payloads(
    hidden: Any, make_trainer: Any, constructions: Counter[str], pluggy_calls: list[str]
) -> None:
    class CountBatches:
        seen = 0

        @surge.hookimpl
        def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
            self.seen += 1

    counter = CountBatches()
    trainer = make_trainer(plugins=[counter], **FIT)
    _fit(trainer)
    assert constructions == Counter({"train_batch_end": 4})
    assert counter.seen == 4
    assert pluggy_calls == []  # Surge dispatches itself; pluggy only registers and validates
    assert trainer._bus.train_batch_end is not None
    assert trainer._bus.train_batch_start is None


def test_module_hook_is_a_subscriber_for_cost_too(hidden: Any, make_trainer: Any, constructions: Counter[str]) -> None:
    class Hooked(TinyModule):
        def on_validation_batch_end(self, outputs: Any) -> None:
            pass

    _fit(make_trainer(num_sanity_val_steps=1, **FIT), Hooked())
    assert constructions == Counter({"validation_batch_end": 3})  # sanity check + one per epoch


# -- the exception policy --------------------------------------------------------------------------------

BOOM = ValueError("boom at batch 1")


class Boom:
    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        if event.batch_idx == 1:
            raise BOOM


class BadExceptionHandler:
    """Its own exception and teardown handlers raise; every other subscriber must still be called."""

    surge_name = "bad_handler"

    @surge.hookimpl(tryfirst=True)
    def exception(self, event: ev.Exception_) -> None:
        raise RuntimeError("the exception handler itself failed")

    @surge.hookimpl(tryfirst=True)
    def teardown(self, event: ev.Teardown) -> None:
        raise OSError("the teardown handler failed too")


class FailureModule(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, Any]] = []

    def on_exception(self, error: BaseException, stage: str) -> None:
        self.seen.append(("exception", error))

    def teardown(self, stage: str) -> None:
        self.seen.append(("teardown", stage))


def test_plugin_error_fires_exception_once_and_reraises_the_original(hidden: Any, make_trainer: Any) -> None:
    hidden.add(surge.Plugin(name="boom", kind="participant", factory=Boom), distribution="surge-boom", version="1.2.3")
    participant, observer = EventRecorder("participant_rec"), EventRecorder("observer_rec", kind="observer")
    model, data = FailureModule(), TinyDataModule()
    trainer = make_trainer(
        plugins=["boom", BadExceptionHandler(), participant, observer],
        max_epochs=3,
        limit_train_batches=4,
        limit_val_batches=0,
    )
    assert trainer.event_order("exception") == ["bad_handler", "participant_rec", "module", "observer_rec"]

    with pytest.raises(ValueError) as info:
        trainer.fit(model, datamodule=data)

    assert info.value is BOOM
    notes = BOOM.__notes__
    blame = [note for note in notes if "boom" in note and "train_batch_end" in note]
    assert len(blame) == 1 and "surge-boom" in blame[0] and "1.2.3" in blame[0]
    assert any("teardown also failed" in note and "OSError" in note for note in notes)
    assert trainer.state.status == "failed"

    for recorder in (participant, observer):
        assert recorder.names().count("exception") == 1
        (event,) = recorder.of("exception")
        assert event.error is BOOM and event.stage == "fit"  # type: ignore[attr-defined]
        assert recorder.names()[-2:] == ["exception", "teardown"]
        assert recorder.names().count("train_batch_end") == 1  # no step after the failure
    assert model.seen == [("exception", BOOM), ("teardown", "fit")]
    assert data.calls[-1] == "teardown:fit"


def test_error_in_training_step_is_not_blamed_on_a_plugin(hidden: Any, make_trainer: Any) -> None:
    error = KeyError("bad batch")

    class Broken(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise error

    recorder = EventRecorder()
    trainer = make_trainer(plugins=[recorder], **SHORT)
    with pytest.raises(KeyError) as info:
        _fit(trainer, Broken())
    assert info.value is error
    assert not getattr(error, "__notes__", [])
    assert [e.error for e in recorder.of("exception")] == [error]  # type: ignore[attr-defined]
    assert recorder.names()[-2:] == ["exception", "teardown"]


def test_teardown_error_after_a_clean_run_is_raised_after_all_handlers(hidden: Any, make_trainer: Any) -> None:
    hidden.add(
        surge.Plugin(name="leaky", kind="participant", factory=BadExceptionHandler),
        distribution="surge-leaky",
        version="0.3.0",
    )
    participant, observer = EventRecorder("participant_rec"), EventRecorder("observer_rec", kind="observer")
    model, data = FailureModule(), TinyDataModule()
    trainer = make_trainer(plugins=["leaky", participant, observer], **SHORT)
    with pytest.raises(OSError, match="teardown handler failed") as info:
        trainer.fit(model, datamodule=data)
    assert any("leaky" in n and "surge-leaky 0.3.0" in n and "'teardown'" in n for n in info.value.__notes__)
    assert participant.names()[-1] == observer.names()[-1] == "teardown"
    assert "exception" not in participant.names()
    assert model.seen == [("teardown", "fit")]
    assert data.calls[-1] == "teardown:fit"
    assert trainer.state.status == "failed"


def test_handler_error_outside_a_run_names_plugin_and_event(hidden: Any, make_trainer: Any) -> None:
    class BadInit:
        @surge.hookimpl
        def init_end(self, event: ev.InitEnd) -> None:
            raise RuntimeError("cannot start")

    with pytest.raises(RuntimeError, match="cannot start") as info:
        make_trainer(plugins=[BadInit()])
    assert any("BadInit" in note and "'init_end'" in note for note in info.value.__notes__)


# -- hook validation -------------------------------------------------------------------------------------


def test_misspelt_hook_is_rejected_naming_it(hidden: Any, make_trainer: Any) -> None:
    class Typo:
        @surge.hookimpl
        def train_batch_ennd(self, event: ev.TrainBatchEnd) -> None:
            pass

    with pytest.raises(surge.PluginError) as info:
        make_trainer(plugins=[Typo()])
    message = str(info.value)
    assert "train_batch_ennd" in message
    assert "plugin 'Typo' (" in message and " object at 0x" not in message  # named like other plugin errors
    assert "surge.events.EVENTS" in message


def test_misspelt_hook_of_an_installed_plugin_names_its_distribution(hidden: Any, make_trainer: Any) -> None:
    class Typo:
        @surge.hookimpl
        def validation_epoch_ends(self, event: Any) -> None:
            pass

    hidden.add(surge.Plugin(name="typo", kind="participant", factory=Typo), distribution="surge-typo", version="2.0")
    with pytest.raises(surge.PluginError) as info:
        make_trainer(plugins=["typo"])
    message = str(info.value)
    assert "validation_epoch_ends" in message and "surge-typo 2.0" in message


def test_misspelt_hook_gets_a_did_you_mean(hidden: Any, make_trainer: Any) -> None:
    class Typos:
        @surge.hookimpl
        def train_batch_ennd(self, event: ev.TrainBatchEnd) -> None:
            pass

        @surge.hookimpl
        def on_validation_epoch_end(self, event: ev.ValidationEpochEnd) -> None:
            pass

    with pytest.raises(surge.PluginError) as info:
        make_trainer(plugins=[Typos()])
    message = str(info.value)
    assert "unknown hook 'train_batch_ennd'; did you mean 'train_batch_end'?" in message
    assert "unknown hook 'on_validation_epoch_end'; did you mean 'validation_epoch_end'?" in message


class Unmarked:
    """Handlers written as for the Module: no marker, and one with its on_ prefix."""

    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        CALLS.append("unmarked")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        CALLS.append("on_validation_end")


def test_unmarked_method_named_after_an_event_is_refused(hidden: Any, make_trainer: Any, tmp_path: Any) -> None:
    hidden.add(surge.Plugin(name="unmarked", kind="participant", factory=Unmarked), distribution="surge-unmarked")
    with pytest.raises(surge.PluginError) as info:
        make_trainer(plugins=["unmarked"])
    message = str(info.value)
    assert "plugin 'unmarked' (distribution surge-unmarked 0.0.1)" in message
    assert "method 'train_batch_end' is named after the event 'train_batch_end' but is not marked" in message
    assert "mark it @surge.hookimpl" in message and "rename it (e.g. '_train_batch_end')" in message
    assert "method 'on_validation_end'" in message and "name it 'validation_end'" in message
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_helpers_and_backend_methods_named_like_events_are_allowed(hidden: Any, make_trainer: Any) -> None:
    class Helpers:
        setup_done = False  # not a method
        teardown = None

        def _train_batch_end(self) -> None:  # private helper
            pass

        @surge.hookimpl(specname="train_batch_end")
        def count(self, event: ev.TrainBatchEnd) -> None:
            CALLS.append("count")

    from surge_devices import CPUAccelerator

    class Closing(CPUAccelerator):
        def teardown(self) -> None:  # the backend API's teardown (the strategy calls it), not the event
            CALLS.append("accelerator teardown")

    trainer = make_trainer(plugins=[Helpers()], accelerator=Closing(), **SHORT)
    _fit(trainer)
    assert CALLS == ["count", "accelerator teardown"]


def test_hook_with_a_wrong_argument_is_rejected(hidden: Any, make_trainer: Any) -> None:
    class WrongArg:
        @surge.hookimpl
        def train_batch_end(self, evt: Any) -> None:
            pass

    with pytest.raises(surge.PluginError, match="train_batch_end"):
        make_trainer(plugins=[WrongArg()])


def test_hook_taking_no_argument_is_allowed(hidden: Any, make_trainer: Any) -> None:
    class NoArg:
        calls = 0

        @surge.hookimpl
        def train_batch_end(self) -> None:
            self.calls += 1

    plugin = NoArg()
    _fit(make_trainer(plugins=[plugin], **SHORT))
    assert plugin.calls == 1


def test_wrapper_hooks_are_rejected(hidden: Any, make_trainer: Any) -> None:
    class Wrapper:
        @pluggy.HookimplMarker("surge")(wrapper=True)
        def train_batch_end(self, event: Any) -> Any:
            yield

    with pytest.raises(surge.PluginError, match="wrapper"):
        make_trainer(plugins=[Wrapper()])


def test_two_plugins_with_one_name_are_rejected(hidden: Any, make_trainer: Any) -> None:
    with pytest.raises(surge.PluginError, match="'twin'"):
        make_trainer(plugins=[subscriber("twin"), subscriber("twin")])


def test_hookimpl_rejects_tryfirst_with_trylast() -> None:
    with pytest.raises(ValueError, match="tryfirst and trylast"):
        surge.hookimpl(tryfirst=True, trylast=True)


# -- tracing ---------------------------------------------------------------------------------------------


def test_trace_logs_each_dispatch_in_order(hidden: Any, make_trainer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURGE_TRACE_PLUGINS", "1")
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), format="{message}", level="INFO")
    try:
        trainer = make_trainer(plugins=[subscriber("a"), subscriber("b", tryfirst=True)], **SHORT)
        _fit(trainer)
    finally:
        logger.remove(sink)
    assert CALLS == ["b", "a"]
    traces = [m for m in messages if m.startswith("surge trace: train_batch_end")]
    assert len(traces) == 1
    assert traces[0].index(" b ") < traces[0].index(" a ")


def test_a_subscriber_can_switch_off_handlers_it_does_not_need(make_trainer: Any) -> None:
    class Optional:
        surge_name = "optional"

        def __init__(self, per_step: bool) -> None:
            self.per_step, self.calls = per_step, 0

        @property
        def surge_unused_hooks(self) -> frozenset[str]:
            return frozenset() if self.per_step else frozenset({"train_batch_end"})

        @surge.hookimpl
        def train_batch_end(self, event: Any) -> None:
            self.calls += 1

        @surge.hookimpl
        def train_end(self, event: Any) -> None:
            self.ended = True

    for per_step, calls in ((True, 8), (False, 0)):
        plugin = Optional(per_step)
        trainer = make_trainer(max_epochs=1, num_sanity_val_steps=0, plugins=[plugin], enable_progress_bar=False)
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
        assert plugin.calls == calls and plugin.ended  # its other handlers still run
        assert ("optional" in trainer.event_order("train_batch_end")) is per_step


def test_dispatchers_are_timed_only_for_a_profiler_with_a_handler_timer(hidden: Any, make_trainer: Any) -> None:
    from surge.events.bus import _TimedDispatch

    class Timing:
        surge_name = "timing_profiler"

        def __init__(self) -> None:
            self.timed: list[tuple[str, str]] = []

        def handler_timer(self, event: str, name: str, start: float, end: float) -> None:
            self.timed.append((event, name))

        @surge.hookimpl
        def fit_start(self, event: Any) -> None: ...

    class Plain:  # a profiler without handler_timer (like surge-profilers' advanced one)
        surge_name = "plain_profiler"

        @surge.hookimpl
        def fit_start(self, event: Any) -> None: ...

    def timed(profiler: Any) -> list[str]:
        trainer = make_trainer(plugins=[subscriber("a")], profiler=profiler, **SHORT)
        _fit(trainer)
        return [name for name in ev.EVENTS if isinstance(getattr(trainer._bus, name), _TimedDispatch)]

    timing = Timing()
    assert "train_batch_end" in timed(timing) and ("train_batch_end", "a") in timing.timed
    assert timed(None) == [] and timed(Plain()) == []
