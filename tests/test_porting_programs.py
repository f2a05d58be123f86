"""The porting suite's programs from public Lightning material (issue 25, deliverable 5): tutorials and docs pages,
a university course's notebooks, lightning-bolts, and a project template driven by Hydra configs with tests of its
own. Each program (``tests/porting/<name>.py``, its source named in its header) runs as written under Lightning and
with its imports rewritten by :func:`test_porting.port` (nothing else) under Surge, in the same process with the same
seed, and the two are compared: ``global_step``, epoch, weights bit for bit, ``callback_metrics``, and the loggers'
rows where the program has a logger, differing only where docs/porting.md says so.

Every program now gives Lightning's result under Surge, with the differences docs/porting.md names; a program
added later that does not is written as it should pass and marked ``pytest.mark.xfail(strict=True, reason=...)``
naming what it waits for (strict: the day it passes, the marker must go). ``test_each_program_runs_under_lightning``
checks what each program does under Lightning, so that an expected failure cannot hide a program that is wrong.
"""

from __future__ import annotations

import ast
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from test_porting import (
    PORTING,
    _assert_same_metrics,
    _assert_same_run,
    _assert_same_weights,
    _event_tags,
    _fit_row_step,
    _is_lightning,
    _Suite,
    _without_imports,
    port,
)

PROGRAMS = [
    "barlow_twins",
    "basic_gan",
    "bolts_vae",
    "cifar10_baseline",
    "demo_transformer",
    "finetuning",
    "mnist_hello_world",
    "multi_loaders",
    "optimization_hooks",
    "prediction_writer",
    "uva_autoencoder",
    "uva_transformers",
]
"""The programs of this file; ``hydra_template/`` is a project of several files, tested at the end."""

TEMPLATE = PORTING / "hydra_template"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> _Suite:
    return _Suite(tmp_path_factory.mktemp("porting-programs"))


def _csv_rows(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _assert_same_scalars(ours: str | Path, theirs: str | Path) -> None:
    """The same TensorBoard scalars under both directories: the same tags, the same values in the same order, each
    at Lightning's step or, for the Trainer's rows of a fit, one step later (docs/porting.md, "Metrics")."""
    surge_events, lightning_events = _event_tags(str(ours)), _event_tags(str(theirs))
    assert sorted(surge_events.Tags()["scalars"]) == sorted(lightning_events.Tags()["scalars"])
    for tag in lightning_events.Tags()["scalars"]:
        mine, theirs_ = surge_events.Scalars(tag), lightning_events.Scalars(tag)
        assert [e.value for e in mine] == [e.value for e in theirs_], tag
        assert all(a.step - b.step in (0, 1) for a, b in zip(mine, theirs_, strict=True)), tag


# --- Under Lightning, as written -------------------------------------------------------------------------------


def _lightning_facts(name: str, run: dict[str, Any]) -> None:
    """What each program does under Lightning 2.6: the behaviour its side-by-side test asks Surge for."""
    trainer = run["trainer"]
    if name == "uva_transformers":  # the warm-up scheduler stepped by the optimizer_step override, every step
        assert trainer.global_step == 2 * 1024 // 128 == run["scheduler_steps"]
        assert run["lr"] == 0.0  # the cosine's end: max_iters is the number of steps
    elif name == "barlow_twins":  # the probe's values logged in on_train_batch_end are the last batch's
        assert trainer.global_step == 2 * 512 // 32
        assert float(trainer.callback_metrics["online_train_acc"]) == float(run["logged_metrics"]["online_train_acc"])
        assert Path(run["last_model_path"]).name == "last.ckpt"
        assert type(trainer.logger).__name__ == "TensorBoardLogger"
    elif name == "basic_gan":  # the default logger is TensorBoard's: add_image works
        assert type(run["logger"]).__name__ == "TensorBoardLogger"
        assert {"train/generated_images", "validation/generated_images"} <= set(
            _event_tags(run["log_dir"]).Tags()["images"]
        )
    elif name == "mnist_hello_world":  # the second fit() on the finished Trainer returns at once
        assert trainer.global_step == 3 * 21 and trainer.current_epoch == 3
        assert set(run["tested"][0]) == {"test_loss", "test_acc"}
        assert list(run["metrics"].columns) == ["test_acc", "test_loss", "val_acc", "val_loss"]
    elif name == "cifar10_baseline":  # Lightning records the constructor chain (trained_model) and then adds "lr"
        assert set(run["swa_hparams"]) == {"lr", "trained_model"} and run["swa_hparams"]["lr"] == 0.01
        assert trainer.global_step == run["resnet_trainer"].global_step == 2 * 8
    elif name == "uva_autoencoder":  # the classes are hyper-parameters; the graph and images in TensorBoard
        assert run["runs"][8]["model"].hparams.encoder_class.__name__ == "Encoder"
        assert "lr-Adam" in run["fit_metrics"] and len(run["val_scores"]) == 2
        for directory in run["log_dirs"]:  # relative to the program's working directory
            assert "Reconstructions" in _event_tags(str(Path(run["root"], directory))).Tags()["images"]
    elif name == "prediction_writer":
        assert run["returned"] is None and run["autoencoder_returned"] is None  # return_predictions=False
        assert sorted(os.listdir(run["epoch_dir"])) == ["batch_indices_0.pt", "predictions_0.pt"]
        assert sorted(os.listdir(run["batch_dir"])) == ["0", "1"]
    elif name == "multi_loaders":  # one dict per loader, each with its own loader's metrics only
        assert [sorted(d) for d in run["tested"]] == [
            ["test_acc_clean", "test_loss_clean"],
            ["test_acc_shifted", "test_loss_shifted"],
        ]
        assert [sorted(d) for d in run["validated"]] == [
            ["val_acc_0/dataloader_idx_0", "val_loss_0/dataloader_idx_0"],
            ["val_acc_1/dataloader_idx_1", "val_loss_1/dataloader_idx_1"],
        ]
    elif name == "bolts_vae":
        assert run["hparams"]["dataset"] == "cifar10" and run["hparams"]["latent_dim"] == 16  # **kwargs kept
        assert set(run["fit_metrics"]) == {f"{s}_{k}" for s in ("train", "val") for k in ("recon_loss", "kl", "loss")}
    elif name == "finetuning":  # the feature extractor joined the optimizer at epoch 1, in a group of its own
        assert run["trainable"] and len(run["param_groups"]) == 2
    elif name == "optimization_hooks":  # every override called as often as Lightning calls it
        assert run["calls"]["optimizer_step"] == run["calls"]["backward"] == trainer.global_step == 3 * 20
        assert run["calls"]["lr_scheduler_step"] == 3 and run["scheduler_epochs"] == [0, 1, 2]
        assert run["calls"]["on_before_batch_transfer"] == 3 * (20 + 3)  # training and validation batches
        assert run["lrs"][:2] == pytest.approx([0.05 / 40, 0.05 * 2 / 40])
    elif name == "demo_transformer":
        assert trainer.global_step == 4 and set(run["fit_metrics"]) == {
            "train_loss",
            "train_loss_step",
            "train_loss_epoch",
        }


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_runs_under_lightning(suite: _Suite, name: str) -> None:
    run = suite.lightning(name)
    assert run["trainer"].global_step > 0
    _lightning_facts(name, run)


def test_the_programs_are_in_the_suite() -> None:
    assert sorted(PROGRAMS) == PROGRAMS and all((PORTING / f"{name}.py").is_file() for name in PROGRAMS)
    assert len(PROGRAMS) >= 10 and (TEMPLATE / "tests").is_dir()


# --- Side by side: ported to Surge, against Lightning ----------------------------------------------------------


@pytest.mark.slow
def test_uva_transformers_warm_up_stepped_in_optimizer_step(suite: _Suite) -> None:
    result = suite.surge("uva_transformers")
    lightning = suite.lightning("uva_transformers")
    assert result["scheduler_steps"] == lightning["scheduler_steps"]
    assert result["lr"] == lightning["lr"]
    _assert_same_run(result, lightning)
    assert result["result"] == pytest.approx(lightning["result"], rel=1e-6)
    assert Path(result["best_model_path"]).name == Path(lightning["best_model_path"]).name


@pytest.mark.slow
def test_barlow_twins_online_probe_logged_in_on_train_batch_end(suite: _Suite) -> None:
    result = suite.surge("barlow_twins")
    lightning = suite.lightning("barlow_twins")
    _assert_same_metrics(result["logged_metrics"], lightning["logged_metrics"])
    _assert_same_run(result, lightning)  # the probe (added in on_fit_start) among the weights
    assert Path(result["last_model_path"]).name == "last.ckpt"
    _assert_same_scalars(result["log_dir"], lightning["log_dir"])  # the default logger's rows: TensorBoard's


@pytest.mark.slow
def test_basic_gan_images_through_the_default_logger(suite: _Suite) -> None:
    result = suite.surge("basic_gan")
    lightning = suite.lightning("basic_gan")
    _assert_same_run(result, lightning)
    ours, theirs = _event_tags(result["log_dir"]), _event_tags(lightning["log_dir"])
    assert sorted(ours.Tags()["images"]) == sorted(theirs.Tags()["images"])
    for tag in theirs.Tags()["images"]:  # written with the program's own step (the epoch)
        assert [e.step for e in ours.Images(tag)] == [e.step for e in theirs.Images(tag)]
        assert [e.encoded_image_string for e in ours.Images(tag)] == [
            e.encoded_image_string for e in theirs.Images(tag)
        ]
    _assert_same_scalars(result["log_dir"], lightning["log_dir"])


@pytest.mark.slow
def test_mnist_hello_world_fit_test_best_and_fit_again(suite: _Suite) -> None:
    result = suite.surge("mnist_hello_world")
    lightning = suite.lightning("mnist_hello_world")
    _assert_same_run(result, lightning)
    assert result["simple_trainer"].global_step == lightning["simple_trainer"].global_step
    _assert_same_weights(result["simple"], lightning["simple"])
    _assert_same_metrics(result["test_metrics"], lightning["test_metrics"])
    assert result["tested"] == [pytest.approx(lightning["tested"][0], rel=1e-6)]
    # the CSV logger's rows as the tutorial reads them back (pandas, without the step column)
    assert result["metrics"].equals(lightning["metrics"])
    assert Path(result["log_dir"]) == Path(lightning["log_dir"]) == Path("logs/lightning_logs/version_0")


@pytest.mark.slow
def test_cifar10_baseline_one_cycle_csv_logger_and_swa_subclass(suite: _Suite) -> None:
    result = suite.surge("cifar10_baseline")
    lightning = suite.lightning("cifar10_baseline")
    assert sorted(result["swa_hparams"]) == sorted(lightning["swa_hparams"])
    assert result["resnet"].keys() == lightning["resnet"].keys()
    assert all(torch.equal(result["resnet"][k], lightning["resnet"][k]) for k in result["resnet"])
    _assert_same_metrics(result["resnet_fit_metrics"], lightning["resnet_fit_metrics"])
    _assert_same_run(result, lightning)
    assert result["tested"] == [pytest.approx(lightning["tested"][0], rel=1e-6)]
    assert result["swa_tested"] == [pytest.approx(lightning["swa_tested"][0], rel=1e-6)]
    assert result["metrics"].equals(lightning["metrics"])
    for ours, theirs in zip(result["log_dirs"], lightning["log_dirs"], strict=True):
        assert ours == theirs  # logs/lightning_logs/version_0, then version_1
        surge_rows, lightning_rows = (
            _csv_rows(Path(result["root"], ours, "metrics.csv")),
            _csv_rows(Path(lightning["root"], theirs, "metrics.csv")),
        )
        assert list(surge_rows[0]) == list(lightning_rows[0])  # the same columns, in the same order
        fit_rows = [r for r in surge_rows if not r.get("test_loss")]
        shifted = [{**r, "step": str(_fit_row_step(int(r["step"]), True))} for r in fit_rows]
        assert shifted == [r for r in lightning_rows if not r.get("test_loss")]


@pytest.mark.slow
def test_uva_autoencoder_classes_as_hyperparameters_and_images(suite: _Suite) -> None:
    result = suite.surge("uva_autoencoder")
    lightning = suite.lightning("uva_autoencoder")
    for dim in (8, 16):
        ours, theirs = result["runs"][dim], lightning["runs"][dim]
        _assert_same_run(ours, theirs)
        assert ours["result"]["val"] == [pytest.approx(theirs["result"]["val"][0], rel=1e-6)]
        assert ours["result"]["test"] == [pytest.approx(theirs["result"]["test"][0], rel=1e-6)]
        assert dict(ours["model"].hparams).keys() == dict(theirs["model"].hparams).keys()
        assert ours["model"].hparams.encoder_class.__name__ == "Encoder"
    for ours, theirs in zip(result["log_dirs"], lightning["log_dirs"], strict=True):
        # the default logger's directories (Lightning's trainer.log_dir is relative, as default_root_dir is)
        assert Path(result["root"], ours).relative_to(result["root"]) == Path(theirs)
        _assert_same_scalars(Path(result["root"], ours), Path(lightning["root"], theirs))
        surge_events, lightning_events = (
            _event_tags(str(Path(result["root"], ours))),
            _event_tags(str(Path(lightning["root"], theirs))),
        )
        assert surge_events.Tags()["images"] == lightning_events.Tags()["images"] == ["Reconstructions"]
        assert [e.step for e in surge_events.Images("Reconstructions")] == [
            e.step for e in lightning_events.Images("Reconstructions")
        ]
        assert surge_events.Tags()["graph"] == lightning_events.Tags()["graph"]  # trainer.logger._log_graph = True


@pytest.mark.slow
def test_prediction_writer_epoch_and_batch_intervals(suite: _Suite) -> None:
    result = suite.surge("prediction_writer")
    lightning = suite.lightning("prediction_writer")
    _assert_same_run(result, lightning)
    assert result["returned"] is None and result["autoencoder_returned"] is None
    _assert_same_weights(result["boring"], lightning["boring"])
    for key in ("epoch_dir", "batch_dir"):
        ours = sorted(p.relative_to(result[key]) for p in Path(result[key]).rglob("*.pt"))
        assert ours == sorted(p.relative_to(lightning[key]) for p in Path(lightning[key]).rglob("*.pt"))
        for relative in ours:
            mine, theirs = torch.load(Path(result[key], relative)), torch.load(Path(lightning[key], relative))
            flat = torch.utils._pytree.tree_leaves
            assert [torch.as_tensor(a).tolist() for a in flat(mine)] == [
                torch.as_tensor(b).tolist() for b in flat(theirs)
            ]


@pytest.mark.slow
def test_multi_loaders_one_dict_per_loader(suite: _Suite) -> None:
    result = suite.surge("multi_loaders")
    lightning = suite.lightning("multi_loaders")
    _assert_same_run(result, lightning)
    for key in ("validated", "tested"):
        assert [sorted(d) for d in result[key]] == [sorted(d) for d in lightning[key]], key
        for ours, theirs in zip(result[key], lightning[key], strict=True):
            assert ours == pytest.approx(theirs, rel=1e-6)
    _assert_same_metrics(result["test_metrics"], lightning["test_metrics"])


@pytest.mark.slow
def test_bolts_vae_kwargs_hyperparameters_and_log_dict(suite: _Suite) -> None:
    result = suite.surge("bolts_vae")
    lightning = suite.lightning("bolts_vae")
    assert result["hparams"] == lightning["hparams"]  # the argparse arguments through **kwargs
    _assert_same_run(result, lightning)  # q.rsample() draws the same numbers in both: the same weights


@pytest.mark.slow
def test_finetuning_callback_unfreezes_into_a_new_param_group(suite: _Suite) -> None:
    result = suite.surge("finetuning")
    lightning = suite.lightning("finetuning")
    _assert_same_run(result, lightning)
    assert result["param_groups"] == lightning["param_groups"] and result["trainable"]


@pytest.mark.slow
def test_optimization_hooks_each_override_called_as_lightning_calls_it(suite: _Suite) -> None:
    result = suite.surge("optimization_hooks")
    lightning = suite.lightning("optimization_hooks")
    assert result["calls"] == lightning["calls"]
    assert result["lrs"] == lightning["lrs"] and result["scheduler_epochs"] == lightning["scheduler_epochs"]
    _assert_same_run(result, lightning)


@pytest.mark.slow
def test_demo_transformer_fast_dev_run(suite: _Suite) -> None:
    result = suite.surge("demo_transformer")
    lightning = suite.lightning("demo_transformer")
    _assert_same_run(result, lightning)


# --- The Hydra project template ---------------------------------------------------------------------------------


def _port_target(target: str) -> str:
    """A ``_target_`` class path of a Hydra config as the import rewrite maps it: ``a.b.C`` is ``from a.b import C``."""
    module, _, name = target.rpartition(".")
    if not _is_lightning(module):
        return target
    (statement,) = ast.parse(port(f"from {module} import {name}\n")).body
    assert isinstance(statement, ast.ImportFrom) and [a.name for a in statement.names] == [name], target
    return f"{statement.module}.{name}"


_TARGET = re.compile(r"^(\s*_target_:\s*)(\S+)(.*)$", re.MULTILINE)


def _port_config(text: str) -> str:
    return _TARGET.sub(lambda m: m[1] + _port_target(m[2]) + m[3], text)


def _targets(text: str) -> list[str]:
    return [m[2] for m in _TARGET.finditer(text)]


def _blank_targets(text: str) -> str:
    return _TARGET.sub(lambda m: m[1] + "<target>" + m[3], text)


def _template_copy(framework: str, dest: Path) -> Path:
    """The template under ``dest``: as written for Lightning, with every Python file's imports and every config's
    Lightning ``_target_`` rewritten for Surge."""
    shutil.copytree(TEMPLATE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    if framework == "surge":
        for path in dest.rglob("*.py"):
            path.write_text(port(path.read_text()))
        for path in dest.rglob("*.yaml"):
            path.write_text(_port_config(path.read_text()))
    return dest


def _template_files(suffix: str) -> list[Path]:
    return sorted(p for p in TEMPLATE.rglob(f"*{suffix}") if "__pycache__" not in p.parts)


def test_hydra_template_port_rewrites_imports_and_targets_only() -> None:
    python, configs = _template_files(".py"), _template_files(".yaml")
    assert len(python) >= 15 and len(configs) >= 20
    targets = 0
    for path in configs:
        text = path.read_text()
        ported = _port_config(text)
        assert _blank_targets(ported) == _blank_targets(text)  # only the _target_ values changed
        targets += len([t for t in _targets(text) if _is_lightning(t.rpartition(".")[0])])
        assert not [t for t in _targets(ported) if _is_lightning(t.rpartition(".")[0])]
    assert targets == 7  # the Trainer, four callbacks, two loggers
    for path in python:
        source = path.read_text()
        assert _without_imports(port(source)) == _without_imports(source), path


def _run_pytest(project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PROJECT_ROOT"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=project,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_hydra_template_own_tests_pass_under_lightning(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="Lightning is not installed (the `bench` extra)")
    project = _template_copy("lightning", tmp_path / "project")
    run = _run_pytest(project)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\b9 passed\b", run.stdout), run.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_hydra_template_own_tests_pass_under_surge(tmp_path: Path) -> None:
    project = _template_copy("surge", tmp_path / "project")
    run = _run_pytest(project)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\b9 passed\b", run.stdout), run.stdout[-2000:]


_DRIVER = """
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

project, out = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(project))
from src.train import train

overrides = ["seed=12345", "logger=csv", "trainer.max_epochs=3"]
overrides += ["extras.print_config=false", "extras.enforce_tags=false"]
with initialize_config_dir(version_base="1.3", config_dir=str(project / "configs")):
    cfg = compose(config_name="train.yaml", return_hydra_config=True, overrides=overrides)
with open_dict(cfg):
    cfg.paths.root_dir = str(project)
    cfg.paths.output_dir = cfg.paths.log_dir = str(out)
    cfg.paths.data_dir = str(out / "data")
HydraConfig().set_config(cfg)
metric_dict, objects = train(cfg)
trainer = objects["trainer"]
torch.save(
    {
        "global_step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "state_dict": objects["model"].state_dict(),
        "metrics": {k: float(v) for k, v in metric_dict.items()},
        "best_model_path": trainer.checkpoint_callback.best_model_path,
        "callbacks": sorted(type(c).__name__ for c in objects["callbacks"]),
    },
    out / "result.pt",
)
"""
"""One run of the template's ``train()`` (the default callbacks, the CSV logger, 3 epochs), its outcome saved."""


def _train_template(framework: str, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    project = _template_copy(framework, tmp_path / framework / "project")
    out = tmp_path / framework / "out"
    run = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(project), str(out)],
        cwd=tmp_path / framework,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, f"{framework}: {run.stderr[-4000:]}"
    return torch.load(out / "result.pt", weights_only=True), out


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_hydra_template_trains_as_lightning_does(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="Lightning is not installed (the `bench` extra)")
    ours, out = _train_template("surge", tmp_path)
    theirs, lightning_out = _train_template("lightning", tmp_path)
    assert theirs["callbacks"] == ["EarlyStopping", "ModelCheckpoint", "RichModelSummary", "RichProgressBar"]
    assert (ours["global_step"], ours["epoch"]) == (theirs["global_step"], theirs["epoch"]) == (3 * 10, 3)
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    assert all(torch.equal(ours["state_dict"][k], theirs["state_dict"][k]) for k in ours["state_dict"])
    assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-6)
    assert Path(ours["best_model_path"]).relative_to(out) == Path(theirs["best_model_path"]).relative_to(lightning_out)
    surge_rows = _csv_rows(out / "csv" / "version_0" / "metrics.csv")
    lightning_rows = _csv_rows(lightning_out / "csv" / "version_0" / "metrics.csv")
    assert list(surge_rows[0]) == list(lightning_rows[0])
    fit = [r for r in surge_rows if not r.get("test/acc")]
    shifted = [{**r, "step": str(_fit_row_step(int(r["step"]), True))} for r in fit]
    assert shifted == [r for r in lightning_rows if not r.get("test/acc")]
    assert [r for r in surge_rows if r.get("test/acc")] == [r for r in lightning_rows if r.get("test/acc")]


def test_hydra_template_port_of_a_target() -> None:
    assert _port_target("torch.optim.Adam") == "torch.optim.Adam"  # not Lightning's: left as it is
    assert _port_config("  _target_: src.models.digits_module.DigitsLitModule\n") == (
        "  _target_: src.models.digits_module.DigitsLitModule\n"
    )
    ported = _port_config("model_checkpoint:\n  _target_: lightning.pytorch.callbacks.ModelCheckpoint\n  dirpath: x\n")
    (target,) = _targets(ported)
    assert not _is_lightning(target.rpartition(".")[0]) and target.endswith(".ModelCheckpoint")
    assert ported.endswith("  dirpath: x\n")
