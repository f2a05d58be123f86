"""Lightning's ``WandbLogger`` (``surge_lightning.pytorch.loggers.WandbLogger``, from ``surge_wandb.lightning``) in real fits
and direct calls, wandb offline, read back from the ``.wandb`` transaction logs wandb wrote (see conftest): the
run, its config, rows and axis, media, checkpoint artifacts, and the arguments. Side by side with Lightning's:
``tests/test_porting.py`` (``wandb_logger.py``)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import shutil
import sys
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint
from surge_lightning.pytorch.loggers import WandbLogger
from surge_lightning.pytorch.utilities import rank_zero_only
from surge_wandb import WandbError


@pytest.fixture(autouse=True)
def no_run_left_open() -> Iterator[None]:
    """Lightning's logger leaves its run open (``wandb.finish()`` ends it): end it, so that the next test's
    logger does not log into it."""
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()


def fit(logger: Any, tmp_path: Path, model: surge.Module | None = None, **kwargs: Any) -> surge.Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    kwargs.setdefault("max_epochs", 2)
    trainer = surge.Trainer(
        logger=logger,
        default_root_dir=str(tmp_path / "root"),
        limit_train_batches=4,
        limit_val_batches=2,
        log_every_n_steps=2,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(model or TinyModule(), datamodule=TinyDataModule())
    return trainer


def test_a_fit_is_one_open_run_with_lightnings_config_rows_and_axis(tmp_path: Path, wandb_runs: Any) -> None:
    import wandb

    logger = WandbLogger(project="tiny", name="first", save_dir=tmp_path / "logs", group="g", tags=["a"])
    trainer = fit(logger, tmp_path, enable_checkpointing=True)
    run = logger.experiment
    assert wandb.run is run and trainer.logger is logger  # the process's run, still open: wandb.log reaches it
    wandb.log({"after": 1.0})
    assert (logger.name, logger.version, logger.save_dir) == ("tiny", run.id, str(tmp_path / "logs"))
    # the run directory is Lightning's checkpoint directory's parent: save_dir/project/<run id>
    assert trainer.log_dir == str(tmp_path / "logs" / "tiny" / run.id)
    assert [p.name for p in Path(trainer.log_dir, "checkpoints").glob("*.ckpt")] == ["epoch=1-step=8.ckpt"]

    (written,) = wandb_runs(tmp_path / "logs")
    assert (written.id, written.project, written.name) == (run.id, "tiny", "first")
    assert (written.group, written.tags) == ("g", ["a"])  # wandb.init's keyword arguments
    assert written.config == {"in_features": 8, "hidden": 16, "lr": 0.05}
    assert written.step_metrics == {"trainer/global_step": "", "*": "trainer/global_step"}
    rows = written.rows()
    train = [(r["trainer/global_step"], r["epoch"]) for r in rows if "train_loss" in r]
    assert train == [(2, 0), (4, 0), (6, 1), (8, 1)]
    assert [(r["trainer/global_step"], r["epoch"]) for r in rows if "val_loss" in r] == [(4, 0), (8, 1)]
    assert rows[-1] == {"after": 1.0, "trainer/global_step": 8}  # wandb's own log: the axis synced
    assert written.exit_code == 0  # finished by read_runs' wandb.teardown()


def test_fit_then_test_log_into_one_run(tmp_path: Path, wandb_runs: Any) -> None:
    logger = WandbLogger(project="tiny", save_dir=tmp_path)
    trainer = fit(logger, tmp_path)
    trainer.test(trainer.module, datamodule=TinyDataModule())
    (written,) = wandb_runs(tmp_path)
    assert written.id == logger.version
    assert [r["trainer/global_step"] for r in written.rows() if "test_loss" in r] == [8]


def test_offline_true_needs_no_server_and_leaves_the_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wandb_runs: Any
) -> None:
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no API key anywhere
    with pytest.raises(WandbError, match=r"wandb.init\(project='tiny', mode wandb's setting\) failed: .*API key.*"
                       r"WandbLogger\(offline=True\)"):  # fmt: skip
        WandbLogger(project="tiny", save_dir=tmp_path / "online").experiment  # noqa: B018

    logger = WandbLogger(project="tiny", save_dir=tmp_path / "offline", offline=True)
    logger.log_metrics({"x": 1.0}, step=0)
    assert "WANDB_MODE" not in os.environ  # Lightning's sets WANDB_MODE=dryrun for the rest of the process
    (written,) = wandb_runs(tmp_path / "offline")
    assert written.rows() == [{"x": 1.0, "trainer/global_step": 0}]


def test_direct_calls_prefix_steps_and_hyperparameters(tmp_path: Path, wandb_runs: Any) -> None:
    logger = WandbLogger(project="tiny", save_dir=tmp_path, prefix="p")
    logger.log_metrics({"a": 1.0}, step=3)
    logger.log_metrics({"b": torch.tensor(2.0)})
    logger.log_hyperparams(Namespace(lr=0.1, act=torch.nn.ReLU, fn=print, path=Path("data"), nested={"k": 1}))
    copy = pickle.loads(pickle.dumps(logger))  # as a spawned process gets it: the same run, without its Run object
    assert copy.version == logger.version and copy._experiment is None
    (written,) = wandb_runs(tmp_path)
    assert written.rows() == [{"p-a": 1.0, "trainer/global_step": 3}, {"p-b": 2.0, "trainer/global_step": 3}]
    assert written.config == {"lr": 0.1, "act": "ReLU", "fn": "print", "path": "data", "nested": {"k": 1}}


def test_tables_text_and_images(tmp_path: Path, wandb_runs: Any) -> None:
    logger = WandbLogger(project="tiny", save_dir=tmp_path)
    logger.log_table("table", columns=["a", "b"], data=[[1, 2.5], [3, 4.5]], step=1)
    logger.log_text("text", columns=["input", "label"], data=[["cheese", "english"]], step=2)
    images = [torch.zeros(3, 4, 4), torch.ones(3, 4, 4)]
    logger.log_image("images", images, step=3, caption=["black", "white"])
    with pytest.raises(ValueError, match=r"log_image\('images'\): caption= has 1 values for 2 images"):
        logger.log_image("images", images, caption=["one"])
    with pytest.raises(TypeError, match="images must be a list, got Tensor"):
        logger.log_image("images", images[0])  # type: ignore[arg-type]

    (written,) = wandb_runs(tmp_path)
    table, text, image = written.rows()  # media are rows of their fields, by dotted key
    assert (table["trainer/global_step"], table["table._type"], table["table.nrows"]) == (1, "table-file", 2)
    assert (text["trainer/global_step"], text["text._type"], text["text.ncols"]) == (2, "table-file", 2)
    assert image["trainer/global_step"] == 3 and image["images._type"] == "images/separated"
    assert image["images.count"] == 2 and image["images.captions"] == ["black", "white"]
    files = written.path.parent / "files"
    assert json.loads((files / table["table.path"]).read_text())["data"] == [[1, 2.5], [3, 4.5]]
    assert json.loads((files / text["text.path"]).read_text())["data"] == [["cheese", "english"]]


def test_log_model_all_logs_each_checkpoint_and_its_marker_as_they_are_saved(tmp_path: Path, wandb_runs: Any) -> None:
    logger = WandbLogger(project="tiny", save_dir=tmp_path, log_model="all", checkpoint_name="tiny-model")
    checkpoints = ModelCheckpoint(monitor="val_loss", save_top_k=2)
    trainer = fit(logger, tmp_path, callbacks=[checkpoints], max_epochs=3)
    (written,) = wandb_runs(tmp_path)
    val_losses = [row["val_loss"] for row in written.rows() if "val_loss" in row]
    assert [(a.name, a.type) for a in written.artifacts] == [("tiny-model", "model")] * 3
    metadata = [json.loads(a.metadata) for a in written.artifacts]
    assert [m["original_filename"] for m in metadata] == [f"epoch={e}-step={4 * (e + 1)}.ckpt" for e in range(3)]
    assert [m["score"] for m in metadata] == pytest.approx(val_losses, rel=1e-6)
    assert metadata[-1]["ModelCheckpoint"] == {
        "monitor": "val_loss", "mode": "min", "save_last": False, "save_top_k": 2, "save_weights_only": False,
        "_every_n_train_steps": 0,
    }  # fmt: skip
    best_so_far = [loss == min(val_losses[: i + 1]) for i, loss in enumerate(val_losses)]
    aliases = [["best", "latest"] if best else ["latest"] for best in best_so_far]  # "best" as it stood at each save
    assert [sorted(a.aliases) for a in written.artifacts] == aliases  # wandb records them in no fixed order
    files = written.files(written.artifacts[-1])
    assert sorted(files) == ["model.ckpt", "model.ckpt.sha256"]
    original = Path(trainer.log_dir, "checkpoints", metadata[-1]["original_filename"])
    assert files["model.ckpt"].digest == base64.b64encode(hashlib.md5(original.read_bytes()).digest()).decode()

    # what a download gives, from the staged copies `wandb sync` uploads: it loads as Lightning's docs load it
    download = tmp_path / "download"
    download.mkdir()
    for name, entry in files.items():
        shutil.copy(entry.local_path, download / name)
    loaded = TinyModule.load_from_checkpoint(str(download / "model.ckpt"))
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), trainer.module.state_dict().values()))


def test_log_model_true_logs_at_the_end_of_a_fit_that_ends_well(tmp_path: Path, wandb_runs: Any) -> None:
    class Failing(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.trainer.current_epoch == 1:
                raise RuntimeError("bad batch")
            return super().training_step(batch, batch_idx)

    logger = WandbLogger(project="tiny", save_dir=tmp_path / "ok", log_model=True)
    fit(logger, tmp_path, enable_checkpointing=True)
    (written,) = wandb_runs(tmp_path / "ok")
    (artifact,) = written.artifacts  # the one file ModelCheckpoint kept, once the fit ended
    assert artifact.name == f"model-{written.id}" and sorted(artifact.aliases) == ["best", "latest"]
    assert '"original_filename":"epoch=1-step=8.ckpt"' in artifact.metadata

    failing = WandbLogger(project="tiny", save_dir=tmp_path / "failed", log_model=True)
    with pytest.raises(RuntimeError, match="bad batch"):
        fit(failing, tmp_path, Failing(), enable_checkpointing=True)
    (written,) = wandb_runs(tmp_path / "failed")
    assert written.artifacts == []  # epoch 0's checkpoint was saved, but the fit failed (as in Lightning)


def test_a_run_given_or_already_open_is_used(tmp_path: Path, wandb_runs: Any) -> None:
    import wandb

    own = wandb.init(project="mine", dir=str(tmp_path), id="own-run")
    given = WandbLogger(experiment=own, save_dir=None)
    assert given.experiment is own and given.version == "own-run" and given.surge_run_dir is None
    with pytest.warns(UserWarning, match="a wandb run already in progress"):
        reusing = WandbLogger(project="other").experiment
    assert reusing is own
    wandb.finish()

    continued = WandbLogger(project="mine", save_dir=tmp_path / "again", version="own-run")
    continued.log_metrics({"later": 1.0}, step=5)
    first, second = wandb_runs(tmp_path)
    assert first.id == second.id == "own-run" and second.rows() == [{"later": 1.0, "trainer/global_step": 5}]


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    for kwargs, message in [
        ({"log_model": "best"}, r"log_model='best'\): use False .* True .* or 'all'"),
        ({"add_file_policy": "copy"}, r"add_file_policy='copy'\): use 'mutable' .* or 'immutable'"),
        ({"checkpoint_name": "my model"}, r"checkpoint_name='my model'\): W&B artifact names"),
    ]:
        with pytest.raises(surge.SurgeError, match=message):
            WandbLogger(save_dir=tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_other_ranks_get_an_experiment_that_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing wandb now fails: nothing may need it
    logger = WandbLogger(project="tiny", save_dir=tmp_path)
    assert logger.experiment.log({"x": 1.0}) is None
    logger.log_metrics({"x": 1.0}, step=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.finalize("success")
    assert logger.version is None and not list(tmp_path.iterdir())


def test_watch_logs_gradients_and_parameters(tmp_path: Path, wandb_runs: Any) -> None:
    logger = WandbLogger(project="tiny", save_dir=tmp_path)
    model = TinyModule()
    logger.watch(model, log="all", log_freq=1)
    fit(logger, tmp_path, model, max_epochs=1)
    (written,) = wandb_runs(tmp_path)
    kinds = {key: value for row in written.rows() for key, value in row.items() if key.endswith("._type")}
    assert kinds["gradients/net.0.weight._type"] == kinds["parameters/net.0.weight._type"] == "histogram"
