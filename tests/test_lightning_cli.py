"""``surge_lightning.pytorch.cli.LightningCLI``: scripts written as Lightning's CLI documentation writes them, run in a
subprocess (``python main.py fit --config cfg.yaml --trainer.max_epochs=1``) after their two import lines
are changed, and, where Lightning and jsonargparse are installed, the same script under Lightning beside it.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # every test runs its scripts in child processes

SCRIPT = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.cli import LightningCLI


class LitRegressor(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class WideRegressor(LitRegressor):
    def __init__(self, hidden: int = 64, lr: float = 0.01, depth: int = 2):
        super().__init__(hidden, lr)


class RandomData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, size: int = 64):
        super().__init__()
        self.batch_size = batch_size
        self.size = size

    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.size, 8, generator=g)
        self.dataset = TensorDataset(x, x.sum(1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


def cli_main():
{main}


if __name__ == "__main__":
    cli_main()
"""

LIGHTNING_IMPORTS = ("import lightning as L\n", "from lightning.pytorch.cli import LightningCLI\n")
SURGE_IMPORTS = ("import surge_lightning as L\n", "from surge_lightning.pytorch.cli import LightningCLI\n")

BASE = """\
seed_everything: 3
model:
  hidden: 32
data:
  batch_size: 16
trainer:
  max_epochs: 3
  log_every_n_steps: 1
  enable_progress_bar: false
  enable_model_summary: false
  callbacks:
    - class_path: lightning.pytorch.callbacks.EarlyStopping
      init_args:
        monitor: val_loss
        patience: 5
"""


def _script(tmp_path: Path, main: str, *, lightning: bool = False, name: str = "main.py") -> Path:
    text = SCRIPT.replace("{main}", textwrap.indent(textwrap.dedent(main).strip(), "    "))
    if not lightning:  # the port: the two import lines, and nothing else
        for old, new in zip(LIGHTNING_IMPORTS, SURGE_IMPORTS, strict=True):
            assert text.count(old) == 1
            text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SURGE_TRAINER_", "SURGE_LAB", "PL_"))}
    return subprocess.run(
        [sys.executable, script.name, *args], cwd=script.parent, env=env, capture_output=True, text=True, timeout=240
    )


def _config(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


def _train_losses(run_dir: Path) -> int:
    """How many training steps wrote their loss (log_every_n_steps: 1): in metrics.csv when the run had a CSV
    logger, else in the files of Lightning's default logger, TensorBoard."""
    if (run_dir / "metrics.csv").exists():
        with open(run_dir / "metrics.csv", newline="") as f:
            return sum(1 for row in csv.DictReader(f) if row.get("train_loss"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    return len(events.Scalars("train_loss"))


def test_fit_merges_configs_and_overrides_and_saves_the_resolved_config(tmp_path: Path) -> None:
    script = _script(tmp_path, "LightningCLI(LitRegressor, RandomData)")
    base = _config(tmp_path, "base.yaml", BASE)
    small = _config(tmp_path, "small.yaml", "data:\n  size: 32\ntrainer:\n  max_epochs: 2\n")
    done = _run(script, "fit", "--config", base, "-c", small, "--trainer.max_epochs=1", "--model.lr", "0.1")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "lightning_logs" / "version_0"  # the default logger's, TensorBoard, as Lightning's
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["seed_everything"] == 3
    assert saved["model"] == {"hidden": 32, "lr": 0.1}  # the file, then the command line; plain init args
    assert saved["data"] == {"batch_size": 16, "size": 32}  # the second file over the first
    assert saved["trainer"]["max_epochs"] == 1
    (callback,) = saved["trainer"]["callbacks"]
    assert callback["class_path"] == "surge_callbacks.EarlyStopping"  # Lightning's, read as Surge's
    assert (callback["init_args"]["monitor"], callback["init_args"]["patience"]) == ("val_loss", 5)
    assert _train_losses(run_dir) == 2  # one epoch of 32 samples in batches of 16
    assert yaml.safe_load((run_dir / "hparams.yaml").read_text()) == {"hidden": 32, "lr": 0.1}

    again = _run(script, "fit", "--config", str(run_dir / "config.yaml"))  # the saved config runs again
    assert again.returncode == 0, again.stderr
    assert _train_losses(tmp_path / "lightning_logs" / "version_1") == 2


def test_validate_test_and_predict_take_the_checkpoint_and_the_seed(tmp_path: Path) -> None:
    script = _script(tmp_path, "LightningCLI(LitRegressor, RandomData, seed_everything_default=1234)")
    fitted = _run(script, "fit", "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false")
    assert fitted.returncode == 0, fitted.stderr
    (checkpoint,) = (tmp_path / "lightning_logs" / "version_0" / "checkpoints").glob("*.ckpt")
    for number, command in enumerate(("validate", "test", "predict"), start=1):
        done = _run(script, command, f"--ckpt_path={checkpoint}", "--trainer.enable_progress_bar=false")
        assert done.returncode == 0, f"{command}: {done.stderr}"
        saved = yaml.safe_load((tmp_path / "lightning_logs" / f"version_{number}" / "config.yaml").read_text())
        assert (saved["ckpt_path"], saved["seed_everything"]) == (str(checkpoint), 1234)


def test_run_false_builds_the_objects_as_lightnings_examples_use_them(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        cli = LightningCLI(
            LitRegressor,
            RandomData,
            seed_everything_default=1234,
            save_config_kwargs={"overwrite": True},
            trainer_defaults={"max_epochs": 2, "enable_progress_bar": False},
            run=False,
        )
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
        print("max_epochs", cli.trainer.max_epochs, "hidden", cli.model.hparams.hidden, "steps", cli.trainer.global_step)
        """,
    )
    done = _run(script, "--model.hidden=8", "--data.batch_size=32")  # no subcommand with run=False
    assert done.returncode == 0, done.stderr
    assert "max_epochs 2 hidden 8 steps 4" in done.stdout  # trainer_defaults; two epochs of two batches
    saved = yaml.safe_load((tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert saved["seed_everything"] == 1234 and saved["trainer"]["max_epochs"] == 2


def test_subclass_mode_takes_class_paths_and_short_names(tmp_path: Path) -> None:
    script = _script(tmp_path, "LightningCLI(LitRegressor, RandomData, subclass_mode_model=True)")
    config = _config(tmp_path, "wide.yaml", "model:\n  class_path: __main__.WideRegressor\n  init_args: {depth: 3}\n")
    by_path = _run(script, "fit", "-c", config, "--model.lr=0.2", "--print_config")
    assert by_path.returncode == 0, by_path.stderr
    model = yaml.safe_load(by_path.stdout)["model"]
    assert model == {"class_path": "__main__.WideRegressor", "init_args": {"hidden": 64, "lr": 0.2, "depth": 3}}
    by_name = _run(script, "fit", "--model=WideRegressor", "--print_config")
    assert by_name.returncode == 0, by_name.stderr
    assert yaml.safe_load(by_name.stdout)["model"]["class_path"] == "__main__.WideRegressor"
    other = _run(script, "fit", "--model.class_path=surge.testing.TinyModule", "--print_config")
    assert other.returncode == 2
    assert "surge.testing.TinyModule is not a subclass of LitRegressor" in other.stderr


def test_every_problem_at_once_with_its_line_and_nothing_written(tmp_path: Path) -> None:
    script = _script(tmp_path, "LightningCLI(LitRegressor, RandomData)")
    broken = BASE.replace("max_epochs: 3", "max_epocs: 3").replace("hidden: 32", "hiden: 32")
    broken = broken.replace("lightning.pytorch.callbacks.EarlyStopping", "lightning.pytorch.callbacks.RichProgressBar")
    config = _config(tmp_path, "broken.yaml", broken)
    done = _run(script, "fit", "--config", config, "--data.batch_sise=4")
    assert done.returncode == 2
    assert "4 problem(s)" in done.stderr and "Traceback" not in done.stderr
    assert "model.hiden: unknown argument; did you mean 'hidden'? (broken.yaml, line 3)" in done.stderr
    assert "trainer.max_epocs: unknown argument; did you mean 'max_epochs'? (broken.yaml, line 7)" in done.stderr
    assert "data.batch_sise: unknown argument; did you mean 'batch_size'? (the command line" in done.stderr
    assert "Lightning's RichProgressBar has no counterpart in Surge" in done.stderr
    assert "(broken.yaml, line 12)" in done.stderr
    assert not (tmp_path / "surge_runs").exists() and not (tmp_path / "lightning_logs").exists()
    wrong = _run(script, "fti")
    assert wrong.returncode == 2 and "did you mean 'fit'?" in wrong.stderr
    usage = _run(script, "fit", "--help")
    assert usage.returncode == 0 and "--model.hidden=VALUE  (default: 16)" in usage.stdout
    assert "--trainer.max_epochs" in usage.stdout


def test_loggers_save_config_callback_none_and_parser_defaults(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        class MyCLI(LightningCLI):
            def add_arguments_to_parser(self, parser):
                parser.set_defaults({"trainer.max_epochs": 2, "data.batch_size": 4})
                parser.link_arguments("data.batch_size", "model.hidden")
                parser.link_arguments("data.size", "model.lr", lambda size: size / 640, apply_on="instantiate")

            def after_fit(self):
                hparams = self.model.hparams
                print("after_fit", self.trainer.global_step, self.config["subcommand"], hparams.hidden, hparams.lr)

        MyCLI(LitRegressor, RandomData, save_config_callback=None)
        """,
    )
    logger = (
        "trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n    init_args: {save_dir: logs}\n"
    )
    done = _run(script, "fit", "-c", _config(tmp_path, "logger.yaml", logger), "--trainer.log_every_n_steps=1")
    assert done.returncode == 0, done.stderr
    # two epochs of 16 batches of 4 (set_defaults), hidden linked from the batch size, lr from the data module
    assert "after_fit 32 fit 4 0.1" in done.stdout
    run_dir = tmp_path / "logs" / "surge_runs" / "version_0"  # save_dir is where the run directory goes
    assert _train_losses(run_dir) == 32
    assert not (run_dir / "config.yaml").exists()  # save_config_callback=None


LIGHTNING_CLI = (
    importlib.util.find_spec("lightning") is not None and importlib.util.find_spec("jsonargparse") is not None
)


@pytest.mark.skipif(not LIGHTNING_CLI, reason="Lightning's CLI needs lightning and jsonargparse (the bench extra)")
def test_print_config_gives_lightnings_values_for_the_keys_both_have(tmp_path: Path) -> None:
    main = "LightningCLI(LitRegressor, RandomData)"
    config = _config(tmp_path, "base.yaml", BASE)
    args = ["fit", "-c", config, "--trainer.max_epochs=2", "--model.lr=0.2", "--data.size=48", "--print_config"]
    ours = _run(_script(tmp_path, main), *args)
    theirs = _run(_script(tmp_path, main, lightning=True, name="lightning_main.py"), *args)
    assert ours.returncode == 0, ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    ours_config, their_config = yaml.safe_load(ours.stdout), yaml.safe_load(theirs.stdout)
    for key in ("model", "data", "ckpt_path"):
        assert ours_config[key] == their_config[key], key
    assert ours_config["seed_everything"] == their_config["seed_everything"] == 3
    for key in ("max_epochs", "log_every_n_steps", "enable_progress_bar", "enable_model_summary"):
        assert ours_config["trainer"][key] == their_config["trainer"][key], key
    (our_callback,), (their_callback,) = ours_config["trainer"]["callbacks"], their_config["trainer"]["callbacks"]
    assert our_callback["class_path"].rsplit(".")[-1] == their_callback["class_path"].rsplit(".")[-1]
    shared = our_callback["init_args"].keys() & their_callback["init_args"].keys()
    assert {"monitor", "patience", "mode", "min_delta"} <= shared
    assert {k: our_callback["init_args"][k] for k in shared} == {k: their_callback["init_args"][k] for k in shared}
