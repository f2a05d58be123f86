"""``lightning.pytorch.callbacks.finetuning``: :class:`BaseFinetuning`, Lightning's base of a callback that freezes
part of the model before training and unfreezes it, epoch by epoch, into new parameter groups of the optimizer;
and :class:`BackboneFinetuning`, which does so for a module's ``backbone`` with a learning-rate schedule of its
own. Written for Surge with Lightning's methods, order and arithmetic (the same run gives the same weights)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from surge import ConfigError
from torch.nn import Module, ModuleDict
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.callbacks.callback import Callback

__all__ = ["BackboneFinetuning", "BaseFinetuning", "multiplicative"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why

log = logging.getLogger(__name__)

Modules = Module | Iterable[Any]
"""A module, or an iterable of modules and of such iterables."""


def multiplicative(epoch: int) -> float:
    """:class:`BackboneFinetuning`'s default schedule: the backbone's learning rate doubles each epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Override :meth:`freeze_before_training` (called at each run's ``setup``, before ``configure_optimizers``:
    freeze what the optimizer must not get; have ``configure_optimizers`` take only the parameters that
    ``requires_grad``) and :meth:`finetune_function` (called at each training epoch's start, once per optimizer:
    unfreeze, typically with :meth:`unfreeze_and_add_param_group`).

    The parameter groups the callback added are in its ``state_dict`` (by parameter name) and are put back into
    the optimizers when a fit resumes from a checkpoint, before the optimizers' own state is loaded into them."""

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        self._groups_restored = False  # put back from the checkpoint already (on_load_checkpoint)

    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning 1.x saved the metadata itself, without the enclosing key
        self._internal_optimizer_metadata = state_dict.get("internal_optimizer_metadata", state_dict)
        self._restarting = not self._groups_restored

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Surge loads the optimizers' state before the callbacks' (Lightning, after ``on_fit_start``): the groups
        this callback added must be there first, so they are put back here, from the checkpoint's entry for it."""
        state = checkpoint.get("plugins", {}).get(self.state_key)
        if trainer.state.stage == "fit" and isinstance(state, dict):
            self.load_state_dict(state)
            self._restore_groups(trainer, pl_module)
            self._groups_restored = True

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._restarting:
            self._restore_groups(trainer, pl_module)
        self._restarting = self._groups_restored = False

    def _restore_groups(self, trainer: Any, pl_module: Any) -> None:
        named = dict(pl_module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            if index in self._internal_optimizer_metadata:
                optimizer.param_groups = _mapped(self._internal_optimizer_metadata[index], named)
        self._restarting = False

    @staticmethod
    def flatten_modules(modules: Modules) -> list[Module]:
        """The leaf modules of ``modules`` (those with no children), and the modules holding parameters of their
        own, in ``modules()`` order."""
        if isinstance(modules, ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            found: Iterable[Module] = [m for item in modules for m in BaseFinetuning.flatten_modules(item)]
        else:
            found = modules.modules()
        return [m for m in found if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[Any]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad``; a batch norm's skipped when
        not ``train_bn``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze ``modules``: every parameter trainable; batch norms track running statistics again."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: Module) -> None:
        """Freeze ``module``'s own parameters; a batch norm stops tracking running statistics."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``, except their batch norms when ``train_bn`` (those are made trainable)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[Any]) -> list[Any]:
        """``params`` less those ``optimizer`` has already, with a warning when some were. As Lightning's, a
        parameter counts as there when one of the optimizer's is equal to it in shape and values."""
        kept: list[Any] = []
        there: list[Any] = []
        for param in params:
            known = any(torch.equal(p, param) for group in optimizer.param_groups for p in group["params"])
            (there if known else kept).append(param)
        if there:
            warnings.warn(
                f"{len(there)} of the parameters to unfreeze are already in the optimizer and are skipped. Did "
                f"configure_optimizers build {type(optimizer).__name__} from all parameters? Give it only the "
                "trainable ones: filter(lambda p: p.requires_grad, self.parameters())",
                UserWarning,
                stacklevel=2,
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters that ``optimizer`` lacks as a new group, at ``lr``, or
        without it at the first group's learning rate divided by ``initial_denom_lr``."""
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        for index, optimizer in enumerate(trainer.optimizers):
            groups_before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, index, groups_before, optimizer.param_groups)

    def _store(self, pl_module: Any, index: int, groups_before: int, groups: list[dict[str, Any]]) -> None:
        """Record the optimizer's groups by parameter name: all of them the first time, then those added."""
        names = {p: n for n, p in pl_module.named_parameters()}
        if index not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[index] = _mapped(groups, names)
        elif groups_before != len(groups):
            self._internal_optimizer_metadata[index].extend(_mapped(groups[groups_before:], names))

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        """Override: unfreeze what should train from ``epoch`` on (called at each training epoch's start)."""
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(pl_module, epoch, optimizer)")

    def freeze_before_training(self, pl_module: Any) -> None:
        """Override: freeze what should not train at first (called before ``configure_optimizers``)."""
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(pl_module)")


def _mapped(groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
    """Copies of ``groups`` with each parameter replaced by ``mapping[param]`` (a name, or back a parameter)."""
    return [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [mapping[p] for p in g["params"]]} for g in groups
    ]


class BackboneFinetuning(BaseFinetuning):
    """Freeze the module's ``backbone`` (an ``nn.Module`` attribute) before training; at epoch
    ``unfreeze_backbone_at_epoch`` add it to the optimizer at ``backbone_initial_lr`` (or the first group's
    learning rate times ``backbone_initial_ratio_lr``); at each later epoch multiply its learning rate by
    ``lambda_func(epoch + 1)``, capped at the first group's when ``should_align``."""

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), Module):
            raise ConfigError(
                [
                    (
                        f"{type(pl_module).__name__}.backbone",
                        "BackboneFinetuning needs the module's backbone as an nn.Module attribute named `backbone`",
                    )
                ]
            )
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None  # set when the backbone was unfrozen
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        else:
            return
        self.previous_backbone_lr = backbone_lr
        if self.verbose:
            log.info(
                f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(backbone_lr, self.rounding)}"
            )
