"""A child process for the crash tests (run as a script; not collected by pytest).

``_child.py ROOT MAX_EPOCHS [last]`` trains :class:`Growing` for ``MAX_EPOCHS`` epochs of 8 batches, writing
every step (``log_every_n_steps=1``) with the default plugins (csv logger, checkpoint each epoch), resuming
from ``"last"`` when asked. It prints ``run RUN_DIR`` once training starts, then ``ready`` once the first row of
epoch 2 is written, and from there sleeps a little in every step so that the parent can kill it mid-epoch.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class Growing(TinyModule):
    """Logs ``train_loss`` every step and, from epoch 1 on, a new metric ``late`` (a new CSV column)."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.current_epoch >= 1:
            self.log("late", torch.tensor(float(self.global_step)))
        if self.current_epoch >= 2:
            time.sleep(0.05)  # 0.8 s for epochs 2 and 3: the parent kills it well before the end
        return loss


class Announce:
    surge_name = "announce"

    @surge.hookimpl
    def train_start(self, event) -> None:
        print(f"run {event.trainer.run_dir}", flush=True)

    @surge.hookimpl
    def train_batch_start(self, event) -> None:
        if event.trainer.current_epoch == 2 and event.batch_idx == 1:  # epoch 2's first row is written
            print("ready", flush=True)


def main() -> None:
    root, max_epochs, *resume = sys.argv[1:]
    torch.set_num_threads(1)
    surge.seed_everything(0)
    trainer = surge.Trainer(
        default_root_dir=root,
        max_epochs=int(max_epochs),
        limit_train_batches=8,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[Announce()],
    )
    trainer.fit(Growing(), datamodule=TinyDataModule(), ckpt_path="last" if resume else None)
    print("done", flush=True)


if __name__ == "__main__":
    main()
