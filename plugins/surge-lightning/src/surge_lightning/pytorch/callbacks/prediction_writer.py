"""``lightning.pytorch.callbacks.prediction_writer``: :class:`BasePredictionWriter`, Lightning's base of a callback
that writes predictions as they come (``write_interval="batch"``), once per predict epoch (``"epoch"``) or both."""

from __future__ import annotations

from typing import Any

from surge import ConfigError

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.callbacks.callback import Callback

__all__ = ["BasePredictionWriter"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Override :meth:`write_on_batch_end` and/or :meth:`write_on_epoch_end` and pass the writer in
    ``callbacks=``; ``trainer.predict`` calls them as Lightning does, with the indices of the samples each batch
    holds (``batch_indices``: read from the predict loader's batch sampler, which a predict loader does not
    shuffle; ``[]`` for a loader without one, an ``IterableDataset``'s)."""

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ConfigError(
                [("BasePredictionWriter.write_interval", f"got {write_interval!r}; use one of {list(_INTERVALS)}")]
            )
        self.interval = write_interval
        self._indices: list[list[list[int]]] = []  # per dataloader, per batch: the sample indices
        self._predictions: list[list[Any]] = []  # per dataloader, per batch (epoch interval only)

    def write_on_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Write one batch's predictions (``write_interval`` "batch" or "batch_and_epoch")."""
        raise NotImplementedError

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        """Write the epoch's predictions, a list per dataloader, or the list itself for one dataloader, and their
        ``batch_indices``, a list per dataloader (``write_interval`` "epoch" or "batch_and_epoch")."""
        raise NotImplementedError

    def on_predict_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        loaders = trainer.view.predict_dataloaders  # a list, one loader or several (the Trainer's is Lightning's shape)
        self._indices = [_batch_indices(loader) for loader in loaders]
        self._predictions = [[] for _ in loaders]

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.interval != "batch":
            self._predictions[dataloader_idx].append(outputs)
        if self.interval == "epoch":
            return
        indices = self._indices[dataloader_idx]
        self.write_on_batch_end(
            trainer,
            pl_module,
            outputs,
            indices[batch_idx] if batch_idx < len(indices) else [],
            batch,
            batch_idx,
            dataloader_idx,
        )

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.interval == "batch":
            return
        predictions, indices = (
            self._predictions,
            [i[: len(p)] for i, p in zip(self._indices, self._predictions, strict=True)],
        )
        # as Lightning: the one loader's predictions as the list itself, the indices always a list per loader
        self.write_on_epoch_end(trainer, pl_module, predictions[0] if len(predictions) == 1 else predictions, indices)
        self._predictions = []


def _batch_indices(loader: Any) -> list[list[int]]:
    sampler = getattr(loader, "batch_sampler", None)
    if sampler is None:
        return []
    return [list(batch) for batch in sampler]
