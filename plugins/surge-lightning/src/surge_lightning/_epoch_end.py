"""Lightning 1.x's ``training_epoch_end``/``validation_epoch_end``/``test_epoch_end(self, outputs)``, which
Lightning 2 removed and Surge's loops do not call: the ``epoch_end_outputs`` plugin claims them
(``surge.Plugin(module_hooks=...)``), so it joins exactly the runs whose Module defines one, collects the step
outputs from the batch-end events and calls the hook first thing in the epoch-end event, where the seed's loops
called it. A run whose Module has none of them has no such plugin: nothing is collected, no handler runs."""

from __future__ import annotations

from typing import Any

import surge
from loguru import logger

from surge_lightning._callbacks import step_outputs

__all__ = ["MODULE_HOOKS", "EpochEndOutputs"]

MODULE_HOOKS = {
    "training_epoch_end": {"training": True},
    "validation_epoch_end": {"validation": True},
    "test_epoch_end": {"test": True},
}
"""The Module methods the plugin claims, with the setting each turns on."""

_REPLACEMENT = {
    "training_epoch_end": "on_train_epoch_end",
    "validation_epoch_end": "on_validation_epoch_end",
    "test_epoch_end": "on_test_epoch_end",
}

_warned: set[tuple[str, str]] = set()  # (the Module class's qualified name, the hook) warned about


class EpochEndOutputs:
    """Collects the step outputs of a stage whose 1.x epoch-end hook the Module defines, and calls it with them:
    in training, what Lightning hands ``on_train_batch_end`` (the detached loss and the step's other entries); in
    evaluation, what the step returned (one list per loader, or the list itself for one loader). The handlers of
    the other stages are switched off for the run (``surge_unused_hooks``).

    Args:
        training: Call ``training_epoch_end(outputs)``.
        validation: Call ``validation_epoch_end(outputs)``.
        test: Call ``test_epoch_end(outputs)``.
    """

    def __init__(self, training: bool = False, validation: bool = False, test: bool = False) -> None:
        self.stages = {"training": training, "validation": validation, "test": test}
        self._train: list[Any] = []
        self._eval: list[list[Any]] = []

    @property
    def surge_unused_hooks(self) -> frozenset[str]:
        events = {"training": "train", "validation": "validation", "test": "test"}
        return frozenset(f"{events[stage]}_{scope}" for stage, on in self.stages.items() if not on for scope in _SCOPES)

    # -- training ------------------------------------------------------------------------------------------------
    @surge.hookimpl
    def train_epoch_start(self, event: surge.events.TrainEpochStart) -> None:
        _warn(event.module, "training_epoch_end")
        self._train = []

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        output = step_outputs(event.trainer, event.outputs)
        if output:
            self._train.append(output)

    @surge.hookimpl(tryfirst=True)  # before every other handler, where the seed's loop called the hook
    def train_epoch_end(self, event: surge.events.TrainEpochEnd) -> None:
        outputs, self._train = self._train, []
        event.module.training_epoch_end(outputs)

    # -- evaluation ----------------------------------------------------------------------------------------------
    @surge.hookimpl
    def validation_epoch_start(self, event: surge.events.ValidationEpochStart) -> None:
        _warn(event.module, "validation_epoch_end")
        self._eval_start(len(event.trainer.val_dataloaders))

    @surge.hookimpl
    def validation_batch_end(self, event: surge.events.ValidationBatchEnd) -> None:
        if event.outputs is not None:
            self._eval[event.dataloader_idx].append(event.outputs)

    @surge.hookimpl(tryfirst=True)
    def validation_epoch_end(self, event: surge.events.ValidationEpochEnd) -> None:
        event.module.validation_epoch_end(self._eval_end())

    @surge.hookimpl
    def test_epoch_start(self, event: surge.events.TestEpochStart) -> None:
        _warn(event.module, "test_epoch_end")
        self._eval_start(len(event.trainer.test_dataloaders))

    @surge.hookimpl
    def test_batch_end(self, event: surge.events.TestBatchEnd) -> None:
        if event.outputs is not None:
            self._eval[event.dataloader_idx].append(event.outputs)

    @surge.hookimpl(tryfirst=True)
    def test_epoch_end(self, event: surge.events.TestEpochEnd) -> None:
        event.module.test_epoch_end(self._eval_end())

    def _eval_start(self, loaders: int) -> None:
        self._eval = [[] for _ in range(max(loaders, 1))]

    def _eval_end(self) -> Any:
        """A list per loader, or the list itself for one loader, as in Lightning 1.x."""
        outputs, self._eval = self._eval, []
        return outputs if len(outputs) > 1 else outputs[0]


def _warn(module: Any, method: str) -> None:
    """Once per Module class and hook: what the hook costs, and Lightning 2's way."""
    key = (f"{type(module).__module__}.{type(module).__qualname__}", method)
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(
        "{}.{}(outputs) is a Lightning 1.x hook (Lightning 2 removed it); Surge runs it as the seed did, with the "
        "outputs of every step of the epoch kept in memory until its end (memory grows with the epoch). Lightning "
        "2's way: {}(self), with what you need collected in the step method",
        type(module).__name__,
        method,
        _REPLACEMENT[method],
    )


_SCOPES = ("epoch_start", "batch_end", "epoch_end")
