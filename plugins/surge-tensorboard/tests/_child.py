"""Child process of the crash test (run as a script; not collected by pytest).

``_child.py ROOT READY STEP MODE``
    Trains forever with the TensorBoard logger (metrics written at every step), under ``ROOT``, and writes
    READY (atomically): JSON with the run directory and every metric the ``log_metrics`` events carried up
    to step STEP, as ``[tag, step, value]``.

    MODE ``parent``: READY once step STEP's metrics are written; it then goes on training and writing until
    the parent kills it. MODE ``self``: READY just before step STEP's metrics are written, and the process
    sends itself SIGKILL right after that write, before the writer's thread has had a chance to catch up.
"""

from __future__ import annotations

import json
import os
import signal
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class Ready:
    surge_name = "ready"

    def __init__(self, path: str, step: int, mode: str) -> None:
        self.path, self.step, self.mode = path, step, mode
        self.writes: list[list[object]] = []

    @surge.hookimpl
    def log_metrics(self, event) -> None:  # a participant: before the logger (an observer) writes them
        self.writes += [[tag, event.step, value] for tag, value in event.metrics.items()]
        if self.mode == "self" and event.step == self.step:
            self._report(event.trainer)

    @surge.hookimpl
    def train_batch_start(self, event) -> None:  # the next batch's: a step's row is written after its batch end
        if event.trainer.global_step == self.step:
            if self.mode == "self":
                os.kill(os.getpid(), signal.SIGKILL)
            self._report(event.trainer)

    def _report(self, trainer) -> None:
        with open(f"{self.path}.tmp", "w") as f:
            json.dump({"run_dir": trainer.run_dir, "writes": self.writes}, f)
        os.replace(f"{self.path}.tmp", self.path)


def main(root: str, ready: str, step: int, mode: str) -> None:
    torch.set_num_threads(1)
    trainer = surge.Trainer(
        default_root_dir=root,
        logger="tensorboard",
        plugins=[Ready(ready, step, mode)],
        max_steps=10_000_000,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
