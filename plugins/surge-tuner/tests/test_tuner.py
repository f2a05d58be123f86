"""surge-tuner: the learning-rate finder against a regression whose divergent learning rate is known, the
batch-size finder against a model that runs "out of memory" above a known batch size, what both leave
behind (nothing but the tuned value), and ``Trainer.tune`` end to end."""

from __future__ import annotations

import copy
import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import PluginEnv, TinyDataModule, TinyModule, assert_discovered
from surge_tuner import LRFinder, TuneConfig, Tuner
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# -- models and data whose answers are known ------------------------------------------------------------


class Regression(surge.Module):
    """Least squares with full-batch SGD: the loss is a quadratic with Hessian ``H = 2 XᵀX / n``, so SGD
    diverges for a learning rate above ``2 / λmax(H)`` and converges fastest at ``2 / (λmax + λmin)``."""

    def __init__(self, features: int = 4, lr: float = 0.01) -> None:
        super().__init__()
        self.lr = lr
        self.linear = nn.Linear(features, 1, bias=False)
        nn.init.zeros_(self.linear.weight)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Quadratic:
    """64 samples whose inputs have the singular values ``scales * sqrt(64)``, so that the eigenvalues of
    ``H`` are ``2 * scales**2``, known exactly."""

    def __init__(self, scales: tuple[float, ...] = (2.0, 1.5, 1.0, 0.5), n: int = 64) -> None:
        generator = torch.Generator().manual_seed(0)
        q, _ = torch.linalg.qr(torch.randn(n, len(scales), generator=generator))
        x = q * torch.tensor(scales) * n**0.5
        y = x @ torch.randn(len(scales), 1, generator=generator)
        eigenvalues = torch.linalg.eigvalsh(2 * x.T @ x / n)
        self.diverges_above = 2 / eigenvalues.max().item()
        self.best_lr = 2 / (eigenvalues.max() + eigenvalues.min()).item()
        self.dataset = TensorDataset(x, y)

    def loader(self, batch_size: int | None = None) -> DataLoader:
        return DataLoader(self.dataset, batch_size=batch_size or len(self.dataset))


class OutOfMemory(TinyModule):
    """Raises what a device out of memory raises once a batch has more than ``limit`` samples (training and
    validation alike); ``sizes`` records the batch sizes it saw."""

    def __init__(self, limit: int, error: Callable[[str], Exception] = torch.cuda.OutOfMemoryError) -> None:
        super().__init__(in_features=4, hidden=8)
        self.limit, self.error = limit, error
        self.sizes: set[int] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.add(x.shape[0])
        if x.shape[0] > self.limit:
            raise self.error(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB")
        return super().forward(x)


def data(n_train: int = 128, n_val: int = 32) -> TinyDataModule:
    return TinyDataModule(batch_size=8, n_train=n_train, n_val=n_val, in_features=4)


# -- what a tuning run may leave behind -----------------------------------------------------------------


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_same_weights(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    changed = [name for name in before if not torch.equal(after[name], before[name])]
    assert not changed, f"changed by tuning: {changed}"


def assert_same_state(a: Any, b: Any) -> None:
    """Equal nested optimizer states, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_state(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_state(x, y)
    else:
        assert a == b


def trial_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("surge-tune-*")}


def assert_untouched(trainer: surge.Trainer, root: Path) -> None:
    """The user's Trainer never ran: no step, no run directory, nothing written."""
    assert trainer.global_step == 0 and trainer.current_epoch == 0
    assert list(root.iterdir()) == []  # (reading trainer.run_dir would make the run directory)


@pytest.fixture
def make_quiet(tmp_path: Path) -> Callable[..., surge.Trainer]:
    """A Trainer without progress output writing into ``tmp_path``."""

    def make(**kwargs: Any) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path))
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
        return surge.Trainer(**kwargs)

    return make


# -- the learning-rate finder ---------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "max_lr"), [("exponential", 10.0), ("linear", 1.0)])
def test_lr_suggestion_lies_below_the_divergence_threshold(make_quiet, tmp_path, mode, max_lr):
    quadratic, model = Quadratic(), Regression()
    before, dirs = weights(model), trial_dirs()
    trainer = make_quiet()
    finder = Tuner(trainer).lr_find(model, quadratic.loader(), min_lr=1e-4, max_lr=max_lr, mode=mode)

    lrs, losses = finder.results["lr"], finder.results["loss"]
    assert len(lrs) == len(losses) and lrs[0] == pytest.approx(1e-4)
    assert all(a < b for a, b in itertools.pairwise(lrs))
    # the sweep went past the divergence threshold and stopped early there
    assert lrs[-1] > quadratic.diverges_above and len(lrs) < 100
    assert losses[-1] > 4 * min(losses)
    suggestion = finder.suggestion()
    assert suggestion is not None
    assert quadratic.best_lr / 30 < suggestion < quadratic.diverges_above
    assert model.lr == suggestion  # update_attr defaults to True
    assert_same_weights(model, before)
    assert_untouched(trainer, tmp_path)
    assert trial_dirs() == dirs


def test_lr_find_records_one_point_per_optimizer_step(make_quiet):
    trainer = make_quiet(accumulate_grad_batches=2)  # 4 batches of 16: 2 optimizer steps per epoch
    finder = Tuner(trainer).lr_find(
        Regression(),
        Quadratic().loader(batch_size=16),
        min_lr=1e-5,
        max_lr=1e-3,
        num_training=10,
        early_stop_threshold=None,
        update_attr=False,
    )
    assert finder.results["lr"] == pytest.approx([1e-5 * 100 ** (i / 9) for i in range(10)])
    assert len(finder.results["loss"]) == 10


class KeepsItsOptimizer(TinyModule):
    """Builds one Adam (which has state) and a plateau scheduler on a validation metric, and returns them at
    every call: tuning must give both back as they were."""

    def __init__(self) -> None:
        super().__init__(in_features=4, hidden=8)
        self.opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt)

    def configure_optimizers(self) -> Any:
        return {"optimizer": self.opt, "lr_scheduler": {"scheduler": self.plateau, "monitor": "val_loss"}}


def test_lr_find_gives_back_weights_grads_modes_optimizer_and_trainer(make_quiet, tmp_path):
    torch.manual_seed(0)
    model, datamodule = KeepsItsOptimizer(), data()
    datamodule.setup("fit")
    x, y = datamodule.train_set.tensors
    nn.functional.mse_loss(model(x[:4]), y[:4]).backward()
    model.opt.step()  # the optimizer has state, and the gradients stay populated
    model.net[1].eval()  # a submodule in its own mode
    before, grads = weights(model), [p.grad.clone() for p in model.parameters()]
    optimizer_state, optimizer_attributes = copy.deepcopy(model.opt.state_dict()), set(vars(model.opt))
    rng = torch.get_rng_state()
    trainer = make_quiet()

    Tuner(trainer).lr_find(model, datamodule=datamodule, num_training=20, update_attr=False)

    assert_same_weights(model, before)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert model.training and model.net[0].training and not model.net[1].training
    assert_same_state(model.opt.state_dict(), optimizer_state)
    assert set(vars(model.opt)) == optimizer_attributes
    assert "configure_optimizers" not in vars(model)
    assert torch.equal(torch.get_rng_state(), rng)
    with pytest.raises(surge.SurgeError, match="not attached"):
        model.trainer  # noqa: B018 - the trial's Trainer is not left attached
    assert_untouched(trainer, tmp_path)


def test_tune_then_fit_trains_exactly_like_fit_alone(make_quiet):
    def run(tune: bool) -> tuple[TinyModule, surge.Trainer]:
        torch.manual_seed(0)
        model, datamodule = TinyModule(), TinyDataModule()
        trainer = make_quiet(auto_lr_find=True, max_steps=6, logger=False, enable_checkpointing=False)
        if tune:
            trainer.tune(model, datamodule=datamodule, lr_find_kwargs={"num_training": 30, "update_attr": False})
        trainer.fit(model, datamodule=datamodule)
        return model, trainer

    tuned, tuned_trainer = run(tune=True)
    plain, _ = run(tune=False)
    assert tuned_trainer.global_step == 6  # the finder's steps did not count against max_steps
    assert_same_weights(tuned, weights(plain))


def test_auto_lr_find_sets_lr_wherever_the_model_keeps_it(make_quiet):
    torch.manual_seed(0)
    model = TinyModule()  # `lr` is an attribute and an hparams entry
    trainer = make_quiet(auto_lr_find=True, max_steps=3, logger=False, enable_checkpointing=False)
    result = trainer.tune(model, datamodule=TinyDataModule(), lr_find_kwargs={"num_training": 40})
    finder = result["lr_find"]
    assert isinstance(finder, LRFinder) and result["scale_batch_size"] is None
    assert finder.suggestion() is not None
    assert model.lr == model.hparams["lr"] == finder.suggestion()
    trainer.fit(model, datamodule=TinyDataModule())
    assert trainer.global_step == 3


class LearningRateInHParams(Regression):
    def __init__(self) -> None:
        super().__init__()
        del self.lr
        self.hparams["learning_rate"] = 0.01

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


class NamedLearningRate(Regression):
    def __init__(self) -> None:
        super().__init__()
        self.head_lr = 0.01


def test_update_attr_finds_learning_rate_or_the_named_attribute(make_quiet):
    loader = Quadratic().loader()
    in_hparams = LearningRateInHParams()
    suggestion = Tuner(make_quiet()).lr_find(in_hparams, loader, min_lr=1e-4, max_lr=10).suggestion()
    assert in_hparams.hparams["learning_rate"] == suggestion and not hasattr(in_hparams, "lr")

    named = NamedLearningRate()
    result = make_quiet(auto_lr_find="head_lr").tune(named, loader, lr_find_kwargs={"min_lr": 1e-4, "max_lr": 10})
    assert named.head_lr == result["lr_find"].suggestion() and named.lr == 0.01


def test_a_missing_attribute_is_refused_before_any_trial(make_quiet, tmp_path):
    model, dirs = Regression(), trial_dirs()
    before = weights(model)
    trainer = make_quiet(auto_lr_find="nope")
    with pytest.raises(surge.SurgeError, match="has no 'nope' attribute or hparams entry"):
        trainer.tune(model, Quadratic().loader())
    assert_same_weights(model, before)
    assert trial_dirs() == dirs
    assert_untouched(trainer, tmp_path)


def test_bad_arguments_name_their_path(make_quiet):
    trainer, loader = make_quiet(), Quadratic().loader()
    with pytest.raises(surge.ConfigError) as info:
        Tuner(trainer).lr_find(Regression(), loader, mode="cubic", num_training=1)
    assert {path for path, _ in info.value.problems} == {"Tuner.lr_find.mode", "Tuner.lr_find.num_training"}
    with pytest.raises(surge.ConfigError, match="min_lr .* must be smaller than max_lr"):
        Tuner(trainer).lr_find(Regression(), loader, min_lr=1.0, max_lr=0.1)
    with pytest.raises(surge.ConfigError, match="trainer.auto_scale_batch_size: got 'huge'"):
        make_quiet(auto_scale_batch_size="huge").tune(Regression(), loader)
    with pytest.raises(surge.ConfigError, match="Tuner.scale_batch_size.init_val"):
        Tuner(trainer).scale_batch_size(OutOfMemory(8), datamodule=data(), init_val=0)


def test_plot_marks_the_suggestion(make_quiet):
    finder = Tuner(make_quiet()).lr_find(Regression(), Quadratic().loader(), min_lr=1e-4, max_lr=10)
    axes = finder.plot(suggest=True).axes[0]
    assert axes.get_xscale() == "log"
    curve, marker = axes.lines
    assert list(curve.get_xdata()) == finder.results["lr"]
    assert list(marker.get_xdata()) == [finder.suggestion()]


# -- the batch-size finder ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "init_val", "error", "expected"),
    [
        ("power", 2, torch.cuda.OutOfMemoryError, 32),  # the largest power of two <= 40
        ("binsearch", 2, RuntimeError, 40),  # exactly the limit
        ("power", 100, torch.cuda.OutOfMemoryError, 25),  # halved from 100 until it fits
        ("binsearch", 100, RuntimeError, 40),
    ],
)
def test_batch_size_finder_stops_below_out_of_memory(make_quiet, tmp_path, mode, init_val, error, expected):
    model, datamodule, dirs = OutOfMemory(limit=40, error=error), data(), trial_dirs()
    before = weights(model)
    trainer = make_quiet()
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode=mode, init_val=init_val)
    assert found == expected == datamodule.batch_size
    assert expected + 1 in model.sizes or 2 * expected in model.sizes  # the size above was tried, and failed
    assert_same_weights(model, before)
    assert_untouched(trainer, tmp_path)
    assert trial_dirs() == dirs


class LoadsItsOwnData(OutOfMemory):
    """Keeps the batch size in ``hparams`` and builds its own loader from it."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.hparams["batch_size"] = 4
        self.data = TinyDataModule(n_train=128, in_features=4)
        self.data.setup("fit")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data.train_set, batch_size=self.hparams.batch_size)


def test_auto_scale_batch_size_sets_the_models_hparams(make_quiet):
    model = LoadsItsOwnData(limit=20)
    result = make_quiet(auto_scale_batch_size="binsearch").tune(model)
    assert result == {"lr_find": None, "scale_batch_size": 20}
    assert model.hparams["batch_size"] == 20


def test_a_batch_covering_the_whole_training_set_ends_the_search(make_quiet):
    datamodule = data(n_train=20, n_val=20)
    model = OutOfMemory(limit=10**6)
    # 32 is the first size to hold all 20 samples; a batch larger than the training set is no larger batch
    assert Tuner(make_quiet()).scale_batch_size(model, datamodule=datamodule, mode="binsearch") == 20
    assert datamodule.batch_size == 20
    assert Tuner(make_quiet()).scale_batch_size(model, datamodule=data(n_train=20), init_val=64) == 20


def test_other_errors_propagate_and_the_batch_size_is_put_back(make_quiet):
    datamodule = data()
    with pytest.raises(ValueError, match="CUDA out of memory"):  # the message alone does not make an OOM
        Tuner(make_quiet()).scale_batch_size(OutOfMemory(limit=10, error=ValueError), datamodule=datamodule)
    assert datamodule.batch_size == 8


def test_batch_size_finder_refuses_what_it_cannot_scale(make_quiet):
    tuner = Tuner(make_quiet())
    with pytest.raises(surge.SurgeError, match="cannot use loaders passed as train_dataloaders"):
        tuner.scale_batch_size(OutOfMemory(8), DataLoader(Quadratic().dataset))
    with pytest.raises(surge.SurgeError, match="has no `rows` attribute"):
        tuner.scale_batch_size(OutOfMemory(8), datamodule=data(), batch_arg_name="rows")
    with pytest.raises(surge.SurgeError, match="no batch size fits, down to 1"):
        tuner.scale_batch_size(OutOfMemory(0), datamodule=data())


# -- Trainer.tune and discovery -------------------------------------------------------------------------


def test_the_tuner_is_a_discovered_provider():
    assert_discovered("tuner", distribution="surge-tuner", kind="provider")


def test_the_tuner_owns_its_trainer_arguments(make_quiet, monkeypatch):
    plugin = assert_discovered("tuner", distribution="surge-tuner", kind="provider")
    assert set(plugin.switches) == {"auto_lr_find", "auto_scale_batch_size"} and plugin.config is TuneConfig
    monkeypatch.setenv("SURGE_DISABLE_PLUGIN_AUTOLOAD", "1")  # the argument requests the plugin (surge.switches)
    trainer = make_quiet(auto_scale_batch_size="binsearch")
    assert trainer.catalog.records["tuner"].status == "active"
    assert trainer.catalog.records["csv"].status == "blocked"  # nothing else was loaded


def test_the_settings_may_come_from_plugins_too(make_quiet):
    model = OutOfMemory(8)
    result = make_quiet(plugins={"tuner": {"auto_scale_batch_size": "power"}}).tune(model, datamodule=data())
    assert result == {"lr_find": None, "scale_batch_size": 8}
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.tuner.auto_lr_find: got '': .*use True, or the name"):
        make_quiet(plugins={"tuner": {"auto_lr_find": ""}})


def test_tune_without_a_tuner_says_what_to_install(make_quiet):
    with PluginEnv() as env:
        env.hide_installed()
        trainer = make_quiet(auto_lr_find=True)
        with pytest.raises(surge.SurgeError, match="`pip install surge-tuner` adds it"):
            trainer.tune(Regression(), Quadratic().loader())


def test_tune_with_the_tuner_blocked_says_why(make_quiet, monkeypatch):
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "tuner")
    with pytest.raises(surge.SurgeError, match="blocked by SURGE_DISABLE_PLUGINS"):
        make_quiet(auto_scale_batch_size=True).tune(OutOfMemory(8), datamodule=data())


def test_tune_with_nothing_to_tune_changes_nothing(make_quiet):
    model = Regression()
    before = weights(model)
    assert make_quiet().tune(model, Quadratic().loader()) == {"lr_find": None, "scale_batch_size": None}
    assert_same_weights(model, before) and model.lr == 0.01
