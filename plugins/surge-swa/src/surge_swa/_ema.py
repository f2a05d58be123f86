"""``ExponentialMovingAverage``: an EMA of the weights, updated after optimizer steps with
``torch.optim.swa_utils.get_ema_multi_avg_fn`` (one ``torch._foreach_lerp_`` per device and dtype, no host
synchronisation), and swapped in for validation and test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import surge
import torch
from pydantic import Field
from surge import logger
from torch import nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["EMAConfig", "ExponentialMovingAverage"]


def _one_start(settings: Any) -> None:
    if settings.start_step is not None and settings.start_epoch is not None:
        raise ValueError(
            "start_step and start_epoch exclude each other: give one of them (or neither, to start at step 0)"
        )


class ExponentialMovingAverage:
    """Keeps ``ema = decay * ema + (1 - decay) * weights`` of the Module's parameters (and floating-point
    buffers when ``use_buffers``), exactly as ``AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay),
    use_buffers=...)`` stepped after each update step would, without copying the Module.

    * **Updates** run in ``after_optimizer_step``: the first one (from ``start_step``/``start_epoch``)
      copies the weights, then every ``update_every_n_steps``-th optimizer step lerps them in. A step the
      fp16 gradient scaler skipped (``trainer.precision_plugin.last_step_skipped``) is not averaged. The
      update is a ``torch._foreach_lerp_`` per device and dtype: nothing waits for the device.
    * **Validation and test** (``validate_with_ema``): the EMA values are copied into the Module when a
      validation or test run starts and the Module's own values are copied back when it ends, before any
      other participant's ``validation_end`` (a checkpoint saved there holds the trained weights), and also
      on a failure, Ctrl-C or teardown. Integer buffers (``num_batches_tracked``) are never averaged.
    * **Checkpoints** hold the EMA values, the number of updates and the step of the first; a resumed fit
      continues the average exactly. ``Trainer.validate``/``test`` with ``ckpt_path`` read the EMA from the
      checkpoint too.
    * ``apply_at_end``: the Module keeps the EMA weights after ``fit``.

    Args:
        decay: ``ema = decay * ema + (1 - decay) * weights`` at every update.
        update_every_n_steps: Update after every n-th optimizer step, counted from the first update.
        start_step: The first update follows the optimizer step taken at ``trainer.global_step == start_step``.
        start_epoch: The first update follows the first optimizer step of training epoch ``start_epoch``
            (0-based).
        use_buffers: Average floating-point buffers (batch-norm running statistics) too; otherwise the
            model's are used.
        validate_with_ema: Validation and test run on the EMA weights (swapped in at their start, back at
            their end).
        apply_at_end: Copy the EMA weights into the Module when training ends.
    """

    surge_name = "ema"

    @surge.validated(check=_one_start)
    def __init__(
        self,
        decay: Annotated[float, Field(ge=0.0, le=1.0)] = 0.999,
        update_every_n_steps: Annotated[int, Field(ge=1)] = 1,
        start_step: Annotated[int | None, Field(ge=0)] = None,
        start_epoch: Annotated[int | None, Field(ge=0)] = None,
        use_buffers: bool = True,
        validate_with_ema: bool = True,
        apply_at_end: bool = False,
    ) -> None:
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.start_step = start_step
        self.start_epoch = start_epoch
        self.use_buffers = use_buffers
        self.validate_with_ema = validate_with_ema
        self.apply_at_end = apply_at_end
        self.n_averaged = 0
        """Updates so far (0: no average yet)."""
        self.first_step: int | None = None
        """``trainer.global_step`` at the first update's optimizer step."""
        self._avg = get_ema_multi_avg_fn(self.decay)
        self._names: list[str] = []
        self._model: list[torch.Tensor] = []  # the Module's averaged tensors (detached views)
        self._ema: list[torch.Tensor] = []  # their averages, in the same order
        self._groups: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []  # (ema, model) per device and dtype
        self._backup: list[torch.Tensor] | None = None  # the Module's own values while the EMA is swapped in
        self._swapped = False
        self._pending: dict[str, Any] | None = None

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        if self.validate_with_ema:
            return frozenset()
        return frozenset({"validation_start", "validation_end", "test_start", "test_end"})

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """The EMA values by the Module's parameter and buffer names (empty before the first update)."""
        return dict(zip(self._names, self._ema, strict=True)) if self.n_averaged else {}

    # -- the run --------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        self._bind(event.trainer.module)

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        pending, self._pending = self._pending, None
        self.n_averaged, self.first_step, self._ema = 0, None, []  # every fit starts a new average...
        if pending is not None:
            self._load(pending)  # ...unless it resumes one
        self._group()

    @surge.hookimpl
    def after_optimizer_step(self, event: ev.AfterOptimizerStep) -> None:
        trainer = event.trainer
        if trainer.precision_plugin.last_step_skipped:  # the weights did not change: nothing to average
            return
        step = trainer.global_step  # not yet incremented: the index of the step just taken
        if self.first_step is None:
            if not self._may_start(trainer, step):
                return
            self.first_step = step
        # Not @surge.hookimpl(every_n_steps=...): n counts from the first update's step (start_step, start_epoch,
        # steps the scaler skipped), and global_step here is the step just taken, not yet incremented.
        elif (step - self.first_step) % self.update_every_n_steps:
            return
        with torch.no_grad():
            if self.n_averaged == 0:
                self._ema = [t.clone() for t in self._model]
                self._group()
            else:
                for ema, model in self._groups:
                    self._avg(ema, model, self.n_averaged)
        self.n_averaged += 1

    @surge.hookimpl
    def validation_start(self, event: ev.ValidationStart) -> None:
        self._swap_in()

    @surge.hookimpl(tryfirst=True)  # before a checkpoint saved at validation_end reads the Module
    def validation_end(self, event: ev.ValidationEnd) -> None:
        self._swap_out()

    @surge.hookimpl
    def test_start(self, event: ev.TestStart) -> None:
        self._swap_in()

    @surge.hookimpl(tryfirst=True)
    def test_end(self, event: ev.TestEnd) -> None:
        self._swap_out()

    @surge.hookimpl
    def train_end(self, event: ev.TrainEnd) -> None:
        if self.apply_at_end and self.n_averaged:
            with torch.no_grad():
                torch._foreach_copy_(self._model, self._ema)
            logger.info("ema: the Module now holds the EMA weights ({} updates)", self.n_averaged)

    @surge.hookimpl(tryfirst=True)  # other handlers (an emergency checkpoint) see the trained weights
    def exception(self, event: ev.Exception_) -> None:
        self._swap_out()

    @surge.hookimpl(tryfirst=True)
    def keyboard_interrupt(self, event: ev.KeyboardInterrupt_) -> None:
        self._swap_out()

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        self._swap_out()
        self._backup = None

    @surge.hookimpl
    def after_checkpoint_load(self, event: ev.AfterCheckpointLoad) -> None:
        trainer = event.trainer
        if trainer.state.stage == "fit":
            return  # fit restores plugin states itself (load_state_dict)
        state = event.checkpoint.get("plugins", {}).get(getattr(self, "state_key", None) or self.surge_name)
        if state is not None:
            self._load(state)

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": self.n_averaged,
            "first_step": self.first_step,
            "weights": self.weights,
            "decay": self.decay,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._pending = dict(state)  # applied when fit starts, once the Module is bound

    # -- helpers --------------------------------------------------------------------------------------
    def _may_start(self, trainer: surge.Trainer, step: int) -> bool:
        if self.start_epoch is not None:
            return trainer.current_epoch >= self.start_epoch
        return step >= (self.start_step or 0)

    def _bind(self, module: nn.Module) -> None:
        named: list[tuple[str, torch.Tensor]] = list(module.named_parameters())
        if self.use_buffers:
            named += [(n, b) for n, b in module.named_buffers() if b.is_floating_point() or b.is_complex()]
        names = [n for n, _ in named]
        model = [t.detach() for _, t in named]
        if self._ema and (
            names != self._names or any(e.shape != t.shape for e, t in zip(self._ema, model, strict=True))
        ):
            logger.warning("ema: this Module differs from the one averaged before; the old average is dropped")
            self.n_averaged, self.first_step, self._ema = 0, None, []
        self._names, self._model = names, model
        if self._ema:  # an average from an earlier run of this Trainer: follow the Module's device and dtype
            self._ema = [e.to(t.device, t.dtype) for e, t in zip(self._ema, model, strict=True)]
        self._group()

    def _group(self) -> None:
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for ema, model in zip(self._ema, self._model, strict=False):  # no average yet: no groups
            ema_list, model_list = groups.setdefault((model.device, model.dtype), ([], []))
            ema_list.append(ema)
            model_list.append(model)
        self._groups = list(groups.values())

    def _load(self, state: Mapping[str, Any]) -> None:
        n = int(state.get("n_averaged", 0))
        weights: Mapping[str, torch.Tensor] = state.get("weights", {})
        if n and set(weights) != set(self._names):
            missing, unexpected = sorted(set(self._names) - set(weights)), sorted(set(weights) - set(self._names))
            raise surge.SurgeError(
                f"ema: the checkpoint's average does not fit this Module (missing {missing or 'none'}, unexpected "
                f"{unexpected or 'none'}; was use_buffers the same?); resume with the Module and settings that "
                "wrote it"
            )
        self.n_averaged = n
        self.first_step = state.get("first_step")
        self._ema = (
            [weights[name].to(t.device, t.dtype).clone() for name, t in zip(self._names, self._model, strict=True)]
            if n
            else []
        )
        self._group()

    def _swap_in(self) -> None:
        if not self.validate_with_ema or self._swapped or not self.n_averaged:
            return
        if self._backup is None:
            with torch.inference_mode(False):  # evaluation runs in inference mode; the backup outlives it
                self._backup = [torch.empty_like(t) for t in self._model]
        with torch.no_grad():
            torch._foreach_copy_(self._backup, self._model)
            torch._foreach_copy_(self._model, self._ema)
        self._swapped = True

    def _swap_out(self) -> None:
        if not self._swapped:
            return
        assert self._backup is not None
        with torch.no_grad():
            torch._foreach_copy_(self._model, self._backup)
        self._swapped = False


EMAConfig = surge.settings_model(ExponentialMovingAverage)
"""The ``ema`` plugin's settings, derived from :class:`ExponentialMovingAverage`'s signature."""
