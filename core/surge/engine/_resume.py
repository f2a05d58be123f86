"""What a bit-exact resume needs beyond weights and optimizer states: RNG states and the loop's and the
training data's position.

A checkpoint saved during ``fit`` records where the loop stands (epoch, batches done in it, whether the
validation after the last batch already ran, whether only the epoch's end remains), any gradients of an
open accumulation window, the RNG states at that moment (python, numpy, torch, every CUDA device, the
train loader's generators and the RNG objects its sampler or dataset holds) and the RNG states the train
loader drew its order from when the epoch began (captured once per epoch, never per step). What it records
is a position the loop can continue from exactly, not simply the live state: see :func:`resumable_state`
for a save during a validation, after a batch that raised, or after a stop that cut the epoch short
(docs/resume.md has the contract). A resumed ``fit`` continues from that point:

* between epochs: the RNG states are put back before the next ``train_epoch_start``;
* mid-epoch: a loader with its own ``state_dict``/``load_state_dict`` restores itself. For any other
  loader the epoch-start RNG states are put back, a fresh iterator draws the same order, and the batches
  already done are skipped inside the sampler, so no data is loaded for them (other iterables are
  replayed). Then the save-time RNG states and the accumulated gradients are put back, and the
  validation due after the last batch runs if it had not;
* after the epoch's batches (a save in ``train_epoch_end``): the epoch-interval schedulers step and the
  next epoch begins.

With several processes each rank records its own RNG states, data position and open-window gradients
(gathered into ``ranks``) and resumes from them.

Limits, each warned about when the run resumes: several train loaders (combined) are replayed from the
epoch's start, which is exact unless one of them draws from the global RNG mid-epoch (a shorter loader
restarting in ``max_size_cycle`` mode); randomness inside the workers of a map-style loader (augmentations
with ``num_workers > 0``) is not replayed for the rest of a resumed epoch; ``persistent_workers`` loaders
start and seed their workers once, which a resume cannot repeat.
"""

from __future__ import annotations

import array
import collections
import contextlib
import ctypes
import itertools
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, Sampler, SequentialSampler

from surge import _data
from surge._logging import logger

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer


# -- RNG states ----------------------------------------------------------------------------------------


def rng_states(loader: Any) -> dict[str, Any]:
    """The states of every generator a step may draw from, as plain tensors and containers."""
    states: dict[str, Any] = {"python": _python_state(), "torch": torch.get_rng_state()}
    numpy_state = _numpy_state()
    if numpy_state is not None:
        states["numpy"] = numpy_state
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    states["generators"] = [g.get_state() for g in loader_generators(loader)]
    objects = [_object_state(rng) for rng in loader_rng_objects(loader)]
    if objects:
        states["objects"] = objects
    return states


def _python_state() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    # one tensor instead of 625 Python ints: far cheaper to pickle at every save. Through an array("q"), which
    # converts the ints in C: torch.tensor(internal) converts them one by one (a million instructions a call).
    state = torch.frombuffer(array.array("q", internal), dtype=torch.int64)
    return {"version": version, "state": state, "gauss": gauss}


def _numpy_state() -> dict[str, Any] | None:
    np = sys.modules.get("numpy")  # not imported by anyone: nothing can have drawn from it
    if np is None:
        return None
    fast = _legacy_numpy_state(np)
    if fast is not None:
        key, pos, has_gauss, gauss = fast
    else:
        state = np.random.get_state(legacy=False)
        key, pos = state["state"]["key"].astype(np.int64), int(state["state"]["pos"])
        has_gauss, gauss = int(state["has_gauss"]), float(state["gauss"])
    return {"key": torch.from_numpy(key), "pos": pos, "has_gauss": has_gauss, "gauss": gauss}


_MT_WORDS = 624


class _MTState(ctypes.Structure):
    """numpy's ``mt19937_state``: the key and the position in it."""

    _fields_ = (("key", ctypes.c_uint32 * _MT_WORDS), ("pos", ctypes.c_int))


class _AugState(ctypes.Structure):
    """numpy's ``aug_bitgen_t`` inside a ``RandomState``: a pointer to its ``bitgen_t`` copy, then the cache of
    the second normal of a pair (``has_gauss``, ``gauss``)."""

    _fields_ = (("bitgen", ctypes.c_void_p), ("has_gauss", ctypes.c_int), ("gauss", ctypes.c_double))


class _LegacyView:
    """Views of one ``RandomState``'s C state (held alive here, so the memory stays valid), made once."""

    def __init__(self, rs: Any, bg: Any, layout: tuple[int, int]) -> None:
        import numpy as np

        bitgen, aug = layout
        self.rs, self.bg = rs, bg
        self.state_address = bg.ctypes.state_address
        self.bitgen_address = id(rs) + bitgen  # CPython: id is the object's address (checked by the layout)
        self.state_pointer = ctypes.c_void_p.from_address(self.bitgen_address)
        self.aug = _AugState.from_address(id(rs) + aug)
        self.mt = _MTState.from_address(self.state_address)
        self.key = np.frombuffer(self.mt.key, dtype=np.uint32)
        self.int64 = np.int64

    def read(self) -> tuple[Any, int, int, float] | None:
        """``(key, pos, has_gauss, gauss)``, the key copied as int64; None when a pointer does not lead where it
        must."""
        if self.state_pointer.value != self.state_address or self.aug.bitgen != self.bitgen_address:
            return None
        aug = self.aug
        return self.key.astype(self.int64), self.mt.pos, aug.has_gauss, aug.gauss


_legacy_layout: tuple[int, int] | bool | None = False
"""Where a ``RandomState`` keeps its C fields (offsets of its ``bitgen_t`` copy and of its ``aug_bitgen_t``);
None: not found or not trusted (``get_state`` is used); False: not looked for yet."""
_legacy_view: _LegacyView | None = None


def _legacy_numpy_state(np: Any) -> tuple[Any, int, int, float] | None:
    """numpy's global legacy RNG state ``(key, pos, has_gauss, gauss)`` read from its memory, exactly what
    ``np.random.get_state()`` returns, or None where that read is not possible (then the caller asks
    ``get_state``). ``get_state`` copies the 624 words of the key one numpy element at a time (about a million
    instructions, at every epoch start and every checkpoint); the key is read here in one copy through the
    bit generator's documented ``ctypes.state_address``, and ``has_gauss``/``gauss`` (numpy's cache of the second
    normal of a pair, which can change while the key does not) from the ``RandomState`` object, at offsets found
    and checked against ``get_state`` on a private instance (:func:`_find_legacy_layout`). Every read checks that
    the object's pointers still lead where they must; anything unexpected falls back to ``get_state``."""
    global _legacy_layout, _legacy_view
    if _legacy_layout is False:
        _legacy_layout = _find_legacy_layout(np)
    if not isinstance(_legacy_layout, tuple):
        return None
    rs = getattr(getattr(np.random, "mtrand", None), "_rand", None)
    if type(rs) is not np.random.RandomState:
        return None
    bg = rs._bit_generator
    view = _legacy_view
    if view is None or view.rs is not rs or view.bg is not bg:
        if type(bg) is not np.random.MT19937:
            return None
        view = _legacy_view = _LegacyView(rs, bg, _legacy_layout)
    with bg.lock:  # the lock the RandomState's draws hold
        return view.read()


def _find_legacy_layout(np: Any) -> tuple[int, int] | None:
    """The offsets of a ``RandomState``'s ``bitgen_t`` copy (whose first field points at the bit generator's
    state) and of its ``aug_bitgen_t`` (whose first field points at that copy), found in a private instance and
    trusted only when reads through them equal ``get_state()`` in several states (no cached normal, one cached,
    one used, one set explicitly); None otherwise (another interpreter, numpy or layout)."""
    if sys.implementation.name != "cpython":
        return None
    try:
        probe = np.random.RandomState(20261202)
        bg = probe._bit_generator
        word = ctypes.sizeof(ctypes.c_void_p)
        if type(bg) is not np.random.MT19937:
            return None
        size = type(probe).__basicsize__
        raw = ctypes.string_at(id(probe), size)
        words = {o: int.from_bytes(raw[o : o + word], sys.byteorder) for o in range(0, size - word + 1, word)}
        bitgens = [o for o, w in words.items() if w == bg.ctypes.state_address]
        layouts = [(b, o) for b in bitgens for o, w in words.items() if w == id(probe) + b]
        if len(layouts) != 1 or layouts[0][1] + ctypes.sizeof(_AugState) > size:
            return None
        view = _LegacyView(probe, bg, layouts[0])

        def agrees() -> bool:
            read = view.read()
            state = probe.get_state(legacy=False)
            return (
                read is not None
                and np.array_equal(read[0], state["state"]["key"])
                and read[1] == state["state"]["pos"]
                and read[2] == state["has_gauss"]
                and read[3] == state["gauss"]
            )

        checks = [agrees()]
        probe.standard_normal()  # a pair drawn, one cached: has_gauss 1
        checks.append(agrees())
        probe.random_sample(3)
        checks.append(agrees())
        probe.standard_normal()  # the cached one used: has_gauss 0, the key unchanged
        checks.append(agrees())
        probe.set_state(("MT19937", probe.get_state()[1][::-1].copy(), 7, 1, -0.25))
        checks.append(agrees())
        return layouts[0] if all(checks) else None
    except Exception:  # any surprise: use get_state
        return None


def _same_state(a: Any, b: Any) -> bool:
    """Whether two recorded RNG states (tensors, numbers, containers of them) are equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    return bool(a == b)


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
    _set_object_states(loader, states.get("objects", []))


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


def loader_rng_objects(loader: Any) -> list[Any]:
    """The RNG objects of their own that a train loader's sampler, batch sampler or dataset hold as attributes
    (``self.rng = np.random.default_rng(seed)``, ``random.Random(seed)``, a ``RandomState``), in a fixed order:
    their states are recorded with the global ones, so a data order drawn from them resumes exactly too.
    The global RNGs' own instances are left out (they are recorded as ``python`` and ``numpy``)."""
    np = sys.modules.get("numpy")
    kinds: tuple[type, ...] = (random.Random,)
    if np is not None:
        kinds += (np.random.Generator, np.random.RandomState)
    shared = {id(random._inst)}  # type: ignore[attr-defined]
    if np is not None:
        shared.add(id(np.random.mtrand._rand))
    found: list[Any] = []
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if obj is None or id(obj) in seen or depth > 3:
            return
        seen.add(id(obj))
        if isinstance(obj, kinds):
            if id(obj) not in shared:
                found.append(obj)
            return
        if isinstance(obj, _data.CombinedLoader):
            for item in obj.items:
                visit(item, depth + 1)
            return
        if depth == 0:  # the loader: only what draws its order or its samples
            for name in ("sampler", "batch_sampler", "dataset"):
                visit(getattr(obj, name, None), depth + 1)
            return
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            for value in attributes.values():
                wrapped = hasattr(value, "__iter__") and hasattr(value, "__dict__")
                if wrapped or isinstance(value, (*kinds, Dataset, Sampler)):
                    visit(value, depth + 1)  # an RNG, or a wrapped sampler/dataset

    visit(loader, 0)
    return found


def _object_state(rng: Any) -> dict[str, Any]:
    if isinstance(rng, random.Random):
        version, internal, gauss = rng.getstate()
        return {
            "kind": "random",
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        }
    if hasattr(rng, "bit_generator"):  # numpy.random.Generator
        return {"kind": "generator", "state": _arrays_to_tensors(rng.bit_generator.state)}
    return {"kind": "random_state", "state": _arrays_to_tensors(rng.get_state(legacy=False))}


def _object_state_kind(rng: Any) -> str:
    if isinstance(rng, random.Random):
        return "random"
    return "generator" if hasattr(rng, "bit_generator") else "random_state"


def _set_object_state(rng: Any, entry: dict[str, Any]) -> None:
    if entry["kind"] == "random":
        rng.setstate((entry["version"], tuple(entry["state"].tolist()), entry["gauss"]))
    elif entry["kind"] == "generator":
        rng.bit_generator.state = _tensors_to_arrays(entry["state"])
    else:
        rng.set_state(_tensors_to_arrays(entry["state"]))


def _arrays_to_tensors(value: Any) -> Any:
    """numpy's RNG states hold arrays: kept as tensors with their dtype's name, so the safe loader reads them."""
    if isinstance(value, dict):
        return {k: _arrays_to_tensors(v) for k, v in value.items()}
    if type(value).__name__ == "ndarray":
        return {"ndarray": torch.from_numpy(value.astype("int64")), "dtype": str(value.dtype)}
    return value


def _tensors_to_arrays(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"ndarray", "dtype"}:
            return value["ndarray"].numpy().astype(value["dtype"])
        return {k: _tensors_to_arrays(v) for k, v in value.items()}
    return value


def _set_object_states(loader: Any, saved: list[dict[str, Any]]) -> None:
    objects = loader_rng_objects(loader)
    found = [_object_state_kind(rng) for rng in objects]
    if found != [entry["kind"] for entry in saved]:
        if objects or saved:
            logger.warning(
                "the training loader's sampler or dataset holds {} RNG object(s) of its own, the checkpoint the "
                "states of {}: they are not restored, so the data order after resuming differs from the original run",
                len(objects),
                len(saved),
            )
        return
    for rng, entry in zip(objects, saved, strict=True):
        _set_object_state(rng, entry)


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


@contextlib.contextmanager
def isolated_rng(loaders: list[Any]) -> Iterator[None]:
    """Put every RNG state back afterwards (python, numpy, torch, CUDA, the loaders' generators), so that what
    runs inside (the sanity check) changes no later random draw."""
    python = random.getstate()
    np = sys.modules.get("numpy")
    numpy_state = np.random.get_state() if np is not None else None
    torch_state = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    generators = [g for loader in loaders for g in loader_generators(loader)]
    generator_states = [g.get_state() for g in generators]
    objects = [(rng, _object_state(rng)) for loader in loaders for rng in loader_rng_objects(loader)]
    try:
        yield
    finally:
        for rng, object_state in objects:
            _set_object_state(rng, object_state)
        random.setstate(python)
        if np is not None:
            np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        for generator, state in zip(generators, generator_states, strict=True):
            generator.set_state(state)


def epoch_start_states(loader: Any) -> dict[str, Any]:
    """What the train loader draws its epoch order from: taken by the loop right before ``iter(loader)``,
    once per epoch. Python's and numpy's global RNGs are included: a sampler calling
    ``np.random.permutation`` or an iterable dataset shuffling with ``random`` draws from them."""
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": _python_state(),
        "generators": [g.get_state() for g in loader_generators(loader)],
    }
    objects = [_object_state(rng) for rng in loader_rng_objects(loader)]
    if objects:
        states["objects"] = objects
    numpy_state = _numpy_state()
    if numpy_state is not None:
        states["numpy"] = numpy_state
    return states


@dataclass
class OpenBatch:
    """A training batch begun and not finished: it raised (an exception, a second Ctrl-C, a non-finite
    loss), or a stop requested in its ``train_batch_start`` skipped it. A checkpoint written afterwards
    records the position before it: its gradients dropped, torch's RNG as it was before it."""

    epoch: int
    batch_idx: int
    torch_rng: torch.Tensor
    """torch's RNG state before the batch was fetched (one cheap copy per batch)."""
    window_open: bool
    """Gradients of earlier micro-batches were accumulated when it began."""
    ran: bool
    """Its step ran (its gradients, if any, are mixed into the window's); False: skipped before the step."""
    reason: str


# -- what a checkpoint records ---------------------------------------------------------------------------


def resumable_state(trainer: Trainer) -> dict[str, Any]:
    """The part of a checkpoint that says where the run stands: the loop and data position, RNG states and
    an open accumulation window's gradients, as they are true for a resume.

    * restored and not yet reached by the loop: the restored position, unchanged;
    * during a validation inside ``fit`` (a save from a handler, or after Ctrl-C in it): the RNG states
      from before that validation, which counts as not done, so the resume runs it again;
    * after a batch that did not finish (:class:`OpenBatch`): the position before it, without its
      gradients, torch's RNG rewound. Python's and numpy's global RNGs cannot be rewound (saving them per
      batch would cost more than the step): if they moved since the epoch began, a warning says so here
      and again when the checkpoint is resumed. Inside an open accumulation window the earlier
      micro-batches' gradients cannot be separated from the failed one's, and the save is refused.
    """
    pending = trainer._resume_point
    if pending is not None:
        return _every_rank(
            trainer,
            {
                "loops": loop_position(trainer),
                "rng": pending.rng if pending.rng is not None else rng_states(trainer.train_dataloader),
                "data": pending.data(),
                "accumulated_grads": pending.grads,
            },
        )
    loops = loop_position(trainer)
    validation_rng = trainer._validation_rng
    rng = validation_rng if validation_rng is not None else rng_states(trainer.train_dataloader)
    grads = accumulated_grads(trainer.module)
    open_batch = trainer._open_batch
    if open_batch is not None:
        rng, grads = _rewind(trainer, open_batch, rng, grads, loops)
    return _every_rank(
        trainer, {"loops": loops, "rng": rng, "data": data_position(trainer), "accumulated_grads": grads}
    )


_PER_RANK = ("rng", "data", "accumulated_grads")
"""What each process of a multi-process run has of its own: its RNG states, its data position (the states its
shard of the data was drawn from, its loader's own state) and, inside an accumulation window, its gradients
(``no_sync``: not yet averaged)."""


def _every_rank(trainer: Trainer, resume: dict[str, Any]) -> dict[str, Any]:
    """With several processes, ``resume["ranks"]``: every rank's :data:`_PER_RANK` entries, in rank order,
    gathered from all of them (each checkpoint is dumped on every rank). The top-level entries stay this
    rank's (global rank zero's in the file), which a single process resuming the checkpoint takes."""
    if trainer.world_size <= 1:
        return resume
    mine = {key: resume[key] for key in _PER_RANK}
    own_grads = mine["accumulated_grads"]
    shared = {**mine, "accumulated_grads": {k: v.detach().cpu() for k, v in own_grads.items()}}
    ranks = trainer.strategy.all_gather_object(shared)
    if len(ranks) != trainer.world_size:
        return resume  # a strategy that gathers nothing: every rank resumes from the saving rank's state
    ranks[trainer.global_rank] = mine  # this rank's own objects: what is shared with the top level is saved once
    return {**resume, "ranks": ranks}


def this_rank(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> dict[str, Any]:
    """This process's :data:`_PER_RANK` entries of ``checkpoint``: its rank's, when the checkpoint was saved by as
    many processes as this run has; else the top-level ones (global rank zero's), with a warning when the
    number of processes changed."""
    ranks = checkpoint.get("ranks")
    if isinstance(ranks, list) and len(ranks) == trainer.world_size:
        return dict(ranks[trainer.global_rank])
    if isinstance(ranks, list) and trainer.is_global_zero:
        logger.warning(
            "checkpoint {} was saved by {} processes, this run has {}: each process continues from the RNG states "
            "and data position of the original rank 0, so random draws (and data not sharded by rank) differ "
            "from the original run's",
            url,
            len(ranks),
            trainer.world_size,
        )
    return {key: checkpoint.get(key, {} if key != "rng" else None) for key in _PER_RANK}


def _rewind(
    trainer: Trainer, batch: OpenBatch, rng: dict[str, Any], grads: dict[str, torch.Tensor], loops: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from surge.errors import CheckpointSaveError

    where = f"batch {batch.batch_idx} of epoch {batch.epoch} ({batch.reason})"
    if batch.ran and batch.window_open and grads:
        raise CheckpointSaveError(
            f"no exact checkpoint can be written now: {where} did not finish inside a gradient accumulation "
            "window, and the gradients the window's earlier micro-batches accumulated can no longer be told apart "
            "from the failed batch's. Resume from the last checkpoint written at a step boundary (ModelCheckpoint's "
            "schedule, last.ckpt), or save from a handler at a step boundary (train_batch_end)"
        )
    rng = {**rng, "torch": batch.torch_rng}
    start = trainer.state.epoch_rng or {}
    moved = [
        name
        for name, now in (("python", rng.get("python")), ("numpy", rng.get("numpy")))
        if now is not None and name in start and not _same_state(now, start[name])
    ]
    if moved:
        note = (
            f"{where}: torch's RNG is rewound to the batch's start, but {' and '.join(moved)}'s global RNG moved "
            "since the epoch began and is saved as the failed batch left it; if that batch (its data or its "
            "training step) drew from it, the resumed run's random draws differ from an uninterrupted run's"
        )
        loops["inexact"] = note
        logger.warning("checkpoint: {}", note)
    return rng, grads if not batch.ran else {}  # a skipped batch added nothing to the window's gradients


# -- what a checkpoint records ---------------------------------------------------------------------------


def loop_position(trainer: Trainer) -> dict[str, Any]:
    state, n = trainer.state, trainer.num_training_batches
    position: dict[str, Any] = {
        "current_epoch": state.current_epoch,
        "global_step": state.global_step,
        "total_batches": state.total_batches,
        "epoch_batches": state.total_batches - state.epoch_start_batches,
        "epoch_length": None if math.isinf(n) else int(n),
        "validated": state.validated_at == state.total_batches,
        "epoch_loop_done": state.epoch_loop_done,
    }
    held = held_stop(trainer)
    if held is not None:
        position["held_stop"] = held
    return position


def held_stop(trainer: Trainer) -> str | None:
    """The reason of a stop that was requested and is held back until ``min_epochs``/``min_steps`` are met
    (the run goes on, then stops there); ``None`` when there is none. A checkpoint records it, so that a resumed
    run stops where the uninterrupted one does; a stop that did end the run is not held, and a resume with a
    larger budget goes on."""
    state, loop = trainer.state, trainer._loop
    if not state.should_stop or (state.current_epoch >= loop.min_epochs and state.global_step >= loop.min_steps):
        return None
    return state.stop_reason or "a stop was requested"


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
            if self.epoch_start is not None:  # torch, python, numpy and the loader's generators
                set_rng_states(self.epoch_start, loader)
            iterator = fast_forward(loader, self.epoch_batches)
            _warn_if_workers_reseed(loader, self.epoch_batches)
        trainer.state.epoch_rng = self.epoch_start  # a later save in this epoch records the same start
        if self.rng is not None:
            set_rng_states(self.rng, loader)
        if self.grads:
            for name, param in trainer.module.named_parameters():
                if name in self.grads:
                    param.grad = self.grads[name].to(device=param.device, dtype=param.dtype)
        return iterator


def _warn_if_workers_reseed(loader: Any, skipped: int) -> None:
    """A map-style loader with worker processes skips inside its sampler, so the rest of the epoch is loaded by
    fresh workers, each handed other batches than in the original run: the sample order is exact, random
    draws inside the workers (augmentations in ``__getitem__``) are not. Iterable datasets are replayed, so
    their workers' draws are exact."""
    loaders = loader.items if isinstance(loader, _data.CombinedLoader) else [loader]
    for item in loaders:
        if (
            skipped
            and isinstance(item, DataLoader)
            and item.num_workers > 0
            and not isinstance(item.dataset, IterableDataset)
        ):
            logger.warning(
                "resuming after {} batches of the epoch: the training loader's {} worker processes start afresh "
                "for the rest of it, so random draws inside them (augmentations in the Dataset's __getitem__) "
                "differ from the original run's; the order of the samples is exact. Save checkpoints at epoch "
                "boundaries, or draw augmentations from a generator seeded per sample, where that matters",
                skipped,
                item.num_workers,
            )
            return


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
    if loops.get("held_stop"):  # requested before the save, held back by min_epochs/min_steps: it still holds
        state.should_stop, state.stop_reason = True, str(loops["held_stop"])
    mine = this_rank(trainer, checkpoint, url)
    data = mine["data"] or {}
    point = ResumePoint(
        epoch_batches=done,
        validated=bool(loops.get("validated")),
        epoch_loop_done=state.epoch_loop_done,
        rng=mine["rng"],
        epoch_start=data.get("epoch_start"),
        loader_state=data.get("loader"),
        grads=mine["accumulated_grads"] or {},
    )
    if loops.get("inexact"):
        logger.warning("resuming from {}, which is not an exact continuation: {}", url, loops["inexact"])
    _warn_persistent_workers(trainer, point, url)
    _warn_restarted_loaders(trainer, point, url)
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


def _train_loaders(trainer: Trainer) -> list[tuple[str, Any]]:
    """The training loaders, each with how to name it in a message."""
    loader = trainer.train_dataloader
    if not isinstance(loader, _data.CombinedLoader):
        return [("the training loader", loader)]
    keys = list(loader.loaders) if isinstance(loader.loaders, dict) else list(range(len(loader.items)))
    return [(f"the training loader {key!r}", item) for key, item in zip(keys, loader.items, strict=True)]


def _warn_persistent_workers(trainer: Trainer, point: ResumePoint, url: str) -> None:
    """``persistent_workers=True``: the original run's worker processes were started (and seeded) once, when the
    loader was first iterated, and kept for every later epoch; a resume after that point starts new ones, seeded
    now, and draws their seed from the RNG where the original run drew nothing."""
    if trainer.state.current_epoch == 0 and not point.epoch_batches:
        return  # the run's first iteration of the loader is still ahead: nothing differs
    for name, item in _train_loaders(trainer):
        if isinstance(item, DataLoader) and item.num_workers > 0 and item.persistent_workers:
            logger.warning(
                "resuming from {}: {} has persistent_workers=True, so in the original run its {} worker processes "
                "were started and seeded once, when it was first iterated, and kept for every epoch after; the "
                "resumed run starts new ones now, seeded from the RNG where the original run drew nothing, so "
                "random draws inside the workers (augmentations, per-worker shuffling or sharding) and after them "
                "differ from the original run's. For exact resumes set persistent_workers=False",
                url,
                name,
                item.num_workers,
            )


def _warn_restarted_loaders(trainer: Trainer, point: ResumePoint, url: str) -> None:
    """Several train loaders in ``max_size_cycle`` mode, resumed in the middle of an epoch in which a shorter one
    had already been restarted: the replay of the epoch's first batches restarts it from the RNG states as the
    replay leaves them, not as the training steps had left them in the original run. Exact for a loader whose
    order draws on no global RNG (sequential, a generator or RNG objects of its own, a ``DistributedSampler``)."""
    loader = trainer.train_dataloader
    done = point.epoch_batches
    if not isinstance(loader, _data.CombinedLoader) or loader.mode != "max_size_cycle" or not point.mid_epoch:
        return
    if point.loader_state is not None and _has_own_state(loader):
        return  # it restores itself, restarts included
    for name, item in _train_loaders(trainer):
        length = _data.loader_len(item)
        if length is not None and length < done and _order_from_global_rng(item):
            logger.warning(
                "resuming from {} after {} batches of an epoch of several training loaders (max_size_cycle): {} "
                "has {} batches, so it had been restarted by then, drawing its new order from the global RNG while "
                "the training steps were drawing from it too; the resume replays the epoch's first batches without "
                "those steps, so the rest of the epoch differs from the original run. Give that loader a generator "
                "of its own (DataLoader(..., generator=torch.Generator().manual_seed(s))), use mode='min_size', or "
                "save at epoch boundaries",
                url,
                done,
                name,
                length,
            )


def _order_from_global_rng(loader: Any) -> bool:
    """Whether a loader's order may come from a global RNG (python's, numpy's or torch's): anything but a
    map-style ``DataLoader`` with a sequential or distributed sampler, or one drawing from generators or RNG
    objects of its own."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return True
    inner = getattr(loader.batch_sampler, "sampler", None)
    sampler = inner if inner is not None else loader.sampler
    if isinstance(sampler, (SequentialSampler, DistributedSampler)):
        return False
    return not (loader_generators(loader) or loader_rng_objects(loader))


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
