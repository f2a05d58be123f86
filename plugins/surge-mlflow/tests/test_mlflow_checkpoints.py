"""``log_checkpoints`` from surge-checkpoint's events (``checkpoint_saved``/``checkpoint_removed``): the checkpoints a
fit kept, wherever its ModelCheckpoints write, and nothing (with a warning) when no plugin publishes them."""

from __future__ import annotations

import os

import surge
import torch
from surge import checkpoint as store
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint


def test_the_kept_checkpoints_of_a_dirpath_of_its_own_are_uploaded_under_its_name(
    tmp_path, store_uri, client, experiment, mlflow_of
):
    callback = ModelCheckpoint(dirpath=tmp_path / "best", monitor="val_loss", save_top_k=1, filename="{epoch}")
    trainer = surge.Trainer(
        default_root_dir=str(tmp_path / "root"),
        logger="mlflow",
        plugins=[
            callback,
            {"mlflow": {"tracking_uri": store_uri, "experiment_name": experiment, "log_checkpoints": True}},
        ],
        max_epochs=3,
        limit_train_batches=4,
        limit_val_batches=2,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    torch.manual_seed(0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    best = os.path.basename(callback.best_model_path)
    assert sorted(os.listdir(tmp_path / "best")) == [best, f"{best}.sha256"]  # the others were saved, then removed
    run_id = mlflow_of(trainer).run_id
    assert [a.path for a in client.list_artifacts(run_id, "checkpoints")] == ["checkpoints/best"]
    assert [a.path for a in client.list_artifacts(run_id, "checkpoints/best")] == [
        f"checkpoints/best/{best}",
        f"checkpoints/best/{best}.sha256",
    ]
    local = client.download_artifacts(run_id, "checkpoints/best", str(tmp_path / "download"))
    epoch = int(best.removeprefix("epoch=").removesuffix(".ckpt"))
    assert store.load(os.path.join(local, best))["global_step"] == 4 * (epoch + 1)  # the downloaded copy verifies


def test_without_the_checkpoint_plugin_nothing_is_uploaded_and_a_warning_says_why(
    fit, client, mlflow_of, warnings, tmp_path
):
    trainer = fit({"log_checkpoints": True}, enable_checkpointing=False)
    run = client.get_run(mlflow_of(trainer).run_id)
    assert run.info.status == "FINISHED" and client.list_artifacts(run.info.run_id) == []
    assert any(
        "log_checkpoints=True, but no active checkpoint plugin publishes 'checkpoint_saved'" in m for m in warnings
    )


def test_a_reported_checkpoint_that_no_longer_verifies_is_left_out_with_a_warning(fit, client, mlflow_of, warnings):
    class Corrupts:
        """Overwrites the first committed checkpoint after its save was reported."""

        surge_name, surge_kind = "corrupts", "observer"

        @surge.hookimpl(optional=True)
        def checkpoint_saved(self, event):
            with open(event.path, "r+b") as f:
                f.write(b"garbage")

    trainer = fit({"log_checkpoints": True}, extras=[Corrupts()], enable_checkpointing=True)
    run_id = mlflow_of(trainer).run_id
    assert client.list_artifacts(run_id, "checkpoints") == []
    assert any("epoch=0-step=4.ckpt is gone or no longer verifies; not uploaded" in m for m in warnings)
