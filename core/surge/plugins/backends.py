"""The provider interfaces: :class:`Accelerator`, :class:`Strategy` and :class:`Precision`.

Plugins subclass these and register them by name (``surge.Plugin(kind="provider", provides=...)``).
The core ships only the ``32-true`` precision; accelerators and strategies come from plugins
(the first-party device plugin provides ``cpu``, ``cuda``, ``mps`` and ``single_device``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any, ClassVar

import torch
from torch import nn

from surge.checkpoint import FileCheckpointIO
from surge.errors import SurgeError
from surge.events.protocols import CheckpointIO

__all__ = ["Accelerator", "Strategy", "Precision", "move_to_device"]


class Accelerator:
    """One kind of device. Subclasses set ``name`` and ``device_type`` and override what differs.

    The API a provider implements (docs/plugins.md, "Accelerators"): ``is_available()`` (a class method: whether
    this machine has the device; ``accelerator="name"`` refuses an unavailable one), ``device_count()``,
    ``parse_devices(devices)`` (the Trainer's ``devices`` as indices, with an error saying what exists),
    ``device(index)``, ``setup_device(device)`` (make it current, once per run, in the strategy's
    ``setup_environment``) and ``teardown()``. It is built with no arguments; settings come through
    ``configure(settings)`` when its plugin declares a model. Like any provider object it is a subscriber of the
    run's bus: a ``@surge.hookimpl`` handler reads the run (``event.trainer.run_dir``, the run directory) there."""

    name: ClassVar[str] = ""
    device_type: ClassVar[str] = ""
    auto_priority: ClassVar[int | None] = None
    """How ``accelerator="auto"`` ranks this accelerator among the available ones: the highest wins (surge-devices:
    ``cpu`` 0, ``mps`` 10, ``cuda`` 20; surge-tpu: ``tpu`` 30). ``None`` (the default): never chosen by ``auto``, so
    installing an accelerator never changes what ``auto`` means unless it says so. Only a value set in the class's own
    body counts (a subclass of another accelerator inherits none), and two available ones at the top with one value
    are an error naming both."""

    inference_mode_ok: ClassVar[bool] = True
    """Whether evaluation on this device may run under ``torch.inference_mode``; False (XLA, which has no
    inference tensors) makes evaluation run under ``torch.no_grad`` whatever ``Trainer(inference_mode=...)``."""

    @classmethod
    def is_available(cls) -> bool:
        raise NotImplementedError

    @classmethod
    def device_count(cls) -> int:
        return 1

    def parse_devices(self, devices: int | str | Sequence[int]) -> list[int]:
        """Turn the Trainer's ``devices`` into device indices, with an error that says what exists."""
        count, given = self.device_count(), devices
        if devices == "auto":
            return [0]
        if isinstance(devices, str):  # "2", "-1", "0,2" (and "1," for the index list [1])
            try:
                devices = [int(part) for part in devices.split(",") if part.strip()] if "," in devices else int(devices)
            except ValueError:
                raise ValueError(f"devices={given!r} is not 'auto', a count or a comma-separated index list") from None
        if devices == -1:
            return list(range(count))
        indices = list(range(devices)) if isinstance(devices, int) else list(devices)
        if not indices:
            raise ValueError(
                f"devices={given!r} selects no {self.name} device; pass 'auto', a count of at least 1, -1 for all "
                "of them, or a list of indices such as [0]"
            )
        if len(set(indices)) != len(indices):
            raise ValueError(f"devices={given!r} names a device twice; list each index once")
        bad = [i for i in indices if not 0 <= i < count]
        if bad:
            raise ValueError(
                f"devices={given!r} asks for {self.name} device(s) {bad}, but {count} "
                f"{'is' if count == 1 else 'are'} available (indices 0..{count - 1})"
            )
        return indices

    def device(self, index: int) -> torch.device:
        return torch.device(self.device_type, index) if self.device_type != "cpu" else torch.device("cpu")

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current for this process (for example ``torch.cuda.set_device``)."""

    def teardown(self) -> None:
        pass


class Precision:
    """Numerical precision: autocast, module and batch conversion, backward and optimizer step.

    The base class is ``32-true`` (no autocast, no scaler). A precision plugin adds the others.
    """

    name: ClassVar[str] = "32-true"
    aliases: ClassVar[tuple[str, ...]] = ("32", "32-true", "fp32")
    last_step_skipped: bool = False
    """Set by :meth:`optimizer_step` when it did not update the weights (a gradient scaler found inf/NaN):
    per-step learning-rate schedulers then do not step either, as in Lightning."""

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    def convert_input(self, batch: Any) -> Any:
        return batch

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        return _NO_AUTOCAST  # reusable and stateless: no object built per step

    def backward(self, loss: torch.Tensor, backward_fn: Callable[[torch.Tensor], None] | None = None) -> None:
        """Compute the gradients of ``loss``. ``backward_fn``, when given, does the backward pass itself (it is
        the Module's overridden ``backward``, or ``manual_backward``'s extra arguments): a precision that scales
        the loss passes the scaled loss to it instead of calling ``.backward()``."""
        if backward_fn is None:
            loss.backward()
        else:
            backward_fn(loss)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Make gradients true-scale before clipping (a scaler divides here)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Update the weights. ``closure``, when given, computes the gradients and must run before the update:
        the base class passes it to ``optimizer.step`` (which calls it, as ``LBFGS`` does, several times); a
        precision that cannot do that (a gradient scaler) calls it first, once."""
        return optimizer.step(closure) if closure is not None else optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class Strategy:
    """How the model, data and collectives are laid over devices and processes.

    The base class is a single process on one device; distributed strategies override the collectives
    (:class:`surge.ProcessGroupStrategy` implements them on ``torch.distributed``).
    """

    name: ClassVar[str] = ""
    inference_mode_ok: ClassVar[bool] = True
    """Whether evaluation may run under ``torch.inference_mode`` (``Trainer(inference_mode=True)``); a strategy
    whose evaluation creates tensors that training reuses later (a sharding strategy's gathered parameters,
    XLA's graphs) says False, and evaluation then runs under ``torch.no_grad``."""
    agreement_interval: int = 16
    """With several processes, how many training batches apart the loop agrees on a stop, a Ctrl-C or a
    checkpoint request seen on one rank (one small all-reduce, overlapping the next batch); it also agrees, and
    waits for the answer, after every validation and at every epoch's end. A decision taken on one rank takes
    effect on every rank at the same batch, at most ``agreement_interval + 1`` batches later. Set it on the
    strategy object (``1``: after every batch, as a step that must react at once would want)."""

    def __init__(self, accelerator: Accelerator, device_indices: Sequence[int], num_nodes: int = 1) -> None:
        self.accelerator = accelerator
        self.device_indices = list(device_indices)
        self.num_nodes = num_nodes
        self.root_device = accelerator.device(self.device_indices[0])

    # process topology (Lightning names)
    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    def setup_environment(self) -> None:
        """Join or create the process group, make the device current. Runs once per entry point."""
        self.accelerator.setup_device(self.root_device)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move the module to its device and return it: the returned object becomes ``trainer.module`` and
        must be the user's Module itself (moved or converted in place). A strategy that wraps the model
        (DistributedDataParallel) keeps the wrapper and hands it to the loop via :meth:`wrap_training_step`."""
        return module.to(self.root_device)

    def wrap_training_step(self, module: nn.Module) -> Callable[..., Any]:
        """The callable the training loop calls as ``training_step(batch, batch_idx)``, looked up once per
        epoch. A wrapping strategy returns its wrapper, whose ``forward`` calls ``module.training_step``
        (DDP synchronises gradients only for a forward that went through it)."""
        return module.training_step  # type: ignore[return-value]

    def accumulation_context(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """Wraps the forward and backward of one training micro-batch when ``accumulate_grad_batches > 1``;
        ``sync`` is False for micro-batches whose gradients are only accumulated (an optimizer step does not
        follow), where a distributed strategy may skip its gradient synchronisation (DDP's ``no_sync``)."""
        return _NO_AUTOCAST

    def batch_to_device(self, batch: Any) -> Any:
        return move_to_device(batch, self.root_device)

    def process_dataloader(self, loader: Any, stage: str) -> Any:
        """Adapt a loader to the process layout (a distributed strategy injects its sampler)."""
        return loader

    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Reduce across processes; identity on a single process."""
        return tensor

    def reduce_async(self, tensor: torch.Tensor, op: str = "mean") -> Callable[[], torch.Tensor]:
        """Start :meth:`reduce` and return a function that waits for its result, so that the reduction can
        overlap other work (the loop's step-boundary agreement). The base class reduces at once."""
        result = self.reduce(tensor, op)
        return lambda: result

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` stacked along a new first dimension in rank order, shape
        ``(world_size, *tensor.shape)``; the base class has one process. :class:`surge.ProcessGroupStrategy`
        gathers over its process group."""
        if self.world_size > 1:
            raise SurgeError(
                f"strategy '{self.name or type(self).__qualname__}' runs {self.world_size} processes but does not "
                "implement all_gather; override Strategy.all_gather, or subclass surge.ProcessGroupStrategy"
            )
        return tensor.detach().unsqueeze(0)

    def barrier(self, name: str | None = None) -> None:
        pass

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every process's ``obj`` (picklable), in rank order: checkpoints gather each rank's RNG states and data
        position with it. The base class returns ``[obj]``, this process's alone: a strategy of several processes
        that does not override it (:class:`surge.ProcessGroupStrategy` does) has checkpoints record the state of
        the process that writes them, which every process then resumes from."""
        return [obj]

    @staticmethod
    def with_sampler(loader: Any, sampler: Any) -> Any:
        """A copy of the torch ``DataLoader`` ``loader`` drawing from ``sampler`` (shuffle off; batch size,
        workers, collate function and the rest kept), for :meth:`process_dataloader`."""
        from surge._data import with_sampler

        return with_sampler(loader, sampler)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Agree on a decision across processes (a stop decided on one rank reaches all)."""
        return decision

    # checkpoints: what the module and optimizer states are, and how a checkpoint reaches storage
    async_checkpoint_save: ClassVar[bool] = True
    """Whether a checkpoint dict may be written by a background thread of global rank zero alone (the
    checkpoint plugin's ``async_save``). False when every process writes its own shard."""

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The ``state_dict`` entry of a checkpoint. A sharding strategy returns this process's shards."""
        return module.state_dict()

    def load_module_state_dict(self, module: nn.Module, state: Mapping[str, Any]) -> None:
        module.load_state_dict(state)

    def optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        optimizer.load_state_dict(dict(state))

    checkpoint_io: CheckpointIO = FileCheckpointIO()
    """What writes, reads and removes checkpoint files (:class:`surge.events.protocols.CheckpointIO`): the
    Trainer's ``checkpoint_io=`` (or one passed in ``plugins=``) when given, else crash-safe files
    (:class:`surge.checkpoint.FileCheckpointIO`)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], url: str) -> None:
        """Write ``checkpoint`` to ``url``; called on every process. The base class writes one file through
        :attr:`checkpoint_io` on global rank zero; a sharding strategy has every process write its shards."""
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, url)

    def load_checkpoint(
        self, url: str, module: nn.Module, optimizers: Sequence[torch.optim.Optimizer], *, trusted: bool = False
    ) -> dict[str, Any]:
        """Read the checkpoint at ``url`` on every process through :attr:`checkpoint_io`; a sharding strategy
        reads its shards into the layout of ``module`` and ``optimizers``."""
        return self.checkpoint_io.load_checkpoint(url, trusted=trusted)

    def remove_checkpoint(self, url: str) -> None:
        """Delete the checkpoint at ``url`` through :attr:`checkpoint_io`, on global rank zero (where the
        checkpoint plugin removes the files that left its top k)."""
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(url)

    def teardown(self) -> None:
        self.accelerator.teardown()


_NO_AUTOCAST = contextlib.nullcontext()


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor inside lists, tuples, named tuples, dicts and dataclasses to ``device``."""
    if isinstance(batch, torch.Tensor):
        # comparing devices costs a fifth of a no-op `.to()`, which a CPU run would pay on every tensor
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(item, device) for item in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*moved)
        return type(batch)(moved) if not isinstance(batch, list) else moved
    if isinstance(batch, Mapping):
        return type(batch)({key: move_to_device(value, device) for key, value in batch.items()})  # type: ignore[call-arg]
    if is_dataclass(batch) and not isinstance(batch, type):
        return replace(
            batch, **{f.name: move_to_device(getattr(batch, f.name), device) for f in fields(batch) if f.init}
        )
    return batch


def api_names(obj: object) -> frozenset[str]:
    """The provider API names ``obj`` has from Surge's base classes (``teardown``, ``setup``, ...): methods of
    those names are the provider's API, never taken for event handlers missing their marker."""
    return frozenset(n for base in (Accelerator, Strategy, Precision) if isinstance(obj, base) for n in vars(base))
