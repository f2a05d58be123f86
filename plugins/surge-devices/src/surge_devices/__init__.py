"""Single-device accelerators (``cpu``, ``cuda``, ``mps``, and Lightning's ``gpu``) and the ``single_device``
strategy.

Written against the public API only (``surge.Plugin``, ``surge.Accelerator``, ``surge.Strategy``), exactly
as a third-party backend would be.
"""

from __future__ import annotations

from typing import ClassVar

import surge
import torch
from surge.errors import ProviderError

__all__ = ["CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "SingleDeviceStrategy", "gpu_accelerator", "plugin"]


class CPUAccelerator(surge.Accelerator):
    name: ClassVar[str] = "cpu"
    device_type: ClassVar[str] = "cpu"
    auto_priority: ClassVar[int] = 0

    @classmethod
    def is_available(cls) -> bool:
        return True

    def parse_devices(self, devices: int | str | list[int]) -> list[int]:
        # One process drives the CPU; more CPU processes are a distributed strategy's business.
        if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
            devices = int(devices)  # "2" means what 2 means
        if devices in ("auto", 1, -1, [0]):
            return [0]
        if isinstance(devices, int) and devices > 1:
            return list(range(devices))  # the strategy decides whether it can use several processes
        return super().parse_devices(devices)

    @classmethod
    def device_count(cls) -> int:
        return 1


class CUDAAccelerator(surge.Accelerator):
    name: ClassVar[str] = "cuda"
    device_type: ClassVar[str] = "cuda"
    auto_priority: ClassVar[int] = 20

    @classmethod
    def is_available(cls) -> bool:
        return torch.cuda.is_available()

    @classmethod
    def device_count(cls) -> int:
        return torch.cuda.device_count()

    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def teardown(self) -> None:
        torch.cuda.empty_cache()


class MPSAccelerator(surge.Accelerator):
    name: ClassVar[str] = "mps"
    device_type: ClassVar[str] = "mps"
    auto_priority: ClassVar[int] = 10

    @classmethod
    def is_available(cls) -> bool:
        backend = getattr(torch.backends, "mps", None)
        return bool(backend and backend.is_available())

    def device(self, index: int) -> torch.device:
        return torch.device("mps")

    def synchronize(self, device: torch.device) -> None:
        torch.mps.synchronize()


def gpu_accelerator() -> surge.Accelerator:
    """Lightning's ``accelerator="gpu"``: the machine's GPU backend, chosen as Lightning chooses it (MPS where
    it is available, else CUDA). ``devices`` then means what it means for that backend: a count, a list of
    indices, ``"0,1"``, ``-1`` for all of them, ``"auto"`` for one."""
    for backend in (MPSAccelerator, CUDAAccelerator):
        if backend.is_available():
            return backend()
    cuda = torch.version.cuda
    build = f"built with CUDA {cuda}" if cuda else "a CPU-only build, without CUDA"
    raise ProviderError(
        "trainer.accelerator: 'gpu' (plugin 'devices' from surge-devices) found no GPU on this machine: "
        f"torch.cuda.is_available() is False (torch {torch.__version__}, {build}) and MPS is not available. "
        "Use accelerator='auto' (the best device present) or 'cpu', or install a torch build for your GPU"
    )


class SingleDeviceStrategy(surge.Strategy):
    """One process, one device: the model and each batch are moved there; collectives are identities."""

    name: ClassVar[str] = "single_device"

    def __init__(self, accelerator: surge.Accelerator, device_indices: list[int], num_nodes: int = 1) -> None:
        if len(device_indices) != 1 or num_nodes != 1:
            raise surge.ConfigError(
                [
                    (
                        "trainer.devices",
                        f"strategy 'single_device' uses one device, got {device_indices} on "
                        f"{num_nodes} node(s); pass devices=1 or a distributed strategy (`pip install surge-ddp`)",
                    )
                ]
            )
        super().__init__(accelerator, device_indices, num_nodes)


plugin = surge.Plugin(
    name="devices",
    kind="provider",
    provides={
        # "gpu" is a function, not a class: "auto" chooses among the classes only
        "accelerator": {"cpu": CPUAccelerator, "cuda": CUDAAccelerator, "mps": MPSAccelerator, "gpu": gpu_accelerator},
        "strategy": {"single_device": SingleDeviceStrategy},
    },
    description="single-device accelerators cpu, cuda, mps (and gpu: cuda or mps) and the single_device strategy",
)
