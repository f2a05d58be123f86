"""``StochasticWeightAveraging``: Lightning's SWA callback as a Surge participant, on ``torch.optim.swa_utils``.

The average lives in a ``torch.optim.swa_utils.AveragedModel`` and the learning rate follows a ``SWALR``;
batch-norm statistics are recomputed with ``torch.optim.swa_utils.update_bn`` over batches the strategy
moved to its device.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import surge
import torch
from pydantic import BeforeValidator, Field, PositiveFloat
from surge import logger
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["SWAConfig", "StochasticWeightAveraging"]

_PATH = "trainer.plugins.swa"


def _epoch_start(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be an int epoch (>= 1) or a float fraction of max_epochs in [0, 1]")
    if isinstance(value, int) and value < 1:
        raise ValueError("an int is the 1-based epoch to start from and must be >= 1 (or give a float in [0, 1])")
    if isinstance(value, float) and not 0.0 <= value <= 1.0:
        raise ValueError("a float is a fraction of max_epochs and must lie in [0, 1] (or give an int epoch >= 1)")
    return value


def _device(value: Any) -> Any:
    if value is not None:
        try:
            return str(torch.device(value))
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"not a torch device ({exc}); use e.g. 'cpu' or 'cuda:0'") from None
    return value


class _Shadow(nn.Module):
    """Tensors shaped like a module's parameters and buffers, in the same order: what ``AveragedModel``
    copies instead of the user's Module (a deep copy of that would copy its Trainer and data too)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        for i, parameter in enumerate(module.parameters()):
            self.register_parameter(f"p{i}", nn.Parameter(torch.zeros_like(parameter), requires_grad=False))
        for i, buffer in enumerate(module.buffers()):
            self.register_buffer(f"b{i}", torch.zeros_like(buffer))


class StochasticWeightAveraging:
    """Stochastic weight averaging (Izmailov et al., 2018) with Lightning's ``StochasticWeightAveraging``
    semantics.

    * **Start**: when the training epoch ``swa_start`` (0-based, from ``swa_epoch_start``) begins, a
      ``SWALR`` is made on the optimizer and from then on sets the learning rate: it is stepped once at the
      end of every training epoch, annealing over ``annealing_epochs`` to ``swa_lrs``.
    * **The user's schedulers** stay in ``trainer.lr_scheduler_configs`` and keep stepping (so checkpoints
      keep their states and load into the same ``configure_optimizers``), but their values no longer reach
      the weights: before every optimizer step from ``swa_start`` on, this plugin writes SWALR's learning
      rates into the optimizer's parameter groups.
    * **Averaging**: at the end of every training epoch from ``swa_start`` on (before any other participant's
      ``train_epoch_end``, so a checkpoint saved there includes it) the parameters are added to the average.
    * **End of fit** (``train_end``): the averaged parameters are copied into the Module, and when it has
      batch-norm layers their statistics are recomputed with one pass over the training batches of an epoch
      (``update_bn``: the input is the batch, or its first element for a list or tuple).
    * **Checkpoints** hold the averaged parameters, the number averaged, SWALR's state and learning rates.

    One optimizer only (several: a :class:`surge.SurgeError` when ``fit`` starts). Lightning's names and
    defaults.

    Args:
        swa_lrs: The learning rate SWALR anneals to: one for every parameter group, or one per group.
            ``None``: each group's learning rate when averaging starts.
        swa_epoch_start: When averaging starts. An int is Lightning's 1-based epoch (``1``: from the first
            epoch); a float in [0, 1] is a fraction of ``max_epochs`` (``0.8`` of 10 epochs: from the 8th
            epoch, ``current_epoch == 7``).
        annealing_epochs: Epochs SWALR takes to anneal from the learning rate at the start to ``swa_lrs``.
        annealing_strategy: The shape of SWALR's annealing.
        device: Where the averaged copy of the weights lives (``"cpu"`` saves accelerator memory); ``None``:
            with the model.
    """

    surge_name = "swa"

    @surge.validated
    def __init__(
        self,
        swa_lrs: PositiveFloat | Annotated[list[PositiveFloat], Field(min_length=1)] | None = None,
        swa_epoch_start: Annotated[int | float, BeforeValidator(_epoch_start)] = 0.8,
        annealing_epochs: Annotated[int, Field(ge=0)] = 10,
        annealing_strategy: Literal["cos", "linear"] = "cos",
        device: Annotated[str | torch.device | None, BeforeValidator(_device)] = None,
    ) -> None:
        self.swa_lrs = swa_lrs
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self.device = torch.device(device) if device is not None else None
        self.swa_start: int | None = None
        """The first averaged epoch (0-based), known once ``fit`` starts."""
        self.swa_end: int | None = None
        """The last averaged epoch (``max_epochs - 1``; ``None`` without ``max_epochs``)."""
        self.average: AveragedModel | None = None
        """The running average (its ``module`` holds the averaged parameters); ``None`` until averaging starts."""
        self.scheduler: SWALR | None = None
        self.n_averaged = 0
        """Epochs averaged so far (mirrors ``average.n_averaged`` without reading it from the device)."""
        self._lrs: list[float] = []  # SWALR's current learning rates, imposed before every optimizer step
        self._names: list[str] = []
        self._pending: dict[str, Any] | None = None  # restored state, applied when fit starts

    # -- the run --------------------------------------------------------------------------------------
    @surge.hookimpl
    def init_start(self, event: ev.InitStart) -> None:
        if isinstance(self.swa_epoch_start, float) and event.trainer.max_epochs == -1:
            raise surge.ConfigError(
                [
                    (
                        f"{_PATH}.swa_epoch_start",
                        f"{self.swa_epoch_start} is a fraction of max_epochs, but the run has no max_epochs (it "
                        "ends at max_steps); give the epoch to start from as an int",
                    )
                ]
            )

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        trainer = event.trainer
        self._check(trainer)
        self.swa_start, self.swa_end = self._window(trainer)
        self.average, self.scheduler, self.n_averaged, self._lrs = None, None, 0, []
        self._names = [name for name, _ in trainer.module.named_parameters()]
        pending, self._pending = self._pending, None
        if pending is not None and pending.get("started"):
            self._restore(trainer, pending)
        elif self.swa_end is not None and self.swa_start > self.swa_end:
            logger.warning(
                "swa: averaging would start at epoch {} but the run ends after epoch {}; nothing is averaged "
                "(lower swa_epoch_start or raise max_epochs)",
                self.swa_start,
                self.swa_end,
            )

    @surge.hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        if self.average is None and self._averages(event.epoch):
            self._start(event.trainer)
        if self.scheduler is not None:
            self._apply_lrs()

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        if self.scheduler is not None and event.optimizer is self.scheduler.optimizer:
            self._apply_lrs()  # the user's schedulers may have written theirs since the last step

    @surge.hookimpl(tryfirst=True)  # before a checkpoint saved at this epoch's end records the state
    def train_epoch_end(self, event: ev.TrainEpochEnd) -> None:
        if self.average is None or self.scheduler is None or not self._averages(event.epoch):
            return
        self.average.update_parameters(event.trainer.module)
        self.n_averaged += 1
        self._apply_lrs()  # SWALR continues from its own rates, whatever the user's schedulers wrote
        self.scheduler.step()
        self._lrs = [float(lr) for lr in self.scheduler.get_last_lr()]

    @surge.hookimpl
    def train_end(self, event: ev.TrainEnd) -> None:
        if self.average is None or self.n_averaged == 0:
            return
        trainer = event.trainer
        module = trainer.module
        with torch.no_grad():
            for target, averaged in zip(module.parameters(), self.average.module.parameters(), strict=True):
                target.copy_(averaged.to(target.device))
        recomputed = _has_batch_norm(module)
        if recomputed:
            with trainer.precision_plugin.autocast(trainer.strategy.root_device):
                _update_bn(trainer, module)
        logger.info(
            "swa: the Module now holds the average of {} epochs{}",
            self.n_averaged,
            "; batch-norm statistics recomputed over one epoch of training batches" if recomputed else "",
        )

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.average is None or self.scheduler is None:
            return {"started": False}
        optimizer = self.scheduler.optimizer
        averaged = [p.detach() for p in self.average.module.parameters()]
        return {
            "started": True,
            "n_averaged": self.n_averaged,
            "average": dict(zip(self._names, averaged, strict=True)),
            "scheduler": self.scheduler.state_dict(),
            "swa_lrs": [float(group["swa_lr"]) for group in optimizer.param_groups],
            "lrs": list(self._lrs),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._pending = dict(state)  # the optimizer and Module are ready when fit starts

    # -- helpers --------------------------------------------------------------------------------------
    def _check(self, trainer: surge.Trainer) -> None:
        if len(trainer.optimizers) != 1:
            raise surge.SurgeError(
                f"swa: averages the weights trained by one optimizer, but configure_optimizers returned "
                f"{len(trainer.optimizers)}; use one optimizer (with parameter groups) or remove 'swa' from plugins"
            )
        groups = len(trainer.optimizers[0].param_groups)
        if isinstance(self.swa_lrs, list) and len(self.swa_lrs) != groups:
            raise surge.ConfigError(
                [
                    (
                        f"{_PATH}.swa_lrs",
                        f"gives {len(self.swa_lrs)} learning rates, but the optimizer has {groups} parameter "
                        "group(s); give one per group, or a single float for all",
                    )
                ]
            )

    def _window(self, trainer: surge.Trainer) -> tuple[int, int | None]:
        start = self.swa_epoch_start
        if isinstance(start, float):
            start = int(trainer.max_epochs * start)
        end = trainer.max_epochs - 1 if trainer.max_epochs != -1 else None
        return max(start - 1, 0), end  # Lightning's 1-based epoch, counted from 0 here

    def _averages(self, epoch: int) -> bool:
        assert self.swa_start is not None
        return epoch >= self.swa_start and (self.swa_end is None or epoch <= self.swa_end)

    def _start(self, trainer: surge.Trainer) -> None:
        optimizer = trainer.optimizers[0]
        self.average = AveragedModel(_Shadow(trainer.module), device=self.device)
        swa_lrs = self.swa_lrs if self.swa_lrs is not None else [float(g["lr"]) for g in optimizer.param_groups]
        self.scheduler = self._make_scheduler(optimizer, swa_lrs)
        self._lrs = [float(lr) for lr in self.scheduler.get_last_lr()]
        logger.info(
            "swa: averaging from epoch {}; SWALR ({}, {} annealing epochs) sets the learning rate{}",
            trainer.current_epoch,
            self.annealing_strategy,
            self.annealing_epochs,
            " instead of the Module's schedulers" if trainer.lr_scheduler_configs else "",
        )

    def _make_scheduler(self, optimizer: torch.optim.Optimizer, swa_lrs: float | list[float]) -> SWALR:
        return SWALR(
            optimizer,
            swa_lr=swa_lrs,  # type: ignore[arg-type]  # a list gives one rate per parameter group
            anneal_epochs=self.annealing_epochs,
            anneal_strategy=self.annealing_strategy,
        )

    def _restore(self, trainer: surge.Trainer, state: Mapping[str, Any]) -> None:
        saved: Mapping[str, torch.Tensor] = state["average"]
        if list(saved) != self._names:
            missing, unexpected = sorted(set(self._names) - set(saved)), sorted(set(saved) - set(self._names))
            raise surge.SurgeError(
                f"swa: the checkpoint's average does not fit this Module (missing {missing or 'none'}, unexpected "
                f"{unexpected or 'none'}); resume with the Module that wrote it"
            )
        optimizer = trainer.optimizers[0]
        self.average = AveragedModel(_Shadow(trainer.module), device=self.device)
        with torch.no_grad():
            for averaged, name in zip(self.average.module.parameters(), self._names, strict=True):
                averaged.copy_(saved[name])
            self.average.n_averaged.fill_(int(state["n_averaged"]))
        self.n_averaged = int(state["n_averaged"])
        self.scheduler = self._make_scheduler(optimizer, list(state["swa_lrs"]))
        self.scheduler.load_state_dict(dict(state["scheduler"]))
        self._lrs = [float(lr) for lr in state["lrs"]]
        self._apply_lrs()

    def _apply_lrs(self) -> None:
        assert self.scheduler is not None
        for group, lr in zip(self.scheduler.optimizer.param_groups, self._lrs, strict=True):
            group["lr"] = lr


def _update_bn(trainer: surge.Trainer, module: surge.Module) -> None:
    """``torch.optim.swa_utils.update_bn`` over one epoch of training batches. A Module without ``forward``
    (Lightning code often computes in ``training_step`` only) is run through ``training_step`` instead, under
    ``no_grad``, as Lightning recomputes the statistics with an epoch of training steps without backward; its
    ``self.log`` calls are dropped there, this pass being no part of the run."""
    if type(module).forward is not nn.Module.forward:
        update_bn(_training_inputs(trainer), module)
        return
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    was_training = module.training
    step = module.training_step
    with_index = _takes_batch_idx(step)
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the pass, as update_bn computes
    module.train()
    module.__dict__.update(log=_unlogged, log_dict=_unlogged)  # instance attributes shadow the methods
    try:
        with torch.no_grad():
            for index, batch in enumerate(_training_inputs(trainer)):
                step(batch, index) if with_index else step(batch)
    finally:
        del module.__dict__["log"], module.__dict__["log_dict"]
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
        module.train(was_training)


def _unlogged(*args: Any, **kwargs: Any) -> None:
    return None


def _takes_batch_idx(step: Any) -> bool:
    """Whether ``training_step`` takes ``batch_idx`` (Lightning's rule: two positional parameters or more,
    one named ``batch_idx``, or ``*args``)."""
    params = list(inspect.signature(step).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.name == "batch_idx" or p.kind is p.VAR_POSITIONAL for p in params)


def _has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def _training_inputs(trainer: surge.Trainer) -> Iterator[Any]:
    """One epoch of training batches (``limit_train_batches`` applies), on the strategy's device."""
    n = trainer.num_training_batches
    strategy, precision = trainer.strategy, trainer.precision_plugin
    for batch in itertools.islice(trainer.train_dataloader, None if math.isinf(n) else int(n)):
        yield precision.convert_input(strategy.batch_to_device(batch))


SWAConfig = surge.settings_model(StochasticWeightAveraging)
"""The ``swa`` plugin's settings, derived from :class:`StochasticWeightAveraging`'s signature."""
