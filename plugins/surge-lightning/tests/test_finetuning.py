"""``BaseFinetuning`` and ``BackboneFinetuning`` side by side with Lightning 2.6 (issue 25, item 5): the static
helpers, ``freeze_before_training`` before ``configure_optimizers``, ``finetune_function`` once per epoch and
optimizer, the same parameter groups and weights, and the added groups put back when a fit resumes."""

from __future__ import annotations

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

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(32, 6, generator=g), torch.randn(32, 1, generator=g)), batch_size=8)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8)))


def _model(framework: Any, two_optimizers: bool = False) -> Any:
    class Model(framework.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.backbone = _net()
            self.head = nn.Linear(8, 1)
            self.extra = nn.Linear(8, 1)
            self.automatic_optimization = not two_optimizers

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.backbone(x)) + self.extra(self.backbone(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self) -> Any:
            trainable = [p for p in self.parameters() if p.requires_grad]
            if not two_optimizers:
                optimizer = torch.optim.Adam(trainable, lr=0.01)
                return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]
            return torch.optim.SGD(self.head.parameters(), lr=0.1), torch.optim.SGD(self.extra.parameters(), lr=0.05)

    if two_optimizers:
        Model.training_step = _manual_step  # type: ignore[method-assign]
    return Model()


def _manual_step(self: Any, batch: Any, batch_idx: int) -> None:
    x, y = batch
    for optimizer in self.optimizers():
        optimizer.zero_grad()
        self.manual_backward(nn.functional.mse_loss(self(x), y))
        optimizer.step()


def _finetuner(framework: Any, at_epoch: int = 1) -> Any:
    class Unfreeze(framework.callbacks.BaseFinetuning):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[int, int]] = []

        def freeze_before_training(self, pl_module: Any) -> None:
            self.freeze([pl_module.backbone, nn.ModuleDict({"extra": pl_module.extra})], train_bn=False)

        def finetune_function(self, pl_module: Any, current_epoch: int, optimizer: Any) -> None:
            self.seen.append((current_epoch, len(optimizer.param_groups)))
            if current_epoch == at_epoch:
                self.unfreeze_and_add_param_group(pl_module.backbone[:2], optimizer, train_bn=True)
            elif current_epoch == at_epoch + 1:
                self.unfreeze_and_add_param_group([pl_module.backbone, pl_module.extra], optimizer, lr=0.003)

    return Unfreeze()


def _groups(trainer: Any, model: Any) -> list[list[tuple[list[str], float]]]:
    names = {p: n for n, p in model.named_parameters()}
    return [[(sorted(names[p] for p in g["params"]), g["lr"]) for g in o.param_groups] for o in trainer.optimizers]


def _fit(framework: Any, root: Path, *, max_epochs: int, ckpt_path: Any = None, **options: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model, finetuner = _model(framework, options.pop("two_optimizers", False)), _finetuner(framework)
    trainer = framework.Trainer(max_epochs=max_epochs, default_root_dir=root, callbacks=[finetuner], **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's about workers and logging intervals
        trainer.fit(model, _loader(), ckpt_path=ckpt_path, **options)
    return {
        "weights": model.state_dict(),
        "groups": _groups(trainer, model),
        "seen": finetuner.seen,
        "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
        "state": finetuner.state_dict(),
        "trainer": trainer,
    }


def _assert_same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["groups"] == theirs["groups"]
    assert ours["seen"] == theirs["seen"] and ours["trainable"] == theirs["trainable"]
    assert ours["state"] == theirs["state"]
    assert list(ours["weights"]) == list(theirs["weights"])
    assert all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in ours["weights"])


@pytest.mark.parametrize("two_optimizers", [False, True])
def test_base_finetuning_unfreezes_into_new_groups_as_lightning(tmp_path: Path, two_optimizers: bool) -> None:
    ours = _fit(spl, tmp_path / "surge", max_epochs=3, two_optimizers=two_optimizers)
    theirs = _fit(pl, tmp_path / "lightning", max_epochs=3, two_optimizers=two_optimizers)
    _assert_same(ours, theirs)
    assert len(ours["groups"][0]) == 3  # the optimizer's own group, then one per unfreezing
    assert len(ours["seen"]) == 3 * (2 if two_optimizers else 1)  # each epoch, each optimizer


def test_the_added_groups_survive_a_resume_as_in_lightning(tmp_path: Path) -> None:
    runs = {}
    for name, framework in (("surge", spl), ("lightning", pl)):
        first = _fit(framework, tmp_path / name, max_epochs=2)
        path = str(tmp_path / name / "after-2.ckpt")
        first["trainer"].save_checkpoint(path)
        runs[name] = _fit(framework, tmp_path / name, max_epochs=4, ckpt_path=path)
    _assert_same(runs["surge"], runs["lightning"])
    assert len(runs["surge"]["groups"][0]) == 3
    uninterrupted = _fit(spl, tmp_path / "straight", max_epochs=4)
    _assert_same(runs["surge"], {**uninterrupted, "seen": runs["surge"]["seen"]})  # resumed as if never stopped
    saved = surge.checkpoint.load(str(tmp_path / "surge" / "after-2.ckpt"))  # the safe loader reads it
    assert (
        len(
            next(iter(v for v in saved["plugins"].values() if "internal_optimizer_metadata" in v))[
                "internal_optimizer_metadata"
            ][0]
        )
        == 2
    )


def test_the_static_helpers_as_lightnings() -> None:
    base, theirs = spl.callbacks.BaseFinetuning, pl.callbacks.BaseFinetuning
    for train_bn in (True, False):
        torch.manual_seed(0)
        ours_net, their_net = _net(), _net()
        their_net.load_state_dict(ours_net.state_dict())
        assert [type(m) for m in base.flatten_modules(ours_net)] == [type(m) for m in theirs.flatten_modules(their_net)]
        base.freeze(ours_net, train_bn=train_bn)
        theirs.freeze(their_net, train_bn=train_bn)
        flags = [
            (p.requires_grad, getattr(m, "track_running_stats", None))
            for m in ours_net.modules()
            for p in m.parameters(recurse=False)
        ]
        assert flags == [
            (p.requires_grad, getattr(m, "track_running_stats", None))
            for m in their_net.modules()
            for p in m.parameters(recurse=False)
        ]
        assert len(list(base.filter_params(ours_net, train_bn, requires_grad=False))) == len(
            list(theirs.filter_params(their_net, train_bn, requires_grad=False))
        )
        base.make_trainable(ours_net)
        assert all(p.requires_grad for p in ours_net.parameters()) and ours_net[1].track_running_stats
    optimizer = torch.optim.SGD(ours_net[0].parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="already in the optimizer"):
        kept = base.filter_on_optimizer(optimizer, ours_net.parameters())
    assert len(kept) == len(list(ours_net.parameters())) - 2


def test_backbone_finetuning_as_lightning(tmp_path: Path) -> None:
    runs = {}
    for name, framework in (("surge", spl), ("lightning", pl)):
        torch.manual_seed(0)
        model = _model(framework)
        callback = framework.callbacks.BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda e: 1.5)
        trainer = framework.Trainer(max_epochs=4, default_root_dir=tmp_path / name, callbacks=[callback], **QUIET)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model, _loader())
        runs[name] = {
            "weights": model.state_dict(),
            "groups": _groups(trainer, model),
            "seen": [],
            "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
            "state": callback.state_dict(),
        }
    _assert_same(runs["surge"], runs["lightning"])
    assert runs["surge"]["state"]["previous_backbone_lr"] is not None


def test_backbone_finetuning_without_a_backbone_is_refused(tmp_path: Path) -> None:
    class NoBackbone(spl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(6, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = spl.Trainer(
        max_epochs=1, default_root_dir=tmp_path, callbacks=[spl.callbacks.BackboneFinetuning()], **QUIET
    )
    with pytest.raises(surge.ConfigError, match=r"NoBackbone\.backbone"):
        trainer.fit(NoBackbone(), _loader())


def test_a_finetuning_callback_without_its_overrides_says_what_to_define(tmp_path: Path) -> None:
    trainer = spl.Trainer(max_epochs=1, default_root_dir=tmp_path, callbacks=[spl.callbacks.BaseFinetuning()], **QUIET)
    with pytest.raises(NotImplementedError, match=r"must define freeze_before_training\(pl_module\)"):
        trainer.fit(_model(spl), _loader())
