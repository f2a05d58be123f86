"""``lightning.pytorch.core.module``: :class:`LightningModule`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import surge
import torch
from surge import default_hook

from surge_lightning import inventory
from surge_lightning._callbacks import step_outputs
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

    _surge_event_fields: ClassVar[Mapping[tuple[str, str], Callable[..., Any]]] = {
        ("train_batch_end", "outputs"): lambda event: step_outputs(event.trainer, event.outputs)
    }
    """``on_train_batch_end`` gets what Lightning hands it, as a Callback's does: a dict with the detached ``"loss"``
    (``{"loss": tensor}`` for a step that returned a tensor), not what ``training_step`` returned."""

    # -- Lightning's hooks, as do-nothing defaults -------------------------------------------------------------------
    # An override may call ``super().on_train_epoch_end()`` as under Lightning. Each is marked a default hook, so
    # Surge's loops call none of them (and pay nothing) until a subclass overrides it.
    @default_hook
    def prepare_data(self) -> None: ...
    @default_hook
    def setup(self, stage: str) -> None: ...
    @default_hook
    def teardown(self, stage: str) -> None: ...
    @default_hook
    def on_fit_start(self) -> None: ...
    @default_hook
    def on_fit_end(self) -> None: ...
    @default_hook
    def on_train_start(self) -> None: ...
    @default_hook
    def on_train_end(self) -> None: ...
    @default_hook
    def on_validation_start(self) -> None: ...
    @default_hook
    def on_validation_end(self) -> None: ...
    @default_hook
    def on_test_start(self) -> None: ...
    @default_hook
    def on_test_end(self) -> None: ...
    @default_hook
    def on_predict_start(self) -> None: ...
    @default_hook
    def on_predict_end(self) -> None: ...
    @default_hook
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None: ...
    @default_hook
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    @default_hook
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    @default_hook
    def on_train_epoch_start(self) -> None: ...
    @default_hook
    def on_train_epoch_end(self) -> None: ...
    @default_hook
    def on_validation_epoch_start(self) -> None: ...
    @default_hook
    def on_validation_epoch_end(self) -> None: ...
    @default_hook
    def on_test_epoch_start(self) -> None: ...
    @default_hook
    def on_test_epoch_end(self) -> None: ...
    @default_hook
    def on_predict_epoch_start(self) -> None: ...
    @default_hook
    def on_predict_epoch_end(self) -> None: ...
    @default_hook
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...
    @default_hook
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    @default_hook
    def on_after_backward(self) -> None: ...
    @default_hook
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    @default_hook
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    @default_hook
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

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
