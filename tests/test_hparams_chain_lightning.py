"""``save_hyperparameters()`` called in a base class's ``__init__`` (issue 25, item 9): Lightning records the
arguments of the whole constructor chain (every ``__init__`` of the object on the stack, the subclass's values
winning), so ``self.hparams.lr`` works in a subclass whose base saved them. The same classes run on
``surge.Module`` and on Lightning 2.6's ``LightningModule`` (installed by the test set-up): the hyper-parameters
recorded, attribute access, what a checkpoint records and what ``load_from_checkpoint`` rebuilds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import quiet_trainer_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

lightning: Any = pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra)


def classes(base: type, data_base: type) -> dict[str, Any]:
    """Each case: a factory making the object as a program would."""

    class Base(base):  # type: ignore[misc,valid-type]
        def __init__(self, lr: float = 0.1, depth: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)  # the subclass's lr when it passes one

    class Sub(Base):
        """More arguments than the base; passes a changed ``lr`` on (the subclass's own value is recorded)."""

        def __init__(self, hidden: int = 4, lr: float = 0.1, name: str = "x") -> None:
            super().__init__(lr=lr * 2)

    class SubIgnores(Base):
        """Calls it again with ``ignore=``: drops its own argument and one the base saved."""

        def __init__(self, hidden: int = 4, lr: float = 0.1, secret: str = "s") -> None:
            super().__init__(lr)
            self.save_hyperparameters(ignore=["secret", "depth"])

    class VarBase(Base):
        def __init__(self, lr: float = 0.1, *args: Any, **kwargs: Any) -> None:
            super().__init__(lr)

    class SubVar(VarBase):
        """``*args`` left out, ``**kwargs`` merged in, at every level."""

        def __init__(self, hidden: int, *args: Any, width: int = 1, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    class Both(Base):
        """Saves in both classes, after changing an argument (its current value is recorded)."""

        def __init__(self, hidden: int = 4, lr: float = 0.1) -> None:
            super().__init__(lr)
            hidden = hidden + 1
            self.save_hyperparameters()

    class DataBase(data_base):  # type: ignore[misc,valid-type]
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()

    class Data(DataBase):
        def __init__(self, root: str = "/data", batch_size: int = 8) -> None:
            super().__init__(batch_size)

    return {
        "subclass": lambda: Sub(hidden=8, lr=0.3),
        "ignore": lambda: SubIgnores(5, 0.2),
        "args-kwargs": lambda: SubVar(3, 0.5, 7, width=2, extra="e"),
        "both": lambda: Both(6, 0.4),
        "datamodule": lambda: Data(root="/tmp/x"),
    }


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def run(framework: str, case: str, root: Path) -> dict[str, Any]:
    if framework == "surge":
        made = classes(surge.Module, surge.DataModule)[case]
        Trainer: Any = surge.Trainer
    else:
        made = classes(lightning.LightningModule, lightning.LightningDataModule)[case]
        Trainer = lightning.Trainer
    surge.seed_everything(0)
    obj = made()
    seen: dict[str, Any] = {"hparams": dict(obj.hparams)}
    if case == "datamodule":
        seen["batch_size"] = obj.hparams.batch_size
        return seen
    seen["lr"] = obj.hparams.lr
    trainer = Trainer(default_root_dir=str(root), max_epochs=1, **quiet_trainer_args())
    trainer.fit(obj, loader())
    trainer.save_checkpoint(str(root / "model.ckpt"))
    loaded = type(obj).load_from_checkpoint(str(root / "model.ckpt"))
    seen["loaded"] = dict(loaded.hparams)
    seen["weights"] = all(torch.equal(a, b) for a, b in zip(obj.state_dict().values(), loaded.state_dict().values()))
    seen["trained"] = obj.layer.weight.detach().clone()
    return seen


@pytest.mark.parametrize("case", ["subclass", "ignore", "args-kwargs", "both", "datamodule"])
def test_a_base_class_saving_hyperparameters_records_the_constructor_chain_as_lightning(
    tmp_path: Path, case: str
) -> None:
    ours, theirs = run("surge", case, tmp_path / "surge"), run("lightning", case, tmp_path / "lightning")
    trained = (ours.pop("trained", None), theirs.pop("trained", None))
    assert ours == theirs
    if trained[0] is not None:  # trained with the lr the chain recorded, on both sides
        assert torch.equal(*trained)
    expected = {
        "subclass": {"lr": 0.3, "depth": 2, "hidden": 8, "name": "x"},
        "ignore": {"lr": 0.2, "hidden": 5},
        "args-kwargs": {"lr": 0.5, "depth": 2, "hidden": 3, "width": 2, "extra": "e"},
        "both": {"lr": 0.4, "depth": 2, "hidden": 7},
        "datamodule": {"batch_size": 8, "root": "/tmp/x"},
    }[case]
    assert ours["hparams"] == expected
    if case != "datamodule":
        # rebuilt from the saved values; "both" adds one to hidden again in its __init__, in Lightning too
        assert ours["loaded"] == ({**expected, "hidden": 8} if case == "both" else expected) and ours["weights"]


def test_a_module_built_inside_another_records_only_its_own_chain() -> None:
    """Only the object's own ``__init__`` frames count: a Module made inside another Module's ``__init__``
    does not take the outer one's arguments (Lightning's walk takes any ``LightningModule``'s frame above)."""

    class Inner(surge.Module):
        def __init__(self, size: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters()

    class Outer(surge.Module):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.inner = Inner(3)
            self.save_hyperparameters()

    outer = Outer(0.5)
    assert dict(outer.inner.hparams) == {"size": 3}
    assert dict(outer.hparams) == {"lr": 0.5}
