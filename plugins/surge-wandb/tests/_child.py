"""Child processes of the tests (run as a script; not collected by pytest). wandb's settings come from the
parent's environment (offline, directories under its tmp_path).

``_child.py resume CKPT ROOT``
    Fits two epochs with the ``wandb`` plugin under ROOT, resuming from CKPT, and prints ``run_id ID``.

``_child.py imports``
    Builds Trainers with and without the plugin and prints the ``wandb`` modules imported meanwhile.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
from surge.testing import TinyDataModule, TinyModule


def resume(ckpt: str, root: str) -> None:
    trainer = surge.Trainer(
        default_root_dir=root,
        logger="wandb",
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt)
    print("run_id", trainer.logger.run_id, flush=True)


def imports() -> None:
    root = tempfile.mkdtemp(prefix="surge-wandb-child-")
    import surge_wandb  # noqa: F401

    print("after import:", sorted(m for m in sys.modules if m.split(".")[0] == "wandb"), flush=True)
    surge.Trainer(default_root_dir=root)
    print("after Trainer():", sorted(m for m in sys.modules if m.split(".")[0] == "wandb"), flush=True)
    trainer = surge.Trainer(default_root_dir=root, logger="wandb")
    assert "wandb" in trainer.plugin_names
    print("after Trainer(logger='wandb'):", sorted(m for m in sys.modules if m.split(".")[0] == "wandb"), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        resume(sys.argv[2], sys.argv[3])
    else:
        imports()
