"""Numerical precisions for ``Trainer(precision=...)``: ``64-true``, ``16-mixed``, ``bf16-mixed``, ``16-true``
and ``bf16-true`` (the core keeps ``32-true``).

* ``*-mixed``: weights stay float32; the steps run under ``torch.autocast`` on the run's device. ``16-mixed``
  also scales the loss with a ``torch.amp.GradScaler`` so that small float16 gradients do not flush to zero,
  and skips a step whose gradients hold inf/NaN (lowering the scale).
* ``*-true``: the module and the floating tensors of each batch are converted to the dtype, and it is the
  default dtype while a step runs (tensors a step creates match the weights).

Written against the public API only (``surge.Precision``, ``surge.Plugin``, ``surge.hookimpl``). Importing
this module builds nothing: discovery imports it for every ``Trainer()``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace
from typing import Any, ClassVar

import surge
import torch
from loguru import logger
from torch import nn

__all__ = [
    "BF16MixedPrecision",
    "BF16TruePrecision",
    "DoublePrecision",
    "FP16MixedPrecision",
    "FP16TruePrecision",
    "MixedPrecision",
    "TruePrecision",
    "cast_floating",
    "plugin",
]


# -- *-true: the whole model in one dtype ------------------------------------------------------------------


class _DefaultDtype:
    """``torch.set_default_dtype`` for the duration of a step; one object per run, re-entrant."""

    __slots__ = ("dtype", "_previous")

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._previous: list[torch.dtype] = []

    def __enter__(self) -> None:
        self._previous.append(torch.get_default_dtype())
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc_info: object) -> None:
        torch.set_default_dtype(self._previous.pop())


def cast_floating(data: Any, dtype: torch.dtype) -> Any:
    """Cast every floating-point tensor inside lists, tuples, named tuples, dicts and dataclasses to ``dtype``;
    integer and boolean tensors (labels, masks, indices) and everything else are returned as they are."""
    if isinstance(data, torch.Tensor):
        return data.to(dtype) if data.is_floating_point() and data.dtype != dtype else data
    if isinstance(data, (list, tuple)):
        cast = [cast_floating(item, dtype) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*cast)
        return cast if isinstance(data, list) else type(data)(cast)
    if isinstance(data, Mapping):
        return type(data)({key: cast_floating(value, dtype) for key, value in data.items()})  # type: ignore[call-arg]
    if is_dataclass(data) and not isinstance(data, type):
        return replace(data, **{f.name: cast_floating(getattr(data, f.name), dtype) for f in fields(data) if f.init})
    return data


class TruePrecision(surge.Precision):
    """Weights, batches and the step's default dtype all in ``dtype``. Subclasses set ``name``, ``aliases``
    and ``dtype``."""

    dtype: ClassVar[torch.dtype] = torch.float32

    def __init__(self) -> None:
        self._context = _DefaultDtype(self.dtype)

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, batch: Any) -> Any:
        return cast_floating(batch, self.dtype)

    def autocast(self, device: torch.device) -> _DefaultDtype:  # type: ignore[override]
        return self._context


class DoublePrecision(TruePrecision):
    name: ClassVar[str] = "64-true"
    aliases: ClassVar[tuple[str, ...]] = ("64", "64-true", "fp64")
    dtype: ClassVar[torch.dtype] = torch.float64


class FP16TruePrecision(TruePrecision):
    name: ClassVar[str] = "16-true"
    aliases: ClassVar[tuple[str, ...]] = ("16-true",)
    dtype: ClassVar[torch.dtype] = torch.float16


class BF16TruePrecision(TruePrecision):
    name: ClassVar[str] = "bf16-true"
    aliases: ClassVar[tuple[str, ...]] = ("bf16-true",)
    dtype: ClassVar[torch.dtype] = torch.bfloat16


# -- *-mixed: float32 weights, autocast steps -------------------------------------------------------------


class MixedPrecision(surge.Precision):
    """Float32 weights, steps under ``torch.autocast(device.type, dtype)``. Subclasses set ``dtype``."""

    dtype: ClassVar[torch.dtype] = torch.bfloat16

    def __init__(self) -> None:
        self._autocast_device: torch.device | None = None
        self._autocast: torch.autocast | None = None

    def autocast(self, device: torch.device) -> torch.autocast:  # type: ignore[override]
        # Built once per run and device, then reused on every step: the loop enters it sequentially, never
        # nested, which torch.autocast allows.
        if device != self._autocast_device or self._autocast is None:
            self._autocast = torch.autocast(device_type=device.type, dtype=self.dtype)
            self._autocast_device = device
        return self._autocast


class BF16MixedPrecision(MixedPrecision):
    name: ClassVar[str] = "bf16-mixed"
    aliases: ClassVar[tuple[str, ...]] = ("bf16", "bf16-mixed")
    dtype: ClassVar[torch.dtype] = torch.bfloat16


class FP16MixedPrecision(MixedPrecision):
    """Autocast to float16 with a ``torch.amp.GradScaler`` for the device in use.

    Per optimizer step: every micro-batch's loss is scaled in :meth:`backward`; the gradients are unscaled
    once, before ``before_optimizer_step`` handlers and clipping see them; ``scaler.step`` skips the step when
    they hold inf/NaN and ``scaler.update`` then lowers the scale. ``last_step_skipped`` and ``skipped_steps``
    record the skips.
    """

    name: ClassVar[str] = "16-mixed"
    aliases: ClassVar[tuple[str, ...]] = ("16", "16-mixed")
    dtype: ClassVar[torch.dtype] = torch.float16

    def __init__(self) -> None:
        super().__init__()
        self.scaler: torch.amp.GradScaler | None = None
        """Made at the first backward, for the loss's device (the precision is built before the device is
        known)."""
        self._pending: dict[str, Any] | None = None  # state loaded before the scaler exists
        self._unscaled: torch.optim.Optimizer | None = None  # unscaled since the last update
        self._stepped = False
        self._hooked: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.last_step_skipped = False
        self.skipped_steps = 0
        self._told_cpu = False

    @surge.hookimpl
    def setup(self, event: Any) -> None:
        # Float16 it is, as asked: torch autocasts and scales on the CPU too. Lightning 2.x switches to
        # bf16-mixed there instead, so a ported program's numbers differ: say so once, with the way to match
        trainer = event.trainer
        if trainer.strategy.root_device.type == "cpu" and not self._told_cpu and trainer.is_global_zero:
            self._told_cpu = True
            logger.warning(
                "precision='16-mixed' on the CPU runs float16 autocast with a GradScaler, as on CUDA; Lightning "
                "switches to 'bf16-mixed' on the CPU instead. Pass precision='bf16-mixed' for Lightning's numbers"
            )

    def _make_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        scaler = torch.amp.GradScaler(device.type)
        if self._pending:
            scaler.load_state_dict(self._pending)
            self._pending = None
        self.scaler = scaler
        return scaler

    def backward(self, loss: torch.Tensor, backward_fn: Callable[[torch.Tensor], None] | None = None) -> None:
        scaler = self.scaler or self._make_scaler(loss.device)
        if backward_fn is None:
            scaler.scale(loss).backward()
        else:  # the Module's backward gets the scaled loss, as in Lightning
            backward_fn(scaler.scale(loss))

    def _scaler_for(self, optimizer: torch.optim.Optimizer) -> torch.amp.GradScaler:
        """The scaler; made here only when gradients were restored from a checkpoint and no backward ran
        since (they carry the checkpoint's scale, which the new scaler takes over)."""
        if self.scaler is not None:
            return self.scaler
        return self._make_scaler(next(p.device for group in optimizer.param_groups for p in group["params"]))

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        if self._unscaled is not optimizer:
            self._scaler_for(optimizer).unscale_(optimizer)
            self._unscaled = optimizer

    @surge.hookimpl
    def before_optimizer_step(self, event: Any) -> None:
        # Providers' handlers run first: every other handler sees true-scale gradients (as in Lightning),
        # whether or not clipping made the loop unscale already.
        self.unscale_gradients(event.optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        result = None
        if closure is not None:  # as Lightning's: the scaler cannot hand the closure to the optimizer; run it first
            if isinstance(optimizer, torch.optim.LBFGS):
                raise surge.SurgeError(
                    "precision='16-mixed' cannot step LBFGS, which evaluates its closure several times per step "
                    "(torch.amp.GradScaler cannot scale those); use precision='bf16-mixed' or '32-true' with LBFGS"
                )
            result = closure()
            if not any(p.grad is not None for group in optimizer.param_groups for p in group["params"]):
                # nothing to step (the closure's training_step returned None): a GradScaler cannot step without
                # gradients, so skip as Lightning does
                self.last_step_skipped = True
                return result
        scaler = self._scaler_for(optimizer)
        if optimizer not in self._hooked:
            optimizer.register_step_post_hook(self._mark_stepped)
            self._hooked.add(optimizer)
        self._stepped = False
        # Unscale now unless done this step (clipping, a handler): in manual optimization the step events fire
        # from inside scaler.step, and a handler unscaling there would unscale twice.
        self.unscale_gradients(optimizer)
        scaler.step(optimizer)  # steps only if all gradients are finite
        scaler.update()
        self._unscaled = None
        self.last_step_skipped = not self._stepped
        if self.last_step_skipped:
            self.skipped_steps += 1
        return result

    def _mark_stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True

    @property
    def scale(self) -> float | None:
        """The current loss scale (``None`` before the first backward of a run that restored nothing)."""
        if self.scaler is not None:
            return float(self.scaler.get_scale())
        return float(self._pending["scale"]) if self._pending else None

    def state_dict(self) -> dict[str, Any]:
        # GradScaler.state_dict holds Python floats and ints only: loadable with torch.load(weights_only=True)
        if self.scaler is not None:
            return self.scaler.state_dict()
        return dict(self._pending or {})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not state:  # saved before the first backward, or by another precision
            return
        if self.scaler is not None:
            self.scaler.load_state_dict(dict(state))
        else:
            self._pending = dict(state)


plugin = surge.Plugin(
    name="precision",
    kind="provider",
    provides={
        "precision": {
            cls.name: cls
            for cls in (
                DoublePrecision,
                FP16MixedPrecision,
                BF16MixedPrecision,
                FP16TruePrecision,
                BF16TruePrecision,
            )
        }
    },
    description="precision=64-true, 16-mixed (GradScaler), bf16-mixed, 16-true, bf16-true",
)
