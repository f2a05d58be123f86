"""``ckpt_path="last"``/``"best"`` are scoped to the experiment (the Module's class and hyper-parameters, and
the DataModule's): two experiments sharing one ``default_root_dir`` never resume each other's checkpoints,
and restoring another experiment's checkpoint by its path says how it differs."""

from __future__ import annotations

import enum
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import surge
import torch
from loguru import logger
from surge import checkpoint as store
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from surge_checkpoint import ModelCheckpoint
from torch import nn


class Other(TinyModule):
    """The same network as TinyModule under another class: its weights load into a TinyModule."""


QUIET = quiet_trainer_args(enable_checkpointing=True)


@pytest.fixture
def logs():
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="INFO")
    yield messages
    logger.remove(sink)


def _warnings(messages: list[str]) -> str:
    return "\n".join(m for m in messages if "| WARNING" in m)


def _newest(trainer: surge.Trainer) -> str:
    (path,) = sorted(Path(f"{trainer.run_dir}/checkpoints").glob("*.ckpt"))
    return str(path)


def _experiments(fit, b_model):
    """Experiment A (TinyModule lr=0.1) trains 2 epochs of 4 steps (ends at step 8); then experiment B trains
    1 epoch of 2 steps (step 2) in the same default_root_dir: B's checkpoint is the newest."""
    a = fit(model=TinyModule(lr=0.1), max_epochs=2)
    b = fit(model=b_model, max_epochs=1, limit_train_batches=2)
    return _newest(a), _newest(b)


@pytest.mark.parametrize(
    ("b_model", "reason"),
    [
        (lambda: TinyModule(lr=0.01), "lr: 0.01 -> 0.1"),
        (lambda: Other(lr=0.1), "test_last_scoping:Other -> surge.testing:TinyModule"),
    ],
    ids=["other-hparams", "other-class"],
)
@pytest.mark.parametrize("declared", ["experiment-json", "no-experiment-json", "several"])
def test_last_resumes_this_experiment_not_the_newer_one_of_another(fit, logs, b_model, reason, declared):
    a_ckpt, b_ckpt = _experiments(fit, b_model())
    # Without experiment.json (a run of an older version), or with one that says the run directory holds
    # several experiments, the candidate checkpoints themselves say whose they are.
    for ckpt in (a_ckpt, b_ckpt):
        if declared == "no-experiment-json":
            (Path(ckpt).parent / "experiment.json").unlink(missing_ok=True)
        elif declared == "several":
            (Path(ckpt).parent / "experiment.json").write_text('{"several": true}')
    logs.clear()
    trainer = fit(model=TinyModule(lr=0.1), max_epochs=3, ckpt_path="last")
    assert trainer.global_step == 12  # A's step 8 and one more epoch of 4 (from B's step 2 it would be 10)
    assert trainer.current_epoch == 3
    assert any(f"resolved to {a_ckpt}" in m for m in logs)
    warned = _warnings(logs)
    assert b_ckpt in warned and "other experiment" in warned and reason in warned
    assert f"ckpt_path={b_ckpt!r}" in warned  # how to resume it anyway


def test_last_says_which_run_it_continues_when_several_runs_have_checkpoints(fit, logs):
    first = fit(model=TinyModule(lr=0.1), max_epochs=1)
    second = fit(model=TinyModule(lr=0.1), max_epochs=1)  # the same experiment, a run of its own
    logs.clear()
    trainer = fit(model=TinyModule(lr=0.1), max_epochs=2, ckpt_path="last")
    assert trainer.ckpt_path == _newest(second)
    (line,) = [m for m in logs if "the newest, in" in m]
    assert (
        f"ckpt_path='last': {_newest(second)}, the newest, in {second.run_dir}/checkpoints; older checkpoints are in "
        f"{first.run_dir}/checkpoints (pass ckpt_path=PATH to resume one of those)"
    ) in line


def test_a_checkpoint_of_an_older_version_is_used_with_a_warning(fit, logs):
    a_ckpt, b_ckpt = _experiments(fit, TinyModule(lr=0.01))
    old = store.load(a_ckpt)
    del old["experiment"]  # written before checkpoints recorded their experiment, in a directory without one
    store.save(old, a_ckpt)
    before = Path(b_ckpt).stat().st_mtime - 10  # still older than B's
    for path in (a_ckpt, a_ckpt + store.MARKER_SUFFIX):
        os.utime(path, (before, before))
    (Path(a_ckpt).parent / "experiment.json").unlink()
    logs.clear()
    trainer = fit(model=TinyModule(lr=0.1), max_epochs=3, ckpt_path="last")
    assert trainer.global_step == 12
    warned = _warnings(logs)
    assert f"{a_ckpt} records no experiment" in warned and b_ckpt in warned


def test_best_is_scoped_too(fit, logs, tmp_path):
    a_ckpt, _ = _experiments(fit, TinyModule(lr=0.01))
    logs.clear()
    trainer = surge.Trainer(default_root_dir=str(tmp_path / "root"), **QUIET)
    assert trainer.validate(TinyModule(lr=0.1), datamodule=TinyDataModule(), ckpt_path="best")
    assert any(f"resolved to {a_ckpt}" in m for m in logs)


def test_a_new_experiment_starts_from_scratch_with_a_warning(fit, logs):
    _, b_ckpt = _experiments(fit, TinyModule(lr=0.01))
    logs.clear()
    trainer = fit(model=TinyModule(lr=0.5), max_epochs=1, ckpt_path="last")
    assert trainer.global_step == 4  # trained its own epoch from scratch, not B's (step 2, epoch done)
    assert not any("resolved to" in m for m in logs)
    warned = _warnings(logs)
    assert b_ckpt in warned and "other experiment" in warned and "lr: 0.01 -> 0.5" in warned
    assert "from scratch" in warned


def test_experiment_json_is_written_into_the_run_checkpoint_directory(fit):
    trainer = fit(model=TinyModule(lr=0.1))
    identity = json.loads(Path(f"{trainer.run_dir}/checkpoints/experiment.json").read_text())
    assert identity["module"] == "surge.testing:TinyModule"
    assert identity["datamodule"] == "surge.testing:TinyDataModule"
    assert identity == store.load(_newest(trainer))["experiment"]


class Twin(surge.Module):
    """Another experiment's Module: no subclass or base of TinyModule."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@pytest.mark.parametrize(
    ("b_model", "reason"),
    [
        (lambda: TinyModule(lr=0.01), "lr: 0.01 -> 0.1"),
        (lambda: Twin(lr=0.1), "test_last_scoping:Twin -> surge.testing:TinyModule"),
    ],
    ids=["other-hparams", "other-class"],
)
def test_an_explicit_shared_dirpath_refuses_another_experiments_newest_checkpoint(fit, tmp_path, b_model, reason):
    shared = tmp_path / "shared"
    fit([ModelCheckpoint(dirpath=shared)], model=TinyModule(lr=0.1), max_epochs=2)
    fit([ModelCheckpoint(dirpath=shared, filename="b-{epoch}")], model=b_model(), max_epochs=1)
    with pytest.raises(surge.SurgeError, match=r"another experiment") as info:
        fit([ModelCheckpoint(dirpath=shared)], model=TinyModule(lr=0.1), max_epochs=3, ckpt_path="last")
    message = str(info.value)
    assert str(shared / "b-epoch=0.ckpt") in message and reason in message
    assert "surge.testing:TinyModule(hidden=16, in_features=8, lr=0.1)" in message  # both identities
    assert "dirpath" in message and "ckpt_path=" in message  # the fixes

    # Its own newest checkpoint in the explicit directory resumes as before.
    trainer = fit(
        [ModelCheckpoint(dirpath=shared, filename="b-{epoch}")], model=b_model(), max_epochs=2, ckpt_path="last"
    )
    assert trainer.global_step == 8


def test_a_variant_in_an_explicit_dirpath_resumes_with_a_warning(fit, tmp_path, logs):
    shared = tmp_path / "shared"
    fit([ModelCheckpoint(dirpath=shared)], model=Other(lr=0.1), max_epochs=1)  # a subclass: a variant
    logs.clear()
    trainer = fit([ModelCheckpoint(dirpath=shared)], model=TinyModule(lr=0.1), max_epochs=2, ckpt_path="last")
    assert trainer.global_step == 8
    warned = _warnings(logs)
    assert "other experiment" in warned and "test_last_scoping:Other -> surge.testing:TinyModule" in warned


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_an_explicit_path_of_another_experiment_loads_with_a_warning(fit, logs, stage):
    _, b_ckpt = _experiments(fit, Other(lr=0.01))
    logs.clear()
    if stage == "fit":
        trainer = fit(model=TinyModule(lr=0.1), max_epochs=2, ckpt_path=b_ckpt)
        assert trainer.global_step == 2 + 4  # resumed B's position: the path is the user's choice
    else:
        trainer = surge.Trainer(default_root_dir=str(Path(b_ckpt).parents[3]), **QUIET)
        assert trainer.validate(TinyModule(lr=0.1), datamodule=TinyDataModule(), ckpt_path=b_ckpt)
    warned = _warnings(logs)
    assert b_ckpt in warned and "other experiment" in warned
    assert "test_last_scoping:Other -> surge.testing:TinyModule" in warned
    assert "lr: 0.01 -> 0.1" in warned


def test_the_same_experiment_resumes_without_a_warning(fit, logs):
    fit(model=TinyModule(lr=0.1), max_epochs=1)
    logs.clear()
    trainer = fit(model=TinyModule(lr=0.1), max_epochs=2, ckpt_path="last")
    assert trainer.global_step == 8
    assert "other experiment" not in _warnings(logs)


class Color(enum.Enum):
    RED = 1


class Odd:
    """No stable repr of its own: the default one holds the object's address."""


class Awkward(TinyModule):
    def __init__(self, path: Path, color: Color, scale: np.float32, tags: set[str], odd: Odd, table: dict) -> None:
        super().__init__()
        self.save_hyperparameters()


def test_the_identity_takes_any_hyperparameter_value_and_is_stable():
    def make() -> Awkward:
        table = {1: "one", "two": 2, (3, 4): [float("nan"), math.inf]}
        return Awkward(Path("data/x"), Color.RED, np.float32(0.5), {"b", "a", "c"}, Odd(), table)

    first, second = store.experiment_identity(make()), store.experiment_identity(make())
    assert first == second and json.loads(json.dumps(first)) == first
    assert store.experiment_diff(first, second) == []
    assert store.experiment_identity(TinyModule(lr=0.1)) != store.experiment_identity(TinyModule(lr=0.2))


def test_a_class_run_as_a_script_and_as_a_module_is_one_experiment():
    """``python train.py`` defines ``__main__:Net``, ``python -m pkg.train`` defines ``pkg.train:Net``."""
    from surge.checkpoint import experiment_diff, experiment_identity
    from surge.testing import TinyModule

    as_module = experiment_identity(TinyModule())
    as_script = {
        **as_module,
        "module": "__main__:TinyModule",
        "module_bases": ["__main__:TinyModule", *as_module["module_bases"][1:]],
    }
    assert experiment_diff(as_script, as_module) == []
    other = {**as_module, "module": "__main__:Other", "module_bases": ["__main__:Other"]}
    assert experiment_diff(other, as_module) == ["module class: __main__:Other -> surge.testing:TinyModule"]
