"""Subscription filters (``@surge.hookimpl(every_n_steps=, every_n_epochs=, once=, when=)``).

Each filtered handler is compared with what an unfiltered handler, seeing every event of the same run, says the
filter should have let through; over combinations of accumulation, epochs and filters (the bugs live where
two features meet). A handler without a filter gets no wrapper at all.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
import surge
from surge.errors import PluginError
from surge.events import bus as _bus
from surge.testing import TinyDataModule, TinyModule


@pytest.fixture
def hidden(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    return plugin_env


class Everything:
    """Records (event, global_step, epoch) of every train_batch_end and train_epoch_end, unfiltered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        self.seen.append(("train_batch_end", event.trainer.global_step, event.trainer.current_epoch))

    @surge.hookimpl
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        self.seen.append(("train_epoch_end", event.trainer.global_step, event.epoch))


def _filtered_recorder(**marks: Any) -> Any:
    class Filtered:
        def __init__(self) -> None:
            self.seen: list[tuple[str, int, int]] = []
            self.surge_name = "filtered-" + "-".join(sorted(marks))

        @surge.hookimpl(**marks)
        def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
            self.seen.append(("train_batch_end", event.trainer.global_step, event.trainer.current_epoch))

        @surge.hookimpl(**marks)
        def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
            self.seen.append(("train_epoch_end", event.trainer.global_step, event.epoch))

    return Filtered()


def _expected(seen: list[tuple[str, int, int]], marks: dict[str, Any]) -> list[tuple[str, int, int]]:
    """What the filter's documented semantics let through, computed from the unfiltered record, per handler."""
    out = []
    for event in ("train_batch_end", "train_epoch_end"):
        last_step, done = -1, False
        for entry in (e for e in seen if e[0] == event):
            _, step, epoch = entry
            if done:
                continue
            n = marks.get("every_n_steps")
            if n is not None:
                if step == 0 or step % n or step == last_step:
                    continue
                last_step = step
            m = marks.get("every_n_epochs")
            if m is not None and (epoch + 1) % m:
                continue
            when = marks.get("when")
            if when is not None and not when.plain(entry):
                continue
            done = bool(marks.get("once"))
            out.append(entry)
    return sorted(out, key=seen.index)


class _OddStep:
    """A ``when`` predicate with a plain twin the expectation can call on a record."""

    def __call__(self, event: Any) -> bool:
        return event.trainer.global_step % 2 == 1

    @staticmethod
    def plain(entry: tuple[str, int, int]) -> bool:
        return entry[1] % 2 == 1


FILTERS = [
    {"every_n_steps": 1},
    {"every_n_steps": 3},
    {"every_n_epochs": 2},
    {"once": True},
    {"when": _OddStep()},
    {"every_n_steps": 2, "once": True},
    {"every_n_steps": 2, "every_n_epochs": 2},
    {"every_n_epochs": 3, "when": _OddStep()},
]


@pytest.mark.parametrize(("accumulate", "epochs"), list(itertools.product([1, 3], [1, 4])))
def test_filters_let_through_what_they_promise(hidden: Any, tmp_path: Any, accumulate: int, epochs: int) -> None:
    reference = Everything()
    recorders = [_filtered_recorder(**marks) for marks in FILTERS]
    for i, recorder in enumerate(recorders):
        recorder.surge_name += f"-{i}"
    trainer = surge.Trainer(
        max_epochs=epochs,
        limit_train_batches=7,
        limit_val_batches=0,
        accumulate_grad_batches=accumulate,
        plugins=[reference, *recorders],
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert len(reference.seen) == epochs * 8
    for marks, recorder in zip(FILTERS, recorders, strict=True):
        assert recorder.seen == _expected(reference.seen, marks), marks
    # a filter passes something in each configuration except where its condition never holds
    assert recorders[0].seen and recorders[3].seen == [
        reference.seen[0],
        next(e for e in reference.seen if e[0] == "train_epoch_end"),
    ]


def test_a_filter_starts_afresh_with_each_run(hidden: Any, tmp_path: Any) -> None:
    recorder = _filtered_recorder(once=True)
    trainer = surge.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=0, plugins=[recorder], default_root_dir=str(tmp_path)
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    trainer.validate(TinyModule(), datamodule=TinyDataModule())  # a second run: its own bus, its own filter state
    second = surge.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=0, plugins=[recorder], default_root_dir=str(tmp_path)
    )
    second.fit(TinyModule(), datamodule=TinyDataModule())
    assert [e[0] for e in recorder.seen] == ["train_batch_end", "train_epoch_end"] * 2


def test_no_filter_no_wrapper() -> None:
    class Plain:
        @surge.hookimpl
        def train_batch_end(self, event: Any) -> None: ...

    class Filtered:
        @surge.hookimpl(every_n_steps=5)
        def train_batch_end(self, event: Any) -> None: ...

    plain, filtered = Plain(), Filtered()
    impls = {
        name: _bus._register([_bus.Subscriber(name, obj, _bus.Tier.PARTICIPANT)]).hook.train_batch_end.get_hookimpls()
        for name, obj in (("plain", plain), ("filtered", filtered))
    }
    subs = {
        name: _bus.Subscriber(name, obj, _bus.Tier.PARTICIPANT)
        for name, obj in (("plain", plain), ("filtered", filtered))
    }
    assert _bus._caller(impls["plain"][0], subs["plain"]) == plain.train_batch_end  # the bound method itself
    assert _bus._caller(impls["filtered"][0], subs["filtered"]) != filtered.train_batch_end


@pytest.mark.parametrize(
    ("marks", "message"),
    [
        ({"every_n_steps": 0}, "every_n_steps takes an int >= 1"),
        ({"every_n_epochs": 1.5}, "every_n_epochs takes an int >= 1"),
        ({"every_n_steps": True}, "every_n_steps takes an int >= 1"),
        ({"when": "step > 3"}, "when= takes a predicate of the event"),
    ],
)
def test_bad_filters_are_refused_where_they_are_written(marks: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        surge.hookimpl(**marks)


# -- n read from an attribute of the plugin (``every_n_steps="every_n_train_steps"``) ----------------------------


def _fit_with(tmp_path: Any, *plugins: Any, accumulate: int = 1, epochs: int = 1) -> surge.Trainer:
    trainer = surge.Trainer(
        max_epochs=epochs,
        limit_train_batches=7,
        limit_val_batches=0,
        accumulate_grad_batches=accumulate,
        plugins=list(plugins),
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return trainer


@pytest.mark.parametrize("name", ["every_n_steps", "every_n_epochs"])
def test_an_attribute_holding_n_filters_as_the_int_does(hidden: Any, tmp_path: Any, name: str) -> None:
    reference = Everything()
    recorder = _filtered_recorder(**{name: "period"})
    recorder.period = 3
    _fit_with(tmp_path, reference, recorder, accumulate=2, epochs=4)
    assert recorder.seen == _expected(reference.seen, {name: 3})
    assert 0 < len(recorder.seen) < len(reference.seen)


@pytest.mark.parametrize("off", [0, None])
@pytest.mark.parametrize("name", ["every_n_steps", "every_n_epochs"])
def test_zero_or_none_in_the_attribute_switches_the_handler_off(
    hidden: Any, tmp_path: Any, name: str, off: int | None
) -> None:
    recorder = _filtered_recorder(**{name: "period"})
    recorder.period = off
    trainer = _fit_with(tmp_path, recorder)
    assert recorder.seen == []
    assert trainer._bus.train_batch_end is None and trainer._bus.train_epoch_end is None  # no dispatcher at all
    reference = Everything()
    trainer = _fit_with(tmp_path, reference, recorder)  # another listener keeps the events, without this handler
    assert recorder.seen == [] and reference.seen
    assert trainer.event_order("train_batch_end") == trainer.event_order("train_epoch_end") == ["Everything", "module"]


class Periodic:
    """A handler whose n is the attribute ``period``; ``calls`` records every event it handles."""

    def __init__(self, period: Any) -> None:
        self.period = period
        self.calls: list[str] = []

    @surge.hookimpl
    def setup(self, event: surge.events.Setup) -> None:
        self.calls.append("setup")

    @surge.hookimpl(every_n_steps="period")
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        self.calls.append("train_batch_end")


@pytest.mark.parametrize("bad", ["3", -1, 1.5, True])
def test_a_bad_attribute_value_is_refused_naming_the_plugin_and_the_attribute(
    hidden: Any, tmp_path: Any, bad: Any
) -> None:
    message = rf"plugin 'Periodic' .*handler 'train_batch_end'.*attribute 'period', which is {re.escape(repr(bad))}; it must be an int"
    with pytest.raises(surge.PluginError, match=message):
        surge.Trainer(plugins=[Periodic(bad)], default_root_dir=str(tmp_path))
    periodic = Periodic(2)
    trainer = surge.Trainer(max_epochs=1, limit_train_batches=4, plugins=[periodic], default_root_dir=str(tmp_path))
    periodic.period = bad  # read again when the run starts: refused before any event
    with pytest.raises(surge.PluginError, match=message):
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert periodic.calls == []


class _StepRecorder:
    surge_name = "step_recorder"

    def __init__(self, save_at: int | None = None, path: str = "") -> None:
        self.seen: list[tuple[int, int]] = []
        self.save_at, self.path = save_at, path

    @surge.hookimpl(every_n_steps=1)
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        self.seen.append((event.batch_idx, event.trainer.global_step))

    @surge.hookimpl(trylast=True, specname="train_batch_end")
    def save(self, event: surge.events.TrainBatchEnd) -> None:
        if event.batch_idx == self.save_at:
            event.trainer.save_checkpoint(self.path)


def test_a_resumed_run_does_not_handle_a_step_again(hidden: Any, tmp_path: Any) -> None:
    # inside an accumulation window the checkpoint's step was already handled: the resumed run must not repeat it
    def run(recorder: _StepRecorder, ckpt_path: str | None = None) -> None:
        trainer = surge.Trainer(
            max_epochs=1,
            limit_train_batches=8,
            limit_val_batches=0,
            accumulate_grad_batches=4,
            plugins=[recorder],
            default_root_dir=str(tmp_path),
            enable_checkpointing=False,
        )
        trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)

    path = str(tmp_path / "mid-window.ckpt")
    full = _StepRecorder(save_at=4, path=path)
    run(full)
    assert full.seen == [(3, 1), (7, 2)]
    resumed = _StepRecorder()
    run(resumed, ckpt_path=path)
    assert resumed.seen == [(7, 2)]


def test_a_misspelt_attribute_is_refused_not_taken_for_off(hidden: Any, tmp_path: Any) -> None:
    class Misspelt:
        surge_name = "misspelt"
        every_n_train_steps = 2

        @surge.hookimpl(every_n_steps="every_n_train_step")
        def train_batch_end(self, event: Any) -> None: ...

    with pytest.raises(PluginError, match=r"plugin 'misspelt'.*attribute 'every_n_train_step', which it does not have"):
        surge.Trainer(plugins=[Misspelt()], default_root_dir=str(tmp_path))
