"""What a bit-exact resume needs beyond weights and optimizer states: RNG states and the loop's and the
training data's position.

A checkpoint saved during ``fit`` records where the loop stands (epoch, batches done in it, whether the
validation after the last batch already ran, whether only the epoch's end remains), any gradients of an
open accumulation window, the RNG states at that moment (python, numpy, torch, every CUDA device, the
train loader's generators) and the RNG states the train loader drew its order from when the epoch began
(captured once per epoch, never per step). A resumed ``fit`` continues from that point:

* between epochs: the RNG states are put back before the next ``train_epoch_start``;
* mid-epoch: a loader with its own ``state_dict``/``load_state_dict`` restores itself. For any other
  loader the epoch-start RNG states are put back, a fresh iterator draws the same order, and the batches
  already done are skipped inside the sampler, so no data is loaded for them (other iterables are
  replayed). Then the save-time RNG states and the accumulated gradients are put back, and the
  validation due after the last batch runs if it had not;
* after the epoch's batches (a save in ``train_epoch_end``): the epoch-interval schedulers step and the
  next epoch begins.

Limits: several train loaders (combined) are replayed from the epoch's start, which is exact unless one
of them draws from the global RNG mid-epoch (a shorter loader restarting in ``max_size_cycle`` mode);
randomness inside loader workers (augmentations with ``num_workers > 0``) is reseeded per epoch
by PyTorch and is not replayed for the rest of a resumed epoch; ``persistent_workers`` loaders draw their
worker seed once per loader, not once per epoch; epoch-level metrics of a resumed epoch cover the batches
after the resume.
"""

from __future__ import annotations

import collections
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from loguru import logger
from torch.utils.data import DataLoader, IterableDataset

from surge import _data

if TYPE_CHECKING:
    from surge.trainer import Trainer


# -- RNG states ----------------------------------------------------------------------------------------


def rng_states(loader: Any) -> dict[str, Any]:
    """The states of every generator a step may draw from, as plain tensors and containers."""
    version, internal, gauss = random.getstate()
    # one tensor instead of 625 Python ints: far cheaper to pickle at every save
    python = {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss}
    states: dict[str, Any] = {"python": python, "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        np_state = np.random.get_state(legacy=False)
        states["numpy"] = {
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    states["generators"] = [g.get_state() for g in loader_generators(loader)]
    return states


def set_rng_states(states: dict[str, Any], loader: Any) -> None:
    if "python" in states:
        python = states["python"]
        if isinstance(python, dict):
            python = (python["version"], tuple(python["state"].tolist()), python["gauss"])
        random.setstate(python)
    if "numpy" in states:
        try:
            import numpy as np
        except ImportError:
            logger.warning("the checkpoint holds numpy's RNG state, but numpy is not installed; it is not restored")
        else:
            saved = states["numpy"]
            key = saved["key"].numpy().astype(np.uint32)
            np.random.set_state(("MT19937", key, saved["pos"], saved["has_gauss"], saved["gauss"]))
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    cuda = states.get("cuda")
    if cuda:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            available = torch.cuda.device_count() if torch.cuda.is_available() else 0
            logger.warning(
                "the checkpoint holds the RNG states of {} CUDA device(s), {} are available: they are not "
                "restored, so random draws on the GPU differ from the original run",
                len(cuda),
                available,
            )
    _set_generator_states(loader, states.get("generators", []))


def loader_generators(loader: Any) -> list[torch.Generator]:
    """The ``torch.Generator`` objects a train loader draws from (its own, its samplers'), in a fixed order."""
    found: list[torch.Generator] = []

    def visit(obj: Any, depth: int) -> None:
        if isinstance(obj, torch.Generator):
            if not any(g is obj for g in found):
                found.append(obj)
            return
        if obj is None or depth > 3 or isinstance(obj, (str, bytes, int, float, torch.Tensor)):
            return
        if isinstance(obj, _data.CombinedLoader):
            for item in obj.items:
                visit(item, depth + 1)
            return
        for name in ("generator", "sampler", "batch_sampler"):
            visit(getattr(obj, name, None), depth + 1)

    visit(loader, 0)
    return found


def _set_generator_states(loader: Any, saved: list[torch.Tensor]) -> None:
    generators = loader_generators(loader)
    if len(generators) != len(saved):
        logger.warning(
            "the training loader draws from {} torch.Generator(s), the checkpoint holds the states of {}: they "
            "are not restored, so the data order after resuming differs from the original run",
            len(generators),
            len(saved),
        )
        return
    for generator, state in zip(generators, saved, strict=True):
        generator.set_state(state)


def epoch_start_states(loader: Any) -> dict[str, Any]:
    """What the train loader draws its epoch order from: taken by the loop right before ``iter(loader)``."""
    return {"torch": torch.get_rng_state(), "generators": [g.get_state() for g in loader_generators(loader)]}


# -- what a checkpoint records ---------------------------------------------------------------------------


def loop_position(trainer: Trainer) -> dict[str, Any]:
    state, n = trainer.state, trainer.num_training_batches
    return {
        "current_epoch": state.current_epoch,
        "global_step": state.global_step,
        "total_batches": state.total_batches,
        "epoch_batches": state.total_batches - state.epoch_start_batches,
        "epoch_length": None if math.isinf(n) else int(n),
        "validated": state.validated_at == state.total_batches,
        "epoch_loop_done": state.epoch_loop_done,
    }


def data_position(trainer: Trainer) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if trainer.state.epoch_rng is not None:
        data["epoch_start"] = trainer.state.epoch_rng
    loader = trainer.train_dataloader
    if _has_own_state(loader):
        data["loader"] = loader.state_dict()
    return data


def accumulated_grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Gradients not yet stepped (an open accumulation window): after every step they are ``None``."""
    return {name: p.grad for name, p in module.named_parameters() if p.grad is not None}


def _has_own_state(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


# -- continuing from a checkpoint ----------------------------------------------------------------------------


@dataclass
class ResumePoint:
    """Where a restored ``fit`` continues; the loops consume it once."""

    epoch_batches: int
    """Batches of the current epoch already done."""
    validated: bool
    """The validation due after the last of those batches already ran."""
    epoch_loop_done: bool
    """Only the epoch's end remains: epoch-interval schedulers, then the next epoch."""
    rng: dict[str, Any] | None
    epoch_start: dict[str, Any] | None
    loader_state: Any = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        """The ``data`` entry of the checkpoint this point came from."""
        data: dict[str, Any] = {}
        if self.epoch_start is not None:
            data["epoch_start"] = self.epoch_start
        if self.loader_state is not None:
            data["loader"] = self.loader_state
        return data

    @property
    def mid_epoch(self) -> bool:
        return not self.epoch_loop_done and (self.epoch_start is not None or self.epoch_batches > 0)

    def begin_epoch(self, trainer: Trainer) -> None:
        """At an epoch boundary: put the RNG states (and a stateful loader's state) back."""
        loader = trainer.train_dataloader
        if self.loader_state is not None and _has_own_state(loader):
            loader.load_state_dict(self.loader_state)
        if self.rng is not None:
            set_rng_states(self.rng, loader)

    def continue_epoch(self, trainer: Trainer) -> Iterator[Any]:
        """Mid-epoch: an iterator over the rest of the epoch's batches, with every RNG as it was at the save."""
        loader = trainer.train_dataloader
        if self.loader_state is not None and _has_own_state(loader):
            loader.load_state_dict(self.loader_state)
            iterator = iter(loader)
        else:
            if self.epoch_start is not None:
                torch.set_rng_state(self.epoch_start["torch"])
                _set_generator_states(loader, self.epoch_start["generators"])
            iterator = fast_forward(loader, self.epoch_batches)
        trainer.state.epoch_rng = self.epoch_start  # a later save in this epoch records the same start
        if self.rng is not None:
            set_rng_states(self.rng, loader)
        if self.grads:
            for name, param in trainer.module.named_parameters():
                if name in self.grads:
                    param.grad = self.grads[name].to(device=param.device, dtype=param.dtype)
        return iterator


def restore_position(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> ResumePoint:
    """Put the loop counters of ``checkpoint`` into ``trainer.state``; the rest waits in the returned point."""
    loops, state = checkpoint["loops"], trainer.state
    state.current_epoch = loops["current_epoch"]
    state.global_step = loops["global_step"]
    state.total_batches = loops.get("total_batches", 0)
    done = int(loops.get("epoch_batches", 0))
    state.epoch_start_batches = state.total_batches - done
    state.validated_at = state.total_batches if loops.get("validated") else -1
    state.epoch_loop_done = bool(loops.get("epoch_loop_done", False))
    state.epoch_rng = None
    data = checkpoint.get("data", {})
    point = ResumePoint(
        epoch_batches=done,
        validated=bool(loops.get("validated")),
        epoch_loop_done=state.epoch_loop_done,
        rng=checkpoint.get("rng"),
        epoch_start=data.get("epoch_start"),
        loader_state=data.get("loader"),
        grads=checkpoint.get("accumulated_grads", {}),
    )
    n = trainer.num_training_batches
    length = None if math.isinf(n) else int(n)
    if point.mid_epoch and "epoch_length" in loops and loops["epoch_length"] != length:
        logger.warning(
            "checkpoint {} was saved after {} of {} training batches of epoch {}, but the training data now has "
            "{} batches per epoch: the rest of this epoch does not continue the original run's data",
            url,
            done,
            loops["epoch_length"],
            state.current_epoch,
            length,
        )
    return point


# -- fast-forwarding a loader --------------------------------------------------------------------------------


def fast_forward(loader: Any, skip: int) -> Iterator[Any]:
    """An iterator over ``loader`` past its first ``skip`` batches, drawing the same RNG as ``iter(loader)``.

    A map-style ``DataLoader`` skips inside its (batch) sampler: the skipped indices are never fetched, so
    no worker loads them. Anything else is replayed.
    """
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset):
        copy, skipping = _skipping_copy(loader, skip)
        iterator = iter(copy)
        # The sampler draws its order lazily; draw it now, while the RNG is still at the epoch's start.
        skipping.start()
        return iterator
    iterator = iter(loader)
    collections.deque(itertools.islice(iterator, skip), maxlen=0)
    return iterator


def _skipping_copy(loader: DataLoader, skip: int) -> tuple[DataLoader, _SkipFirst]:
    kwargs = {name: getattr(loader, name) for name in _data.LOADER_ARGS if hasattr(loader, name)}
    for name in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
        kwargs.pop(name, None)
    if loader.batch_sampler is not None:
        skipping = kwargs["batch_sampler"] = _SkipFirst(loader.batch_sampler, skip)
    else:  # no automatic batching: the sampler yields one batch's index at a time
        skipping = kwargs["sampler"] = _SkipFirst(loader.sampler, skip)
        kwargs["batch_size"] = None
    kwargs["persistent_workers"] = False  # it serves the rest of one epoch
    if not kwargs.get("num_workers"):
        kwargs.pop("prefetch_factor", None)
    return DataLoader(loader.dataset, **kwargs), skipping


class _SkipFirst:
    """A (batch) sampler yielding what ``inner`` yields after its first ``count`` items."""

    def __init__(self, inner: Any, count: int) -> None:
        self.inner, self.count = inner, count
        self._live: _Skipping | None = None

    def __len__(self) -> int:
        return max(0, len(self.inner) - self.count)

    def __iter__(self) -> Iterator[Any]:
        self._live = _Skipping(self.inner, self.count)
        return self._live

    def start(self) -> None:
        """Make the live iterator draw its order and skip now (a worker-backed iterator already has)."""
        if self._live is not None:
            self._live.start()


class _Skipping:
    def __init__(self, inner: Any, count: int) -> None:
        self._inner, self._count = inner, count
        self._iterator: Iterator[Any] | None = None

    def start(self) -> Iterator[Any]:
        if self._iterator is None:
            self._iterator = iter(self._inner)
            collections.deque(itertools.islice(self._iterator, self._count), maxlen=0)
        return self._iterator

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._iterator if self._iterator is not None else self.start())
