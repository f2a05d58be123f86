"""The Module and Trainer API that Lightning programs use, under Surge (issue 17): ``accelerator="gpu"``,
"did you mean" by the domain's synonyms, step methods without ``batch_idx``, a DataModule in the loaders'
place, the Module's ``loggers``/``toggle_optimizer``/``clip_gradients``/``freeze``, the Trainer flags
``detect_anomaly``/``sync_batchnorm``/``barebones``/``enable_autolog_hparams``, and the names of
``lightning.pytorch`` that user code imports.

Where Lightning is installed (the ``bench`` extra), the semantics copied from it are checked side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_devices
import tomllib
import torch
from loguru import logger
from surge.errors import ConfigError, ProviderError
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args
from torch import nn

REPO = Path(__file__).resolve().parents[1]
QUIET = quiet_trainer_args(enable_checkpointing=True)  # surge's runs here keep their checkpoint callback
LIGHTNING_QUIET = quiet_trainer_args()


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    yield messages
    logger.remove(sink)


def lightning() -> Any:
    return pytest.importorskip("lightning")


def fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """A machine with ``count`` CUDA devices, as far as device selection can tell (no MPS)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(surge_devices.MPSAccelerator, "is_available", classmethod(lambda cls: False))


# -- accelerator="gpu" ---------------------------------------------------------------------------------------


def test_gpu_without_a_gpu_says_so_and_how_to_go_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_cuda(monkeypatch, 0)
    with pytest.raises(ProviderError) as info:
        surge.Trainer(accelerator="gpu", default_root_dir=str(tmp_path))
    message = str(info.value)
    assert "trainer.accelerator: 'gpu' (plugin 'devices' from surge-devices) found no GPU" in message
    assert "torch.cuda.is_available() is False" in message and "accelerator='auto'" in message
    assert "tpu" not in message and "pip install" not in message
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_gpu_is_cuda_with_lightnings_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, 4)
    trainer = surge.Trainer(accelerator="gpu", devices=[2], **QUIET)
    assert isinstance(trainer.accelerator, surge_devices.CUDAAccelerator) and trainer.accelerator.name == "cuda"
    assert trainer.strategy.device_indices == [2] and trainer.strategy.root_device == torch.device("cuda", 2)
    assert surge.Trainer(accelerator="gpu", devices="1,", **QUIET).strategy.device_indices == [1]
    assert surge.Trainer(accelerator="gpu", **QUIET).strategy.device_indices == [0]  # devices="auto": one
    parse = trainer.accelerator.parse_devices
    assert parse(2) == [0, 1] and parse("3") == [0, 1, 2] and parse(-1) == [0, 1, 2, 3] and parse("-1") == [0, 1, 2, 3]
    assert parse("0,2") == [0, 2] and parse([3, 1]) == [3, 1]
    with pytest.raises(ValueError, match=r"asks for cuda device\(s\) \[4\], but 4 are available"):
        parse([4])
    with pytest.raises(
        ConfigError, match=r"devices=2 and num_nodes=1 need a distributed strategy; pass strategy=.ddp."
    ):
        surge.Trainer(accelerator="gpu", devices=2, **QUIET)


def test_gpu_is_mps_on_a_mac(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surge_devices.MPSAccelerator, "is_available", classmethod(lambda cls: True))
    trainer = surge.Trainer(accelerator="gpu", **QUIET)
    assert isinstance(trainer.accelerator, surge_devices.MPSAccelerator)


def test_gpu_is_declared_so_that_choosing_it_requests_the_plugin() -> None:
    declared = tomllib.loads((REPO / "plugins/surge-devices/pyproject.toml").read_text())
    assert declared["project"]["entry-points"]["surge.providers"]["accelerator.gpu"] == "surge_devices:plugin"
    from surge.plugins.selection import declared_providers

    assert ("accelerator", "gpu") in declared_providers()["devices"]


def test_lightning_refuses_gpu_without_a_gpu_too(monkeypatch: pytest.MonkeyPatch) -> None:
    L = lightning()
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(Exception, match="No supported gpu backend found"):
        L.Trainer(accelerator="gpu")


# -- "did you mean" knows the domain's names ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slot", "given", "meant"),
    [
        ("precision", "fp16", "16-mixed"),
        ("precision", "half", "16-mixed"),
        ("precision", "bfloat16", "bf16-mixed"),
        ("precision", "float32", "32-true"),
        ("precision", "double", "64-true"),
        ("accelerator", "CPU", "cpu"),
        ("strategy", "ddp_spawn", "ddp"),
    ],
)
def test_did_you_mean_proposes_what_the_name_means(slot: str, given: str, meant: str) -> None:
    with pytest.raises(ProviderError) as info:
        surge.Trainer(**{slot: given}, **QUIET)
    assert f"no {slot} named '{given}'. Did you mean '{meant}'?" in str(info.value)


@pytest.mark.parametrize(
    ("precision", "name"), [(16, "16-mixed"), ("bf16", "bf16-mixed"), ("fp32", "32-true"), (32, "32-true")]
)
def test_lightnings_short_precision_names_are_aliases(precision: Any, name: str) -> None:
    assert surge.Trainer(precision=precision, **QUIET).precision_plugin.name == name


def test_install_hints_name_only_distributions_that_exist() -> None:
    with pytest.raises(ConfigError) as info:
        surge.Trainer(logger="tensorbord")
    message = str(info.value)
    assert "did you mean 'tensorboard'?" in message and "pip install" not in message
    with pytest.raises(ConfigError) as info:
        surge.Trainer(plugins=["early_stoping"])
    assert "did you mean 'early_stopping'?" in str(info.value) and "surge-early_stoping" not in str(info.value)


def test_install_hint_for_a_first_party_plugin_that_is_not_installed(plugin_env: Any) -> None:
    plugin_env.hide_installed(keep=("devices", "csv"))
    with pytest.raises(
        ConfigError, match=r"no installed logger is named 'tensorboard'.*`pip install surge-tensorboard`"
    ):
        surge.Trainer(logger="tensorboard")


def test_the_first_party_table_matches_the_plugins_in_this_repository() -> None:
    from surge.plugins._first_party import FIRST_PARTY

    shipped = {}
    for pyproject in REPO.glob("plugins/*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        for name in project.get("entry-points", {}).get("surge.plugins", {}):
            shipped[name] = project["name"]
    assert FIRST_PARTY == shipped


# -- step methods, DataModules in the loaders' place, per-instance steps ------------------------------------


class BatchOnly(TinyModule):
    """Lightning's short signatures: no batch_idx anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        self.seen.append("train")
        return self._loss(batch)

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        self.seen.append("val")
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: Any) -> None:  # type: ignore[override]
        self.seen.append("test")
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self(batch[0])


def test_step_methods_without_batch_idx(tmp_path: Path) -> None:
    model, data = BatchOnly(), TinyDataModule()
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), num_sanity_val_steps=0, **QUIET)
    trainer.fit(model, datamodule=data)
    assert model.seen.count("train") == 8 and model.seen.count("val") == 4
    assert trainer.validate(model, datamodule=data)[0]["val_loss"] >= 0
    assert trainer.test(model, datamodule=data)[0]["test_loss"] >= 0
    predictions = trainer.predict(model, datamodule=data)
    assert len(predictions) == 4 and predictions[0].shape == (8, 1)


def test_a_datamodule_in_the_loaders_place_is_the_datamodule(tmp_path: Path) -> None:
    model, data = TinyModule(), TinyDataModule()
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(model, data)
    assert trainer.datamodule is data and "setup:fit" in data.calls
    assert trainer.validate(model, data)[0]["val_loss"] >= 0
    assert trainer.test(model, data)[0]["test_loss"] >= 0
    assert len(trainer.predict(model, data)) == 4


def test_step_signatures_are_read_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    calls: list[object] = []
    real = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda fn, *a, **k: (calls.append(fn), real(fn, *a, **k))[1])
    trainer = surge.Trainer(max_epochs=3, default_root_dir=str(tmp_path), **quiet_trainer_args())
    trainer.fit(BatchOnly(), TinyDataModule())
    step_reads = [fn for fn in calls if getattr(fn, "__name__", "").endswith("_step")]
    assert len(step_reads) == 4  # training, validation, test and predict step, once for the whole fit


def test_a_datamodule_in_the_loaders_place_and_as_datamodule_is_refused(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(surge.SurgeError, match=r"DataModule in the dataloaders' place .*pass one of them"):
        trainer.fit(TinyModule(), TinyDataModule(), datamodule=TinyDataModule())


class NoStep(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_training_step_assigned_per_instance_is_used(tmp_path: Path) -> None:
    model = NoStep()
    steps: list[int] = []

    def step(batch: Any, batch_idx: int) -> torch.Tensor:
        steps.append(batch_idx)
        return nn.functional.mse_loss(model.layer(batch[0]), batch[1])

    model.training_step = step  # type: ignore[method-assign]
    surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET).fit(model, datamodule=TinyDataModule())
    assert steps == list(range(8))


def test_lightning_calls_batch_only_steps_too(tmp_path: Path) -> None:
    L = lightning()

    class LitBatchOnly(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)
            self.seen: list[str] = []

        def training_step(self, batch: Any) -> torch.Tensor:
            self.seen.append("train")
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch: Any) -> None:
            self.seen.append("val")

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class LitData(L.LightningDataModule):
        def train_dataloader(self) -> Any:
            return _loader(64)

        def val_dataloader(self) -> Any:
            return _loader(32)

    model = LitBatchOnly()
    L.Trainer(max_epochs=1, default_root_dir=str(tmp_path), num_sanity_val_steps=0, **LIGHTNING_QUIET).fit(
        model, LitData()
    )
    assert model.seen.count("train") == 8 and model.seen.count("val") == 4


def _loader(n: int) -> torch.utils.data.DataLoader[Any]:
    from surge.testing import tiny_dataset

    return torch.utils.data.DataLoader(tiny_dataset(n, 8, seed=1), batch_size=8)


# -- loggers and their experiment ----------------------------------------------------------------------------


class WritesToExperiment(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0:
            self.seen.append((self.logger, list(self.loggers)))
            self.logger.experiment.add_scalar("own/value", 3.5, self.global_step)
        return super().training_step(batch, batch_idx)


def test_module_logger_experiment_is_the_real_summary_writer(tmp_path: Path) -> None:
    from surge_csv import CSVLogger
    from surge_tensorboard import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = WritesToExperiment()
    trainer = surge.Trainer(
        max_epochs=1, logger=["tensorboard", "csv"], default_root_dir=str(tmp_path), enable_progress_bar=False
    )
    trainer.fit(model, datamodule=TinyDataModule())
    ((first, loggers),) = model.seen
    assert isinstance(first, TensorBoardLogger) and [type(x) for x in loggers] == [TensorBoardLogger, CSVLogger]
    assert trainer.logger is first and trainer.loggers == loggers
    accumulator = EventAccumulator(first.log_dir)
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("own/value")] == [(0, 3.5)]
    with pytest.raises(surge.SurgeError, match="experiment is the SummaryWriter of a running fit"):
        _ = first.experiment  # the run is over: its writer is closed


def test_logger_experiment_type_during_a_run(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    kinds: list[type] = []

    class Peek(TinyModule):
        def on_train_start(self) -> None:
            kinds.append(type(self.logger.experiment))

    surge.Trainer(max_epochs=1, logger="tensorboard", default_root_dir=str(tmp_path), enable_progress_bar=False).fit(
        Peek(), datamodule=TinyDataModule()
    )
    assert kinds == [SummaryWriter]


def test_no_logger_means_none_and_an_empty_list(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Peek(TinyModule):
        def on_train_start(self) -> None:
            seen.append((self.logger, self.loggers))

    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(Peek(), datamodule=TinyDataModule())
    assert seen == [(None, [])] and trainer.logger is None and TinyModule().loggers == []


def test_mlflow_experiment_is_the_client_of_the_runs_store(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")

    class Notes(TinyModule):
        def on_train_end(self) -> None:
            self.logger.experiment.log_text(self.logger.run_id, "from the module", "notes.txt")

    trainer = surge.Trainer(max_epochs=1, logger="mlflow", default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.fit(Notes(), datamodule=TinyDataModule())
    client = trainer.logger.experiment
    assert type(client).__name__ == "MlflowClient"
    assert [a.path for a in client.list_artifacts(trainer.logger.run_id)] == ["notes.txt"]


def test_experiment_on_other_ranks_does_nothing() -> None:
    from surge_mlflow import MLflowLogger
    from surge_tensorboard import TensorBoardLogger

    for each in (TensorBoardLogger(), MLflowLogger()):
        with pytest.raises(surge.SurgeError, match="experiment"):
            _ = each.experiment  # no run yet
        each._other_rank = True  # what setup records on a process other than global rank zero
        assert each.experiment.add_image("x", torch.zeros(1)) is None
        assert each.experiment["anything"].log_text("run", "t", "f") is None


# -- toggle_optimizer, clip_gradients, freeze ------------------------------------------------------------------


def _two_optimizer_module(base: type) -> type:
    """A GAN-shaped module in manual optimization, written the same way for Surge and for Lightning: the
    "generator" step toggles its optimizer and records every parameter's requires_grad."""

    class TwoOptimizers(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.gen = nn.Linear(8, 4)
            self.disc = nn.Linear(4, 1)
            self.frozen = nn.Linear(4, 1)
            self.records: list[dict[str, bool]] = []

        def flags(self) -> dict[str, bool]:
            return {name: p.requires_grad for name, p in self.named_parameters()}

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt_g, opt_d = self.optimizers()
            self.toggle_optimizer(opt_g)
            self.records.append(self.flags())
            loss = self.disc(self.gen(batch[0])).pow(2).mean()
            self.manual_backward(loss)
            self.clip_gradients(opt_g, gradient_clip_val=0.05, gradient_clip_algorithm="norm")
            opt_g.step()
            opt_g.zero_grad()
            self.untoggle_optimizer(opt_g)
            self.records.append(self.flags())
            self.toggle_optimizer(opt_d)
            loss = self.disc(self.gen(batch[0]).detach()).mean()
            self.manual_backward(loss)
            self.clip_gradients(opt_d, gradient_clip_val=0.01, gradient_clip_algorithm="value")
            opt_d.step()
            opt_d.zero_grad()
            self.untoggle_optimizer(opt_d)

        def configure_optimizers(self) -> Any:
            self.frozen.weight.requires_grad = False  # set by the user: kept through every toggle
            opt_g = torch.optim.SGD(self.gen.parameters(), lr=0.1)
            opt_d = torch.optim.SGD([*self.disc.parameters(), *self.frozen.parameters()], lr=0.1)
            return opt_g, opt_d

    return TwoOptimizers


def test_toggle_optimizer_and_clip_gradients(tmp_path: Path) -> None:
    cls = _two_optimizer_module(surge.Module)
    torch.manual_seed(0)
    model = cls()
    surge.Trainer(max_steps=6, default_root_dir=str(tmp_path), **quiet_trainer_args()).fit(model, _loader(32))
    toggled, untoggled = model.records[0], model.records[1]
    assert toggled == {
        "gen.weight": True,
        "gen.bias": True,
        "disc.weight": False,
        "disc.bias": False,
        "frozen.weight": False,
        "frozen.bias": False,
    }
    assert untoggled == {**{k: True for k in toggled}, "frozen.weight": False}
    assert model.flags() == untoggled


def test_toggle_optimizer_and_clip_gradients_as_lightning(tmp_path: Path) -> None:
    L = lightning()
    surge_model, lightning_model = _two_optimizer_module(surge.Module)(), _two_optimizer_module(L.LightningModule)()
    lightning_model.load_state_dict(surge_model.state_dict())
    surge.Trainer(max_steps=6, default_root_dir=str(tmp_path), **quiet_trainer_args()).fit(surge_model, _loader(32))
    L.Trainer(max_steps=6, default_root_dir=str(tmp_path), **LIGHTNING_QUIET).fit(lightning_model, _loader(32))
    assert surge_model.records == lightning_model.records
    for (name, a), b in zip(surge_model.state_dict().items(), lightning_model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # the same clipped steps, bit for bit


def test_clip_gradients_refuses_to_contradict_the_trainer(tmp_path: Path) -> None:
    class Clips(TinyModule):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            self.manual_backward(self._loss(batch))
            self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="value")
            opt.step()

    trainer = surge.Trainer(max_steps=1, gradient_clip_algorithm="norm", default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(surge.SurgeError, match=r"clip_gradients\(gradient_clip_algorithm='value'\) contradicts"):
        trainer.fit(Clips(), datamodule=TinyDataModule())


def test_freeze_unfreeze_and_on_gpu_as_lightning() -> None:
    model = TinyModule()
    assert model.freeze() is model and not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert model.unfreeze() is model and model.training and all(p.requires_grad for p in model.parameters())
    assert model.on_gpu is False
    L = pytest.importorskip("lightning")

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(2, 2)

    lit = Lit()
    assert lit.freeze() is lit and not lit.training and not any(p.requires_grad for p in lit.parameters())
    assert lit.unfreeze() is lit and lit.training and lit.on_gpu is False


def test_load_from_checkpoint_runs_on_load_checkpoint_before_the_weights(tmp_path: Path) -> None:
    class Renamed(TinyModule):
        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            # an older checkpoint called the network "body": rename its keys before they are loaded
            state = checkpoint["state_dict"]
            self.loaded_before = {k: v.clone() for k, v in self.state_dict().items()}
            for key in list(state):
                state[key.replace("body.", "net.")] = state.pop(key)

    model = TinyModule()
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **quiet_trainer_args())
    trainer.fit(model, datamodule=TinyDataModule())
    checkpoint = trainer.dump_checkpoint()
    checkpoint["state_dict"] = {k.replace("net.", "body."): v for k, v in checkpoint["state_dict"].items()}
    path = str(tmp_path / "old.ckpt")
    surge.checkpoint.save(checkpoint, path)
    loaded = Renamed.load_from_checkpoint(path)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )
    assert not torch.equal(loaded.loaded_before["net.0.weight"], model.state_dict()["net.0.weight"])


# -- trainer.is_last_batch, test(verbose=) -----------------------------------------------------------------------


def _last_batch_flags(base: type, trainer: Any, root: Path) -> list[bool]:
    class Flags(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)
            self.flags: list[bool] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.flags.append(self.trainer.is_last_batch)
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Flags()
    trainer.fit(model, _loader(32))
    return model.flags


def test_is_last_batch(tmp_path: Path) -> None:
    def run(**options: Any) -> list[bool]:
        trainer = surge.Trainer(default_root_dir=str(tmp_path), **quiet_trainer_args(), **options)
        return _last_batch_flags(surge.Module, trainer, tmp_path)

    assert run(max_epochs=2) == [False, False, False, True] * 2
    assert run(max_epochs=1, limit_train_batches=3) == [False, False, True]
    L = pytest.importorskip("lightning")
    lightning_trainer = L.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **LIGHTNING_QUIET)
    assert _last_batch_flags(L.LightningModule, lightning_trainer, tmp_path) == run(max_epochs=2)


def test_test_and_validate_print_their_results_unless_told_not_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, data = TinyModule(), TinyDataModule()
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    capsys.readouterr()
    (result,) = trainer.test(model, datamodule=data)
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["Test", "metric", "DataLoader", "0"]
    assert table[3].split() == ["test_loss", str(result["test_loss"])]
    assert set(table[0]) == set(table[2]) == set(table[4]) == {"─"}
    trainer.validate(model, datamodule=data)
    assert "Validate metric" in capsys.readouterr().out
    trainer.test(model, datamodule=data, verbose=False)
    trainer.validate(model, datamodule=data, verbose=False)
    assert capsys.readouterr().out == ""


# -- Trainer flags ---------------------------------------------------------------------------------------------


def _anomaly_seen(base: type, trainer: Any) -> list[bool]:
    class Sees(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)
            self.seen: list[bool] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.append(torch.is_anomaly_enabled())
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Sees()
    trainer.fit(model, _loader(16))
    return model.seen


def test_detect_anomaly_is_on_while_fit_trains(tmp_path: Path) -> None:
    def trainer(**options: Any) -> surge.Trainer:
        return surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **quiet_trainer_args(), **options)

    assert _anomaly_seen(surge.Module, trainer(detect_anomaly=True)) == [True, True]
    assert not torch.is_anomaly_enabled()
    assert _anomaly_seen(surge.Module, trainer()) == [False, False]

    class Nan(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return (self(batch[0]) * 0).sqrt().sum() * 0  # sqrt'(0) * 0: NaN in the backward

    with pytest.raises(RuntimeError, match="returned nan values"):
        trainer(detect_anomaly=True).fit(Nan(), datamodule=TinyDataModule())
    L = pytest.importorskip("lightning")
    lightning_trainer = L.Trainer(max_epochs=1, detect_anomaly=True, default_root_dir=str(tmp_path), **LIGHTNING_QUIET)
    assert _anomaly_seen(L.LightningModule, lightning_trainer) == [True, True]


class WithBatchNorm(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.norm(x))  # type: ignore[no-any-return]


def test_sync_batchnorm_reaches_the_distributed_strategy(tmp_path: Path) -> None:
    trainer = surge.Trainer(strategy="ddp", accelerator="cpu", devices=1, sync_batchnorm=True, **QUIET)
    assert trainer.strategy.sync_batchnorm is True
    assert surge.Trainer(strategy="ddp", accelerator="cpu", devices=1, **QUIET).strategy.sync_batchnorm is False
    model = WithBatchNorm()  # one process: nothing to synchronise, the layers stay (as in Lightning)
    surge.Trainer(max_epochs=1, sync_batchnorm=True, default_root_dir=str(tmp_path), **QUIET).fit(
        model, datamodule=TinyDataModule()
    )
    assert type(model.norm) is nn.BatchNorm1d

    class TwoProcesses(surge.Strategy):
        name = "two"

        @property
        def world_size(self) -> int:
            return 2

    strategy = TwoProcesses(surge_devices.CPUAccelerator(), [0])
    with pytest.raises(ConfigError, match=r"trainer.sync_batchnorm: strategy 'two' runs 2 processes but has no"):
        surge.Trainer(strategy=strategy, sync_batchnorm=True, **QUIET)


BAREBONES_REFUSED = [
    {"enable_checkpointing": True},
    {"logger": True},
    {"logger": "csv"},
    {"enable_progress_bar": True},
    {"enable_model_summary": True},
    {"num_sanity_val_steps": 2},
    {"fast_dev_run": 1},
    {"detect_anomaly": True},
    {"profiler": "simple"},
]


@pytest.mark.parametrize("options", BAREBONES_REFUSED)
def test_barebones_refuses_what_it_turns_off(options: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"barebones=True turns off .* but {next(iter(options))}="):
        surge.Trainer(barebones=True, default_root_dir=str(tmp_path), **options)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("options", BAREBONES_REFUSED)
def test_lightning_barebones_refuses_the_same(options: dict[str, Any], tmp_path: Path) -> None:
    L = lightning()
    lightning_options = {"profiler": "simple"} if "profiler" in options else options
    if lightning_options.get("logger") == "csv":
        lightning_options = {"logger": L.pytorch.loggers.CSVLogger(str(tmp_path))}
    with pytest.raises(ValueError, match="barebones=True"):
        L.Trainer(barebones=True, default_root_dir=str(tmp_path), **lightning_options)


def test_barebones_turns_everything_optional_off(tmp_path: Path, warnings: list[str]) -> None:
    trainer = surge.Trainer(barebones=True, max_epochs=1, default_root_dir=str(tmp_path))
    assert trainer.plugin_names == ["devices.accelerator", "devices.strategy"]
    assert trainer.config.num_sanity_val_steps == 0 and trainer.loggers == []
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 8 and trainer.callback_metrics == {}  # self.log does nothing, as in Lightning
    assert any("barebones=True) turns logging off" in w for w in warnings)
    assert not list(tmp_path.iterdir())  # nothing written
    # a resolved config (every switch at its "off" value) is accepted
    surge.Trainer(barebones=True, logger=False, enable_checkpointing=False, num_sanity_val_steps=0, profiler=None)


def test_enable_autolog_hparams(tmp_path: Path) -> None:
    def run(**options: Any) -> surge.Trainer:
        trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_progress_bar=False, **options)
        trainer.fit(TinyModule(hidden=4), datamodule=TinyDataModule())
        return trainer

    assert Path(run().log_dir, "hparams.yaml").exists()
    trainer = run(enable_autolog_hparams=False)
    assert not Path(trainer.log_dir, "hparams.yaml").exists() and Path(trainer.log_dir, "metrics.csv").exists()


# -- names under lightning.pytorch: rank_zero_*, Tuner, EarlyStoppingReason, profilers ---------------------------


def test_rank_zero_helpers_follow_the_trainers_rank(tmp_path: Path, warnings: list[str]) -> None:
    from surge_lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

    @rank_zero_only
    def write(value: int) -> int:
        return value * 2

    saved = rank_zero_only.rank
    try:
        rank_zero_only.rank = 1  # another process: nothing runs, nothing is said
        assert write(3) is None and rank_zero_only(lambda: 1, default="skipped")() == "skipped"
        rank_zero_info("not on rank one")
        rank_zero_warn("not on rank one either")
        surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET).fit(TinyModule(), TinyDataModule())
        assert rank_zero_only.rank == 0  # the running Trainer's global rank
        assert write(3) == 6
        with pytest.warns(UserWarning, match="only once") as caught:
            rank_zero_warn("said only once")
        assert caught[0].filename == __file__  # attributed to the caller
    finally:
        rank_zero_only.rank = saved
    assert not any("not on rank one" in w for w in warnings)


def test_lightnings_rank_zero_only_behaves_the_same() -> None:
    lightning()
    from lightning.pytorch.utilities import rank_zero_only as lightning_rank_zero_only

    saved = lightning_rank_zero_only.rank
    try:
        lightning_rank_zero_only.rank = 1
        assert lightning_rank_zero_only(lambda: 1)() is None
        assert lightning_rank_zero_only(lambda: 1, default="skipped")() == "skipped"
        lightning_rank_zero_only.rank = 0
        assert lightning_rank_zero_only(lambda: 1)() == 1
    finally:
        lightning_rank_zero_only.rank = saved


def test_tuner_from_compat_takes_lightnings_call(tmp_path: Path) -> None:
    from surge_lightning.pytorch.tuner import Tuner

    model, data = TinyModule(lr=0.05), TinyDataModule()
    tuner = Tuner(surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET))
    finder = tuner.lr_find(model, data, num_training=24, min_lr=1e-4, max_lr=1.0)  # a DataModule in place
    assert len(finder.results["lr"]) == len(finder.results["loss"]) > 0
    assert model.lr == finder.suggestion() and finder.plot() is not None
    assert tuner.scale_batch_size(model, data, mode="power", max_trials=2) == data.batch_size == 4
    with pytest.raises(surge.SurgeError, match=r"Tuner.scale_batch_size\(method='validate'.*trial fits only"):
        tuner.scale_batch_size(model, datamodule=data, method="validate")


def test_a_name_from_a_plugin_that_is_not_installed_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from surge_lightning.pytorch import tuner

    monkeypatch.setitem(sys.modules, "surge_tuner", None)  # as if surge-tuner were not installed
    for module in (tuner, tuner.tuning):  # a name read once is kept: forget it
        monkeypatch.delattr(module, "Tuner", raising=False)
    with pytest.raises(ImportError, match=r"tuner.tuning.Tuner is surge-tuner's, .*`pip install surge-tuner`"):
        tuner.Tuner  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        tuner.Nothing  # noqa: B018


def _stopped_by(callback: Any, base: Any, trainer: Any) -> Any:
    class Stops(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer.fit(Stops(), _loader(32), _loader(16))
    return callback


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"stopping_threshold": 1e9}, "STOPPING_THRESHOLD"),
        ({"divergence_threshold": -1.0}, "DIVERGENCE_THRESHOLD"),
        ({"patience": 1, "min_delta": 1e9}, "PATIENCE_EXHAUSTED"),
    ],
)
def test_early_stopping_reason_as_lightning(options: dict[str, Any], reason: str, tmp_path: Path) -> None:
    from surge_callbacks import EarlyStopping
    from surge_lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    assert EarlyStopping().stopping_reason is EarlyStoppingReason.NOT_STOPPED
    ours = EarlyStopping(monitor="val_loss", **options)
    trainer = surge.Trainer(max_epochs=5, callbacks=[ours], default_root_dir=str(tmp_path), **QUIET)
    _stopped_by(ours, surge.Module, trainer)
    assert (
        ours.stopping_reason is EarlyStoppingReason[reason]
        and ours.stopping_reason_message == trainer.state.stop_reason
    )
    restored = EarlyStopping(monitor="val_loss", **options)
    restored.load_state_dict(ours.state_dict())
    assert restored.stopping_reason is ours.stopping_reason
    L = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks.early_stopping import EarlyStopping as LitEarlyStopping
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason as LitReason

    assert {r.name: r.value for r in LitReason} == {r.name: r.value for r in EarlyStoppingReason}
    theirs = LitEarlyStopping(monitor="val_loss", **options)
    lightning_trainer = L.Trainer(max_epochs=5, callbacks=[theirs], default_root_dir=str(tmp_path), **LIGHTNING_QUIET)
    _stopped_by(theirs, L.LightningModule, lightning_trainer)
    assert theirs.stopping_reason.name == ours.stopping_reason.name and theirs.stopped_epoch == ours.stopped_epoch


def test_profilers_from_compat_take_lightnings_file_arguments(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from surge_lightning.pytorch.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler

    assert {SimpleProfiler.kind, AdvancedProfiler.kind, PyTorchProfiler.kind} == {"simple", "advanced", "pytorch"}
    profiler = SimpleProfiler(dirpath=str(tmp_path / "profiles"), filename="perf_logs")
    trainer = surge.Trainer(max_epochs=1, profiler=profiler, default_root_dir=str(tmp_path), **QUIET)
    capfd.readouterr()
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    trainer.test(TinyModule(), datamodule=TinyDataModule(), verbose=False)
    report = (tmp_path / "profiles" / "fit-perf_logs.txt").read_text()
    assert "train_batch" in report and (tmp_path / "profiles" / "test-perf_logs.txt").exists()
    assert "train_batch" not in capfd.readouterr().err  # written to the file instead of printed
    with pytest.raises(ConfigError, match=r"trainer.profiler.extended: unknown argument"):
        SimpleProfiler(extended=True)


# -- ReduceLROnPlateau in manual optimization; SWA without forward ------------------------------------------------


def _plateau_lrs(base: type, trainer: Any) -> list[float]:
    class Plateau(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.layer = nn.Linear(8, 1)
            self.lrs: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt, scheduler = self.optimizers(), self.lr_schedulers()
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            scheduler.step(1.0)  # a metric that never improves: the rate drops after each patience
            self.lrs.append(opt.param_groups[0]["lr"])

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)}

    model = Plateau()
    trainer.fit(model, _loader(48))
    return model.lrs


def test_reduce_lr_on_plateau_without_monitor_in_manual_optimization(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **quiet_trainer_args())
    lrs = _plateau_lrs(surge.Module, trainer)
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001, 0.001])
    L = pytest.importorskip("lightning")
    lightning_trainer = L.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **LIGHTNING_QUIET)
    assert _plateau_lrs(L.LightningModule, lightning_trainer) == lrs


def test_reduce_lr_on_plateau_still_needs_a_monitor_in_automatic_optimization(tmp_path: Path) -> None:
    class Plateau(TinyModule):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}

    with pytest.raises(surge.SurgeError, match="ReduceLROnPlateau needs a metric.*automatic_optimization = False"):
        surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET).fit(Plateau(), datamodule=TinyDataModule())


class NormedNoForward(surge.Module):
    """Lightning code that computes in training_step only, with a batch-norm layer."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class NormedWithForward(NormedNoForward):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]


def test_swa_on_a_module_without_forward_recomputes_batch_norm_through_training_step(tmp_path: Path) -> None:
    def fit(model: surge.Module) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        trainer = surge.Trainer(
            max_epochs=3,
            stochastic_weight_avg=True,
            default_root_dir=str(tmp_path),
            **quiet_trainer_args(),
        )
        trainer.fit(model, _loader(32))
        return model.state_dict()

    without, with_forward = NormedNoForward(), NormedWithForward()
    with_forward.load_state_dict(without.state_dict())
    a, b = fit(without), fit(with_forward)
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)  # update_bn's statistics, exactly
    assert not hasattr(without, "__dict__") or "log" not in without.__dict__  # self.log is the method again


def test_a_custom_action_profiled_from_the_module(tmp_path: Path) -> None:
    from surge_lightning.pytorch.profilers import AdvancedProfiler, PassThroughProfiler, SimpleProfiler

    class Custom(TinyModule):
        def __init__(self, profiler: Any = None) -> None:
            super().__init__()
            self.profiler = profiler or PassThroughProfiler()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            with self.profiler.profile("my_custom_action"):
                batch = [t * 1.0 for t in batch]
            return super().training_step(batch, batch_idx)

    simple = SimpleProfiler(stream=None)
    surge.Trainer(max_epochs=1, profiler=simple, default_root_dir=str(tmp_path), **QUIET).fit(
        Custom(simple), datamodule=TinyDataModule()
    )
    assert simple.actions["my_custom_action"].calls == 8
    assert simple.actions["train_batch"].calls == 8  # the spans around it are untouched
    advanced = AdvancedProfiler(stream=None)
    surge.Trainer(max_epochs=1, profiler=advanced, default_root_dir=str(tmp_path), **QUIET).fit(
        Custom(advanced), datamodule=TinyDataModule()
    )
    assert "my_custom_action" in advanced.profiles
    with simple.profile("outside a run"):  # nothing to record into: the block just runs
        pass
    assert "outside a run" not in simple.actions
    trainer = surge.Trainer(max_epochs=1, profiler=PassThroughProfiler(), default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(Custom(), datamodule=TinyDataModule())  # Lightning's do-nothing profiler, also as the Trainer's
    assert trainer.global_step == 8
