"""The ``ddp`` strategy: DistributedDataParallel on ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

One process per device. The launcher, process group, samplers and collectives are those of the core's
:class:`surge.ProcessGroupStrategy`: under ``torchrun`` or ``srun`` each process joins the process group its
launcher describes; a plain ``python script.py`` with several devices relaunches itself under torch's elastic
launcher (``python -m torch.distributed.run --standalone``) and leaves with the launched job's exit status.

The user's Module stays ``trainer.module``; the DDP wrapper is kept here and the training loop calls it
(:meth:`DDPStrategy.wrap_training_step`), its ``forward`` redirecting to ``module.training_step``, so that
gradients are averaged across processes during ``backward``.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import surge
import torch.distributed as dist
from surge import events as ev
from surge.plugins.distributed import Topology, detect, first_host
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DDPStrategy", "Topology", "detect", "first_host", "plugin", "RELAUNCH_ENV"]

RELAUNCH_ENV = "SURGE_DDP_RELAUNCH"
"""``0`` turns the self-relaunch off (an un-launched process with several devices then raises instead)."""


class _TrainingStep(nn.Module):
    """What DDP wraps: its ``forward`` is the Module's ``training_step``, so the loop's call goes through
    DDP (which prepares the gradient all-reduce) while ``trainer.module`` stays the user's Module."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.training_step(*args, **kwargs)  # type: ignore[operator]


class DDPStrategy(surge.ProcessGroupStrategy):
    """DistributedDataParallel, one process per device.

    Settings (keywords, or ``SURGE_DDP_<NAME>`` environment variables for the by-name ``strategy="ddp"``):
    ``find_unused_parameters``, ``static_graph``, and those of :class:`surge.ProcessGroupStrategy`: ``timeout``
    (default 5 minutes), ``process_group_backend`` (``SURGE_DDP_BACKEND``; default ``nccl`` on CUDA, ``gloo``
    otherwise), ``sync_batchnorm``. Extra keywords go to ``DistributedDataParallel``.
    """

    name: ClassVar[str] = "ddp"

    def __init__(
        self,
        accelerator: surge.Accelerator,
        device_indices: Sequence[int],
        num_nodes: int = 1,
        *,
        timeout: float | datetime.timedelta | None = None,
        find_unused_parameters: bool | None = None,
        static_graph: bool | None = None,
        sync_batchnorm: bool | None = None,
        process_group_backend: str | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__(
            accelerator,
            device_indices,
            num_nodes,
            timeout=timeout,
            process_group_backend=process_group_backend,
            sync_batchnorm=sync_batchnorm,
        )
        self.find_unused_parameters = (
            self.env_flag("FIND_UNUSED_PARAMETERS", False) if find_unused_parameters is None else find_unused_parameters
        )
        self.static_graph = self.env_flag("STATIC_GRAPH", False) if static_graph is None else static_graph
        self.ddp_kwargs = ddp_kwargs
        self._ddp: DistributedDataParallel | None = None
        self._unsynced = False  # gradients accumulated under no_sync and not yet all-reduced

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = super().setup_module(module)  # on its device, BatchNorm synchronised if asked
        if self.world_size == 1:
            self._ddp = None
            return module
        cuda = self.root_device.type == "cuda"
        self._ddp = DistributedDataParallel(
            _TrainingStep(module),
            device_ids=[self.root_device] if cuda else None,
            find_unused_parameters=self.find_unused_parameters,
            static_graph=self.static_graph,
            **self.ddp_kwargs,
        )
        return module  # trainer.module stays the user's Module

    def wrap_training_step(self, module: nn.Module) -> Callable[..., Any]:
        if self._ddp is None or self._ddp.module.module is not module:
            return module.training_step  # type: ignore[return-value]
        return self._ddp

    def accumulation_context(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        self._unsynced = not sync
        if sync or self._ddp is None:
            return contextlib.nullcontext()
        return self._ddp.no_sync()

    def teardown(self) -> None:
        self._ddp = None
        super().teardown()

    # -- events ---------------------------------------------------------------------------------------
    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        """A step after micro-batches that all skipped the synchronisation (a stop inside an accumulation
        window): average the gradients here, so every rank takes the same step."""
        if not self._unsynced or self._ddp is None:
            return
        self._unsynced = False
        for param in self._ddp.parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad)
                param.grad /= self.world_size


plugin = surge.Plugin(
    name="ddp",
    kind="provider",
    provides={"strategy": {"ddp": DDPStrategy}},
    description="DistributedDataParallel on torch.distributed (gloo on CPU, NCCL on CUDA), torchrun/SLURM/self-relaunch",
)
