"""The XLA accelerator (``accelerator="tpu"``, or ``"xla"``) and the ``xla`` strategy, on torch_xla.

Written against the public API only (``surge.Plugin``, ``surge.Accelerator``, ``surge.Strategy``,
``surge.hookimpl``), exactly as a third-party backend would be.

torch_xla is imported lazily, the first time an XLA device is actually used: discovering this plugin, listing
it, and ``accelerator="auto"`` on a machine without torch_xla cost one ``importlib.util.find_spec``.

Where XLA runs the recorded graph: XLA tensors are lazy, so the accelerator cuts the graph with
``torch_xla.sync()`` (``xm.mark_step()``) in ``after_optimizer_step`` - the parameters and the loss of the step
are then real before anything reads them - and at the end of every batch (gradient accumulation, manual
optimization, validation, test, predict), so each graph is one step and compiles once.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from glob import glob
from typing import Any, ClassVar

import surge
import torch
from surge.errors import ProviderError

__all__ = ["TPUAccelerator", "XLAAccelerator", "XLAStrategy", "plugin", "torch_xla_installed"]

_INSTALL = "pip install 'surge-tpu[xla]' (torch_xla needs the torch release it was built for: torch-xla 2.9.0 with torch 2.9.x)"


def torch_xla_installed() -> bool:
    """Whether torch_xla can be imported, without importing it."""
    return importlib.util.find_spec("torch_xla") is not None


def _xla() -> Any:
    """``torch_xla`` and ``torch_xla.core.xla_model``, imported on first use."""
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
    except ImportError as exc:  # typically a torch_xla built for another torch release (undefined symbols)
        raise ProviderError(
            f"surge-tpu: torch_xla is installed but fails to import with torch {torch.__version__}: {exc}. "
            f"Install the pair it was built for: {_INSTALL}"
        ) from exc
    return torch_xla, xm


def sync() -> None:
    """Run the pending XLA graph (``torch_xla.sync()``; ``xm.mark_step()`` on releases without it)."""
    torch_xla, xm = _xla()
    (getattr(torch_xla, "sync", None) or xm.mark_step)()


def _runtime() -> Any:
    _xla()  # the clear error when torch_xla cannot be imported
    import torch_xla.runtime as xr

    return xr


class XLAAccelerator(surge.Accelerator):
    """An XLA device: a TPU core, or XLA on the host CPU with ``PJRT_DEVICE=CPU`` (how this is tested)."""

    name: ClassVar[str] = "xla"
    device_type: ClassVar[str] = "xla"
    auto_priority: ClassVar[int] = -1  # the same device as "tpu": auto picks it under that name
    # torch_xla has no inference tensors (every evaluation step under torch.inference_mode() fails with "Cannot
    # set version_counter for inference tensor"): the core evaluates under torch.no_grad() on this device.
    inference_mode_ok: ClassVar[bool] = False

    @classmethod
    def is_available(cls) -> bool:
        # Cheap on purpose (`accelerator="auto"` asks every accelerator): torch_xla is importable and a PJRT
        # device is configured (PJRT_DEVICE) or TPU chips are visible (/dev/accel* up to v4, /dev/vfio from v5).
        if not torch_xla_installed():
            return False
        return bool(os.environ.get("PJRT_DEVICE") or glob("/dev/accel*") or glob("/dev/vfio/[0-9]*"))

    def __init__(self) -> None:
        _xla()  # chosen, so import torch_xla now: a broken install fails here with its own error

    @classmethod
    def device_count(cls) -> int:
        return int(_runtime().addressable_device_count())

    def device(self, index: int) -> torch.device:
        torch_xla, xm = _xla()
        make = getattr(torch_xla, "device", None)
        return make(index) if make is not None else xm.xla_device(index)

    # Graph cuts (see the module docstring). The accelerator does them, not the strategy, so that any strategy
    # on an XLA device (also `single_device`, which `strategy="auto"` picks) gets them.
    @surge.hookimpl
    def after_optimizer_step(self, event: surge.events.AfterOptimizerStep) -> None:
        sync()

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        sync()  # after a step the graph holds only the logged values; between accumulated batches, the gradients

    @surge.hookimpl
    def validation_batch_end(self, event: surge.events.ValidationBatchEnd) -> None:
        sync()

    @surge.hookimpl
    def test_batch_end(self, event: surge.events.TestBatchEnd) -> None:
        sync()

    @surge.hookimpl
    def predict_batch_end(self, event: surge.events.PredictBatchEnd) -> None:
        sync()


class TPUAccelerator(XLAAccelerator):
    """``accelerator="tpu"``: the XLA accelerator under the name users look for; ``auto`` prefers it."""

    name: ClassVar[str] = "tpu"
    auto_priority: ClassVar[int] = 30  # above cuda (20) and mps (10), as a TPU VM has no other accelerator


class XLAStrategy(surge.Strategy):
    """One process per XLA device.

    Alone (``devices=1``) it is a single device. Inside processes started by ``torch_xla.launch(fn)`` (each
    builds its own Trainer with ``devices=1``) it reads rank and world size from the XLA runtime, shards the
    data with a ``DistributedSampler``, all-reduces gradients before each optimizer step (what
    ``xm.optimizer_step`` does before ``optimizer.step()``), and reduces logged values with ``xm.all_reduce``.
    """

    name: ClassVar[str] = "xla"

    def __init__(self, accelerator: surge.Accelerator, device_indices: Sequence[int], num_nodes: int = 1) -> None:
        if not isinstance(accelerator, XLAAccelerator):
            raise surge.ConfigError(
                [
                    (
                        "trainer.strategy",
                        f"strategy 'xla' runs on an XLA device, but accelerator is '{accelerator.name}'; "
                        "pass accelerator='tpu' (or 'xla')",
                    )
                ]
            )
        if len(device_indices) != 1 or num_nodes != 1:
            raise surge.ConfigError(
                [
                    (
                        "trainer.devices",
                        f"strategy 'xla' drives one XLA device per process, got devices {list(device_indices)} on "
                        f"{num_nodes} node(s); pass devices=1 and start one process per device with "
                        "torch_xla.launch(fn), each building its own Trainer",
                    )
                ]
            )
        super().__init__(accelerator, device_indices, num_nodes)
        xr = _runtime()  # the process layout torch_xla.launch set up (one process: rank 0 of 1)
        self._global_rank, self._local_rank = int(xr.global_ordinal()), int(xr.local_ordinal())
        self._world_size = int(xr.world_size())

    @property
    def global_rank(self) -> int:
        return self._global_rank

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def process_dataloader(self, loader: Any, stage: str) -> Any:
        if self.world_size == 1 or stage == "predict" or not isinstance(loader, torch.utils.data.DataLoader):
            return loader
        from torch.utils.data import DataLoader, DistributedSampler

        if isinstance(loader.sampler, DistributedSampler) or loader.batch_sampler is None:
            return loader
        shuffle = isinstance(loader.sampler, torch.utils.data.RandomSampler)
        sampler = DistributedSampler(
            loader.dataset, num_replicas=self.world_size, rank=self.global_rank, shuffle=shuffle
        )
        return DataLoader(
            loader.dataset,
            batch_size=loader.batch_size,
            sampler=sampler,
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory,
            drop_last=loader.drop_last,
        )

    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        xm = _xla()[1]
        if op not in ("mean", "sum", "max", "min"):
            raise ValueError(f"strategy 'xla' reduces with 'mean', 'sum', 'max' or 'min', got {op!r}")
        reduce_type = {"mean": xm.REDUCE_SUM, "sum": xm.REDUCE_SUM, "max": xm.REDUCE_MAX, "min": xm.REDUCE_MIN}[op]
        out = xm.all_reduce(reduce_type, tensor.to(self.root_device))
        return out / self.world_size if op == "mean" else out

    def barrier(self, name: str | None = None) -> None:
        if self.world_size > 1:
            _xla()[1].rendezvous(name or "surge-barrier")

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self.world_size == 1:
            return obj
        import pickle

        xm = _xla()[1]
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        # every rank needs the length before it can take part in the payload's collective
        size = torch.tensor([data.numel() if self.global_rank == src else 0], device=self.root_device)
        size = int(xm.all_reduce(xm.REDUCE_SUM, size).item())
        payload = torch.zeros(size, dtype=torch.uint8)
        if self.global_rank == src:
            payload = data
        payload = xm.all_reduce(xm.REDUCE_SUM, payload.to(self.root_device)).cpu()
        return pickle.loads(payload.numpy().tobytes())  # the bytes come from this job's own ranks

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        if self.world_size == 1:
            return decision
        votes = self.reduce(torch.tensor(float(decision), device=self.root_device), "sum").item()
        return votes == self.world_size if all else votes > 0

    @surge.hookimpl
    def before_optimizer_step(self, event: surge.events.BeforeOptimizerStep) -> None:
        if self.world_size > 1:  # before clipping and every other handler that reads the gradients
            _xla()[1].reduce_gradients(event.optimizer)


def _needs_torch_xla(slot: str, name: str) -> Any:
    """The provider declared in place of an XLA class while torch_xla is missing: choosing it raises an error
    that says what to install (the class itself would only be reported as 'not available on this machine')."""

    def refuse(*args: Any) -> Any:
        raise ProviderError(
            f"trainer.{slot}: '{name}' (plugin 'tpu' from surge-tpu) needs torch_xla, which is not installed; "
            f"{_INSTALL}. Without an XLA device use accelerator='auto' or 'cpu'"
        )

    refuse.__name__ = f"{name}_needs_torch_xla"
    return refuse


def _provides() -> dict[str, dict[str, Any]]:
    if torch_xla_installed():
        return {
            "accelerator": {"tpu": TPUAccelerator, "xla": XLAAccelerator},
            "strategy": {"xla": XLAStrategy},
        }
    return {
        "accelerator": {"tpu": _needs_torch_xla("accelerator", "tpu"), "xla": _needs_torch_xla("accelerator", "xla")},
        "strategy": {"xla": _needs_torch_xla("strategy", "xla")},
    }


plugin = surge.Plugin(
    name="tpu",
    kind="provider",
    provides=_provides(),
    description="XLA accelerator tpu (alias xla) and the xla strategy, on torch_xla",
)
