"""The members of Lightning's Trainer, LightningModule, LightningDataModule and Logger that Surge serves, side by
side with Lightning 2.6: one program runs under each (same seed, data and arguments), a probe callback reads each
member at the same hooks, and each member's test compares the readings. The inventory
(``surge_lightning/inventory/lightning.toml``) names these tests for the members it classifies as implemented."""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as lightning
import pytest
import surge_lightning.pytorch as surge_lightning
import torch
import yaml
from surge_lightning import inventory
from torch.utils.data import DataLoader, TensorDataset

FRAMEWORKS = {"lightning": lightning, "surge": surge_lightning}


def _plain(value: Any, root: Path) -> Any:
    """A reading comparable across the two frameworks: tensors as numbers, paths under the run's root relative to it."""
    if isinstance(value, torch.Tensor):
        return round(value.item(), 6) if value.numel() == 1 else [round(v, 6) for v in value.flatten().tolist()]
    if isinstance(value, dict):
        return {k: _plain(v, root) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v, root) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, (str, os.PathLike)) and str(value).startswith(str(root)):
        return os.path.relpath(value, root)
    return value


def _loader_shape(loaders: Any) -> Any:
    """A loader (or a list of them) as what a program sees: its kind, and each loader's batch count."""
    if isinstance(loaders, (list, tuple)):
        return ["list", [len(loader) for loader in loaders]]
    return None if loaders is None else ["DataLoader", len(loaders)]


def _type(value: Any) -> str | None:
    return None if value is None else type(value).__name__


TRAINER: dict[str, Callable[[Any, Any], Any]] = {
    "accelerator": lambda t, m: _type(t.accelerator),
    "callbacks": lambda t, m: [
        _type(c) for c in t.callbacks if _type(c) in ("Probe", "EarlyStopping", "ModelCheckpoint")
    ],
    "checkpoint_callback": lambda t, m: [_type(t.checkpoint_callback), t.checkpoint_callback.best_model_path],
    "checkpoint_callbacks": lambda t, m: [_type(c) for c in t.checkpoint_callbacks],
    "datamodule": lambda t, m: _type(t.datamodule),
    "early_stopping_callback": lambda t, m: [_type(t.early_stopping_callback), t.early_stopping_callback.monitor],
    "early_stopping_callbacks": lambda t, m: [_type(c) for c in t.early_stopping_callbacks],
    "estimated_stepping_batches": lambda t, m: float(t.estimated_stepping_batches),
    "lightning_module": lambda t, m: t.lightning_module is m,
    "logger": lambda t, m: _type(t.logger),
    "loggers": lambda t, m: [_type(logger) for logger in t.loggers],
    "lr_scheduler_configs": lambda t, m: [
        [_type(c.scheduler), c.interval, c.frequency, c.monitor] for c in t.lr_scheduler_configs
    ],
    "num_val_batches": lambda t, m: [float(n) for n in t.num_val_batches],
    "num_sanity_val_batches": lambda t, m: [float(n) for n in t.num_sanity_val_batches],
    "num_training_batches": lambda t, m: float(t.num_training_batches),
    "optimizers": lambda t, m: [[_type(o), [g["lr"] for g in o.param_groups]] for o in t.optimizers],
    "precision_plugin": lambda t, m: _type(t.precision_plugin),
    "predict_dataloaders": lambda t, m: _loader_shape(t.predict_dataloaders),
    "profiler": lambda t, m: _type(t.profiler),
    "strategy": lambda t, m: _type(t.strategy),
    "test_dataloaders": lambda t, m: _loader_shape(t.test_dataloaders),
    "train_dataloader": lambda t, m: _loader_shape(t.train_dataloader),
    "val_dataloaders": lambda t, m: _loader_shape(t.val_dataloaders),
}
"""How each Trainer member is read (the others as they are, through ``_plain``)."""
TRAINER_AS_IS = (
    "accumulate_grad_batches callback_metrics current_epoch default_root_dir fast_dev_run global_rank global_step "
    "interrupted is_global_zero is_last_batch local_rank log_dir logged_metrics max_epochs max_steps node_rank "
    "progress_bar_metrics sanity_checking should_stop world_size"
).split()
TRAINER_RUNS = ("fit", "validate", "test", "predict", "save_checkpoint")
"""Methods: their results are compared (save_checkpoint: the weights its file gives load_from_checkpoint)."""

MODULE: dict[str, Callable[[Any, Any], Any]] = {
    "current_epoch": lambda t, m: m.current_epoch,
    "global_step": lambda t, m: m.global_step,
    "device": lambda t, m: str(m.device),
    "trainer": lambda t, m: m.trainer is t,
    "lr_schedulers": lambda t, m: _type(m.lr_schedulers()),
    "toggled_optimizer": lambda t, m: m.toggled_readings,
    "print": lambda t, m: m.printed,
}

DATAMODULE = ("hparams", "prepare_data", "setup", "teardown", "state_dict", "load_state_dict", "save_hyperparameters")
DATAMODULE += ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")

SECTIONS = {
    "trainer": "lightning.pytorch.Trainer",
    "module": "lightning.pytorch.LightningModule",
    "datamodule": "lightning.pytorch.LightningDataModule",
}
LOGGER = ("group_separator", "log_dir", "name", "root_dir", "save_dir", "version")


def _program(framework: Any, root: Path) -> dict[str, Any]:
    """Fit two epochs (three batches, validation of two, a sanity check of one), validate, test, predict, save a
    checkpoint; then resume the fit for a third epoch from its best checkpoint (the DataModule's state only: a
    resumed fit's readings differ by design, docs/porting.md). The readings by member, and what each run returned."""
    L = framework
    run = ["fit"]  # the run now going: each reading and DataModule call is labelled with it

    class Data(L.LightningDataModule):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            generator = torch.Generator().manual_seed(0)
            self.x = torch.randn(24, 4, generator=generator)
            self.y = self.x.sum(dim=1, keepdim=True)
            self.calls: list[tuple[Any, ...]] = []

        def _loader(self, name: str) -> DataLoader:
            self.calls.append((run[0], name))
            return DataLoader(TensorDataset(self.x, self.y), batch_size=self.hparams.batch_size)

        def prepare_data(self) -> None:
            self.calls.append((run[0], "prepare_data"))

        def setup(self, stage: str) -> None:
            self.calls.append((run[0], "setup", stage))

        def teardown(self, stage: str) -> None:
            self.calls.append((run[0], "teardown", stage))

        def train_dataloader(self) -> DataLoader:
            return self._loader("train_dataloader")

        def val_dataloader(self) -> DataLoader:
            return self._loader("val_dataloader")

        def test_dataloader(self) -> DataLoader:
            return self._loader("test_dataloader")

        def predict_dataloader(self) -> DataLoader:
            return self._loader("predict_dataloader")

        def state_dict(self) -> dict[str, Any]:
            self.calls.append((run[0], "state_dict"))
            return {"calls": len(self.calls)}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.calls.append((run[0], "load_state_dict", dict(state_dict)))

    class Model(L.LightningModule):
        def __init__(self, lr: float = 0.05) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)
            self.toggled_readings: list[list[bool]] = []
            self.printed: list[str] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
            self.log("train_loss", loss, prog_bar=True)
            if batch_idx == 0:
                with self.toggled_optimizer(self.optimizers()):
                    self.toggled_readings.append([p.requires_grad for p in self.parameters()])
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.print("step", self.global_step)
                self.printed.append(out.getvalue())
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("test_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0])

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)}

    readings: dict[tuple[str, str], list[Any]] = {}

    def read(where: str, trainer: Any, module: Any) -> None:
        if run[0] == "resumed fit":
            return
        label = f"{run[0]} {where}" + (" (sanity check)" if trainer.sanity_checking else "")
        probes = {("trainer", n): p for n, p in TRAINER.items()}
        probes |= {("trainer", n): (lambda t, m, n=n: getattr(t, n)) for n in TRAINER_AS_IS}
        probes |= {("module", n): p for n, p in MODULE.items()}
        if run[0] != "fit":  # Lightning loads the train loader to estimate it, which changes what the others see
            probes.pop(("trainer", "estimated_stepping_batches"))
        for key, probe in probes.items():
            try:
                value = _plain(probe(trainer, module), root)
            except Exception as exc:  # a member that raises under one framework and not the other differs
                value = ("raised", type(exc).__name__)
            readings.setdefault(key, []).append((label, value))

    class Probe(L.Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            read("on_fit_start", trainer, pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            read(f"on_train_batch_end {batch_idx}", trainer, pl_module)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            read("on_validation_end", trainer, pl_module)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            read("on_train_epoch_end", trainer, pl_module)

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            read("on_fit_end", trainer, pl_module)

    def make_trainer(max_epochs: int) -> Any:
        return L.Trainer(
            max_epochs=max_epochs, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=1,
            log_every_n_steps=1, accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
            default_root_dir=str(root), logger=L.loggers.CSVLogger(str(root)),
            profiler=L.profilers.SimpleProfiler(dirpath=str(root), filename="perf"),
            callbacks=[Probe(), L.callbacks.EarlyStopping(monitor="val_loss", patience=5)],
        )  # fmt: skip

    data, model = Data(), Model()
    trainer = make_trainer(max_epochs=2)
    results: dict[str, Any] = {}
    for stage in ("fit", "validate", "test", "predict"):
        run[0] = stage
        options = {"verbose": False} if stage in ("validate", "test") else {}
        results[stage] = getattr(trainer, stage)(model, datamodule=data, **options)
        read("after it", trainer, model)
    path = root / "saved.ckpt"
    trainer.save_checkpoint(str(path))
    loaded = Model.load_from_checkpoint(str(path))
    results["save_checkpoint"] = [
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values())
    ]
    run[0] = "resumed fit"
    make_trainer(max_epochs=3).fit(Model(), datamodule=data, ckpt_path=trainer.checkpoint_callback.best_model_path)
    readings[("datamodule", "hparams")] = [("after the runs", _plain(dict(data.hparams), root))]
    readings[("datamodule", "save_hyperparameters")] = readings[("datamodule", "hparams")]
    for name in DATAMODULE:
        if name not in ("hparams", "save_hyperparameters"):
            readings[("datamodule", name)] = [(call[0], call[1:]) for call in data.calls if call[1] == name]
    resumed = [call[1] for call in data.calls if call[0] == "resumed fit"]
    readings[("datamodule", "load_state_dict")].append(("the resumed fit's calls", resumed))
    return {"readings": readings, "results": {k: _plain(v, root) for k, v in results.items()}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The program's readings under each framework, each in a directory of its own (run from there)."""
    out = {}
    here = Path.cwd()
    for name, framework in FRAMEWORKS.items():
        root = tmp_path_factory.mktemp(name)
        os.chdir(root)
        try:
            out[name] = _program(framework, root)
        finally:
            os.chdir(here)
    return out


SKIP = object()


def _stage_loaders(stage: str) -> Callable[[str, Any], Any]:
    """A stage's loaders as Lightning's shape, read in that stage's runs only."""

    def normalize(where: str, value: Any) -> Any:
        if not any(where.startswith(run) for run in (stage, "fit" if stage == "validate" else stage)):
            return SKIP
        if where.endswith("on_fit_start"):  # Surge has loaded them by then
            return SKIP
        return ["list", []] if value is None else ["list", [value[1]]] if value[0] == "DataLoader" else value

    return normalize


KNOWN: dict[tuple[str, str], Callable[[str, Any], Any]] = {
    # Each member here has `differs` in the inventory, saying what this normalization leaves out.
    ("trainer", "callbacks"): lambda where, value: sorted(value),
    ("trainer", "checkpoint_callback"): lambda where, value: SKIP if "on_train_epoch_end" in where else value,
    ("trainer", "num_val_batches"): lambda where, value: SKIP if where.endswith("on_fit_start") else value,
    ("trainer", "num_sanity_val_batches"): lambda where, value: SKIP if where.endswith("on_fit_start") else value,
    ("trainer", "optimizers"): lambda where, value: (
        SKIP if where.endswith(("on_train_batch_end 2", "on_train_epoch_end", "fit on_validation_end")) else value
    ),
    ("trainer", "logged_metrics"): lambda where, value: SKIP if "(sanity check)" in where else value,
    ("trainer", "train_dataloader"): lambda where, value: value if where.startswith("fit") else SKIP,
    ("trainer", "val_dataloaders"): _stage_loaders("validate"),
    ("trainer", "test_dataloaders"): _stage_loaders("test"),
    ("trainer", "predict_dataloaders"): _stage_loaders("predict"),
    ("datamodule", "setup"): lambda where, value: (value[0], getattr(value[1], "value", value[1])),
    ("datamodule", "teardown"): lambda where, value: (value[0], getattr(value[1], "value", value[1])),
    ("datamodule", "load_state_dict"): lambda where, value: (
        sorted(value) if where == "the resumed fit's calls" else value
    ),
}
"""What Surge does otherwise than Lightning, left out of the comparison: ``KNOWN[member](where, reading)`` is the
reading to compare, or ``SKIP``."""


def _compare(runs: dict[str, dict[str, Any]], key: tuple[str, str]) -> None:
    ours, theirs = runs["surge"]["readings"][key], runs["lightning"]["readings"][key]
    if key in KNOWN:
        assert inventory.load().entry(SECTIONS[key[0]], key[1]).differs, f"{key}: the inventory must say it differs"
        normalize = KNOWN[key]
        pairs = [(normalize(o[0], o[1]), normalize(t[0], t[1]), o[0]) for o, t in zip(ours, theirs, strict=True)]
        ours = [(where, o) for o, t, where in pairs if o is not SKIP]
        theirs = [(where, t) for o, t, where in pairs if t is not SKIP]
    differ = [(o, t) for o, t in zip(ours, theirs) if o != t]
    assert len(ours) == len(theirs) and not differ, (
        f"{key[0]}.{key[1]}: Surge's readings differ from Lightning's: {differ}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted([*TRAINER, *TRAINER_AS_IS, *TRAINER_RUNS]))
def test_trainer_member_as_lightning(runs: dict[str, dict[str, Any]], name: str) -> None:
    if name in TRAINER_RUNS:
        assert runs["surge"]["results"][name] == runs["lightning"]["results"][name]
    else:
        _compare(runs, ("trainer", name))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULE))
def test_module_member_as_lightning(runs: dict[str, dict[str, Any]], name: str) -> None:
    _compare(runs, ("module", name))


@pytest.mark.slow
@pytest.mark.parametrize("name", DATAMODULE)
def test_datamodule_member_as_lightning(runs: dict[str, dict[str, Any]], name: str) -> None:
    _compare(runs, ("datamodule", name))


@pytest.mark.parametrize("name", LOGGER)
def test_logger_member_as_lightning(name: str, tmp_path: Path) -> None:
    """The base class's members, on a logger of one's own that says its name and version only."""

    def mine(framework: Any) -> Any:
        class Mine(framework.loggers.Logger):
            name = "mine"
            version = 3

            def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

            def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None: ...

        return getattr(Mine(), name)

    assert mine(surge_lightning) == mine(lightning)


def _fit_with(
    framework: Any, root: Path, callbacks: list[Any], ckpt_path: str | None = None, **options: Any
) -> tuple[Any, Any, list[dict[str, str]]]:
    """A small fit under ``framework`` with ``callbacks`` and a CSVLogger: the trainer, the model, metrics.csv's rows."""
    L = framework

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    arguments = {"max_epochs": 2, "limit_train_batches": 4, "log_every_n_steps": 2, **options}
    trainer = L.Trainer(
        **arguments, accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=str(root), logger=L.loggers.CSVLogger(str(root)),
        callbacks=callbacks,
    )  # fmt: skip
    model = Model()
    here = Path.cwd()
    root.mkdir(parents=True, exist_ok=True)
    os.chdir(root)
    try:
        trainer.fit(model, loader, ckpt_path=ckpt_path)
    finally:
        os.chdir(here)
    rows: list[dict[str, str]] = []
    for path in root.rglob("metrics.csv"):  # none when nothing was logged
        with open(path, newline="") as f:
            rows += csv.DictReader(f)
    return trainer, model, rows


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


SERVED_CALLBACKS = ("DeviceStatsMonitor", "GradientAccumulationScheduler", "StochasticWeightAveraging", "Timer")


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVED_CALLBACKS)
def test_served_callback_as_lightning(name: str, tmp_path: Path) -> None:
    """Each callback under Lightning's name and arguments, in a fit under each framework, compared."""
    made = {
        "GradientAccumulationScheduler": lambda cls: cls(scheduling={0: 2, 1: 1}),
        "StochasticWeightAveraging": lambda cls: cls(swa_lrs=0.01, swa_epoch_start=1),
        "Timer": lambda cls: cls(duration="00:01:00:00", interval="step"),
        "DeviceStatsMonitor": lambda cls: cls(cpu_stats=True),
    }[name]
    rates: dict[str, list[float]] = {"surge": [], "lightning": []}

    def rates_of(framework: Any, key: str) -> Any:
        class Rates(framework.Callback):
            def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
                rates[key].append(optimizer.param_groups[0]["lr"])

        return Rates()

    made_ours = [made(getattr(surge_lightning.callbacks, name)), rates_of(surge_lightning, "surge")]
    ours = _fit_with(surge_lightning, tmp_path / "surge", made_ours)
    made_theirs = [made(getattr(lightning.callbacks, name)), rates_of(lightning, "lightning")]
    theirs = _fit_with(lightning, tmp_path / "lightning", made_theirs)
    assert ours[0].global_step == theirs[0].global_step
    assert ours[0].current_epoch == theirs[0].current_epoch
    assert rates["surge"] == rates["lightning"]
    if name == "DeviceStatsMonitor":  # the steps written with CPU statistics (Surge's rows are one step later)
        assert inventory.load().entry("lightning.pytorch.callbacks", name).differs

        def steps(rows: list[dict[str, str]], shift: int) -> set[int]:
            return {int(r["step"]) + shift for r in rows if any(k.endswith("cpu_percent") and v for k, v in r.items())}

        assert steps(ours[2], 0) == steps(theirs[2], 1) != set()
    elif name == "StochasticWeightAveraging":  # the learning rates above; what is averaged differs
        assert inventory.load().entry("lightning.pytorch.callbacks", name).differs
        assert not _same_weights(ours[1], theirs[1])  # when they agree, drop this and the `differs`
    elif name == "Timer":  # which stages it timed
        timers = [next(c for c in run[0].callbacks if type(c).__name__ == "Timer") for run in (ours, theirs)]
        stages = ("train", "validate", "test")
        timed = [[(t.start_time(s) is not None, t.end_time(s) is not None) for s in stages] for t in timers]
        assert timed[0] == timed[1]
        assert _same_weights(ours[1], theirs[1])
    else:
        assert _same_weights(ours[1], theirs[1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ("state_key", "state_dict", "load_state_dict"))
def test_callback_member_as_lightning(name: str, tmp_path: Path) -> None:
    """A Callback's state saved in a checkpoint and given back by a resumed fit, under each framework."""

    def run(framework: Any, root: Path) -> list[Any]:
        seen: list[Any] = []

        class Counting(framework.Callback):
            def __init__(self) -> None:
                self.batches = 0

            def on_train_batch_end(
                self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
            ) -> None:
                self.batches += 1

            def state_dict(self) -> dict[str, Any]:
                return {"batches": self.batches}

            def load_state_dict(self, state_dict: dict[str, Any]) -> None:
                seen.append(dict(state_dict))
                self.batches = state_dict["batches"]

        first = Counting()
        trainer = _fit_with(framework, root / "first", [first])[0]
        trainer.save_checkpoint(str(root / "saved.ckpt"))
        again = Counting()
        _fit_with(framework, root / "again", [again], ckpt_path=str(root / "saved.ckpt"), max_epochs=3)
        return [first.state_key, seen, again.batches]

    ours, theirs = run(surge_lightning, tmp_path / "surge"), run(lightning, tmp_path / "lightning")
    assert ours == theirs


class Color(enum.Enum):
    RED = "red"


def test_save_hparams_to_yaml_as_lightning(tmp_path: Path) -> None:
    """The same values read back from the file each writes (Lightning's is read with yaml's unsafe loader: it writes
    Python tags); a tuple comes back as a list from Surge's, which writes plain YAML."""
    from lightning.pytorch.core.saving import save_hparams_to_yaml as theirs
    from surge_lightning.pytorch.core.saving import save_hparams_to_yaml as ours

    assert inventory.load().entry("lightning.pytorch.core.saving", "save_hparams_to_yaml").differs
    params = {"lr": 0.5, "layers": (2, 3), "name": "x", "nested": {"a": [1, 2]}, "none": None, "flag": True}
    params["color"] = Color.RED

    def lists(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: lists(v) for k, v in value.items()}
        return [lists(v) for v in value] if isinstance(value, (list, tuple)) else value

    ours(tmp_path / "ours.yaml", params)
    theirs(tmp_path / "theirs.yaml", params)
    read = {name: yaml.unsafe_load((tmp_path / f"{name}.yaml").read_text()) for name in ("ours", "theirs")}
    assert read["ours"] == lists(read["theirs"]) and read["ours"]["layers"] == [2, 3]
