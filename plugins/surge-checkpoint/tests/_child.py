"""Child processes of the crash tests (run as a script; not collected by pytest).

``_child.py zygote DIR``
    Imports torch and surge once, then serves commands on stdin: ``fork ASYNC`` forks a child that trains
    forever, saving a checkpoint into DIR at every step (resuming from ``"last"``), and prints ``pid N``;
    ``reap N`` waits for that child. The child prints ``start step=S temps=T`` once its run has started
    (after the start-up sweep and the resume): S is the step it resumed at, T the temp files left in DIR.
    Forking from a warm process keeps each of the 20 killed children cheap.

``_child.py preempt DIR OUT MODE NUM_WORKERS``
    A fit with shuffling, dropout, Adam and gradient accumulation 2. MODE ``full`` runs it to the end;
    ``interrupt`` prints ``ready`` inside the 11th training batch and waits for a line on stdin (send
    SIGTERM first); ``resume`` continues with ``ckpt_path="last"``. ``full`` and ``resume`` write the final
    weights and optimizer state to OUT.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader


class Reporter:
    surge_name = "reporter"

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @surge.hookimpl
    def train_start(self, event) -> None:
        temps = [n for n in os.listdir(self.directory) if n.startswith(".")] if os.path.isdir(self.directory) else []
        print(f"start step={event.trainer.global_step} temps={len(temps)}", flush=True)


class Wide(TinyModule):
    """About 4 MB of weights, so that most of a step's time goes into writing its checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1))


def train_forever(directory: str, async_save: bool) -> None:
    torch.set_num_threads(1)
    callback = ModelCheckpoint(
        dirpath=directory,
        every_n_train_steps=1,
        save_top_k=2,
        monitor="train_loss",
        save_last=True,
        async_save=async_save,
    )
    trainer = surge.Trainer(
        plugins=[callback, Reporter(directory)],
        default_root_dir=os.path.join(directory, os.pardir, "root"),
        max_steps=100_000,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(Wide(), datamodule=TinyDataModule(), ckpt_path="last")


def zygote(directory: str) -> None:
    for line in sys.stdin:
        command, *args = line.split()
        if command == "fork":
            pid = os.fork()
            if pid == 0:
                try:
                    train_forever(directory, args[0] == "1")
                finally:
                    os._exit(0)
            print(f"pid {pid}", flush=True)
        elif command == "reap":
            _, status = os.waitpid(int(args[0]), 0)
            print(f"reaped {status}", flush=True)


class Preemptible(TinyModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(0.2), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        if self.mode == "interrupt" and self.trainer.state.total_batches == 10:
            print("ready", flush=True)
            sys.stdin.readline()  # the parent sends SIGTERM, then a line
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Data(TinyDataModule):
    def __init__(self, num_workers: int) -> None:
        super().__init__()
        self.num_workers = num_workers

    def train_dataloader(self):
        return DataLoader(
            self.train_set, batch_size=8, shuffle=True, num_workers=self.num_workers, persistent_workers=False
        )


def preempt(directory: str, out: str, mode: str, num_workers: int) -> None:
    torch.set_num_threads(1)
    surge.seed_everything(0)
    trainer = surge.Trainer(
        plugins=[ModelCheckpoint(dirpath=directory)],
        default_root_dir=os.path.join(directory, os.pardir, "root"),
        max_epochs=3,
        accumulate_grad_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Preemptible(mode)
    trainer.fit(model, datamodule=Data(num_workers), ckpt_path="last" if mode == "resume" else None)
    optimizer = trainer.optimizers[0].state_dict()
    torch.save({"state_dict": model.state_dict(), "optimizer": optimizer, "step": trainer.global_step}, out)


if __name__ == "__main__":
    if sys.argv[1] == "zygote":
        zygote(sys.argv[2])
    else:
        preempt(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
