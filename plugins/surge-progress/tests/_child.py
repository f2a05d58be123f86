"""A child process for the terminal and pipe tests (run as a script; not collected by pytest).

``_child.py SETTINGS_JSON`` fits a module that logs its loss with ``prog_bar=True`` for two short epochs
(sanity check and validation included), then tests it, with the ``progress`` and ``model_summary`` plugins
as installed and the ``progress`` settings given. It prints ``printed while training`` on stdout during the
second epoch and ``child done`` at the end.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from surge.testing import TinyDataModule, TinyModule


class Logged(TinyModule):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, prog_bar=True)
        if self.trainer.global_step == 5:
            print("printed while training", flush=True)
        return loss


def main(settings: dict) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trainer = surge.Trainer(
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=os.environ["CHILD_ROOT"],
        plugins={"progress": settings},
    )
    model = Logged()
    trainer.fit(model, datamodule=TinyDataModule())
    trainer.test(model, datamodule=TinyDataModule(), verbose=False)  # the progress lines only, no results table
    print("child done", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
