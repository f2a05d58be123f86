"""Single-device accelerators (``cpu``, ``cuda``, ``mps``, and Lightning's ``gpu``) and the ``single_device``
strategy.

Written against the public API only (``surge.Plugin``, ``surge.Accelerator``, ``surge.Strategy``), exactly
as a third-party backend would be.
"""

from __future__ import annotations

from typing import ClassVar

import surge
import torch
from pydantic import BaseModel, ConfigDict, Field
from surge.errors import ProviderError

__all__ = [
    "CPUAccelerator",
    "CUDAAccelerator",
    "DevicesConfig",
    "MPSAccelerator",
    "SingleDeviceStrategy",
    "gpu_accelerator",
    "plugin",
]


class DevicesConfig(BaseModel):
    """The plugin's settings (``plugins={"devices": {...}}``, a run config's ``plugins: devices:``, or
    ``SURGE_TRAINER_PLUGINS``), given to each object it provides."""

    model_config = ConfigDict(extra="forbid")

    cpu_threads: int | None = Field(None, ge=1)
    """Intra-op threads torch uses on the CPU during a run (``torch.set_num_threads``), put back afterwards;
    ``None``: torch's own choice."""


class _Configured:
    """What every object of this plugin has: its settings, given by the core when it is built."""

    settings: DevicesConfig = DevicesConfig()

    def configure(self, settings: DevicesConfig) -> None:
        self.settings = settings


class CPUAccelerator(_Configured, surge.Accelerator):
    name: ClassVar[str] = "cpu"
    device_type: ClassVar[str] = "cpu"
    auto_priority: ClassVar[int] = 0
    _threads_before: int | None = None

    def setup_device(self, device: torch.device) -> None:
        threads = self.settings.cpu_threads
        if threads is not None and self._threads_before is None:
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(threads)

    def teardown(self) -> None:
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

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


class CUDAAccelerator(_Configured, surge.Accelerator):
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

    def teardown(self) -> None:
        torch.cuda.empty_cache()


class MPSAccelerator(_Configured, surge.Accelerator):
    name: ClassVar[str] = "mps"
    device_type: ClassVar[str] = "mps"
    auto_priority: ClassVar[int] = 10

    @classmethod
    def is_available(cls) -> bool:
        backend = getattr(torch.backends, "mps", None)
        return bool(backend and backend.is_available())

    def device(self, index: int) -> torch.device:
        return torch.device("mps")


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


class SingleDeviceStrategy(_Configured, surge.Strategy):
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
    config=DevicesConfig,
    description="single-device accelerators cpu, cuda, mps (and gpu: cuda or mps) and the single_device strategy",
)
