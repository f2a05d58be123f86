"""``NaNGuard``: stop at the first NaN/inf loss or gradient, before it reaches the weights or a checkpoint."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import surge
import torch

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["NaNGuard", "NaNGuardConfig", "NonFiniteError", "first_non_finite"]


class NonFiniteError(surge.SurgeError):
    """A loss, gradient or weight went NaN or infinite. ``what`` is ``"loss"`` or the parameter's qualified
    name; ``kind`` is ``"loss"``, ``"gradient"`` or ``"weight"``; ``global_step``, ``epoch`` and ``batch_idx``
    say where."""

    def __init__(self, message: str, *, what: str, kind: str, global_step: int, epoch: int, batch_idx: int) -> None:
        super().__init__(message)
        self.what, self.kind = what, kind
        self.global_step, self.epoch, self.batch_idx = global_step, epoch, batch_idx


def first_non_finite(tensors: Sequence[torch.Tensor]) -> int | None:
    """The index of the first tensor holding a NaN or inf, or ``None``: one fused max-abs reduction per
    device and dtype (``torch._foreach_norm`` with ``ord=inf``, NaN propagates through it) and one host sync."""
    flags = _non_finite_flags(tensors)
    if flags is None or not bool(flags.any()):  # the one host sync
        return None
    return int(flags.nonzero()[0, 0])


def _non_finite_flags(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One bool per tensor (``True``: not finite), on the first tensor's device, without a host sync."""
    if not tensors:
        return None
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    device = tensors[0].device
    flags = torch.empty(len(tensors), dtype=torch.bool, device=device)
    for (group_device, _), indices in groups.items():
        norms = torch._foreach_norm([tensors[i] for i in indices], float("inf"))
        bad = ~torch.isfinite(torch.stack(norms))
        index = torch.tensor(indices, device=device)
        flags.index_copy_(0, index, bad.to(device, non_blocking=True) if group_device != device else bad)
    return flags


class NaNGuard:
    """Raises :class:`NonFiniteError` at the first non-finite loss or gradient, naming the global step, the
    epoch, the batch and the parameter (or the loss); the seed Trainer's ``terminate_on_nan``.

    * ``after_backward``: the loss's finiteness is folded into a flag on the device (no host sync); the batch
      index of the first bad loss in an accumulation window is kept there too.
    * ``before_optimizer_step``: the gradients of the optimizer's parameters are checked with one fused
      reduction per device and dtype, together with the loss flag, and read with **one host sync per
      optimizer step**. Raising here, before ``optimizer.step()``, keeps non-finite values out of the
      weights, so no later checkpoint holds them.
    * ``before_checkpoint_save``: the weights of every checkpoint are checked the same way (one sync per
      save) and a non-finite one stops the save, a last line of defence (a finite step can still overflow).

    Under a gradient scaler (``precision="16-mixed"``) inf gradients are expected (the scaler skips such
    steps and lowers its scale), so only the loss is checked there.

    Args:
        check_loss: Check every micro-batch's loss (recorded on the device after backward, read at the
            optimizer step).
        check_gradients: Check every gradient before the optimizer step.
        check_checkpoints: Refuse to save a checkpoint whose weights are not finite.
    """

    surge_name = "nan_guard"

    @surge.validated
    def __init__(self, check_loss: bool = True, check_gradients: bool = True, check_checkpoints: bool = True) -> None:
        self.check_loss = check_loss
        self.check_gradients = check_gradients
        self.check_checkpoints = check_checkpoints
        self._names: dict[int, str] = {}
        self._bad_batch: torch.Tensor | None = None  # batch index of the window's first bad loss, -1 if none

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        unused = set()
        if not self.check_loss:
            unused.add("after_backward")
        if not (self.check_loss or self.check_gradients):
            unused.add("before_optimizer_step")
        if not self.check_checkpoints:
            unused.add("before_checkpoint_save")
        return frozenset(unused)

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        self._names = {id(p): name for name, p in event.trainer.module.named_parameters()}
        self._bad_batch = None

    @surge.hookimpl
    def after_backward(self, event: ev.AfterBackward) -> None:
        batch = event.trainer.state.batch_idx
        bad = ~torch.isfinite(event.loss.detach()).all()  # stays on the device: no sync here
        if self._bad_batch is None:
            self._bad_batch = torch.where(bad, batch, -1)
        else:  # keep the first bad batch of the window
            self._bad_batch = torch.where((self._bad_batch < 0) & bad, batch, self._bad_batch)

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        trainer = event.trainer
        bad_batch, self._bad_batch = self._bad_batch, None
        params: list[torch.nn.Parameter] = []
        flags = None
        if self.check_gradients and getattr(trainer.precision_plugin, "scaler", None) is None:
            params = [p for g in event.optimizer.param_groups for p in g["params"] if p.grad is not None]
            flags = _non_finite_flags([p.grad for p in params])  # type: ignore[misc]
        checks = []
        if bad_batch is not None:
            checks.append((bad_batch >= 0).view(1))
        if flags is not None:
            checks.append(flags.to(checks[0].device) if checks else flags)
        if not checks:
            return
        combined = torch.cat(checks) if len(checks) > 1 else checks[0]
        if not bool(combined.any()):  # the one host sync of a step
            return
        state = trainer.state
        where = f"global step {state.global_step} (epoch {state.current_epoch}, batch {state.batch_idx})"
        if bad_batch is not None and int(bad_batch) >= 0:
            batch = int(bad_batch)
            raise NonFiniteError(
                f"nan_guard: the loss is not finite at {where}; first in the micro-batch {batch} of this "
                "accumulation window. Lower the learning rate, check the data of that batch, or clip gradients",
                what="loss",
                kind="loss",
                global_step=state.global_step,
                epoch=state.current_epoch,
                batch_idx=batch,
            )
        assert flags is not None
        bad = flags.nonzero().flatten().tolist()
        name = self._name(params[bad[0]])
        value = _describe(params[bad[0]].grad)  # type: ignore[arg-type]
        others = [self._name(params[i]) for i in bad[1:]]
        more = f"; {len(others)} other parameter(s) too: {_short(others)}" if others else ""
        raise NonFiniteError(
            f"nan_guard: the gradient of '{name}' is not finite ({value}) at {where}{more}. The optimizer step was "
            "not taken, so the weights are unchanged. Lower the learning rate, clip gradients "
            "(gradient_clip_val), or look for a log/sqrt/division of zero in the forward pass",
            what=name,
            kind="gradient",
            global_step=state.global_step,
            epoch=state.current_epoch,
            batch_idx=state.batch_idx,
        )

    @surge.hookimpl
    def before_checkpoint_save(self, event: ev.BeforeCheckpointSave) -> None:
        weights = event.checkpoint.get("state_dict") or {}
        names = [k for k, v in weights.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
        index = first_non_finite([weights[k] for k in names])
        if index is None:
            return
        state = event.trainer.state
        raise NonFiniteError(
            f"nan_guard: refusing to save a checkpoint at global step {state.global_step} (epoch "
            f"{state.current_epoch}, batch {state.batch_idx}): the weight '{names[index]}' is not finite "
            f"({_describe(weights[names[index]])}); the previous checkpoints are intact",
            what=names[index],
            kind="weight",
            global_step=state.global_step,
            epoch=state.current_epoch,
            batch_idx=state.batch_idx,
        )

    def _name(self, param: torch.Tensor) -> str:
        return self._names.get(id(param), f"<unnamed parameter of shape {tuple(param.shape)}>")


def _describe(tensor: torch.Tensor) -> str:
    nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
    return ", ".join(part for part in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if part)


def _short(names: Iterable[str], limit: int = 5) -> str:
    names = list(names)
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


NaNGuardConfig = surge.settings_model(NaNGuard)
"""The ``nan_guard`` plugin's settings, derived from :class:`NaNGuard`'s signature."""
