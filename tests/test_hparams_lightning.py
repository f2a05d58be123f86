"""``save_hyperparameters`` with a dict or an ``argparse.Namespace``, ``ignore=`` and ``logger=``, side by side
with Lightning's: the same Module and DataModule code on ``surge_lightning.pytorch`` and on ``lightning.pytorch``, compared
in what ``hparams`` holds, what the loggers receive, what the checkpoint records and what ``load_from_checkpoint``
builds from it."""

from __future__ import annotations

import types
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_lightning.pytorch
import torch
import torch.nn.functional as F
from loguru import logger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _classes(L: types.ModuleType, Logger: type) -> dict[str, Any]:
    """The programs' classes, written once, on Lightning's names from ``L`` (``surge_lightning.pytorch`` or
    ``lightning.pytorch``)."""

    class Net(L.LightningModule):  # type: ignore[name-defined,misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class FromDict(Net):
        def __init__(self, config: dict) -> None:
            super().__init__()
            self.save_hyperparameters(config)
            self.layer = nn.Linear(config["n"], 1)

    class FromNamespace(Net):
        def __init__(self, args: Namespace | dict) -> None:  # load_from_checkpoint gives it back as a dict
            super().__init__()
            self.save_hyperparameters(args)
            self.layer = nn.Linear(args["n"] if isinstance(args, dict) else args.n, 1)

    class OwnDict(Net):
        """A dict that is no argument of ``__init__``, with a key that is none either, ``ignore=``, ``logger=False``."""

        def __init__(self, n: int = 2, lr: float = 0.1, seed: int = 0) -> None:
            super().__init__()
            self.save_hyperparameters({"n": n, "lr": lr, "width": 2 * n, "seed": seed}, ignore="seed", logger=False)
            self.layer = nn.Linear(n, 1)

    class AllArguments(Net):
        def __init__(self, n: int = 2, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(n, 1)

    class DropsABasesName(AllArguments):
        """``ignore=`` also removes what an earlier call, the base class's, saved."""

        def __init__(self, n: int = 2, lr: float = 0.1, tag: str = "x") -> None:
            super().__init__(n, lr)
            self.save_hyperparameters(ignore=["lr"])

    class Empty(Net):
        def __init__(self, n: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters({})
            self.layer = nn.Linear(n, 1)

    class Data(L.LightningDataModule):  # type: ignore[name-defined,misc]
        def __init__(self, n: int, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters(Namespace(batch_size=batch_size, n=n))
            self.n = n

        def train_dataloader(self) -> DataLoader:
            generator = torch.Generator().manual_seed(0)
            x = torch.randn(8, self.n, generator=generator)
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

    class Recorder(Logger):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.params: list[dict[str, Any]] = []

        @property
        def name(self) -> str:
            return "recorder"

        @property
        def version(self) -> int:
            return 0

        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            pass

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            self.params.append(dict(params))

    return {cls.__name__: cls for cls in (FromDict, FromNamespace, OwnDict, DropsABasesName, Empty, Data, Recorder)}


CASES = {
    "a dict argument": ("FromDict", lambda: ({"n": 3, "lr": 0.5},)),
    "a Namespace argument": ("FromNamespace", lambda: (Namespace(n=3, act="relu"),)),
    "a dict of its own, ignore, logger=False": ("OwnDict", lambda: ()),
    "ignore drops a base class's name": ("DropsABasesName", lambda: (3, 0.5)),
    "an empty dict": ("Empty", lambda: ()),
}


def _run(L: types.ModuleType, Logger: type, case: str, root: Path) -> dict[str, Any]:
    """What ``hparams``, the loggers, the checkpoint and ``load_from_checkpoint`` hold after a one-step fit."""
    classes = _classes(L, Logger)
    name, args = CASES[case]
    cls = classes[name]
    model = cls(*args())
    recorder = classes["Recorder"]()
    trainer = L.Trainer(
        max_steps=1,
        logger=[recorder],
        default_root_dir=str(root),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=classes["Data"](model.layer.in_features))
    path = str(root / "model.ckpt")
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)
    loaded = cls.load_from_checkpoint(path)
    return {
        "hparams": dict(model.hparams),
        "logged": recorder.params,
        "checkpoint": saved.get("hparams", saved.get("hyper_parameters")),  # Surge's key, Lightning's
        "through": None if saved.get("hparams_name") == "kwargs" else saved.get("hparams_name"),
        "loaded": dict(loaded.hparams),
        "weights": [torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values())],
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_save_hyperparameters_as_lightning(case: str, tmp_path: Path) -> None:
    ours = _run(surge_lightning.pytorch, surge_lightning.pytorch.loggers.Logger, case, tmp_path / "surge")
    lightning = pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (the `bench` extra)")
    theirs = _run(lightning, lightning.loggers.Logger, case, tmp_path / "lightning")
    if case == "an empty dict":  # Lightning writes no hyper-parameters into its checkpoint, Surge an empty dict
        assert (ours["checkpoint"], theirs["checkpoint"]) == ({}, None)
        theirs["checkpoint"] = {}
    assert ours == theirs
    assert all(ours["weights"]) and ours["weights"]


def test_what_the_comparison_sees() -> None:
    """The values compared above, written out (Lightning's, which Surge's equal)."""
    model = _classes(surge_lightning.pytorch, surge_lightning.pytorch.loggers.Logger)["OwnDict"](n=3)
    assert dict(model.hparams) == {"n": 3, "lr": 0.1, "width": 6}  # "seed" ignored, from the dict too
    assert model._log_hyperparams is False and model._hparams_name is None
    config = Namespace(n=3, act="relu")
    from_namespace = _classes(surge_lightning.pytorch, surge_lightning.pytorch.loggers.Logger)["FromNamespace"](config)
    assert dict(from_namespace.hparams) == {"n": 3, "act": "relu"} and from_namespace._hparams_name == "args"
    dropping = _classes(surge_lightning.pytorch, surge_lightning.pytorch.loggers.Logger)["DropsABasesName"](n=3, lr=0.5)
    assert dict(dropping.hparams) == {"n": 3, "tag": "x"}  # the base's "lr" removed by the subclass's ignore


def test_other_arguments_are_refused_and_names_beside_a_dict_are_ignored_with_a_warning() -> None:
    class Takes(surge.Module):
        def __init__(self, *args: Any) -> None:
            super().__init__()
            self.save_hyperparameters(*args)

    for args, message in [
        ((5,), r"Takes.save_hyperparameters\(5\): takes a dict, an argparse.Namespace or names .* not a int"),
        (([1, 2],), r"save_hyperparameters\(\[1, 2\]\): takes a dict, .* not a list"),
        (({"a": 1}, {"b": 2}), r"got 2 dicts or Namespaces; pass one"),
    ]:
        with pytest.raises(surge.SurgeError, match=message):
            Takes(*args)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        model = Takes({"a": 1}, "args")  # Lightning keeps the dict and drops the names
    finally:
        logger.remove(sink)
    assert dict(model.hparams) == {"a": 1}
    assert any("the names ['args'] are ignored beside a dict or Namespace" in w for w in warnings)
