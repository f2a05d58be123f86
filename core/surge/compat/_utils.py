"""Small helpers Lightning programs import from ``lightning.pytorch.utilities`` and ``lightning.pytorch.cli``."""

from __future__ import annotations

import torch

from surge._rank_zero import rank_zero_only


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


@rank_zero_only
def cli_lightning_logo() -> None:
    """What Lightning's examples print before their CLI runs; here a one-line Surge banner (rank zero only)."""
    print("Surge: a PyTorch training engine (running a Lightning program through surge.compat)")
