"""``lightning.pytorch.utilities.grads``: :func:`grad_norm`."""

from __future__ import annotations

import torch

__all__ = ["grad_norm"]


def grad_norm(module: torch.nn.Module, norm_type: float | int | str) -> dict[str, torch.Tensor]:
    """The ``norm_type``-norm of each parameter's gradient (``grad_{p}_norm/{name}``) and of all of them
    together (``grad_{p}_norm_total``), as ``lightning.pytorch.utilities.grad_norm`` names them, for
    ``self.log_dict(grad_norm(self, 2))`` in ``on_before_optimizer_step``. Parameters without a gradient are
    left out; the values stay on their device."""
    p = float(norm_type)
    if p <= 0:
        raise ValueError(f"grad_norm: norm_type must be a positive number or 'inf', got {norm_type!r}")
    norms = {
        f"grad_{p}_norm/{name}": param.grad.detach().norm(p)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.stack(list(norms.values())).norm(p)
    return norms
