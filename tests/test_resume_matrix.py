"""The resume matrix: stop a run in every way a run stops, save it in every way Surge saves, resume it in a
fresh Trainer (another seed, a freshly built model and data) and check that it ends exactly where the
uninterrupted run ends.

Factors (``FACTORS``):

* stop: ``max_steps`` (mid-epoch), ``max_time`` (the ``timer`` plugin with a fake clock of one second a
  batch), ``early_stop`` (EarlyStopping at the third mid-epoch validation), ``request_stop`` (a plugin),
  ``exception`` (raised in ``after_backward``), ``ctrlc_train`` (SIGINT in ``train_batch_end``),
  ``ctrlc_val`` (SIGINT in ``validation_batch_end``, not in the sanity check), ``sigterm`` (the checkpoint
  plugin's preemption handling, a real signal to this process), ``sigkill`` (a child process killed with
  SIGKILL after a ``ModelCheckpoint(every_n_train_steps=3)`` save);
* save: ``save_after`` (``trainer.save_checkpoint`` once fit returned or raised), ``every_n``
  (``ModelCheckpoint(every_n_train_steps=3)``, resumed from its newest file), ``last``
  (``ModelCheckpoint(save_last=True)``, resumed with ``ckpt_path="last"``), ``preempt`` (the SIGTERM
  checkpoint, resumed with ``ckpt_path="last"``);
* data: ``shuffle`` (map-style, ``shuffle=True``), ``iterable_random`` (an IterableDataset shuffling a
  buffer with python's ``random``), ``numpy_sampler`` (a Sampler drawing ``np.random.permutation``),
  ``workers2`` (``shuffle=True``, ``num_workers=2``);
* loop: ``acc3`` (``accumulate_grad_batches=3``; 11 batches an epoch, so the last window is partial),
  ``manual2`` (manual optimization, two Adams stepped in ``training_step``, gradients left after the step),
  ``val_half`` (``val_check_interval=0.5``), ``sched_step`` (a per-step StepLR), ``plateau``
  (ReduceLROnPlateau on ``val_loss``, per epoch).

Every stop happens in epoch 1 (of 2), after a full epoch 0. Stops (batch indices within epoch 1):
max_steps after batch 4 (acc3: 5, the next step boundary), max_time after 4, early_stop at the validation
after 4, request_stop after 7, exception in batch 4, ctrlc_train after 4, ctrlc_val in the first validation
of epoch 1 (after 4 with val_check_interval=0.5, else after 10), sigterm after 7, sigkill after 7 (the
newest ``every_n`` checkpoint is then a few batches older). ``early_stop`` validates twice an epoch
(``val_check_interval=0.5``) whatever the loop level; its reference run does so too.

Design: all pairs of factor levels, by the deterministic greedy generator ``all_pairs`` below. Two
constraints remove pairs that cannot exist (they are not generated; every other pair is covered):

* ``save=preempt`` needs ``stop=sigterm``: the preemption checkpoint is written only on a preemption signal;
* ``stop=sigkill`` needs ``save`` in (``every_n``, ``last``): after SIGKILL no code runs, so there is no
  save after the stop and no preemption checkpoint; only checkpoints written before the kill exist.

The property: the resumed run equals the uninterrupted reference run (same data and loop configuration,
cached) in weights, every optimizer's and scheduler's state, ``global_step``, ``current_epoch`` and the whole
``metrics.csv`` (the rows the resumed run copied from the checkpoint's run and the rows it wrote after the
resume point), or one of these documented exceptions holds and is asserted instead:

* ``exception`` + ``save_after`` + ``acc3``: the failed batch (index 4) is inside an open accumulation
  window (batch 3 accumulated), so ``save_checkpoint`` refuses with ``surge.checkpoint.CheckpointSaveError``;
* ``exception`` + ``save_after`` with data that draws from python's or numpy's global RNG during the epoch
  (``iterable_random``, ``numpy_sampler``): the save or the resume logs a warning matching
  ``RNG_MAY_DIFFER`` naming that RNG (the resumed draws may differ); equality is then not asserted (reported only).

The stopped run is checked too: it stopped at the planned batch, and a stop that cuts the epoch short
(max_steps, max_time, early_stop, request_stop) ends it as in Lightning (``train_epoch_end`` fires for it,
``current_epoch`` goes up) while an interrupt or a failure does not.

``EXTRA_CASES`` add what pairs alone do not reach: the two documented exceptions above, Ctrl-C in a
mid-epoch validation followed by more training (semantics: that validation counts as not run and is rerun),
and ``held``: a stop requested in epoch 0 that ``min_epochs=2`` holds back (of ``max_epochs=3``), resumed from
the newest ``every_n`` checkpoint in the middle of epoch 1: the resumed run stops after epoch 1, as the
uninterrupted one does (the checkpoint records the held stop).

The DDP part (``DDP_CASES``, ``slow``): 2 processes (``_resume_matrix_ddp.py``, started with torchrun's variables by
``surge.testing.launch_workers``), stopped by ``max_steps``, by SIGTERM to one rank, and by SIGKILL of one rank with ``last``, resumed in fresh processes with
another global seed (the ``DistributedSampler``'s) and other per-rank seeds; every rank must end with the
uninterrupted 2-process run's weights, optimizer and scheduler states, step and epoch, and rank 0 with its
``metrics.csv``.
Also here: the sanity check leaves the numbers alone (``num_sanity_val_steps`` 0 or 2 gives the same run).

Cases: 48 in the matrix (5 of them subprocess-based, ``slow``), plus 4 extra and 3 DDP ones (``slow``: a
2-process job each for the reference, part 1 and the resume, 30-90 s a case). Measured wall time on the
2-core dev machine (shared with other test runs): the whole file (55 tests) 60-85 s, ``-m "not slow"`` about
30 s; the 5 subprocess cases take 3-9 s each (the child imports torch); one fit takes 0.3-0.5 s (0.7-1 s with
worker processes). SIGTERM is delivered in-process (a real signal to the test process, once the checkpoint
plugin's handler is verified installed), so those cases are not ``slow``.

Set ``SURGE_RESUME_MATRIX_REPORT=<file>`` to append one JSON line per case (outcome, failed comparisons,
the checkpoint's loop position) for a failure table.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import surge
import torch
from loguru import logger
from surge import checkpoint
from surge.testing import tiny_dataset
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, Sampler

EPOCHS, BATCH, N_TRAIN, N_VAL = 2, 8, 88, 24  # 11 training batches an epoch, 3 validation batches
BATCHES = N_TRAIN // BATCH
EVERY_N = 3  # ModelCheckpoint(every_n_train_steps=...)
STOP_EPOCH = 1
RNG_MAY_DIFFER = r"{}'s global RNG moved since the epoch began"
"""The warning (``str.format`` with ``python`` or ``numpy``) of a checkpoint saved after a failed step when
that global RNG moved since the epoch began: the resumed draws may differ."""

CHILD = str(Path(__file__).with_name("_resume_matrix_child.py"))

# -- the design --------------------------------------------------------------------------------------------

STOPS = (
    "max_steps",
    "max_time",
    "early_stop",
    "request_stop",
    "exception",
    "ctrlc_train",
    "ctrlc_val",
    "sigterm",
    "sigkill",
)
SAVES = ("save_after", "every_n", "last", "preempt")
DATAS = ("shuffle", "iterable_random", "numpy_sampler", "workers2")
LOOPS = ("acc3", "manual2", "val_half", "sched_step", "plateau")
FACTORS: dict[str, Sequence[str]] = {"stop": STOPS, "save": SAVES, "data": DATAS, "loop": LOOPS}


def allowed(levels: Mapping[str, str]) -> bool:
    """Whether a (partial) assignment of levels can exist (see the module docstring)."""
    stop, save = levels.get("stop"), levels.get("save")
    if save == "preempt" and stop is not None and stop != "sigterm":
        return False
    if stop == "sigkill" and save is not None and save not in ("every_n", "last"):
        return False
    return True


Pair = tuple[tuple[str, str], tuple[str, str]]


def _pairs_of(levels: Mapping[str, str], names: Sequence[str]) -> set[Pair]:
    chosen = [n for n in names if n in levels]
    return {((a, levels[a]), (b, levels[b])) for a, b in itertools.combinations(chosen, 2)}


def all_pairs(
    factors: Mapping[str, Sequence[str]], allowed: Callable[[Mapping[str, str]], bool]
) -> list[dict[str, str]]:
    """A deterministic greedy all-pairs design: every allowed pair of levels of two factors is in some case.

    Each round tries every uncovered pair as the seed of a case, completes it factor by factor with the
    allowed level that covers the most still-uncovered pairs (ties: the earlier level), and keeps the
    candidate covering the most (ties: the earlier seed)."""
    names = list(factors)
    rank = {(n, v): (i, j) for i, n in enumerate(names) for j, v in enumerate(factors[n])}
    uncovered = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(names, 2)
        for x in factors[a]
        for y in factors[b]
        if allowed({a: x, b: y})
    }
    cases: list[dict[str, str]] = []
    while uncovered:
        best: tuple[int, dict[str, str]] | None = None
        for seed in sorted(uncovered, key=lambda p: (rank[p[0]], rank[p[1]])):
            case = dict(seed)
            for name in names:
                if name in case:
                    continue
                options = [v for v in factors[name] if allowed({**case, name: v})]
                if not options:
                    break
                case[name] = max(
                    options,
                    key=lambda v: (len(_pairs_of({**case, name: v}, names) & uncovered), -factors[name].index(v)),
                )
            if len(case) < len(names) or not allowed(case):
                continue
            gain = len(_pairs_of(case, names) & uncovered)
            if best is None or gain > best[0]:
                best = (gain, case)
        if best is None:
            raise AssertionError(f"the pairs {sorted(uncovered)} cannot be completed to an allowed case")
        cases.append(best[1])
        uncovered -= _pairs_of(best[1], names)
    return cases


@dataclass(frozen=True)
class Case:
    stop: str
    save: str
    data: str
    loop: str

    @property
    def id(self) -> str:
        return f"{self.stop}-{self.save}-{self.data}-{self.loop}"

    @classmethod
    def parse(cls, text: str) -> Case:
        return cls(*text.split("-"))

    @property
    def val_interval(self) -> float:
        return 0.5 if self.loop == "val_half" or self.stop == "early_stop" else 1.0

    @property
    def config(self) -> tuple[str, str, float, bool]:
        """What the reference run depends on."""
        return self.data, self.loop, self.val_interval, self.stop == "held"

    @property
    def subprocess(self) -> bool:
        return self.stop == "sigkill"

    @property
    def stop_batch(self) -> int:
        """The batch index in epoch ``STOP_EPOCH`` after which (in which, for ``exception``) the run stops."""
        if self.stop == "max_steps" and self.loop == "acc3":
            return 5  # the first optimizer step at or after batch 4
        if self.stop == "ctrlc_val" and self.val_interval == 1.0:
            return BATCHES - 1  # the validation at the epoch's end
        if self.stop == "held":
            return BATCHES - 1  # the held stop is honoured once min_epochs are done: after this epoch
        return 7 if self.stop in ("request_stop", "sigterm", "sigkill") else 4

    @property
    def cut_short(self) -> bool:
        """The stop ends the run as in Lightning: the cut-short epoch's end runs and current_epoch goes up."""
        return self.stop in ("max_steps", "max_time", "early_stop", "request_stop", "held")

    @property
    def expected_total_batches(self) -> int:
        """Batches done when part 1 stopped (the failed batch of ``exception`` is not done)."""
        done = STOP_EPOCH * BATCHES + self.stop_batch + 1
        return done - 1 if self.stop == "exception" else done

    @property
    def refused(self) -> bool:
        """Documented: saving after a failure inside an open accumulation window is refused."""
        return (
            self.stop == "exception" and self.save == "save_after" and self.loop == "acc3" and self.stop_batch % 3 != 0
        )

    @property
    def draws_may_differ(self) -> bool:
        """Documented: a save after a failed step warns when python's/numpy's RNG moved since the epoch began."""
        return (
            self.stop == "exception"
            and self.save == "save_after"
            and not self.refused
            and self.data in ("iterable_random", "numpy_sampler")
        )


CASES = [Case(**levels) for levels in all_pairs(FACTORS, allowed)]
EXTRA_CASES = [
    Case("exception", "save_after", "shuffle", "acc3"),  # documented: the save is refused
    Case("exception", "save_after", "iterable_random", "val_half"),  # documented: python's RNG moved, a warning
    Case("ctrlc_val", "save_after", "shuffle", "val_half"),  # Ctrl-C in a mid-epoch validation, training follows
    Case("held", "every_n", "shuffle", "sched_step"),  # a stop held back by min_epochs, resumed mid-epoch
]
"""The documented exceptions and the cases the pairwise design does not reach on its own."""

HELD_FLAGS = {"max_epochs": EPOCHS + 1, "min_epochs": EPOCHS}
"""``held``: a stop requested in epoch 0 is held back by ``min_epochs`` until the end of epoch ``EPOCHS - 1``; the
run would otherwise go on to ``EPOCHS + 1`` epochs."""


# -- model and data ------------------------------------------------------------------------------------------


class Net(surge.Module):
    """An MLP with dropout and Adam; the training step draws from torch only (dropout)."""

    def __init__(self, loop: str) -> None:
        super().__init__()
        self.loop = loop
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
        self.epoch_ends: list[int] = []  # the epochs whose train_epoch_end fired
        if loop == "manual2":
            self.automatic_optimization = False

    def on_train_epoch_end(self) -> None:
        self.epoch_ends.append(self.trainer.current_epoch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        if self.automatic_optimization:
            return loss
        first, second = self.optimizers()
        first.zero_grad()
        second.zero_grad()
        self.manual_backward(loss)
        first.step()
        second.step()  # the gradients stay on the parameters until the next batch zeroes them
        return None

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        if self.loop == "manual2":
            return [
                torch.optim.Adam(self.net[0].parameters(), lr=0.01),
                torch.optim.Adam(self.net[3].parameters(), lr=0.005),
            ]
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        if self.loop == "sched_step":
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]
        if self.loop == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}
        return optimizer


class BufferShuffled(IterableDataset):
    """Streams a dataset through a 16-sample buffer, drawing from python's global ``random``."""

    def __init__(self, base: Any, buffer: int = 16) -> None:
        self.base, self.buffer = base, buffer

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self) -> Iterator[Any]:
        pending: list[int] = []
        for index in range(len(self.base)):
            pending.append(index)
            if len(pending) >= self.buffer:
                yield self.base[pending.pop(random.randrange(len(pending)))]
        while pending:
            yield self.base[pending.pop(random.randrange(len(pending)))]


class NumpyPermutation(Sampler[int]):
    """A sampler drawing each epoch's order from numpy's global RNG."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return iter(np.random.permutation(self.n).tolist())


class Data(surge.DataModule):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.train_set = tiny_dataset(N_TRAIN, seed=1)
        self.val_set = tiny_dataset(N_VAL, seed=2)

    def train_dataloader(self) -> DataLoader:
        if self.kind == "iterable_random":
            return DataLoader(BufferShuffled(self.train_set), batch_size=BATCH)
        if self.kind == "numpy_sampler":
            return DataLoader(self.train_set, batch_size=BATCH, sampler=NumpyPermutation(N_TRAIN))
        workers = 2 if self.kind == "workers2" else 0
        return DataLoader(self.train_set, batch_size=BATCH, shuffle=True, num_workers=workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=BATCH)


# -- stop causes -------------------------------------------------------------------------------------------------


class Boom(Exception):
    """The failure raised after backward."""


class At:
    """A plugin acting once at (epoch, batch index) of training."""

    surge_name = "matrix_stop"

    def __init__(self, batch_idx: int, epoch: int = STOP_EPOCH, rank: int | None = None) -> None:
        self.epoch, self.batch_idx, self.rank, self.fired = epoch, batch_idx, rank, False

    def due(self, trainer: surge.Trainer, batch_idx: int) -> bool:
        if self.fired or trainer.sanity_checking or (trainer.current_epoch, batch_idx) != (self.epoch, self.batch_idx):
            return False
        if self.rank is not None and trainer.global_rank != self.rank:
            return False
        self.fired = True
        return True


class RequestStop(At):
    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if self.due(event.trainer, event.batch_idx):
            event.trainer.request_stop("the resume matrix stops here")


class RaiseAfterBackward(At):
    @surge.hookimpl
    def after_backward(self, event: Any) -> None:
        if self.due(event.trainer, event.trainer.state.batch_idx):
            raise Boom("failed after backward")


def _send(sig: signal.Signals) -> None:
    """Send ``sig`` to this process, but only when a Python handler will catch it (never kill pytest)."""
    handler = signal.getsignal(sig)
    default = (signal.SIG_DFL, signal.SIG_IGN, None) + ((signal.default_int_handler,) if sig == signal.SIGINT else ())
    if handler in default:
        raise AssertionError(f"no handler of {sig.name} is installed; not sending it ({handler!r})")
    os.kill(os.getpid(), sig)


class SigintInTraining(At):
    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if self.due(event.trainer, event.batch_idx):
            _send(signal.SIGINT)


class SigintInValidation(At):
    """SIGINT after the first batch of the first validation (not the sanity check) in the stop epoch."""

    @surge.hookimpl
    def validation_batch_end(self, event: Any) -> None:
        trainer = event.trainer
        if event.batch_idx == 0 and self.due(trainer, trainer.state.batch_idx):
            _send(signal.SIGINT)


class Sigterm(At):
    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if self.due(event.trainer, event.batch_idx):
            _send(signal.SIGTERM)


class Sigkill(At):
    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if self.due(event.trainer, event.batch_idx):
            os.kill(os.getpid(), signal.SIGKILL)


class Tick:
    """Advances the fake clock by one second as each training batch starts."""

    surge_name = "matrix_tick"

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self.now += 1.0


# -- runs ------------------------------------------------------------------------------------------------------------


def make_trainer(root: Path, case: Case, plugins: Sequence[Any] = (), **flags: Any) -> surge.Trainer:
    options: dict[str, Any] = {
        "default_root_dir": str(root),
        "max_epochs": EPOCHS,
        "logger": ["csv"],
        "log_every_n_steps": 1,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "val_check_interval": case.val_interval,
        "accumulate_grad_batches": 3 if case.loop == "acc3" else 1,
        "plugins": list(plugins),
        **flags,
    }
    return surge.Trainer(**options)


def checkpoint_plugins(case: Case, directory: Path) -> list[Any]:
    """The ModelCheckpoint of the save level (also the preemption handler for ``sigterm``); a fresh one per
    Trainer, with the same settings in the stopped and the resumed run."""
    from surge_checkpoint import ModelCheckpoint

    if case.save == "every_n" or case.stop == "sigkill":
        return [ModelCheckpoint(dirpath=directory, every_n_train_steps=EVERY_N, save_last=case.save == "last")]
    if case.save == "last":
        return [ModelCheckpoint(dirpath=directory, save_last=True, save_top_k=0)]
    if case.save == "preempt" or case.stop == "sigterm":
        return [ModelCheckpoint(dirpath=directory, save_top_k=0)]  # only the preemption checkpoint
    return []


def stop_plugins_and_flags(case: Case) -> tuple[list[Any], dict[str, Any], Tick | None]:
    k = case.stop_batch
    if case.stop == "max_steps":
        done = STOP_EPOCH * BATCHES + k + 1
        steps = {"acc3": (done // BATCHES) * 4 + (done % BATCHES) // 3, "manual2": 2 * done}.get(case.loop, done)
        return [], {"max_steps": steps}, None
    if case.stop == "max_time":
        tick = Tick()
        return [tick], {"max_time": {"seconds": STOP_EPOCH * BATCHES + k + 1}}, tick
    if case.stop == "held":
        return [RequestStop(4, epoch=0)], dict(HELD_FLAGS), None
    if case.stop == "early_stop":
        from surge_callbacks import EarlyStopping

        # No real improvement is ever by 1e6: the first check sets the best, the third one stops.
        return [EarlyStopping(monitor="val_loss", patience=2, min_delta=1e6)], {}, None
    plugin = {
        "request_stop": RequestStop,
        "exception": RaiseAfterBackward,
        "ctrlc_train": SigintInTraining,
        "ctrlc_val": SigintInValidation,
        "sigterm": Sigterm,
        "sigkill": Sigkill,
    }[case.stop](k)
    return [plugin], {}, None


@contextlib.contextmanager
def fake_timer_clock(tick: Tick | None) -> Iterator[None]:
    if tick is None:
        yield
        return
    from surge_callbacks import Timer

    saved = Timer.__dict__["clock"]
    Timer.clock = staticmethod(tick)  # type: ignore[assignment]
    try:
        yield
    finally:
        Timer.clock = saved  # type: ignore[method-assign]


def run_part1(case: Case, tmp: Path) -> tuple[surge.Trainer, Net]:
    """The stopped run (seed 0); returns its Trainer and model once fit returned or raised as the stop cause
    makes it."""
    from surge_checkpoint import Preempted

    plugins, flags, tick = stop_plugins_and_flags(case)
    surge.seed_everything(0)
    model, data = Net(case.loop), Data(case.data)
    trainer = make_trainer(tmp / "part1", case, [*plugins, *checkpoint_plugins(case, tmp / "ckpts")], **flags)
    with fake_timer_clock(tick):
        if case.stop == "exception":
            with pytest.raises(Boom):
                trainer.fit(model, datamodule=data)
        elif case.stop == "sigterm":
            with pytest.raises(Preempted):
                trainer.fit(model, datamodule=data)
        else:
            trainer.fit(model, datamodule=data)
    if case.stop in ("ctrlc_train", "ctrlc_val"):
        assert trainer.interrupted, "the Ctrl-C did not interrupt the run"
    return trainer, model


def part1_differences(case: Case, trainer: surge.Trainer, model: Net) -> dict[str, str]:
    """Where the stopped run ended, against the semantics: the planned batch; a stop cutting the epoch short
    ends it as in Lightning (its train_epoch_end fires, current_epoch goes up); an interrupt or a failure
    does not."""
    found = {}
    if trainer.state.total_batches != case.expected_total_batches:
        found["stop_position"] = (
            f"part 1 did {trainer.state.total_batches} batches, expected {case.expected_total_batches}"
        )
    ends, epoch = (
        (list(range(STOP_EPOCH + 1)), STOP_EPOCH + 1) if case.cut_short else (list(range(STOP_EPOCH)), STOP_EPOCH)
    )
    if (model.epoch_ends, trainer.current_epoch) != (ends, epoch):
        found["part1_end"] = (
            f"train_epoch_end fired for {model.epoch_ends}, current_epoch {trainer.current_epoch}; "
            f"expected {ends}, {epoch}"
        )
    return found


def run_part1_in_child(case: Case, tmp: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    done = subprocess.run(
        [sys.executable, CHILD, case.id, str(tmp), str(torch.get_num_threads()), __name__],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == -signal.SIGKILL, (
        f"the child was not killed (rc {done.returncode}):\n{done.stderr[-3000:]}"
    )


def newest_step_checkpoint(directory: Path) -> str:
    files = [p for p in directory.glob("*.ckpt") if p.name != "last.ckpt" and checkpoint.is_valid(str(p))]
    assert files, f"no committed every_n_train_steps checkpoint in {directory}"
    return str(max(files, key=lambda p: checkpoint.load(str(p))["global_step"]))


@dataclass
class Result:
    weights: dict[str, torch.Tensor]
    optimizers: list[dict[str, Any]]
    schedulers: list[dict[str, Any]]
    global_step: int
    epoch: int
    csv: list[dict[str, float]]

    @classmethod
    def of(cls, trainer: surge.Trainer, model: Net) -> Result:
        from surge_csv import read_metrics

        rows = read_metrics(trainer.run_dir) if trainer.run_dir else []
        return cls(
            weights={k: v.detach().clone() for k, v in model.state_dict().items()},
            optimizers=[o.state_dict() for o in trainer.optimizers],
            schedulers=[c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
            global_step=trainer.global_step,
            epoch=trainer.current_epoch,
            csv=[{k: v for k, v in row.items() if v is not None} for row in rows],
        )


@functools.cache
def _reference(root: str, config: tuple[str, str, float, bool]) -> Result:
    data_kind, loop, val_interval, held = config
    case = Case("none", "none", data_kind, loop)
    surge.seed_everything(0)
    model = Net(loop)
    plugins, flags = ([RequestStop(4, epoch=0)], HELD_FLAGS) if held else ([], {})
    trainer = make_trainer(
        Path(root) / "-".join(map(str, config)), case, plugins, val_check_interval=val_interval, **flags
    )
    trainer.fit(model, datamodule=Data(data_kind))
    return Result.of(trainer, model)


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Case], Result]:
    root = str(tmp_path_factory.mktemp("matrix-references"))
    return lambda case: _reference(root, case.config)


# -- comparing -----------------------------------------------------------------------------------------------------


def first_difference(actual: Any, expected: Any, where: str = "") -> str | None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
            return f"{where}: {actual!r} vs {expected!r}"
        if not torch.equal(actual, expected):
            return f"{where}: max |diff| {float((actual.double() - expected.double()).abs().max()):.3g}"
        return None
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            keys = set(actual) if isinstance(actual, Mapping) else actual
            return f"{where}: keys {sorted(map(str, keys))} vs {sorted(map(str, expected))}"
        for key in expected:
            found = first_difference(actual[key], expected[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return (
                f"{where}: length {len(actual) if isinstance(actual, (list, tuple)) else actual!r} vs {len(expected)}"
            )
        for i, (a, b) in enumerate(zip(actual, expected)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if actual == expected else f"{where}: {actual!r} vs {expected!r}"


def csv_difference(actual: list[dict[str, float]], expected: list[dict[str, float]]) -> str | None:
    for i, (a, b) in enumerate(zip(actual, expected)):
        if a != b:
            return f"row {i}: {_row(a)} vs {_row(b)}"
    if len(actual) != len(expected):
        extra = actual[len(expected) :] or expected[len(actual) :]
        return f"{len(actual)} rows vs {len(expected)}; first unmatched {_row(extra[0])}"
    return None


def _row(row: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}={v:.6g}" for k, v in row.items()) + "}"


def differences(resumed: Result, ref: Result) -> dict[str, str]:
    found = {
        "step": first_difference(resumed.global_step, ref.global_step, "global_step"),
        "epoch": first_difference(resumed.epoch, ref.epoch, "current_epoch"),
        "weights": first_difference(resumed.weights, ref.weights, "weights"),
        "optimizer": first_difference(resumed.optimizers, ref.optimizers, "optimizers"),
        "scheduler": first_difference(resumed.schedulers, ref.schedulers, "schedulers"),
        "csv": csv_difference(resumed.csv, ref.csv),
    }
    return {k: v for k, v in found.items() if v}


@contextlib.contextmanager
def captured_warnings() -> Iterator[list[str]]:
    """Loguru warnings and Python warnings, as text."""
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield messages
        finally:
            logger.remove(sink)
            messages.extend(str(w.message) for w in caught)


def report(case: Case, **entry: Any) -> None:
    path = os.environ.get("SURGE_RESUME_MATRIX_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": case.id, **entry}, default=str) + "\n")


def _loops_of(url: str | None) -> dict[str, Any] | None:
    """The loop position a checkpoint records (for the report)."""
    if url is None:
        return None
    with contextlib.suppress(Exception):
        saved = checkpoint.load(url)
        return {**saved.get("loops", {}), "grads": sorted(saved.get("accumulated_grads", {}))}
    return None


# -- the matrix ----------------------------------------------------------------------------------------------------


def run_case(case: Case, tmp: Path, ref: Result) -> None:
    outcome: dict[str, Any] = {"stop": case.stop, "save": case.save, "data": case.data, "loop": case.loop}
    try:
        _run_case(case, tmp, ref, outcome)
    except BaseException as exc:
        if "result" not in outcome:
            outcome["result"] = "crash"
            outcome["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise
    finally:
        report(case, **outcome)


def _run_case(case: Case, tmp: Path, ref: Result, outcome: dict[str, Any]) -> None:
    ckpts = tmp / "ckpts"
    with captured_warnings() as messages:
        part1: surge.Trainer | None = None
        stopped: dict[str, str] = {}
        if case.subprocess:
            run_part1_in_child(case, tmp)
        else:
            part1, part1_model = run_part1(case, tmp)
            outcome["part1_total_batches"] = part1.state.total_batches
            stopped = part1_differences(case, part1, part1_model)
        path: str | None
        if case.save == "save_after":
            assert part1 is not None
            target = str(tmp / "after.ckpt")
            if case.refused:
                with pytest.raises(checkpoint.CheckpointSaveError) as refused:
                    part1.save_checkpoint(target)
                outcome.update(result="documented: save refused", error=str(refused.value).splitlines()[0])
                return
            path = part1.save_checkpoint(target)
        elif case.save == "every_n":
            path = newest_step_checkpoint(ckpts)
        else:
            path = "last"

        if path == "last":
            from surge_checkpoint import ModelCheckpoint

            last = ModelCheckpoint(dirpath=ckpts).surge_checkpoint_path("last")
            outcome["checkpoint_loops"] = _loops_of(last)
        else:
            outcome["checkpoint_loops"] = _loops_of(path)
        surge.seed_everything(12345)  # another seed, another initialization: all of it must come from the checkpoint
        model = Net(case.loop)
        flags = HELD_FLAGS if case.stop == "held" else {}  # the stop request itself must come from the checkpoint
        resumed = make_trainer(tmp / "resumed", case, checkpoint_plugins(case, ckpts), **flags)
        resumed.fit(model, datamodule=Data(case.data), ckpt_path=path)
    found = {**stopped, **differences(Result.of(resumed, model), ref)}
    outcome["failed"] = found
    if case.draws_may_differ:
        pattern = RNG_MAY_DIFFER.format("python" if case.data == "iterable_random" else "numpy")
        warned = [m for m in messages if re.search(pattern, m)]
        outcome["result"] = "documented: warned" if warned else "missing warning"
        outcome["warning"] = warned[0].strip()[:300] if warned else None
        assert warned, f"no warning matching {pattern!r}; warnings: {messages}"
        return  # the resumed draws may differ: equality is reported, not asserted
    outcome["result"] = "equal" if not found else "differs"
    assert not found, "the resumed run differs from the uninterrupted one:\n" + "\n".join(
        f"  {k}: {v}" for k, v in found.items()
    )


def _param(case: Case) -> Any:
    return pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.subprocess else [])


@pytest.mark.parametrize("case", [_param(c) for c in CASES + [c for c in EXTRA_CASES if c not in CASES]])
def test_resume_matrix(case: Case, tmp_path: Path, reference: Callable[[Case], Result]) -> None:
    run_case(case, tmp_path, reference(case))


# -- the DDP part ------------------------------------------------------------------------------------------------

DDP_CHILD = str(Path(__file__).with_name("_resume_matrix_ddp.py"))
DDP_WORLD = 2
DDP_BATCHES = math.ceil(N_TRAIN / DDP_WORLD / BATCH)  # 6 training batches per rank and epoch (the last one of 4)
DDP_CASES = [
    Case("max_steps", "save_after", "shuffle", "sched_step"),
    Case("sigterm", "preempt", "shuffle", "sched_step"),
    Case("sigkill", "last", "shuffle", "acc3"),
]
"""The DDP part: 2 processes (gloo), map-style shuffled data (each rank's shard drawn by a ``DistributedSampler``
seeded with the global seed), dropout drawn from each rank's own torch seed. ``max_steps`` stops mid-epoch and
``trainer.save_checkpoint`` runs on both ranks after ``fit``; ``sigterm`` is sent to rank 1 alone, whose
preemption request both ranks serve (``last.ckpt``); ``sigkill`` kills rank 1 (the job fails) after
``ModelCheckpoint(every_n_train_steps=3, save_last=True)`` saves. The resume runs in fresh processes with another
global seed and other per-rank seeds, and must end where the uninterrupted 2-process run ends, on every rank."""
DDP_STOP = {"max_steps": 2, "sigterm": 3, "sigkill": 4}
"""The batch index of epoch ``STOP_EPOCH`` after which part 1 stops."""
OTHER_SEED = 12345


def ddp_run(run: str, out: Path, case: Case) -> None:
    """One rank of a DDP run (``_resume_matrix_ddp.py``, a 2-process job): ``reference`` (uninterrupted),
    ``part1`` (stopped as ``case.stop`` says) or ``resume`` (``fit(ckpt_path=...)`` from part 1's checkpoint,
    with other seeds). Writes ``OUT/RUN-rank<R>.pt``: the :class:`Result` fields and whether it was preempted."""
    from surge_checkpoint import Preempted

    rank = int(os.environ["RANK"])
    # the ranks agree on a stop or checkpoint request every 2 batches (16 by default): the SIGTERM's preemption
    # checkpoint falls in the middle of the 6-batch epoch, where resuming is hardest
    os.environ["SURGE_DDP_AGREEMENT_INTERVAL"] = "2"
    seed = OTHER_SEED if run == "resume" else 0
    surge.seed_everything(seed)  # the global seed: the DistributedSampler's
    torch.manual_seed(seed + 1 + rank)  # each rank's own RNG: its dropout masks differ from the other's
    model = Net(case.loop)
    plugins: list[Any] = []
    flags: dict[str, Any] = {}
    if run == "part1":
        stop_batch = DDP_STOP[case.stop]
        if case.stop == "max_steps":
            flags["max_steps"] = STOP_EPOCH * DDP_BATCHES + stop_batch + 1  # sched_step: one step per batch
        else:
            plugins.append((Sigterm if case.stop == "sigterm" else Sigkill)(stop_batch, rank=1))
    if run != "reference":
        plugins += checkpoint_plugins(case, out / "ckpts")
    trainer = make_trainer(out / run, case, plugins, strategy="ddp", devices=DDP_WORLD, accelerator="cpu", **flags)
    ckpt_path = None
    if run == "resume":
        ckpt_path = str(out / "after.ckpt") if case.save == "save_after" else "last"
    preempted = False
    try:
        trainer.fit(model, datamodule=Data(case.data), ckpt_path=ckpt_path)
    except Preempted:
        preempted = True
    if run == "part1" and case.save == "save_after":
        trainer.save_checkpoint(str(out / "after.ckpt"))  # on every rank, as Lightning requires too
    fields = vars(Result.of(trainer, model))
    torch.save({**fields, "preempted": preempted}, out / f"{run}-rank{rank}.pt")


def _launch_ddp(run: str, out: Path, case: Case) -> subprocess.CompletedProcess[str]:
    from surge.testing import launch_workers

    out.mkdir(parents=True, exist_ok=True)
    return launch_workers(DDP_CHILD, [run, str(out), case.id, __name__], nproc=DDP_WORLD, timeout=420)


def _ddp_results(out: Path, run: str) -> list[dict[str, Any]]:
    return [torch.load(out / f"{run}-rank{rank}.pt", weights_only=False) for rank in range(DDP_WORLD)]


def _as_result(saved: Mapping[str, Any]) -> Result:
    return Result(**{k: v for k, v in saved.items() if k != "preempted"})


@functools.cache
def _ddp_reference(root: str, loop: str) -> list[Result]:
    out = Path(root) / f"ddp-{loop}"
    done = _launch_ddp("reference", out, Case("none", "none", "shuffle", loop))
    assert done.returncode == 0, done.stderr[-5000:]
    return [_as_result(saved) for saved in _ddp_results(out, "reference")]


@pytest.fixture(scope="session")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Case], list[Result]]:
    root = str(tmp_path_factory.mktemp("matrix-ddp-references"))
    return lambda case: _ddp_reference(root, case.loop)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=f"ddp-{c.id}") for c in DDP_CASES])
def test_resume_matrix_ddp(case: Case, tmp_path: Path, ddp_reference: Callable[[Case], list[Result]]) -> None:
    refs = ddp_reference(case)
    part1 = _launch_ddp("part1", tmp_path, case)
    if case.stop == "sigkill":
        assert part1.returncode != 0, "rank 1 killed itself, the job should have failed"
    else:
        assert part1.returncode == 0, part1.stderr[-5000:]
        stopped = _ddp_results(tmp_path, "part1")
        assert [s["preempted"] for s in stopped] == [case.stop == "sigterm"] * DDP_WORLD
    path = tmp_path / ("after.ckpt" if case.save == "save_after" else "ckpts/last.ckpt")
    saved = checkpoint.load(str(path))
    loops = saved["loops"]
    assert loops["current_epoch"] == STOP_EPOCH and 0 < loops["epoch_batches"] < DDP_BATCHES, loops  # mid-epoch
    assert len(saved["ranks"]) == DDP_WORLD  # every rank's RNG states and data position
    resumed = _launch_ddp("resume", tmp_path, case)
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    found = {
        f"rank {rank}: {key}": text
        for rank, (got, ref) in enumerate(zip(_ddp_results(tmp_path, "resume"), refs, strict=True))
        for key, text in differences(_as_result(got), ref).items()
    }
    assert not found, "the resumed 2-process run differs from the uninterrupted one:\n" + "\n".join(
        f"  {k}: {v}" for k, v in found.items()
    )


# -- the design and the guards ---------------------------------------------------------------------------------


def test_the_design_covers_every_allowed_pair() -> None:
    names = list(FACTORS)
    covered = set().union(*(_pairs_of(vars(c), names) for c in CASES))
    wanted = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(names, 2)
        for x in FACTORS[a]
        for y in FACTORS[b]
        if allowed({a: x, b: y})
    }
    assert wanted <= covered
    assert all(allowed(vars(c)) for c in CASES)
    assert len(set(CASES)) == len(CASES)
    assert all_pairs(FACTORS, allowed) == [vars(c) for c in CASES]  # deterministic
    assert len(CASES) == int(re.search(r"Cases: (\d+) in the matrix", __doc__ or "").group(1))  # type: ignore[union-attr]
    slow = int(re.search(r"\((\d+) of them subprocess", __doc__ or "").group(1))  # type: ignore[union-attr]
    assert sum(c.subprocess for c in CASES) == slow


@pytest.mark.parametrize("data_kind", ["shuffle", "iterable_random"])
def test_the_sanity_check_does_not_change_the_numbers(tmp_path: Path, data_kind: str) -> None:
    results = []
    for sanity in (0, 2):
        case = Case("none", "none", data_kind, "val_half")
        surge.seed_everything(0)
        model = Net(case.loop)
        trainer = make_trainer(tmp_path / f"sanity{sanity}", case, num_sanity_val_steps=sanity)
        trainer.fit(model, datamodule=Data(data_kind))
        results.append(Result.of(trainer, model))
    found = differences(results[1], results[0])
    assert not found, found


def test_the_matrix_notices_a_resume_that_lost_its_state(tmp_path: Path, reference: Callable[[Case], Result]) -> None:
    """Guards the comparison: a run resumed from the right position but with the optimizer state dropped."""
    case = Case("request_stop", "save_after", "shuffle", "val_half")
    part1, _ = run_part1(case, tmp_path)
    path = str(tmp_path / "broken.ckpt")
    part1.save_checkpoint(path)
    saved = checkpoint.load(path)
    saved["optimizer_states"] = [torch.optim.Adam(Net("val_half").parameters(), lr=0.01).state_dict()]
    checkpoint.save(saved, path)
    surge.seed_everything(12345)
    model = Net(case.loop)
    resumed = make_trainer(tmp_path / "resumed", case)
    resumed.fit(model, datamodule=Data(case.data), ckpt_path=path)
    found = differences(Result.of(resumed, model), reference(case))
    assert {"weights", "optimizer"} <= set(found), found
