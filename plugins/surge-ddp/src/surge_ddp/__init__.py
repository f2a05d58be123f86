"""The ``ddp`` strategy: DistributedDataParallel on ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

One process per device. Under ``torchrun`` or ``srun`` each process joins the process group its launcher
describes; a plain ``python script.py`` with several devices relaunches itself under torch's elastic launcher
(``python -m torch.distributed.run --standalone``) and leaves with the launched job's exit status.

The user's Module stays ``trainer.module``; the DDP wrapper is kept here and the training loop calls it
(:meth:`DDPStrategy.wrap_training_step`), its ``forward`` redirecting to ``module.training_step``, so that
gradients are averaged across processes during ``backward``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import surge
import torch
import torch.distributed as dist
from loguru import logger
from surge import events as ev
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from surge_ddp._env import RELAUNCH_ENV, Topology, detect, first_host, relaunch

__all__ = ["DDPStrategy", "Topology", "detect", "first_host", "plugin", "RELAUNCH_ENV"]

DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in ("1", "true", "yes", "on")


class _TrainingStep(nn.Module):
    """What DDP wraps: its ``forward`` is the Module's ``training_step``, so the loop's call goes through
    DDP (which prepares the gradient all-reduce) while ``trainer.module`` stays the user's Module."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.training_step(*args, **kwargs)  # type: ignore[operator]


class DDPStrategy(surge.Strategy):
    """DistributedDataParallel, one process per device.

    Settings (keywords, or ``SURGE_DDP_<NAME>`` environment variables for the by-name ``strategy="ddp"``):
    ``timeout`` (seconds or a ``timedelta``; default 5 minutes: a collective waiting longer for a dead peer
    fails instead of hanging), ``find_unused_parameters``, ``static_graph``, ``sync_batchnorm``,
    ``process_group_backend`` (default ``nccl`` on CUDA, ``gloo`` otherwise). Extra keywords go to
    ``DistributedDataParallel``.
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
        super().__init__(accelerator, device_indices, num_nodes)
        if timeout is None:
            timeout = float(os.environ.get("SURGE_DDP_TIMEOUT", DEFAULT_TIMEOUT.total_seconds()))
        self.timeout = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
        self.find_unused_parameters = (
            _env_flag("SURGE_DDP_FIND_UNUSED_PARAMETERS", False)
            if find_unused_parameters is None
            else find_unused_parameters
        )
        self.static_graph = _env_flag("SURGE_DDP_STATIC_GRAPH", False) if static_graph is None else static_graph
        self.sync_batchnorm = _env_flag("SURGE_DDP_SYNC_BATCHNORM", False) if sync_batchnorm is None else sync_batchnorm
        self.ddp_kwargs = ddp_kwargs
        self.use_distributed_sampler = True
        self.topology = detect()
        expected = len(self.device_indices) * num_nodes
        if self.topology.launcher == "none" and expected > 1:
            relaunch(len(self.device_indices), num_nodes)  # leaves with SystemExit once the job is done
        if self.topology.launcher != "none" and self.topology.world_size != expected:
            logger.warning(
                "strategy 'ddp': the launcher started {} processes, the Trainer asks for {} (devices x num_nodes); "
                "the launcher's count is used",
                self.topology.world_size,
                expected,
            )
        if accelerator.device_type != "cpu":
            local = self.topology.local_rank
            if local >= len(self.device_indices):
                raise surge.ConfigError(
                    [
                        (
                            "trainer.devices",
                            f"local rank {local} has no device: devices={self.device_indices} lists "
                            f"{len(self.device_indices)}; start at most that many processes per node",
                        )
                    ]
                )
            self.root_device = accelerator.device(self.device_indices[local])
        self.process_group_backend = (
            process_group_backend
            or os.environ.get("SURGE_DDP_BACKEND")
            or ("nccl" if self.root_device.type == "cuda" else "gloo")
        )
        self._ddp: DistributedDataParallel | None = None
        self._unsynced = False  # gradients accumulated under no_sync and not yet all-reduced

    # -- topology -------------------------------------------------------------------------------------
    @property
    def global_rank(self) -> int:
        return self.topology.global_rank

    @property
    def local_rank(self) -> int:
        return self.topology.local_rank

    @property
    def node_rank(self) -> int:
        return self.topology.node_rank

    @property
    def world_size(self) -> int:
        return self.topology.world_size

    # -- set-up and teardown --------------------------------------------------------------------------
    def setup_environment(self) -> None:
        self.accelerator.setup_device(self.root_device)
        if self.world_size == 1 or dist.is_initialized():
            return
        topo = self.topology
        if topo.launcher == "slurm":  # torchrun sets these itself; srun does not
            os.environ.setdefault("MASTER_ADDR", topo.master_addr or "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(topo.master_port))
        dist.init_process_group(
            self.process_group_backend,
            rank=topo.global_rank,
            world_size=topo.world_size,
            timeout=self.timeout,
            device_id=self.root_device if self.root_device.type == "cuda" else None,
            store=_attempt_store(topo.global_rank, topo.world_size, self.timeout),
        )
        # Destroyed when the process ends, not at each teardown: a fit followed by a test in one program keeps
        # using the group (a second init_process_group under torchrun's shared store can mismatch its peers).
        atexit.register(_destroy_group)
        logger.debug(
            "joined the {} process group as rank {} of {}",
            self.process_group_backend,
            self.global_rank,
            self.world_size,
        )

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = module.to(self.root_device)
        if self.world_size == 1:
            self._ddp = None
            return module
        if self.sync_batchnorm:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)  # converts children in place
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

    # -- data -----------------------------------------------------------------------------------------
    def process_dataloader(self, loader: Any, stage: str) -> Any:
        """Give each process its shard: a ``DistributedSampler`` (shuffled when the original loader shuffles,
        training only) replaces the sampler of a map-style torch ``DataLoader``."""
        if not self.use_distributed_sampler or self.world_size == 1 or not isinstance(loader, DataLoader):
            return loader
        if isinstance(loader.dataset, IterableDataset) or isinstance(loader.sampler, DistributedSampler):
            return loader  # an iterable dataset shards itself; a distributed sampler is already there
        if loader.batch_sampler is not None and loader.batch_size is None:
            logger.warning("strategy 'ddp': a loader with a custom batch_sampler is not sharded; shard it yourself")
            return loader
        shuffle = stage == "fit" and isinstance(loader.sampler, RandomSampler)
        sampler: DistributedSampler[Any] = DistributedSampler(
            loader.dataset,  # type: ignore[arg-type]
            num_replicas=self.world_size,
            rank=self.global_rank,
            shuffle=shuffle,
            seed=int(os.environ.get("SURGE_GLOBAL_SEED", 0)),
            drop_last=False,
        )
        return self.with_sampler(loader, sampler)

    # -- collectives ----------------------------------------------------------------------------------
    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if self.world_size == 1 or not dist.is_initialized():
            return tensor
        if op not in _OPS:
            raise surge.SurgeError(f"strategy 'ddp' reduces with {sorted(_OPS)}, not {op!r}")
        result = tensor.detach().clone()
        if op == "mean" and not result.is_floating_point():
            result = result.float()
        dist.all_reduce(result, op=_OPS[op])
        if op == "mean":
            result /= self.world_size
        return result

    def reduce_async(self, tensor: torch.Tensor, op: str = "mean") -> Callable[[], torch.Tensor]:
        if self.world_size == 1 or not dist.is_initialized():
            return lambda: tensor
        if op not in _OPS:
            raise surge.SurgeError(f"strategy 'ddp' reduces with {sorted(_OPS)}, not {op!r}")
        result = tensor.detach().clone()
        if op == "mean" and not result.is_floating_point():
            result = result.float()
        work = dist.all_reduce(result, op=_OPS[op], async_op=True)

        def wait() -> torch.Tensor:
            work.wait()  # type: ignore[union-attr]
            return result / self.world_size if op == "mean" else result

        return wait

    def barrier(self, name: str | None = None) -> None:
        if self.world_size > 1 and dist.is_initialized():
            if self.process_group_backend == "nccl":
                dist.barrier(device_ids=[self.root_device.index or 0])
            else:
                dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self.world_size == 1 or not dist.is_initialized():
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=src, device=self.root_device)
        return holder[0]

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        if self.world_size == 1 or not dist.is_initialized():
            return decision
        count = self.reduce(torch.tensor(int(decision), device=self.root_device), "sum")
        return bool(count.item() == self.world_size) if all else bool(count.item() > 0)

    # -- events ---------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        self.use_distributed_sampler = event.trainer.config.use_distributed_sampler

    @surge.hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        """Each epoch its own shuffle, the same on every rank (``DistributedSampler.set_epoch``)."""
        for sampler in _distributed_samplers(event.trainer.train_dataloader):
            sampler.set_epoch(event.epoch)

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


def _attempt_store(rank: int, world_size: int, timeout: datetime.timedelta) -> dist.Store | None:
    """Under torchrun, the rendezvous store of this restart attempt alone (``None``: the default ``env://``).

    An elastic agent keeps its store across restarts, and torch's ``env://`` adds no per-attempt prefix there:
    a restarted worker can read the address a dead worker of the previous attempt published and fail to
    connect ("Connection refused") or wait for it until the timeout. Keys under ``surge/attempt_<N>`` are
    this attempt's only."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        return None
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # else rank 0 hosts the store
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=rank == 0 and not agent_store,
        timeout=timeout,
        multi_tenant=True,
    )
    return dist.PrefixStore(f"surge/attempt_{attempt}", store)


def _destroy_group() -> None:
    """At exit: leave together, then destroy. A rank that tears its gloo connections down while a peer still
    uses them makes the peer's gloo thread abort the process (SIGABRT, "terminate called without an active
    exception"); the barrier is bounded so a dead peer cannot hold the exit."""
    if not dist.is_initialized():
        return
    with contextlib.suppress(Exception):
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        else:
            dist.barrier()
    dist.destroy_process_group()


def _distributed_samplers(loader: Any) -> list[DistributedSampler[Any]]:
    found = []
    loaders = getattr(loader, "items", None)
    for item in loaders if isinstance(loaders, list) else [loader]:
        for candidate in (
            getattr(item, "sampler", None),
            getattr(getattr(item, "batch_sampler", None), "sampler", None),
        ):
            if isinstance(candidate, DistributedSampler) and candidate not in found:
                found.append(candidate)
    return found


plugin = surge.Plugin(
    name="ddp",
    kind="provider",
    provides={"strategy": {"ddp": DDPStrategy}},
    description="DistributedDataParallel on torch.distributed (gloo on CPU, NCCL on CUDA), torchrun/SLURM/self-relaunch",
)
