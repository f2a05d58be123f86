"""``log_checkpoints`` from surge-checkpoint's events (``checkpoint_saved``/``checkpoint_removed``): the checkpoints a
fit kept, wherever its ModelCheckpoints write, and nothing (with a warning) when no plugin publishes them."""

from __future__ import annotations

from pathlib import Path

import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint


def test_the_kept_checkpoints_of_a_dirpath_of_its_own_go_into_the_artifact_under_its_name(tmp_path, wandb_runs):
    callback = ModelCheckpoint(dirpath=tmp_path / "best", monitor="val_loss", save_top_k=1, filename="{epoch}")
    root = tmp_path / "root"
    trainer = surge.Trainer(
        default_root_dir=str(root),
        logger="wandb",
        plugins=[callback, {"wandb": {"log_checkpoints": True}}],
        max_epochs=3,
        limit_train_batches=4,
        limit_val_batches=2,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    torch.manual_seed(0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    best = Path(callback.best_model_path).name
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [best, f"{best}.sha256"]  # the others removed
    (run,) = wandb_runs(root)
    (artifact,) = run.artifacts
    files = run.files(artifact)
    assert sorted(files) == [f"best/{best}", f"best/{best}.sha256"]
    assert Path(files[f"best/{best}"].local_path).read_bytes() == (tmp_path / "best" / best).read_bytes()


def test_without_the_checkpoint_plugin_nothing_is_logged_and_a_warning_says_why(fit, wandb_runs, warnings, tmp_path):
    fit({"log_checkpoints": True}, enable_checkpointing=False)
    (run,) = wandb_runs(tmp_path / "root")
    assert run.artifacts == [] and run.exit_code == 0
    assert any(
        "log_checkpoints=True, but no active checkpoint plugin publishes 'checkpoint_saved'" in m for m in warnings
    )


def test_a_reported_checkpoint_that_no_longer_verifies_is_left_out_with_a_warning(fit, wandb_runs, warnings, tmp_path):
    class Corrupts:
        """Overwrites each committed checkpoint after its save was reported."""

        surge_name, surge_kind = "corrupts", "observer"

        @surge.hookimpl(optional=True)
        def checkpoint_saved(self, event):
            with open(event.path, "r+b") as f:
                f.write(b"garbage")

    fit({"log_checkpoints": True}, extras=[Corrupts()], enable_checkpointing=True)
    (run,) = wandb_runs(tmp_path / "root")
    assert run.artifacts == [] and run.exit_code == 0
    assert any("epoch=0-step=4.ckpt is gone or no longer verifies; not logged" in m for m in warnings)
