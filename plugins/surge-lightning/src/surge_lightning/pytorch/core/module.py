"""``lightning.pytorch.core.module``: :class:`LightningModule`."""

from __future__ import annotations

from typing import Any

import surge
import torch

from surge_lightning import inventory
from surge_lightning._lazy import refusing

__all__ = ["LightningModule"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class LightningModule(surge.Module):
    """Lightning's ``LightningModule``: a :class:`surge.Module` (every ``isinstance(x, surge.Module)`` holds),
    where behaviour that only Lightning's API has goes. docs/porting.md lists what keeps its name and what
    differs; reading or assigning a member Lightning's has and Surge's does not (``self.all_gather``,
    ``self.strict_loading = False``) raises an ``AttributeError`` saying why and what to use."""

    plain_hparams_only = False
    """As Lightning, ``save_hyperparameters()`` keeps an ``nn.Module``, a class or a ``functools.partial`` (a Hydra
    ``_partial_``) in ``self.hparams`` and the run goes on; Surge's checkpoints and loggers leave such values out,
    with one warning naming them and the fix (``ignore=``), so a checkpoint still loads with
    ``torch.load(weights_only=True)`` (docs/porting.md, "Hyper-parameters")."""

    example_input_array: Any = None
    """An example input of ``forward`` (the model summary and TensorBoard's graph read it); ``None`` until set, as
    Lightning's."""

    def __getattr__(self, name: str) -> Any:
        # torch's, which finds parameters and submodules; a refused member's own error is lost on the way here
        # (Python calls __getattr__ after any AttributeError), so it is raised again
        try:
            return _module_getattr(self, name)
        except AttributeError:
            error = inventory.refused_member("lightning.pytorch.LightningModule", name)
            if error is None:
                raise
            raise error from None


_module_getattr = torch.nn.Module.__getattr__


inventory.refuse_members(LightningModule, "lightning.pytorch.LightningModule")
