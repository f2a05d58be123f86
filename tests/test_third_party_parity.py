"""Third-party parity, checked (issue 18): an early-stopping plugin written in this file from the public contract
alone (docs/plugins.md, docs/events.md, ``surge.events.run.Run``), found the way an installed plugin is (a
``surge.Plugin`` made discoverable with ``surge.testing.PluginEnv``, configured by name), and run against the
first-party ``early_stopping`` (surge-callbacks) on the same runs: same epochs and global step, bit-identical
weights, the same stop reason, the same state after every check and in a checkpoint, resumes included.

What the public contract left open, and this plugin settles the way the first-party one does (each is a case
below, so a third party reading only the docs could get it wrong):

* Whether an improvement of exactly ``min_delta`` counts. It does not ("by more than", as in Lightning); the
  first-party setting's docstring ("an improvement smaller than this does not count") suggests it would.
* The stop reason's wording. The first-party docstring shows one example; the other forms (threshold,
  divergence, not finite, "no finite best value yet") are known only from its source and tests. They are
  compared verbatim here, since the reason is what ``trainer.state.stop_reason`` reports to users.
* What a check does while a stop is already requested but held by ``min_epochs``: ``Run.request_stop`` does
  not say that a second call overwrites ``state.stop_reason``; both plugins leave the first reason standing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import surge
import torch
from _fuzzing import examples  # tests/ is on sys.path (pytest `pythonpath`)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger
from pydantic import BaseModel, ConfigDict, Field
from surge.events.run import Run
from surge.testing import PluginEnv, TinyDataModule, TinyModule, quiet_trainer_args
from test_public_contract import problems_in  # tests/ is on sys.path (pytest `pythonpath`)

MINE, THEIRS = "my_early_stopping", "early_stopping"

# -- the third party's plugin: what a distribution "acme-early-stopping" would ship ----------------------------------


class MyEarlyStoppingSettings(BaseModel):
    """Validated by Surge from ``Trainer(plugins={"my_early_stopping": {...}})``; the first-party names."""

    model_config = ConfigDict(extra="forbid")

    monitor: str = "val_loss"
    mode: Literal["min", "max"] = "min"
    min_delta: float = Field(0.0, ge=0)
    patience: int = Field(3, ge=0)
    check_finite: bool = True
    stopping_threshold: float | None = None
    divergence_threshold: float | None = None
    check_on_train_epoch_end: bool | None = None
    strict: bool = True
    verbose: bool = False


# Why the plugin stopped the fit: the values of Lightning's EarlyStoppingReason, which the first-party plugin keeps.
NOT_STOPPED, STOPPING_THRESHOLD, DIVERGENCE_THRESHOLD, PATIENCE_EXHAUSTED, NON_FINITE_METRIC = range(5)

log = logging.getLogger("acme.early_stopping")


def during_fit(event: surge.events.ValidationEnd) -> bool:
    """The validations a fit's early stopping judges: not the sanity check, not ``Trainer.validate``."""
    return event.trainer.state.stage == "fit" and not event.trainer.sanity_checking


class MyEarlyStopping:
    """Stops the fit when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` checks, is not
    finite, reaches ``stopping_threshold`` or is worse than ``divergence_threshold``."""

    surge_callback_role = "early_stopping"  # docs/porting.md: then trainer.early_stopping_callback is this object

    def __init__(self, **settings: Any) -> None:
        self.settings = MyEarlyStoppingSettings(**settings)
        self.wait_count = 0
        self.best_score = math.inf if self.settings.mode == "min" else -math.inf
        self.best_epoch = -1
        self.stopped_epoch = -1
        self.stopping_reason = NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self.checks_at_train_epoch_end = bool(self.settings.check_on_train_epoch_end)
        self.warned_missing = False

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        """A fixed place to check leaves the other handler undispatched; ``None`` decides in ``train_start``."""
        where = self.settings.check_on_train_epoch_end
        return frozenset() if where is None else frozenset({"validation_end" if where else "train_epoch_end"})

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "stopped_epoch": self.stopped_epoch,
            "patience": self.settings.patience,  # for the record: the run's settings decide
            "stopping_reason": self.stopping_reason,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count, self.best_score = int(state["wait_count"]), float(state["best_score"])
        self.best_epoch, self.stopped_epoch = int(state["best_epoch"]), int(state["stopped_epoch"])
        self.stopping_reason, self.stopping_reason_message = state["stopping_reason"], state["stopping_reason_message"]

    @surge.hookimpl
    def train_start(self, event: surge.events.TrainStart) -> None:
        where = self.settings.check_on_train_epoch_end
        # None: after each validation when this fit validates at all, else at each training epoch's end
        self.checks_at_train_epoch_end = not any(event.trainer.num_val_batches) if where is None else where

    @surge.hookimpl(when=during_fit)
    def validation_end(self, event: surge.events.ValidationEnd) -> None:
        if not self.checks_at_train_epoch_end:
            self.check(event.trainer)

    @surge.hookimpl
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        if self.checks_at_train_epoch_end:
            self.check(event.trainer)

    def check(self, run: Run) -> None:
        name = self.settings.monitor
        metric = run.callback_metrics.get(name)
        if metric is None:
            problem = (
                f"my_early_stopping: the monitored metric '{name}' was not logged by epoch {run.current_epoch} "
                f"(logged: {', '.join(sorted(run.callback_metrics)) or 'none'}); log it with self.log('{name}', ...) "
                "or set monitor= to a logged metric"
            )
            if self.settings.strict:
                raise surge.SurgeError(f"{problem}, or strict=False to skip the checks that lack it")
            if not self.warned_missing:
                log.warning("%s; skipping such checks (strict=False)", problem)
                self.warned_missing = True
            return
        verdict = self.judge(float(metric), run.current_epoch)
        if verdict is not None and not run.should_stop:  # a stop held by min_epochs keeps its first reason
            self.stopping_reason, self.stopping_reason_message = verdict
            self.stopped_epoch = run.current_epoch
            run.request_stop(self.stopping_reason_message)

    def gain(self, value: float, reference: float) -> float:
        """How much better ``value`` is than ``reference`` (negative: worse) in the direction of ``mode``."""
        return reference - value if self.settings.mode == "min" else value - reference

    def judge(self, value: float, epoch: int) -> tuple[int, str] | None:
        """Record this check's value; the reason to stop (code and words), or ``None`` to go on."""
        s = self.settings
        if s.check_finite and not math.isfinite(value):
            return NON_FINITE_METRIC, f"{s.monitor} = {value} is not finite; {self.best_so_far()}"
        if s.stopping_threshold is not None and self.gain(value, s.stopping_threshold) >= 0:
            return (
                STOPPING_THRESHOLD,
                f"{s.monitor} = {value:.6g} reached the stopping threshold {s.stopping_threshold:.6g}",
            )
        if s.divergence_threshold is not None and self.gain(value, s.divergence_threshold) < 0:
            return DIVERGENCE_THRESHOLD, (
                f"{s.monitor} = {value:.6g} is worse than the divergence threshold {s.divergence_threshold:.6g}; "
                f"{self.best_so_far()}"
            )
        if self.gain(value, self.best_score) > s.min_delta:
            self.best_score, self.best_epoch, self.wait_count = value, epoch, 0
            if s.verbose:
                log.info("my_early_stopping: %s improved to %.6g at epoch %d", s.monitor, value, epoch)
            return None
        self.wait_count += 1
        if s.verbose:
            log.info(
                "my_early_stopping: %s = %.6g, no improvement for %d of %d checks",
                s.monitor,
                value,
                self.wait_count,
                s.patience,
            )
        if self.wait_count < s.patience:
            return None
        checks = "check" if self.wait_count == 1 else "checks"
        return PATIENCE_EXHAUSTED, (
            f"{s.monitor} did not improve by {s.min_delta:.6g} for {self.wait_count} {checks}; {self.best_so_far()}"
        )

    def best_so_far(self) -> str:
        return (
            f"best {self.best_score:.6g} at epoch {self.best_epoch}"
            if self.best_epoch >= 0
            else "no finite best value yet"
        )


PLUGIN = surge.Plugin(
    name=MINE,
    kind="participant",
    factory=MyEarlyStopping,
    config=MyEarlyStoppingSettings,
    description="early stopping, written against the public API only",
)


# -- the runs ----------------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def installed(plugin_env: PluginEnv) -> None:
    """``my_early_stopping`` is discovered as if the distribution were installed, for each test."""
    plugin_env.add(PLUGIN, distribution="acme-early-stopping", version="1.0.0")


class Scripted(TinyModule):
    """TinyModule (it trains) whose monitored metrics follow a script: ``val_loss`` in validation and
    ``train_score`` per training epoch. ``val_loss`` is ``values[epoch]``, or with ``per_step=n`` that of the
    validation at global step ``(i + 1) * n``; ``train_score`` is ``values[epoch]``."""

    def __init__(self, values: list[float], per_step: int = 0) -> None:
        super().__init__()
        self.values, self.per_step = values, per_step
        self.epochs: list[int] = []

    def on_train_epoch_start(self) -> None:
        self.epochs.append(self.trainer.current_epoch)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("train_score", torch.tensor(self.values[self.trainer.current_epoch]), on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        i = self.trainer.global_step // self.per_step - 1 if self.per_step else self.trainer.current_epoch
        self.log("val_loss", torch.tensor(self.values[i]))


class Trajectory:
    """An observer (so after both stoppers): where the run stands, the stopper's state and the metrics it read,
    after every check."""

    surge_name, surge_kind = "trajectory", "observer"

    def __init__(self, stopper: str) -> None:
        self.stopper = stopper
        self.seen: list[tuple[Any, ...]] = []

    def record(self, event: surge.events.Event) -> None:
        run = event.trainer
        state = dict(run.plugin(self.stopper).state_dict())  # type: ignore[attr-defined]
        metrics = {
            name: repr(float(value)) for name, value in run.callback_metrics.items()
        }  # text: a NaN equals itself
        self.seen.append(
            (event.name, run.current_epoch, run.global_step, run.sanity_checking, run.should_stop, state, metrics)
        )

    @surge.hookimpl
    def validation_end(self, event: surge.events.ValidationEnd) -> None:
        self.record(event)

    @surge.hookimpl
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        self.record(event)


class SaveAt:
    """Saves a checkpoint in the fit's ``where`` event (``validation_end`` or ``train_epoch_end``) at global step
    ``step``, after the stoppers checked (an ordering constraint across plugins, by name)."""

    surge_name = "save_at"

    def __init__(self, path: Path, where: str, step: int) -> None:
        self.path, self.where, self.step = path, where, step

    def save(self, event: surge.events.Event) -> None:
        run = event.trainer
        if event.name == self.where and run.global_step == self.step and not run.sanity_checking:
            run.save_checkpoint(str(self.path))

    @surge.hookimpl(after=[MINE, THEIRS])
    def validation_end(self, event: surge.events.ValidationEnd) -> None:
        self.save(event)

    @surge.hookimpl(after=[MINE, THEIRS])
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        self.save(event)


@dataclass(frozen=True)
class Case:
    """One run: the stopper's settings, the metric script, the Trainer's arguments beyond the defaults below, and
    the epoch at which the stop is requested (by hand from the script; -1: never), so each case stops where its
    name says."""

    settings: dict[str, Any]
    values: list[float]
    stopped_epoch: int
    trainer: dict[str, Any] = field(default_factory=dict)
    per_step: int = 0


@dataclass
class Outcome:
    epochs: list[int]  # the training epochs that started (the Module's record)
    current_epoch: int
    global_step: int
    stop_reason: str | None
    weights: dict[str, torch.Tensor]
    state: dict[str, Any]  # the stopper's state_dict() after the fit
    state_key: str  # where its state lives in a checkpoint's "plugins"
    checks: list[tuple[Any, ...]]


def fit(name: str, case: Case, root: Path, *, save: SaveAt | None = None, ckpt_path: Path | None = None) -> Outcome:
    """Fit ``Scripted(case.values)`` with the stopper ``name`` configured by name with ``case.settings``."""
    trainer_args = {"max_epochs": len(case.values), "limit_train_batches": 2, "limit_val_batches": 1, **case.trainer}
    watch = Trajectory(name)
    trainer = surge.Trainer(
        plugins={name: case.settings},
        callbacks=[watch, *([save] if save else [])],
        **quiet_trainer_args(default_root_dir=str(root), **trainer_args),
    )
    torch.manual_seed(0)  # the same initial weights and batch order for both stoppers
    model = Scripted(case.values, case.per_step)
    trainer.fit(model, datamodule=TinyDataModule(), ckpt_path=None if ckpt_path is None else str(ckpt_path))
    stopper = trainer.plugin(name)
    assert trainer.early_stopping_callback is stopper
    return Outcome(
        epochs=model.epochs,
        current_epoch=trainer.current_epoch,
        global_step=trainer.global_step,
        stop_reason=trainer.state.stop_reason,
        weights={k: v.clone() for k, v in model.state_dict().items()},
        state=stopper.state_dict(),  # type: ignore[attr-defined]
        state_key=getattr(stopper, "state_key", name),
        checks=watch.seen,
    )


def assert_same_run(mine: Outcome, theirs: Outcome) -> None:
    """What a user sees: where the fit ended, why, and the trained weights, bit for bit."""
    assert (mine.current_epoch, mine.global_step) == (theirs.current_epoch, theirs.global_step)
    assert mine.stop_reason == theirs.stop_reason
    assert mine.weights.keys() == theirs.weights.keys()
    assert all(torch.equal(mine.weights[k], theirs.weights[k]) for k in mine.weights)


def assert_parity(mine: Outcome, theirs: Outcome) -> None:
    assert_same_run(mine, theirs)
    assert mine.epochs == theirs.epochs
    assert mine.checks == theirs.checks  # the state after every check, and where the run stood
    assert mine.state == theirs.state


NAN, INF = math.nan, math.inf
SCRIPT = [1.0, 0.8, 0.7, 0.75, 0.69, 0.72, 0.71, 0.5]  # min_delta 0.02, patience 2: best 0.7 at 2, stop at 4
SPARSE = [1.0, 1.0, 0.8, 0.8, 0.9, 0.9, 0.95, 0.95]  # validated every 2nd epoch: 1.0, 0.8, 0.9, 0.95

CASES = {
    "patience-and-min-delta": Case({"patience": 2, "min_delta": 0.02}, SCRIPT, 4),
    "mode-max": Case({"mode": "max", "patience": 1}, [0.1, 0.3, 0.3, 0.5], 2),
    "patience-0": Case({"patience": 0}, [1.0, 0.9, 0.95, 0.5], 2),
    # 1.0 -> 0.75 gains exactly min_delta (both exact in float32): not an improvement
    "gain-of-exactly-min-delta": Case({"min_delta": 0.25, "patience": 1}, [1.0, 0.75, 0.5, 0.25], 1),
    "stopping-threshold-reached-exactly": Case({"stopping_threshold": 0.5, "patience": 9}, [1.0, 0.75, 0.5, 0.25], 2),
    "stopping-threshold-max": Case(
        {"mode": "max", "stopping_threshold": 0.75, "patience": 9}, [0.25, 0.5, 0.75, 1.0], 2
    ),
    "divergence": Case({"divergence_threshold": 2.0, "patience": 9}, [1.0, 0.9, 3.0, 0.5], 2),
    "divergence-before-any-best": Case({"divergence_threshold": 2.0}, [3.0, 1.0, 0.5], 0),
    "nan": Case({"patience": 9}, [1.0, NAN, 0.5], 1),
    "inf-mode-max": Case({"mode": "max", "patience": 9}, [0.5, 0.75, -INF, 1.0], 2),
    "check-finite-off": Case({"check_finite": False, "patience": 2}, [1.0, NAN, NAN, 0.5], 2),
    "validation-every-2-epochs": Case({"patience": 1}, SPARSE, 5, {"check_val_every_n_epoch": 2}),
    # checked at every epoch's end: epoch 0 has no val_loss yet (skipped, strict=False), later ones reuse the last
    "train-epoch-end-with-sparse-validation": Case(
        {"patience": 1, "check_on_train_epoch_end": True, "strict": False}, SPARSE, 2, {"check_val_every_n_epoch": 2}
    ),
    "no-validation-checks-at-train-epoch-end": Case(
        {"monitor": "train_score", "mode": "max", "patience": 1}, [0.1, 0.2, 0.2, 0.3], 2, {"limit_val_batches": 0}
    ),
    # a validation after every batch: the third one (global step 3, mid-epoch 1) stops the fit there
    "mid-epoch-validation": Case(
        {"patience": 1}, [1.0, 0.9, 0.95, 0.5, 0.4, 0.3], 1, {"val_check_interval": 1, "max_epochs": 3}, per_step=1
    ),
    # requested at epoch 1, held until epoch 3 ends; the checks between keep counting but keep the first reason
    "min-epochs-holds-the-stop": Case({"patience": 1}, [1.0, 1.0, 1.0, 0.5, 0.5, 0.5], 1, {"min_epochs": 4}),
    "improving-never-stops": Case({"patience": 1}, [1.0, 0.9, 0.8, 0.7], -1),
    "missing-metric-not-strict": Case({"monitor": "val_acc", "strict": False}, [1.0, 1.0, 1.0], -1),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_same_runs_same_outcome(case: Case, tmp_path: Path) -> None:
    theirs = fit(THEIRS, case, tmp_path)
    assert theirs.state["stopped_epoch"] == case.stopped_epoch  # the case stops where it says
    assert_parity(fit(MINE, case, tmp_path), theirs)


# (case, the event that saves the checkpoint, at which global step): each saved while the stopper waits
RESUMES = {
    "epoch-end": (CASES["patience-and-min-delta"], "train_epoch_end", 8),
    # saved after the validation at step 3 (mid-epoch 1); the resumed fit stops mid-epoch 2, at step 5
    "mid-epoch-validation": (
        Case(
            {"patience": 3},
            [1.0, 0.9, 0.95, 0.96, 0.97, 0.3],
            2,
            {"val_check_interval": 1, "max_epochs": 3},
            per_step=1,
        ),
        "validation_end",
        3,
    ),
    "validation-every-2-epochs": (
        Case({"patience": 2}, [*SPARSE, 0.99, 0.99], 7, {"check_val_every_n_epoch": 2}),
        "train_epoch_end",
        12,
    ),
    # the first resumed epoch (4) has no validation: its check reads the val_loss of epoch 3, from the checkpoint
    "checked-at-train-epoch-end-without-validation": (
        Case(
            {"patience": 3, "check_on_train_epoch_end": True, "strict": False},
            [1.0, 1.0, 1.0, 1.0, 0.5, 0.5],
            4,
            {"check_val_every_n_epoch": 2},
        ),
        "train_epoch_end",
        8,
    ),
}


@pytest.mark.parametrize(("case", "where", "step"), RESUMES.values(), ids=RESUMES.keys())
def test_a_fit_resumed_while_waiting(case: Case, where: str, step: int, tmp_path: Path) -> None:
    outcomes = {}
    for name in (MINE, THEIRS):
        path = tmp_path / f"{name}.ckpt"
        whole = fit(name, case, tmp_path, save=SaveAt(path, where, step))
        saved = torch.load(path, weights_only=True)["plugins"][whole.state_key]
        resumed = fit(name, case, tmp_path, save=SaveAt(path, where, step), ckpt_path=path)  # saves nothing more
        # the resumed fit sees at every check what the whole one saw, and ends where it did, with the same weights
        checks = [check for check in resumed.checks if not check[3]]  # its sanity check aside
        assert checks == whole.checks[len(whole.checks) - len(checks) :]
        assert_same_run(resumed, whole)
        assert resumed.state == whole.state
        outcomes[name] = (saved, whole, resumed)
    (my_saved, my_whole, my_resumed), (saved, whole, resumed) = outcomes[MINE], outcomes[THEIRS]
    assert saved["wait_count"] > 0 and whole.state["stopped_epoch"] == case.stopped_epoch
    assert my_whole.state_key == MINE  # docs/plugins.md: the state key is the plugin's name
    assert my_saved == saved
    assert_parity(my_whole, whole)
    assert_parity(my_resumed, resumed)


@st.composite
def scenarios(draw: st.DrawFn) -> Case:
    """Any mix of the settings on a short script, validated every epoch or every 2nd, or not at all."""
    validation = draw(st.sampled_from(["every epoch", "every 2nd epoch", "none"]))
    trainer: dict[str, Any] = {"check_val_every_n_epoch": 2} if validation == "every 2nd epoch" else {}
    if validation == "none":
        trainer["limit_val_batches"] = 0
    value = st.sampled_from([0.25, 0.5, 0.75, 1.0, 1.5, 2.0, NAN, INF, -INF])
    threshold = st.sampled_from([None, 0.5, 1.0, 1.5])
    settings = {
        "monitor": "train_score" if validation == "none" else draw(st.sampled_from(["val_loss", "train_score"])),
        "mode": draw(st.sampled_from(["min", "max"])),
        "patience": draw(st.integers(0, 3)),
        "min_delta": draw(st.sampled_from([0.0, 0.25, 0.5])),
        "check_finite": draw(st.booleans()),
        "stopping_threshold": draw(threshold),
        "divergence_threshold": draw(threshold),
        "check_on_train_epoch_end": draw(st.sampled_from([None, True, False])),
        "strict": False,
    }
    return Case(settings, draw(st.lists(value, min_size=2, max_size=6)), -1, trainer)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=scenarios())
def test_random_scenarios_agree(case: Case, tmp_path: Path) -> None:
    assert_parity(fit(MINE, case, tmp_path), fit(THEIRS, case, tmp_path))


class OffByOne(MyEarlyStopping):
    """The plugin with a planted bug: one check more of patience than configured."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.settings = self.settings.model_copy(update={"patience": self.settings.patience + 1})


def test_the_comparison_catches_an_off_by_one_patience(plugin_env: PluginEnv, tmp_path: Path) -> None:
    plugin_env.add(
        surge.Plugin(name="off_by_one", kind="participant", factory=OffByOne, config=MyEarlyStoppingSettings)
    )
    caught, by_patience = set(), set()
    for case_name, case in CASES.items():
        theirs = fit(THEIRS, case, tmp_path)
        # patience 0 and 1 are one rule: the first check without an improvement already counts 1
        if "did not improve" in (theirs.stop_reason or "") and case.settings["patience"] > 0:
            by_patience.add(case_name)
        try:
            assert_same_run(fit("off_by_one", case, tmp_path), theirs)
        except AssertionError:
            caught.add(case_name)
    assert len(by_patience) >= 6
    assert caught == by_patience  # every stop that patience decides, and nothing else


def test_found_and_configured_like_an_installed_plugin(tmp_path: Path) -> None:
    trainer = surge.Trainer(plugins={MINE: {"patience": 5}}, **quiet_trainer_args(default_root_dir=str(tmp_path)))
    stopper = trainer.plugin(MINE)
    assert isinstance(stopper, MyEarlyStopping) and stopper.settings.patience == 5
    (entry,) = [p for p in trainer.plugin_set() if p["name"] == MINE]
    assert (entry["distribution"], entry["version"]) == ("acme-early-stopping", "1.0.0")
    assert MINE in trainer.event_order("validation_end") and MINE in trainer.event_order("train_epoch_end")
    bad = {"mode": "mn", "patience": -1, "monitr": "x"}
    problems = {}
    for name in (MINE, THEIRS):
        with pytest.raises(surge.ConfigError) as info:
            surge.Trainer(plugins={name: bad}, logger=False)
        problems[name] = sorted(path.removeprefix(f"trainer.plugins.{name}.") for path, _ in info.value.problems)
    assert problems[MINE] == problems[THEIRS] == ["mode", "monitr", "patience"]


def test_a_missing_metric_fails_both_at_the_same_check(tmp_path: Path) -> None:
    case = Case({"monitor": "val_los"}, SCRIPT, -1)
    errors = {}
    for name in (MINE, THEIRS):
        with pytest.raises(surge.SurgeError) as info:
            fit(name, case, tmp_path)
        errors[name] = str(info.value)
    # the wording is each plugin's own; both say what is missing, when, what was logged, and the way out
    for message in errors.values():
        assert all(part in message for part in ("'val_los'", "epoch 0", "train_loss", "val_loss", "strict=False"))


def test_verbose_logs_each_check_and_the_core_logs_the_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    case = Case({**CASES["patience-and-min-delta"].settings, "verbose": True}, SCRIPT, 4)
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    try:
        with caplog.at_level(logging.INFO, logger="acme.early_stopping"):
            mine = fit(MINE, case, tmp_path)
            theirs = fit(THEIRS, case, tmp_path)
    finally:
        logger.remove(sink)
    assert_parity(mine, theirs)
    my_checks = [r.getMessage() for r in caplog.records if r.name == "acme.early_stopping"]
    their_checks = [line for line in lines if line.startswith("early_stopping: ")]
    assert len(my_checks) == len(their_checks) == 5  # one line per check: epochs 0 to 4
    assert lines.count(f"stop requested: {theirs.stop_reason}") == 2  # Run.request_stop logs it, once per run


def test_uses_only_the_public_api() -> None:
    assert problems_in(Path(__file__)) == []
