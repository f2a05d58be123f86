"""``GradNormTracker``: each parameter's gradient norm and the total, written to the loggers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

import surge
import torch
from loguru import logger
from pydantic import AfterValidator

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["GradNormConfig", "GradNormTracker"]

SOURCE = "grad_norm"


def _positive(value: float | str) -> float | str:
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return "inf"
    if not isinstance(value, str) and not value > 0:
        raise ValueError(f"got {value}: the order of a p-norm is a number > 0, or 'inf'")
    return value


class GradNormTracker:
    """Writes ``grad_{p}_norm/<parameter>`` for every parameter with a gradient and ``grad_{p}_norm_total``
    (the p-norm of all of them together) through ``trainer.log_metrics(..., source="grad_norm")``.

    * **When**: in ``before_optimizer_step`` of the optimizer steps whose metrics are written (every
      ``log_every_n_steps`` steps, where ``trainer.should_log`` holds after the step), under that step's
      number. On other steps the handler returns after one modulo: no computation, no host sync.
    * **What**: the accumulated gradients of the step, at true scale (a ``16-mixed`` precision provider
      unscales them before any participant's ``before_optimizer_step``) and before clipping.
    * ``{p}`` is written as given: ``2`` for ``norm_type=2`` (or ``2.0``), ``1.5``, ``inf``.
    * **Cost** on a write step: one fused ``torch._foreach_norm`` per device and dtype and one batched copy of
      the norms to the host (inside ``trainer.log_metrics``); global rank zero only.

    Args:
        norm_type: The order p of the norm: any number > 0, or ``"inf"`` (the largest absolute value).
    """

    surge_name = "grad_norm"
    surge_kind = "observer"  # it reports what happened: after participants and the Module changed it

    @surge.validated
    def __init__(self, norm_type: Annotated[float | Literal["inf"], AfterValidator(_positive)] = 2.0) -> None:
        self.norm_type: float = math.inf if norm_type == "inf" else float(norm_type)
        self.prefix = f"grad_{_format(self.norm_type)}_norm"
        self._names: dict[int, str] = {}

    @surge.hookimpl
    def train_start(self, event: ev.TrainStart) -> None:
        trainer = event.trainer
        self._names = {id(p): name for name, p in trainer.module.named_parameters()}
        if trainer.is_global_zero and not trainer.event_order("log_metrics"):
            logger.warning(
                "grad_norm: no active plugin handles log_metrics (no logger), so the gradient norms go nowhere; "
                "enable a logger (Trainer(logger=True) or logger='csv')"
            )

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        trainer = event.trainer
        step = trainer.global_step + 1  # the step being taken: its metrics are written under this number
        # Not @surge.hookimpl(every_n_steps=...): n is the Trainer's log_every_n_steps, counted on the step being
        # taken (the filter reads global_step, not yet incremented here), and every optimizer of that step writes.
        if step % trainer.config.log_every_n_steps or not trainer.is_global_zero:
            return
        norms = self.compute(event.optimizer)
        if norms:
            trainer.log_metrics(norms, step=step, source=SOURCE)

    def compute(self, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        """The norms of the gradients of ``optimizer``'s parameters, as tensors on their devices."""
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return {}
        p = self.norm_type
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, param in enumerate(params):
            groups.setdefault((param.grad.device, param.grad.dtype), []).append(i)  # type: ignore[union-attr]
        per_param: list[torch.Tensor] = [torch.empty(0)] * len(params)
        for indices in groups.values():
            norms = torch._foreach_norm([params[i].grad for i in indices], p)  # type: ignore[misc]
            for i, norm in zip(indices, norms, strict=True):
                per_param[i] = norm
        device = per_param[0].device
        total = torch.linalg.vector_norm(torch.stack([n.to(device, torch.float32) for n in per_param]), p)
        result = {
            f"{self.prefix}/{self._names.get(id(param), f'param{i}')}": n
            for i, (param, n) in enumerate(zip(params, per_param, strict=True))
        }
        result[f"{self.prefix}_total"] = total
        return result


def _format(p: float) -> str:
    if math.isinf(p):
        return "inf"
    return str(int(p)) if float(p).is_integer() else repr(float(p))


GradNormConfig = surge.settings_model(GradNormTracker)
"""The ``grad_norm`` plugin's settings, derived from :class:`GradNormTracker`'s signature."""
