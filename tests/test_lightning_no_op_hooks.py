"""surge-lightning's LightningModule gives Lightning's hooks as no-ops (so that ``super().on_fit_start()`` works);
the core's Module subscriber registers no handler for them, so they cost nothing until a class overrides one. The
check reads the core's private hook table, which is why it lives here and not in the plugin's tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from surge.engine._module_hooks import ModuleHooks
from torch import nn

spl = pytest.importorskip(
    "surge_lightning.pytorch", reason="surge-lightning is not installed (`make test` installs it)"
)


def _regressor(**hooks: Any) -> Any:
    class Regressor(spl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    for name, fn in hooks.items():
        setattr(Regressor, name, fn)
    return Regressor()


def _handlers(model: Any) -> list[str]:
    return [name for name in vars(ModuleHooks(model)) if name.startswith("_")]


def test_the_no_op_bases_handle_no_event() -> None:
    assert _handlers(_regressor()) == []

    def on_fit_start(self: Any) -> None: ...

    assert _handlers(_regressor(on_fit_start=on_fit_start)) == ["_fit_start"]
