"""Fault injection: a plugin raises in each event in turn, in every stage, and the run fails cleanly.

The raising plugin (``faulty``) is installed as a discovered distribution (``surge-faulty 9.8.7``) with a
single handler, for the event under test, that raises on its first call. Beside it run the default
checkpoint plugin (saving every step, with ``last.ckpt`` overwritten in place), the CSV logger, a second
recording participant and a fake logger (an observer that notes the run's status at teardown).

Which events a stage fires is not written down here: ``fired`` records each stage once with an
:class:`EventRecorder`. A stage that does not fire an event must never call its handler and must finish.

Ordinary events, whenever a handler raises (``docs/events.md``, "Failures and interrupts"): the original
exception object reaches the caller with one note naming plugin, distribution, version and event;
``exception`` fires exactly once and every other subscriber sees it; ``teardown`` runs last (the
DataModule's too); the status is ``"failed"`` when the loggers tear down; the CSV file on disk holds every
row written, the last one the last ``log_metrics`` seen; every ``*.ckpt`` passes
:func:`surge.checkpoint.verify` and no temp file is left.

Events with their own rules, each tested below: ``init_start``/``init_end`` fire in ``Trainer(...)``, before
any run (the error is raised from the constructor, no ``exception``/``teardown`` event, nothing on disk);
``exception`` and ``keyboard_interrupt`` run every handler and log a failing one (the run ends as it would
have: the original error re-raised, or the interrupted run returning); ``teardown`` runs every handler and
then raises the first failure (status ``"failed"``).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import surge
import surge.events as ev
from loguru import logger
from surge import checkpoint as store
from surge.events import EVENTS
from surge.testing import EventRecorder, PluginEnv, TinyDataModule, TinyModule
from surge_csv import read_metrics

SPECIAL = ("init_start", "init_end", "exception", "keyboard_interrupt", "teardown")
ORDINARY = [name for name in EVENTS if name not in SPECIAL]
STAGES = ("fit", "fit_resumed", "validate", "test", "predict")
"""``fit_resumed``: a fit continued from a mid-epoch checkpoint (it fires the checkpoint-load events)."""

DISTRIBUTION, VERSION = "surge-faulty", "9.8.7"


class InjectedFault(Exception):
    pass


class StepFailure(Exception):
    pass


class Faulty:
    """Raises a new :class:`InjectedFault` from the first call of its one handler (set per class)."""

    def __init__(self) -> None:
        self.calls = 0
        self.raised: InjectedFault | None = None

    def _fail(self, event: ev.Event) -> None:
        self.calls += 1
        if self.raised is None:
            self.raised = InjectedFault(f"injected into {event.name}")
            raise self.raised


def _faulty_class(event_name: str) -> type[Faulty]:
    def handler(self: Faulty, event: ev.Event) -> None:
        self._fail(event)

    handler.__name__ = event_name
    return type(f"Faulty_{event_name}", (Faulty,), {event_name: surge.hookimpl(handler)})


@dataclass
class FakeLogger:
    """An observer standing in for a remote logger: what it saw of the failure and the status it would
    record at teardown."""

    exceptions: list[BaseException] = field(default_factory=list)
    interrupts: int = 0
    statuses: list[str] = field(default_factory=list)

    @surge.hookimpl
    def exception(self, event: ev.Exception_) -> None:
        self.exceptions.append(event.error)

    @surge.hookimpl
    def keyboard_interrupt(self, event: ev.KeyboardInterrupt_) -> None:
        self.interrupts += 1

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        self.statuses.append(event.trainer.state.status)


class FailingModule(TinyModule):
    """TinyModule whose first step in stage ``fail_in`` (the sanity check aside) raises
    :class:`StepFailure`, or, with ``sigint=True``, sends this process a real SIGINT (a first Ctrl-C) and
    goes on."""

    def __init__(self, fail_in: str | None = None, sigint: bool = False) -> None:
        super().__init__()
        self.fail_in, self.sigint = fail_in, sigint
        self.error = StepFailure(f"step failed in {fail_in}")
        self.failed = False

    def _maybe_fail(self, stage: str, batch_idx: int) -> None:
        if stage != self.fail_in or self.failed or self.trainer.sanity_checking:
            return
        self.failed = True
        if self.sigint:
            signal.raise_signal(signal.SIGINT)
        else:
            raise self.error

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self._maybe_fail("fit", batch_idx)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._maybe_fail("validate", batch_idx)
        super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._maybe_fail("test", batch_idx)
        super().test_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self._maybe_fail("predict", batch_idx)
        return super().predict_step(batch, batch_idx, dataloader_idx)


TRAINER = {
    "max_epochs": 1,
    "limit_train_batches": 2,
    "limit_val_batches": 2,
    "limit_test_batches": 2,
    "limit_predict_batches": 2,
    "log_every_n_steps": 1,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


@dataclass
class Run:
    """One stage run with the faulty plugin installed, and what every party saw."""

    stage: str
    root: Path
    trainer: surge.Trainer | None = None
    faulty: Faulty | None = None
    recorder: EventRecorder = field(default_factory=lambda: EventRecorder("recorder"))
    fake_logger: FakeLogger = field(default_factory=FakeLogger)
    datamodule: TinyDataModule = field(default_factory=TinyDataModule)
    error: BaseException | None = None
    result: Any = None

    @property
    def kind(self) -> str:
        """The Trainer's stage name (``fit_resumed`` runs ``fit``)."""
        return "fit" if self.stage == "fit_resumed" else self.stage

    def plugin(self, name: str) -> Any:
        assert self.trainer is not None
        return next(s.obj for s in self.trainer._plugin_subscribers if s.name == name)


def run_stage(
    stage: str,
    root: Path,
    source: str,
    fault_in: str | None,
    module: surge.Module | None = None,
    logs: list[str] | None = None,
) -> Run:
    """Build a Trainer with ``faulty`` raising in ``fault_in`` (``None``: no faulty plugin) and run
    ``stage``; the error that reached the caller is in ``Run.error``. ``source`` is the mid-epoch checkpoint
    that ``fit_resumed`` continues from and that the evaluation stages load their weights from."""
    run = Run(stage, root)
    plugins: dict[str, Any] = {
        "checkpoint": {"every_n_train_steps": 1, "save_last": True},
        "recorder": True,
        "fake_logger": True,
    }
    sink = logger.add(lambda m: logs.append(str(m)), level="ERROR") if logs is not None else None
    with PluginEnv() as env:
        env.add(surge.Plugin(name="recorder", kind="participant", factory=lambda: run.recorder))
        env.add(surge.Plugin(name="fake_logger", kind="observer", factory=lambda: run.fake_logger))
        if fault_in is not None:

            def build() -> Faulty:
                run.faulty = _faulty_class(fault_in)()
                return run.faulty

            env.add(
                surge.Plugin(name="faulty", kind="participant", factory=build),
                distribution=DISTRIBUTION,
                version=VERSION,
            )
            plugins["faulty"] = True
        try:
            run.trainer = surge.Trainer(plugins=plugins, default_root_dir=str(root), **TRAINER)
            run.recorder.clear()  # from here on: what the stage fired
            entry = getattr(run.trainer, run.kind)
            ckpt = None if stage == "fit" else source
            run.result = entry(module or TinyModule(), datamodule=run.datamodule, ckpt_path=ckpt)
        except Exception as exc:
            run.error = exc
        finally:
            if sink is not None:
                logger.remove(sink)
    return run


class SaveAfterFirstBatch:
    surge_name = "save_after_first_batch"

    def __init__(self, path: str) -> None:
        self.path = path

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        if event.batch_idx == 0:
            event.trainer.save_checkpoint(self.path)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint saved after the first training batch of a fit (without the checkpoint plugin, so that a
    resumed run restores no state pointing into this directory)."""
    root = tmp_path_factory.mktemp("source")
    path = str(root / "mid-epoch.ckpt")
    trainer = surge.Trainer(
        plugins=[SaveAfterFirstBatch(path)], default_root_dir=str(root), enable_checkpointing=False, **TRAINER
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return path


@pytest.fixture(scope="module")
def fired(source: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The events each stage fires, in order, as recorded in a run without the faulty plugin."""
    seen = {}
    for stage in STAGES:
        run = run_stage(stage, tmp_path_factory.mktemp(f"fired-{stage}"), source, None)
        assert run.error is None, f"{stage} failed without a fault: {run.error!r}"
        seen[stage] = run.recorder.names()
    return seen


def _note(event_name: str) -> str:
    return (
        f"surge: raised by plugin 'faulty' (distribution {DISTRIBUTION} {VERSION}) while handling event '{event_name}'"
    )


def _assert_checkpoints_intact(root: Path, source: str) -> None:
    for path in [*root.rglob("*.ckpt"), Path(source)]:
        store.verify(str(path))  # raises CheckpointError naming the file
    temps = [p.name for p in root.rglob("*.surge-tmp")]
    assert not temps, f"temp files of a checkpoint save left behind: {temps}"


def _assert_csv_flushed(run: Run) -> None:
    """The CSV file on disk ends with one row per ``log_metrics`` the run dispatched, in order (a resumed
    fit's file starts with the rows it continues)."""
    written: list[ev.LogMetrics] = run.recorder.of("log_metrics")  # type: ignore[assignment]
    csv = run.plugin("csv")
    if csv.file is None or not Path(csv.file.path).exists():
        assert not written, "log_metrics fired but the CSV logger wrote no file"
        return
    rows = read_metrics(csv.file.url)
    assert len(rows) >= len(written)
    for row, event in zip(rows[len(rows) - len(written) :], written, strict=True):
        assert row["step"] == event.step
        for name, value in event.metrics.items():
            assert row[name] == pytest.approx(value, rel=1e-6), name


def test_every_event_is_exercised(fired: dict[str, list[str]]) -> None:
    """Each ordinary event fires in some stage (so its fault test raises somewhere), and the special ones
    have their own tests below: the full event list is covered."""
    everywhere = {name for names in fired.values() for name in names}
    assert set(ORDINARY) <= everywhere, f"never fired in any stage: {sorted(set(ORDINARY) - everywhere)}"
    assert set(ORDINARY) | set(SPECIAL) == set(EVENTS)
    assert all(names[-1] == "teardown" for names in fired.values())


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("event_name", ORDINARY)
def test_a_plugin_raising_in_an_event_fails_the_run_cleanly(
    event_name: str, stage: str, fired: dict[str, list[str]], source: str, tmp_path: Path
) -> None:
    run = run_stage(stage, tmp_path, source, event_name)
    assert run.trainer is not None and run.faulty is not None
    if event_name not in fired[stage]:  # this stage never fires it: the handler is never called
        assert run.error is None, f"{stage} failed although it never fires {event_name}: {run.error!r}"
        assert run.faulty.calls == 0 and run.trainer.state.status == "finished"
        return

    error = run.error
    assert error is not None and error is run.faulty.raised, f"the caller got {error!r}, not the original fault"
    assert getattr(error, "__notes__", []) == [_note(event_name)]

    names = run.recorder.names()
    assert names.count("exception") == 1 and names[-2:] == ["exception", "teardown"], names
    (exception,) = run.recorder.of("exception")
    assert exception.error is error and exception.stage == run.kind  # type: ignore[attr-defined]
    (teardown,) = run.recorder.of("teardown")
    assert teardown.stage == run.kind  # type: ignore[attr-defined]
    assert run.fake_logger.exceptions == [error]
    assert run.fake_logger.statuses == ["failed"]
    assert run.trainer.state.status == "failed"
    assert run.datamodule.calls[-1] == f"teardown:{run.kind}"
    _assert_csv_flushed(run)
    _assert_checkpoints_intact(tmp_path, source)


@pytest.mark.parametrize("event_name", ["init_start", "init_end"])
def test_a_plugin_raising_while_the_trainer_is_built(event_name: str, source: str, tmp_path: Path) -> None:
    """Before any run: the constructor raises the fault, no run event fires, nothing is written."""
    run = run_stage("fit", tmp_path, source, event_name)
    assert run.trainer is None and run.faulty is not None
    assert run.error is run.faulty.raised and run.error is not None
    assert run.error.__notes__ == [_note(event_name)]
    # dispatch of the failing event stops at the failing handler (the recorder runs after it)
    assert run.recorder.names() == ([] if event_name == "init_start" else ["init_start"])
    assert run.fake_logger.exceptions == [] and run.fake_logger.statuses == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_plugin_raising_in_exception(stage: str, source: str, tmp_path: Path) -> None:
    """The run fails (a step raises); the ``exception`` handler that raises too is logged, every other
    subscriber still sees ``exception`` once, and the caller gets the step's error, unchanged."""
    logs: list[str] = []
    module = FailingModule(fail_in="fit" if stage == "fit_resumed" else stage)
    run = run_stage(stage, tmp_path, source, "exception", module=module, logs=logs)
    assert run.trainer is not None and run.faulty is not None and run.faulty.raised is not None
    assert run.error is module.error and not getattr(module.error, "__notes__", [])
    assert run.faulty.calls == 1
    assert run.recorder.names()[-2:] == ["exception", "teardown"] and run.recorder.names().count("exception") == 1
    assert run.fake_logger.exceptions == [module.error] and run.fake_logger.statuses == ["failed"]
    assert run.trainer.state.status == "failed"
    assert any(f"plugin 'faulty' (distribution {DISTRIBUTION} {VERSION})" in m and "'exception'" in m for m in logs)
    assert run.faulty.raised.__notes__ == [_note("exception")]
    _assert_csv_flushed(run)
    _assert_checkpoints_intact(tmp_path, source)


@pytest.mark.parametrize("stage", STAGES)
def test_a_plugin_raising_in_keyboard_interrupt(stage: str, source: str, tmp_path: Path) -> None:
    """A real SIGINT (a first Ctrl-C) in the first step: the interrupted run still returns to the caller;
    the failing ``keyboard_interrupt`` handler is logged and every other subscriber sees the event."""
    logs: list[str] = []
    module = FailingModule(fail_in="fit" if stage == "fit_resumed" else stage, sigint=True)
    run = run_stage(stage, tmp_path, source, "keyboard_interrupt", module=module, logs=logs)
    assert run.trainer is not None and run.faulty is not None and run.faulty.raised is not None
    assert run.error is None, f"an interrupted run returns; got {run.error!r}"
    assert run.trainer.interrupted and run.trainer.state.status == "interrupted"
    assert run.faulty.calls == 1
    names = run.recorder.names()
    assert names[-2:] == ["keyboard_interrupt", "teardown"] and "exception" not in names, names
    assert run.fake_logger.interrupts == 1 and run.fake_logger.exceptions == []
    assert run.fake_logger.statuses == ["interrupted"]
    assert any(
        f"plugin 'faulty' (distribution {DISTRIBUTION} {VERSION})" in m and "'keyboard_interrupt'" in m for m in logs
    )
    assert run.datamodule.calls[-1] == f"teardown:{run.kind}"
    _assert_csv_flushed(run)
    _assert_checkpoints_intact(tmp_path, source)


@pytest.mark.parametrize("stage", STAGES)
def test_a_plugin_raising_in_teardown(stage: str, source: str, tmp_path: Path) -> None:
    """A clean run whose teardown handler raises: every teardown handler runs, then the fault reaches the
    caller naming the plugin; no ``exception`` event (the run itself succeeded), status ``"failed"``."""
    run = run_stage(stage, tmp_path, source, "teardown")
    assert run.trainer is not None and run.faulty is not None
    assert run.error is run.faulty.raised and run.error is not None
    assert run.error.__notes__ == [_note("teardown")]
    names = run.recorder.names()
    assert names[-1] == "teardown" and "exception" not in names
    # the loggers' teardown ran once, after the failing handler, and already saw the run as failed
    assert run.fake_logger.statuses == ["failed"] and run.fake_logger.exceptions == []
    assert run.trainer.state.status == "failed"
    assert run.datamodule.calls[-1] == f"teardown:{run.kind}"
    _assert_csv_flushed(run)
    _assert_checkpoints_intact(tmp_path, source)


@pytest.fixture(autouse=True)
def _sigint_restored() -> Iterator[None]:
    """Every run gives back the SIGINT handler it found."""
    before = signal.getsignal(signal.SIGINT)
    yield
    assert signal.getsignal(signal.SIGINT) is before
