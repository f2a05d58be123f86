"""What ``self.log`` records: values stay on their device until someone reads or writes them.

Per step a logged value is only detached and stored (no host synchronisation, no kernel launch beyond
``detach``); epoch reductions run once at the epoch's end. A torchmetrics ``Metric`` logged as a value is
kept by reference: per step its forward result, per epoch its ``compute()``, then its ``reset()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from surge._logging import logger
from surge.errors import LoggedValueError, SurgeError

ReduceFx = str | Callable[[torch.Tensor], torch.Tensor]
_REDUCERS = ("mean", "sum", "max", "min")


@dataclass(frozen=True)
class _Meta:
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    logger: bool
    reduce_fx: ReduceFx
    sync_dist: bool


@dataclass
class _Accumulator:
    reduce_fx: ReduceFx
    values: list[torch.Tensor] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    restored: bool = False
    """Restored from a checkpoint without its callable ``reduce_fx``: the next ``self.log`` supplies it."""
    dataloader_idx: int | None = None
    """The evaluation loader it was logged from, when there are several (``None``: none, or in ``*_epoch_end``)."""

    def reduce(self) -> torch.Tensor:
        fx = self.reduce_fx
        # The mean and the sum add the step values one by one in the order logged, the arithmetic of
        # Lightning's running sums (so its numbers to the bit), done once here rather than at every step
        if fx == "mean":
            total = self.values[0] * self.weights[0]
            for value, weight in zip(self.values[1:], self.weights[1:], strict=True):
                total = total + value * weight
            return total / torch.tensor(sum(self.weights))
        if fx == "sum":
            total = self.values[0].clone()  # not the logged tensor itself, which its owner may change
            for value in self.values[1:]:
                total = total + value
            return total
        stacked = torch.stack(self.values)
        if fx == "max":
            return stacked.max(0).values
        if fx == "min":
            return stacked.min(0).values
        assert callable(fx)
        return fx(stacked)


class MetricStore:
    """Holds logged values for one Trainer and publishes them into its three metric dicts."""

    def __init__(self, move_to_cpu: bool = False) -> None:
        self.move_to_cpu = move_to_cpu
        self.context: str | None = None  # "train" | "validation" | "test" | "predict" | None
        self.dataloader_idx: int | None = None  # set when an eval stage has several loaders
        self.batch_size: int | None = None  # size of the current batch (for weighted epoch means)
        self.batch: Any = None
        self._step: dict[str, tuple[torch.Tensor, _Meta]] = {}
        self._metas: dict[tuple[Any, ...], _Meta] = {}  # one per flag combination, not one per call
        # keyed by (context, name): a validation run in the middle of a training epoch must neither
        # reduce nor clear the training epoch's accumulators
        self._epoch: dict[tuple[str, str], tuple[_Accumulator, _Meta]] = {}
        self._appended: list[_Accumulator] = []  # what this batch added to, so a failed batch can be taken back
        # torchmetrics objects logged, by (context, name); their state is theirs, so a failed batch's
        # update() cannot be taken back
        self._objects: dict[tuple[str, str], tuple[Any, _Meta, int | None]] = {}
        self._owners: dict[tuple[str, str], int] = {}
        """The loader of each name logged with ``add_dataloader_idx=False`` while several evaluation loaders run."""
        self._to_reset: list[Any] = []  # logged this epoch; reset after its *_epoch_end handlers (reset_objects)
        self.eval_steps: dict[int, int] = {}
        """Evaluation batches written per dataloader (Lightning's step of an evaluation's per-batch rows)."""
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}
        self.progress_bar_metrics: dict[str, torch.Tensor] = {}
        self.reduce_across: Callable[[torch.Tensor, str], torch.Tensor] = lambda t, op: t
        self.pending: dict[str, torch.Tensor] = {}
        """Logged values published since the last write, still on their devices."""
        self.writer: Callable[[dict[str, torch.Tensor], str, int | None], None] | None = None
        """Called with :attr:`pending`, the stage and the step (``None``: the global step) at each write (the
        Trainer emits ``log_metrics``)."""
        self.late: bool | None = None
        """From a training step's publication to the next batch: whether that step is written (the loop sets it
        before publishing the step's values). Set, a value logged now (by a ``train_batch_end`` handler) belongs
        to that step and is published at once, as Lightning's are, and joins its row (written once the handlers
        are done: the loop calls :meth:`flush` when :attr:`pending` holds it); ``None`` otherwise."""

    def record(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: ReduceFx = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
    ) -> None:
        context = self.context
        if context is None:
            raise SurgeError(
                f"self.log({name!r}) was called outside a training, validation, test or predict step; "
                "log from inside a *_step method or an on_*_batch_*/on_*_epoch_* hook"
            )
        if isinstance(reduce_fx, str) and reduce_fx not in _REDUCERS:
            raise SurgeError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): use one of {_REDUCERS} or a callable")
        training = context == "train"
        on_step = training if on_step is None else on_step
        on_epoch = (not training) if on_epoch is None else on_epoch
        metric = None
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            if tensor.dim():  # one element of any shape is that number, as Lightning squeezes it; more is refused
                if tensor.numel() != 1:
                    raise _not_scalar(name, tensor)
                tensor = tensor.reshape(())
        elif isinstance(value, (int, float, bool)):
            tensor = torch.tensor(float(value))
        elif hasattr(value, "items"):
            raise LoggedValueError(
                f"self.log({name!r}) got a {type(value).__name__}; log a mapping or a MetricCollection with "
                "self.log_dict(...)"
            )
        elif _is_metric(value):  # a torchmetrics.Metric: it accumulates and syncs across processes itself
            metric, sync_dist = value, False
        else:
            raise LoggedValueError(
                f"self.log({name!r}) got {type(value).__name__}; log a number, a tensor or a torchmetrics.Metric"
            )
        loader = self.dataloader_idx
        if loader is not None:
            if add_dataloader_idx:
                name = f"{name}/dataloader_idx_{loader}"
            else:
                self._claim(context, name, loader)
        flags = (on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist)
        try:
            meta = self._metas.get(flags)
            if meta is None:
                meta = self._metas[flags] = _Meta(*flags)
        except TypeError:  # an unhashable reduce_fx callable
            meta = _Meta(*flags)
        if metric is not None:
            # As in Lightning: per step its forward() result (none after a bare update()), per epoch its
            # compute() at the epoch's end, after which it is reset (end_epoch)
            self._objects[(context, name)] = (metric, meta, loader)
            cache = getattr(metric, "_forward_cache", None)
            if on_step and isinstance(cache, torch.Tensor):
                self._step[name] = (cache.detach(), meta)
                if self.late is not None:
                    self.end_step(self.late, flush=False)
            return
        if on_step:
            self._step[name] = (tensor, meta)
        if on_epoch:
            entry = self._epoch.get((context, name))
            if entry is None:
                entry = self._epoch[(context, name)] = (_Accumulator(reduce_fx, dataloader_idx=loader), meta)
            elif entry[0].restored:
                entry[0].reduce_fx, entry[0].restored = reduce_fx, False
                entry = self._epoch[(context, name)] = (entry[0], meta)
            entry[0].values.append(tensor)
            entry[0].weights.append(batch_size if batch_size is not None else self._current_batch_size())
            self._appended.append(entry[0])
        if self.late is not None and on_step:  # after the step's publication: into that step's values and row
            self.end_step(self.late, flush=False)

    def _claim(self, context: str, name: str, loader: int) -> None:
        """A name logged with ``add_dataloader_idx=False`` while several loaders run belongs to the one loader
        that logs it (it goes into that loader's result dict); from a second loader it is refused, as Lightning
        refuses it, rather than mixing the loaders' values under one name."""
        owner = self._owners.setdefault((context, name), loader)
        if owner != loader:
            raise SurgeError(
                f"self.log({name!r}, ..., add_dataloader_idx=False) during {context} on dataloader {loader}: "
                f"dataloader {owner} logged {name!r} too, and one name cannot hold the values of several "
                f"dataloaders (Lightning refuses it as well). Log one name per dataloader "
                f"(f'{name}_{{dataloader_idx}}'), or leave add_dataloader_idx=True (the name gets "
                f"'/dataloader_idx_N'); a value over every dataloader can be logged in on_{context}_epoch_end"
            )

    def _current_batch_size(self) -> int:
        if self.batch_size is None:
            self.batch_size = infer_batch_size(self.batch)
        return self.batch_size

    def new_batch(self, batch: Any) -> None:
        """A batch begins (the training loop inlines this; keep the two alike)."""
        self.batch, self.batch_size, self.late = batch, None, None
        self._appended.clear()

    def rollback(self) -> None:
        """Take back what the current batch logged (it failed before its optimizer step, so it did not happen)."""
        self._step.clear()
        for acc in reversed(self._appended):
            if acc.values:
                acc.values.pop()
                acc.weights.pop()
        self._appended.clear()
        kept = sorted(name for context, name in self._objects if context == self.context)
        if kept:  # their state is theirs: what the batch's update() added stays in it
            logger.warning(
                "the failed batch's updates of the torchmetrics objects logged as {} cannot be taken back; their "
                "epoch values include whatever it added (docs/resume.md, 'Not exact')",
                ", ".join(kept),
            )

    def end_step(self, write: bool, flush: bool = True, step: int | None = None) -> None:
        """Publish this step's values into the metric dicts (``write``: also for the loggers; with ``flush``,
        hand them to the writer now, at ``step`` if given, else at the global step)."""
        if not self._step:
            return
        training = (self.context or "train").startswith("train")
        for name, (tensor, meta) in self._step.items():
            key = _forked(name, "_step") if meta.on_epoch else name
            if meta.sync_dist:  # a collective every step, as asked; no host copy
                tensor = self.reduce_across(tensor, meta.reduce_fx if isinstance(meta.reduce_fx, str) else "mean")
            value = self._out(tensor)
            if training:  # as in Lightning, an evaluation's per-step values go to loggers and the bar only
                self.callback_metrics[name] = self.callback_metrics[key] = value
            if meta.prog_bar:
                self.progress_bar_metrics[key] = value
            if meta.logger:  # every step, written or not, as Lightning's logged_metrics (with or without a logger)
                self.logged_metrics[key] = value
                if write:
                    self.pending[key] = value
        self._step.clear()
        if write and flush:
            self.flush(step)

    def end_epoch(
        self, write: bool = True, reset: bool = True, check: bool = False
    ) -> dict[str, tuple[torch.Tensor, int | None]]:
        """Reduce the current context's epoch accumulators and publish them; returns what goes to the loggers
        (Lightning's return value of validate/test: ``logger=True`` values under their logged names), each with
        the evaluation loader it was logged from (``None``: no loader's, such as a value logged in
        ``*_epoch_end``). ``write=False`` keeps them pending, so that what ``*_epoch_end`` handlers log goes out
        in one write with them; with ``write`` and ``reset``, the torchmetrics objects logged are reset now
        (an evaluation resets them later, after its ``*_end`` handlers: :meth:`reset_objects`). ``check``: the
        sanity check's epoch, whose values go to ``callback_metrics`` only, as Lightning's hold them until the
        check ends (the loop then puts back what was there before): nothing to the loggers, the bar or
        ``logged_metrics``, and its per-step values are dropped."""
        self.late = None
        if check:
            self._step.clear()
        else:
            self.end_step(write=True, flush=False)  # values logged per step outside any step: in the epoch's write
        reduced: dict[str, tuple[torch.Tensor, int | None]] = {}
        for context, name in [key for key in self._epoch if key[0] == self.context]:
            acc, meta = self._epoch.pop((context, name))
            value = acc.reduce()
            if meta.sync_dist:
                value = self.reduce_across(value, acc.reduce_fx if isinstance(acc.reduce_fx, str) else "mean")
            self._publish_epoch(name, value, meta, reduced, acc.dataloader_idx, check)
        for context, name in [key for key in self._objects if key[0] == self.context]:
            metric, meta, loader = self._objects.pop((context, name))
            self._to_reset.append(metric)
            if meta.on_epoch:
                self._publish_epoch(name, _computed(metric, name), meta, reduced, loader, check)
        for key in [key for key in self._owners if key[0] == self.context]:
            del self._owners[key]
        if write and not check:
            if reset:
                self.reset_objects()
            self.flush()
        return reduced

    def reset_objects(self) -> None:
        """Reset the torchmetrics objects logged since the last reset: called once the handlers that may still
        read them are done (a training epoch's ``*_epoch_end``; an evaluation's ``*_end``), as Lightning resets
        its results."""
        for metric in self._to_reset:
            metric.reset()
        self._to_reset.clear()

    def _publish_epoch(
        self,
        name: str,
        value: torch.Tensor,
        meta: _Meta,
        logged: dict[str, tuple[torch.Tensor, int | None]],
        loader: int | None,
        check: bool = False,
    ) -> None:
        key = _forked(name, "_epoch") if meta.on_step else name
        value = self._out(value)
        self.callback_metrics[name] = self.callback_metrics[key] = value
        if check:
            return
        if meta.prog_bar:
            self.progress_bar_metrics[key] = value
        if meta.logger:
            self.logged_metrics[key] = self.pending[key] = value
            logged[key] = (value, loader)

    def flush(self, step: int | None = None) -> None:
        """Write whatever is pending now, at ``step`` (``None``: the global step)."""
        if self.pending:
            if self.writer is not None:
                context = self.context or "train"
                self.writer(self.pending, "train" if context.startswith("train") else context, step)
            self.pending.clear()

    def reset(self) -> None:
        """Forget unpublished values (a run that failed mid-epoch leaves some) and, as Lightning does, what
        the previous run published: called when a run starts, so that after ``test()`` the metric dicts hold
        the test's values only. New dicts, so that one read before stays as it was."""
        self._step.clear()
        self._epoch.clear()
        self._objects.clear()
        self._owners.clear()
        self._to_reset.clear()
        self.pending.clear()
        self.eval_steps.clear()
        self.callback_metrics, self.logged_metrics, self.progress_bar_metrics = {}, {}, {}
        self.context = self.dataloader_idx = None

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint taken mid-epoch needs so that the resumed run's epoch values equal an
        uninterrupted run's: the training epoch's accumulated step values, values reduced but not yet
        written, and the metric dicts as last published (a handler after the resume, such as early stopping
        checked at a training epoch's end without a validation in it, reads what it would have read). Plain
        tensors and containers (a callable ``reduce_fx`` is re-read from the next ``self.log`` call of that
        name)."""
        epoch = [
            {
                "context": context,
                "name": name,
                "values": list(acc.values),
                "weights": list(acc.weights),
                "flags": [meta.on_step, meta.on_epoch, meta.prog_bar, meta.logger, meta.sync_dist],
                "reduce_fx": acc.reduce_fx if isinstance(acc.reduce_fx, str) else None,
            }
            for (context, name), (acc, meta) in self._epoch.items()
            if context.startswith("train")
        ]
        published = {
            "callback": dict(self.callback_metrics),
            "logged": dict(self.logged_metrics),
            "progress_bar": dict(self.progress_bar_metrics),
        }
        # saved by a train_batch_end handler, the pending values are the step's row, written after those
        # handlers: the checkpoint predates it, so the resumed run writes it (a file continued from the
        # checkpoint's rows, as the CSV logger's, then has it once)
        return {"epoch": epoch, "pending": dict(self.pending), "published": published}

    def load_state_dict(self, state: Mapping[str, Any], device: torch.device) -> None:
        for entry in state.get("epoch", []):
            on_step, on_epoch, prog_bar, logger, sync_dist = entry["flags"]
            reduce_fx = entry["reduce_fx"] or "mean"
            acc = _Accumulator(reduce_fx, [v.to(device) for v in entry["values"]], list(entry["weights"]))
            acc.restored = entry["reduce_fx"] is None
            self._epoch[(entry["context"], entry["name"])] = (
                acc,
                _Meta(on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist),
            )
        self.pending.update({k: v.to(device) for k, v in state.get("pending", {}).items()})
        published = state.get("published", {})
        for restored, saved in (
            (self.callback_metrics, published.get("callback", {})),
            (self.logged_metrics, published.get("logged", {})),
            (self.progress_bar_metrics, published.get("progress_bar", {})),
        ):
            restored.update({k: self._out(v.to(device)) for k, v in saved.items()})

    def _out(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.cpu() if self.move_to_cpu else tensor


def _not_scalar(name: str, tensor: torch.Tensor) -> LoggedValueError:
    shape = tuple(tensor.shape)
    return LoggedValueError(
        f"self.log({name!r}, <tensor of shape {shape}>): a logged value is one number, and this tensor has "
        f"{tensor.numel()} elements (loggers write scalars; Lightning refuses it too). Log a scalar, such as "
        f"its .mean() or .sum(), or one key per element: self.log_dict({{f'{name}_{{i}}': v for i, v in "
        "enumerate(tensor.flatten())})"
    )


def _forked(name: str, suffix: str) -> str:
    """``name`` with ``_step``/``_epoch`` before its dataloader suffix, as Lightning names it: ``loss_epoch/dataloader_idx_1``."""
    base, sep, index = name.partition("/dataloader_idx_")
    return f"{base}{suffix}{sep}{index}"


def _is_metric(value: Any) -> bool:
    """A torchmetrics ``Metric`` (duck-typed: torchmetrics stays optional and is never imported here)."""
    return all(callable(getattr(value, attr, None)) for attr in ("update", "compute", "reset"))


def _computed(metric: Any, name: str) -> torch.Tensor:
    value = metric.compute()
    if not isinstance(value, torch.Tensor):
        raise SurgeError(
            f"self.log({name!r}, {type(metric).__name__}): its compute() returned {type(value).__name__}, not a "
            "tensor; log a metric whose compute() returns a tensor (a MetricCollection with self.log_dict)"
        )
    return value.detach()


def to_host(values: Mapping[str, Any]) -> dict[str, float]:
    """Scalars as Python floats, with one device-to-host copy per (device, dtype) group rather than one per
    value. Python numbers pass through; tensors with more than one element (``self.log`` refuses them; a
    torchmetrics object's ``compute()`` or a plugin's ``trainer.log_metrics`` may give one) are left out:
    loggers write scalars, and the full tensor stays in ``trainer.callback_metrics``."""
    out: dict[str, float] = {}
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.Tensor]]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            if value.device.type == "cpu":
                out[name] = float(value.item())
            else:
                groups.setdefault((value.device, value.dtype), []).append((name, value))
        elif isinstance(value, (int, float)):
            out[name] = float(value)
    for items in groups.values():
        stacked = torch.stack([t.reshape(()) for _, t in items]).tolist()
        out.update((name, float(v)) for (name, _), v in zip(items, stacked, strict=True))
    return {name: out[name] for name in values if name in out}  # the caller's order


def infer_batch_size(batch: Any) -> int:
    """The first dimension of the first tensor found in ``batch`` (1 when there is none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = infer_batch_size(item)
            if size:
                return size
        return 1
    return 1
