"""Behaviour only Lightning's API has (issue 25, items 5, 7, 8, 10), side by side with Lightning 2.6: the default
logger, a second ``fit`` on a finished Trainer, ``lightning_utilities``' ``rank_zero_only.rank``, ``Trainer.model``
and ``LightningDataModule.trainer``."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_lightning.pytorch as spl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (`make test` installs it)")

QUIET = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)


def _module(base: type) -> Any:
    class Regressor(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 1)
            self.images: list[str] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss)
            if batch_idx == 0 and hasattr(
                self.logger, "experiment"
            ):  # the GAN and autoencoder tutorials' image logging
                self.logger.experiment.add_image("weights", self.net.weight.detach()[None], self.global_step)
                self.images.append(type(self.logger.experiment).__name__)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Regressor()


def _versions(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "lightning_logs").glob("version_*"))


def test_the_default_logger_is_lightnings_tensorboard_logger(tmp_path: Path) -> None:
    runs = {}
    for name, framework, base in (("lightning", pl, pl.LightningModule), ("surge", spl, spl.LightningModule)):
        root = tmp_path / name
        torch.manual_seed(0)
        model = _module(base)
        trainer = framework.Trainer(max_epochs=1, default_root_dir=root, **QUIET)
        trainer.fit(model, _loader())
        runs[name] = (type(trainer.logger).__name__, _versions(root), model.images, trainer.logger.version)
        assert list((root / "lightning_logs" / "version_0").glob("events.out.tfevents.*")), name
    assert (
        runs["surge"] == runs["lightning"] == ("TensorBoardLogger", ["lightning_logs/version_0"], ["SummaryWriter"], 0)
    )


def test_the_plain_surge_trainer_keeps_its_own_default(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET)
    trainer.fit(_module(surge.Module), _loader())
    assert not (tmp_path / "lightning_logs").exists()
    assert [type(logger).__module__.split(".")[0] for logger in trainer.loggers] == ["surge_csv"]


@pytest.mark.parametrize("logger", [False, None])
def test_no_default_logger_when_asked_for_none_or_under_fast_dev_run(tmp_path: Path, logger: Any) -> None:
    options = {"logger": False} if logger is False else {"fast_dev_run": True}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        root = tmp_path / framework.__name__
        framework.Trainer(max_epochs=1, default_root_dir=root, **QUIET, **options).fit(_module(base), _loader())
        assert not (root / "lightning_logs").exists(), framework.__name__


def test_a_second_fit_on_a_finished_trainer_returns_at_once_with_a_warning(tmp_path: Path) -> None:
    seen = {}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        torch.manual_seed(0)
        model = _module(base)
        trainer = framework.Trainer(max_epochs=2, logger=False, default_root_dir=tmp_path, **QUIET)
        trainer.fit(model, _loader())
        weights = model.net.weight.detach().clone()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(model, _loader())
        seen[framework.__name__] = (trainer.global_step, trainer.current_epoch, weights)
        assert torch.equal(model.net.weight, weights), "a second fit trained"
        if framework is spl:
            assert any("nothing ran" in str(w.message) and "max_epochs=2" in str(w.message) for w in caught)
    lightning, surge_side = seen["lightning.pytorch"], seen["surge_lightning.pytorch"]
    assert surge_side[:2] == lightning[:2] == (8, 2)
    assert torch.equal(surge_side[2], lightning[2])


def test_a_second_fit_on_a_plain_surge_trainer_still_says_how_to_train_further() -> None:
    trainer = surge.Trainer(max_epochs=1, logger=False, **QUIET)
    model = _module(surge.Module)
    trainer.fit(model, _loader())
    with pytest.raises(surge.SurgeError, match="already finished"):
        trainer.fit(model, _loader())


def test_rank_zero_only_of_lightning_utilities_is_set_by_importing_surge_lightning() -> None:
    code = textwrap.dedent(
        """
        import surge_lightning
        from lightning_utilities.core.rank_zero import rank_zero_only

        @rank_zero_only
        def hello():
            return "ran"

        print(rank_zero_only.rank, hello())
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["0", "ran"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "RANK": "1"})
    assert out.stdout.split() == ["1", "None"], out.stderr


def test_trainer_model_and_the_datamodules_trainer(tmp_path: Path) -> None:
    class Data(spl.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            return _loader()

    for framework, base, data in ((pl, pl.LightningModule, pl.LightningDataModule), (spl, spl.LightningModule, Data)):
        dm = Data() if data is Data else type("D", (data,), {"train_dataloader": lambda self: _loader()})()
        assert dm.trainer is None
        model = _module(base)
        trainer = framework.Trainer(max_epochs=1, logger=False, default_root_dir=tmp_path, **QUIET)
        trainer.fit(model, datamodule=dm)
        assert dm.trainer is trainer, framework.__name__
        assert trainer.model is model, framework.__name__


def test_lightning_1x_argparse_helpers_build_the_trainer(tmp_path: Path) -> None:
    """A Lightning 1.x program's ``main``: ``Trainer.add_argparse_args(parser)``, the model's own arguments beside,
    ``Trainer.from_argparse_args(args)`` (Lightning 2 removed all three; Lightning 1.x semantics)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=0.1)  # the model's add_model_specific_args
    parser = spl.Trainer.add_argparse_args(parser)
    args = parser.parse_args(
        [
            "--max_epochs",
            "2",
            "--limit_train_batches",
            "0.5",
            "--gpus",
            "None",
            "--learning_rate",
            "0.3",
            "--enable_progress_bar",
            "false",
            "--default_root_dir",
            str(tmp_path),
        ]
    )
    assert (args.max_epochs, args.limit_train_batches, args.gpus, args.enable_progress_bar) == (2, 0.5, None, False)
    trainer = spl.Trainer.from_argparse_args(args, logger=False, enable_checkpointing=False)
    assert (trainer.max_epochs, trainer.config.limit_train_batches, trainer.config.enable_progress_bar) == (
        2,
        0.5,
        False,
    )
    trainer.fit(_module(spl.LightningModule), _loader())
    assert trainer.global_step == 4  # half of 4 batches, two epochs
    with pytest.raises(surge.ConfigError, match="refresh_rate"):
        spl.Trainer.from_argparse_args({"progress_bar_refresh_rate": "fast"})


@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
@pytest.mark.parametrize("loaders", [1, 2])
def test_a_prediction_writer_is_called_as_lightning_calls_it(tmp_path: Path, interval: str, loaders: int) -> None:
    calls: dict[str, list[Any]] = {}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        seen: list[Any] = []

        class Writer(framework.callbacks.BasePredictionWriter):  # type: ignore[misc, name-defined]
            def write_on_batch_end(
                self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx
            ):  # type: ignore[no-untyped-def]
                seen.append(("batch", prediction.tolist(), list(batch_indices), batch_idx, dataloader_idx))  # noqa: B023

            def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):  # type: ignore[no-untyped-def]
                flat = predictions if loaders == 1 else [p for per in predictions for p in per]
                seen.append(("epoch", [p.tolist() for p in flat], batch_indices))  # noqa: B023

        class Model(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Linear(4, 1)

            def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
                return self.net(batch[0]).round(decimals=3)

        torch.manual_seed(0)
        model = Model()
        trainer = framework.Trainer(logger=False, default_root_dir=tmp_path, callbacks=[Writer(interval)], **QUIET)
        predictions = trainer.predict(model, [_loader() for _ in range(loaders)])
        calls[framework.__name__] = [seen, len(predictions)]
    assert calls["surge_lightning.pytorch"] == calls["lightning.pytorch"]


def test_a_prediction_writer_with_an_unknown_interval_is_refused() -> None:
    with pytest.raises(surge.ConfigError, match="write_interval"):
        spl.callbacks.BasePredictionWriter("step")


@pytest.mark.parametrize(
    "make",
    [
        lambda f: f.callbacks.TQDMProgressBar(refresh_rate=2),
        lambda f: f.callbacks.RichProgressBar(leave=True),
        lambda f: f.callbacks.ModelSummary(max_depth=-1),
        lambda f: f.callbacks.RichModelSummary(max_depth=2),
    ],
    ids=["TQDMProgressBar", "RichProgressBar", "ModelSummary", "RichModelSummary"],
)
def test_a_progress_bar_or_model_summary_passed_in_replaces_the_default_one(tmp_path: Path, make: Any) -> None:
    seen = {}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        passed = make(framework)
        trainer = framework.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[passed])
        trainer.fit(_module(base), _loader())
        role = "Progress" if "Progress" in type(passed).__name__ else "Summary"
        seen[framework.__name__] = [type(c).__name__ for c in trainer.callbacks if role in type(c).__name__]
        assert any(c is passed for c in trainer.callbacks), framework.__name__
    assert seen["surge_lightning.pytorch"] == seen["lightning.pytorch"]


def test_checkpoint_callback_under_fast_dev_run_is_the_idle_default(tmp_path: Path) -> None:
    seen = {}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        trainer = framework.Trainer(fast_dev_run=True, default_root_dir=tmp_path / framework.__name__)
        trainer.fit(_module(base), _loader())
        callback = trainer.checkpoint_callback
        seen[framework.__name__] = (
            type(callback).__name__,
            callback.best_model_path,
            len(trainer.checkpoint_callbacks),
        )
        assert not list((tmp_path / framework.__name__).rglob("*.ckpt"))
        off = framework.Trainer(fast_dev_run=True, enable_checkpointing=False, default_root_dir=tmp_path)
        assert off.checkpoint_callback is None
    assert seen["surge_lightning.pytorch"] == seen["lightning.pytorch"] == ("ModelCheckpoint", "", 1)


# -- weights_only= (Lightning 2.6) and hyper-parameters without a plain form ------------------------------------


class _Pickled:
    """A value only a trusted (pickle) load can read back."""

    def __init__(self, n: int) -> None:
        self.n = n


def _checkpoint_with_code(framework: Any, base: type, path: Path) -> Any:
    torch.manual_seed(0)
    model = _module(base)
    trainer = framework.Trainer(max_epochs=1, logger=False, default_root_dir=path.parent, **QUIET)
    trainer.fit(model, _loader())
    trainer.save_checkpoint(str(path))
    saved = torch.load(path, weights_only=False)
    saved["code"] = _Pickled(3)  # what a checkpoint holding pickled code looks like
    if framework is spl:  # committed as Surge commits its checkpoints (with the digest it checks)
        surge.checkpoint.save(saved, str(path))
    else:
        torch.save(saved, path)
    return model


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_weights_only_false_reads_a_checkpoint_with_code_as_lightning(tmp_path: Path, stage: str) -> None:
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        path = tmp_path / framework.__name__ / "code.ckpt"
        model = _checkpoint_with_code(framework, base, path)
        model.validation_step = model.test_step = model.predict_step = lambda batch, batch_idx: None
        trainer = framework.Trainer(max_epochs=2, logger=False, default_root_dir=path.parent, **QUIET)
        loaders = {"fit": "train_dataloaders"}.get(stage, "dataloaders")
        with pytest.raises(Exception, match="weights_only|trusted"):  # the safe loader refuses the code
            getattr(trainer, stage)(model, **{loaders: _loader()}, ckpt_path=str(path), weights_only=True)
        trainer = framework.Trainer(max_epochs=2, logger=False, default_root_dir=path.parent, **QUIET)
        getattr(trainer, stage)(model, **{loaders: _loader()}, ckpt_path=str(path), weights_only=False)
        assert trainer.global_step == (8 if stage == "fit" else 0), framework.__name__


def test_weights_only_contradicting_trusted_is_refused(tmp_path: Path) -> None:
    trainer = spl.Trainer(max_epochs=1, logger=False, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(surge.ConfigError, match=r"trainer\.test\.weights_only.*contradicts trusted=True"):
        trainer.test(_module(spl.LightningModule), _loader(), weights_only=True, trusted=True)
    with pytest.raises(surge.ConfigError, match=r"trainer\.fit\.weights_only: got 'no'"):
        trainer.fit(_module(spl.LightningModule), _loader(), weights_only="no")  # type: ignore[arg-type]


_SGD = functools.partial(torch.optim.SGD, lr=0.1)
"""A Hydra ``_partial_`` optimizer, as a default hyper-parameter."""


def _hparams_module(base: type) -> Any:
    class WithObjects(base):  # type: ignore[misc, valid-type]
        def __init__(
            self,
            net: nn.Module,
            head_class: type = nn.Linear,
            optimizer: Any = _SGD,
            hidden: int = 3,
        ) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = net
            self.head = head_class(hidden, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.head(self.net(x)), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return self.hparams.optimizer(self.parameters())

    return WithObjects


def test_hyperparameters_without_a_plain_form_are_kept_and_the_run_goes_on_as_lightning(tmp_path: Path) -> None:
    runs = {}
    for framework, base in ((pl, pl.LightningModule), (spl, spl.LightningModule)):
        cls = _hparams_module(base)
        torch.manual_seed(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = cls(net=nn.Linear(4, 3))
            trainer = framework.Trainer(max_epochs=2, logger=False, default_root_dir=tmp_path, **QUIET)
            trainer.fit(model, _loader())
        assert set(model.hparams) == {"net", "head_class", "optimizer", "hidden"}
        assert model.hparams.head_class is nn.Linear and isinstance(model.hparams.net, nn.Linear)
        runs[framework.__name__] = (model.state_dict(), trainer.global_step, [str(w.message) for w in caught])
        path = tmp_path / f"{framework.__name__}.ckpt"
        trainer.save_checkpoint(str(path))
    (ours, our_step, our_warnings), (theirs, their_step, _) = runs["surge_lightning.pytorch"], runs["lightning.pytorch"]
    assert our_step == their_step == 8 and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    (message,) = [w for w in our_warnings if "no plain form" in w]
    assert "['net', 'head_class', 'optimizer']" in message and "ignore=['net', 'head_class', 'optimizer']" in message
    # Surge's checkpoint loads with the safe loader: the values without a plain form are left out of it
    saved = torch.load(tmp_path / "surge_lightning.pytorch.ckpt", weights_only=True)
    assert saved["hparams"] == {"hidden": 3}
    cls = _hparams_module(spl.LightningModule)
    loaded = cls.load_from_checkpoint(str(tmp_path / "surge_lightning.pytorch.ckpt"), net=nn.Linear(4, 3))
    assert all(torch.equal(loaded.state_dict()[k], ours[k]) for k in ours)


def test_a_plain_surge_module_still_refuses_them(tmp_path: Path) -> None:
    cls = _hparams_module(surge.Module)
    trainer = surge.Trainer(max_epochs=1, logger=False, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(surge.ConfigError, match=r"hparams\.net: type torch\.nn\.modules\.linear\.Linear"):
        trainer.fit(cls(net=nn.Linear(4, 3)), _loader())
