""":class:`ProcessGroupStrategy`: what every ``torch.distributed`` strategy shares, whatever it does to the model.

One process per device. Under ``torchrun`` or ``srun`` each process joins the process group its launcher
describes (:func:`detect`); a plain ``python script.py`` with several devices relaunches itself under torch's
elastic launcher (``python -m torch.distributed.run --standalone``, :func:`relaunch`) and leaves with the
launched job's exit status. The base class joins the group, shards map-style loaders with a
``DistributedSampler``, and implements the collectives (``reduce``, ``reduce_async``, ``all_gather``,
``barrier``, ``broadcast``, ``reduce_boolean_decision``); a subclass adds what it does to the model
(``setup_module``, ``wrap_training_step``, ``accumulation_context``) and, if it shards, to checkpoints.
First-party strategies (``ddp``, a sharding one) and third-party ones subclass it side by side.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import re
import subprocess
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from surge import events as ev
from surge._logging import logger
from surge.errors import ConfigError, SurgeError
from surge.events.hooks import hookimpl
from surge.plugins.backends import Accelerator, Strategy

__all__ = ["ProcessGroupStrategy", "Topology", "detect", "first_host", "leave_process_group", "relaunch"]

DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


# -- where this process stands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """Where this process stands in the job, read from its launcher's environment."""

    global_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    launcher: str  # "torchrun" (or any launcher setting RANK/WORLD_SIZE), "slurm", or "none"
    master_addr: str | None = None
    master_port: int | None = None


def detect(environ: Mapping[str, str] | None = None) -> Topology:
    """The topology the environment describes (torchrun or SLURM); ``launcher="none"`` for a plain
    ``python script.py``."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun sets these (and LOCAL_RANK, GROUP_RANK)
        return Topology(
            global_rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", 0))),
            world_size=int(env["WORLD_SIZE"]),
            launcher="torchrun",
        )
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", 1)) > 1 and env.get("SLURM_JOB_NAME") != "bash":
        # srun started one task per process (an interactive `salloc` shell, job name "bash", is not one)
        job = env.get("SLURM_JOB_ID", "0")
        port = int(env["MASTER_PORT"]) if "MASTER_PORT" in env else 15000 + int(re.sub(r"\D", "", job) or 0) % 20000
        return Topology(
            global_rank=int(env["SLURM_PROCID"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            node_rank=int(env.get("SLURM_NODEID", 0)),
            world_size=int(env["SLURM_NTASKS"]),
            launcher="slurm",
            master_addr=env.get("MASTER_ADDR")
            or first_host(env.get("SLURM_NODELIST", env.get("SLURM_JOB_NODELIST", ""))),
            master_port=port,
        )
    return Topology(0, 0, 0, 1, "none")


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[003-005,9],cpu1"`` gives ``"gpu003"``."""
    nodelist = nodelist.strip()
    if not nodelist:
        return "127.0.0.1"
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):  # the first entry ends at the first comma outside brackets
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            end = i
            break
    entry = nodelist[:end]
    match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", entry)
    if match is None:
        return entry
    prefix, ranges, suffix = match.groups()
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def relaunch(nproc: int, num_nodes: int, *, strategy: str, switch: str) -> None:
    """Run this same program under ``python -m torch.distributed.run --standalone`` with ``nproc`` workers,
    wait for it, and leave with its exit status (``SystemExit``): the workers ran the whole program.
    ``switch`` is the environment variable whose value ``0`` turns the relaunch off (an error instead)."""
    if os.environ.get(switch, "1") == "0":
        raise SurgeError(
            f"strategy '{strategy}' needs {nproc * num_nodes} processes, but this process was not started by a "
            f"launcher and {switch}=0 turns the self-relaunch off; start it with "
            f"`torchrun --nproc-per-node={nproc} script.py` (or srun under SLURM)"
        )
    if num_nodes > 1:
        raise SurgeError(
            f"strategy '{strategy}' with num_nodes={num_nodes} needs a launcher on every node: run "
            f"`torchrun --nnodes={num_nodes} --nproc-per-node={nproc} --rdzv-backend=c10d "
            "--rdzv-endpoint=HOST:PORT script.py` on each node, or srun under SLURM"
        )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    command += ["--", *_program(strategy)]  # "--": no argument of the program is read as a launcher option
    logger.info("strategy '{}': relaunching {} processes: {}", strategy, nproc, " ".join(command))
    process = subprocess.Popen(command)
    try:
        code = process.wait()
    except KeyboardInterrupt:  # the launcher got the same Ctrl-C and is stopping its workers: let it finish
        try:
            code = process.wait(timeout=60)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            process.terminate()
            code = process.wait()
    raise SystemExit(code)


def _program(strategy: str) -> list[str]:
    """This program's command line for torchrun: the script and its arguments, or ``-m module``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # python -m package
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        raise SurgeError(
            f"strategy '{strategy}' cannot relaunch an interactive session or `python -c`; put the code in a "
            "script and start it with `torchrun --nproc-per-node=N script.py` (or `python script.py`)"
        )
    return [script, *sys.argv[1:]]


def leave_process_group() -> None:
    """Leave the default process group together, then destroy it (registered at exit by
    :meth:`ProcessGroupStrategy.setup_environment`; a program that ends with ``os._exit`` calls it itself).

    A rank that tears its gloo connections down while a peer still uses them makes the peer's gloo thread abort
    the process (SIGABRT, "terminate called without an active exception"); the barrier is bounded so that a
    dead peer cannot hold the exit."""
    if not dist.is_initialized():
        return
    with contextlib.suppress(Exception):
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        else:
            dist.barrier()
    dist.destroy_process_group()


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


# -- the base class ------------------------------------------------------------------------------------------


class ProcessGroupStrategy(Strategy):
    """One process per device on a ``torch.distributed`` process group; subclasses decide what happens to the
    model (replicate it and average gradients, shard it, ...).

    Settings (keywords, or ``SURGE_<NAME>_<SETTING>`` environment variables for a strategy chosen by name,
    ``<NAME>`` being :attr:`name` upper-cased): ``timeout`` (``_TIMEOUT``, seconds or a ``timedelta``; default
    5 minutes: a collective waiting longer for a dead peer fails instead of hanging), ``process_group_backend``
    (``_BACKEND``; default ``nccl`` on CUDA, ``gloo`` otherwise), ``sync_batchnorm`` (``_SYNC_BATCHNORM``:
    BatchNorm layers become ``SyncBatchNorm`` in :meth:`setup_module`), ``agreement_interval``
    (``_AGREEMENT_INTERVAL``: how many batches apart the ranks agree on a stop, Ctrl-C or checkpoint request;
    :attr:`surge.Strategy.agreement_interval`, 16 by default); ``_RELAUNCH=0`` turns the self-relaunch
    of an un-launched program off. A subclass checks its own settings before calling ``__init__``, which may
    relaunch the program.
    """

    def __init__(
        self,
        accelerator: Accelerator,
        device_indices: Sequence[int],
        num_nodes: int = 1,
        *,
        timeout: float | datetime.timedelta | None = None,
        process_group_backend: str | None = None,
        sync_batchnorm: bool | None = None,
        agreement_interval: int | None = None,
    ) -> None:
        super().__init__(accelerator, device_indices, num_nodes)
        if not self.name:
            raise ConfigError(
                [
                    (
                        "trainer.strategy",
                        f"{type(self).__qualname__} sets no `name`; give the class a name: ClassVar[str]",
                    )
                ]
            )
        if timeout is None:
            timeout = float(self.env_setting("TIMEOUT") or DEFAULT_TIMEOUT.total_seconds())
        self.timeout = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
        self.sync_batchnorm = self.env_flag("SYNC_BATCHNORM", False) if sync_batchnorm is None else sync_batchnorm
        if agreement_interval is None and (given := self.env_setting("AGREEMENT_INTERVAL")) is not None:
            if not given.isdigit() or int(given) < 1:
                raise ConfigError(
                    [(self.env_name("AGREEMENT_INTERVAL"), f"{given!r} is not a whole number of batches >= 1")]
                )
            agreement_interval = int(given)
        if agreement_interval is not None:
            if (
                isinstance(agreement_interval, bool)
                or not isinstance(agreement_interval, int)
                or agreement_interval < 1
            ):
                raise ConfigError(
                    [("agreement_interval", f"{agreement_interval!r} is not a whole number of batches >= 1")]
                )
            self.agreement_interval = agreement_interval
        self.use_distributed_sampler = True
        self.sampler_seed: int | None = None
        """The seed of the ``DistributedSampler`` objects this strategy makes: the global seed (``SURGE_GLOBAL_SEED``)
        when it makes the first one, or the seed a restored checkpoint recorded (its state), so that a run resumed
        in a process with another global seed draws the original order on every rank."""
        self._samplers: weakref.WeakSet[DistributedSampler[Any]] = weakref.WeakSet()
        self.topology = detect()
        expected = len(self.device_indices) * num_nodes
        if self.topology.launcher == "none" and expected > 1:  # leaves with SystemExit once the job is done
            relaunch(len(self.device_indices), num_nodes, strategy=self.name, switch=self.env_name("RELAUNCH"))
        if self.topology.launcher != "none" and self.topology.world_size != expected:
            logger.warning(
                "strategy '{}': the launcher started {} processes, the Trainer asks for {} (devices x num_nodes); "
                "the launcher's count is used",
                self.name,
                self.topology.world_size,
                expected,
            )
        if accelerator.device_type != "cpu":
            local = self.topology.local_rank
            if local >= len(self.device_indices):
                raise ConfigError(
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
            or self.env_setting("BACKEND")
            or ("nccl" if self.root_device.type == "cuda" else "gloo")
        )

    # -- settings from the environment ------------------------------------------------------------------------
    def env_name(self, setting: str) -> str:
        """The environment variable of ``setting`` for this strategy: ``SURGE_DDP_TIMEOUT`` for ``ddp``."""
        return f"SURGE_{self.name.upper().replace('-', '_')}_{setting}"

    def env_setting(self, setting: str) -> str | None:
        """The value of :meth:`env_name` ``(setting)``, stripped; ``None`` when unset or blank."""
        value = os.environ.get(self.env_name(setting))
        return value.strip() if value is not None and value.strip() else None

    def env_flag(self, setting: str, default: bool) -> bool:
        value = self.env_setting(setting)
        return default if value is None else value.lower() in ("1", "true", "yes", "on")

    # -- topology ---------------------------------------------------------------------------------------------
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

    @property
    def distributed(self) -> bool:
        """Whether collectives go to other processes: several processes, and the group is joined."""
        return self.world_size > 1 and dist.is_initialized()

    # -- set-up -----------------------------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Make the device current and join the process group (once per process; several processes only)."""
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
        atexit.register(leave_process_group)
        logger.debug(
            "joined the {} process group as rank {} of {}",
            self.process_group_backend,
            self.global_rank,
            self.world_size,
        )

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move the module to this process's device and, with ``sync_batchnorm`` and several processes, turn its
        BatchNorm layers into ``SyncBatchNorm``. A subclass wraps or shards the result."""
        module = module.to(self.root_device)
        if self.sync_batchnorm and self.world_size > 1:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)  # converts children in place
        return module

    # -- data -------------------------------------------------------------------------------------------------
    def process_dataloader(self, loader: Any, stage: str) -> Any:
        """Give each process its shard: a ``DistributedSampler`` (shuffled when the original loader shuffles,
        training only) replaces the sampler of a map-style torch ``DataLoader``."""
        if not self.use_distributed_sampler or self.world_size == 1 or not isinstance(loader, DataLoader):
            return loader
        if isinstance(loader.dataset, IterableDataset) or isinstance(loader.sampler, DistributedSampler):
            return loader  # an iterable dataset shards itself; a distributed sampler is already there
        if loader.batch_sampler is not None and loader.batch_size is None:
            logger.warning(
                "strategy '{}': a loader with a custom batch_sampler is not sharded; shard it yourself", self.name
            )
            return loader
        shuffle = stage == "fit" and isinstance(loader.sampler, RandomSampler)
        if self.sampler_seed is None:
            self.sampler_seed = int(os.environ.get("SURGE_GLOBAL_SEED", 0))
        sampler: DistributedSampler[Any] = DistributedSampler(
            loader.dataset,  # type: ignore[arg-type]
            num_replicas=self.world_size,
            rank=self.global_rank,
            shuffle=shuffle,
            seed=self.sampler_seed,
            drop_last=False,
        )
        self._samplers.add(sampler)
        return self.with_sampler(loader, sampler)

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """In every checkpoint: the seed of the samplers this strategy made (:attr:`sampler_seed`)."""
        return {} if self.sampler_seed is None else {"sampler_seed": self.sampler_seed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A restored checkpoint's sampler seed, for the samplers made so far and every later one."""
        if state.get("sampler_seed") is None:
            return
        self.sampler_seed = int(state["sampler_seed"])
        for sampler in self._samplers:
            sampler.seed = self.sampler_seed

    # -- collectives ------------------------------------------------------------------------------------------
    def _reduce_start(self, tensor: torch.Tensor, op: str, async_op: bool) -> tuple[torch.Tensor, Any]:
        if op not in _OPS:
            raise SurgeError(f"strategy '{self.name}' reduces with {sorted(_OPS)}, not {op!r}")
        result = tensor.detach().clone()
        if op == "mean" and not result.is_floating_point():
            result = result.float()
        return result, dist.all_reduce(result, op=_OPS[op], async_op=async_op)

    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """``op`` (``sum``, ``mean``, ``max``, ``min``) of ``tensor`` over every process, in a new tensor."""
        if not self.distributed:
            return tensor
        result, _ = self._reduce_start(tensor, op, async_op=False)
        if op == "mean":
            result /= self.world_size
        return result

    def reduce_async(self, tensor: torch.Tensor, op: str = "mean") -> Callable[[], torch.Tensor]:
        """:meth:`reduce` started now; the returned function waits for it and returns the result."""
        if not self.distributed:
            return lambda: tensor
        result, work = self._reduce_start(tensor, op, async_op=True)

        def wait() -> torch.Tensor:
            work.wait()
            return result / self.world_size if op == "mean" else result

        return wait

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` (the same shape on each), stacked along a new first dimension in rank
        order: shape ``(world_size, *tensor.shape)``."""
        if not self.distributed:
            return tensor.detach().unsqueeze(0)
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.detach().contiguous())
        return torch.stack(parts)

    def barrier(self, name: str | None = None) -> None:
        if not self.distributed:
            return
        if self.process_group_backend == "nccl":
            dist.barrier(device_ids=[self.root_device.index or 0])
        else:
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self.distributed:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=src, device=self.root_device)
        return holder[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        if not self.distributed:
            return decision
        count = self.reduce(torch.tensor(int(decision), device=self.root_device), "sum")
        return bool(count.item() == self.world_size) if all else bool(count.item() > 0)

    # -- events -----------------------------------------------------------------------------------------------
    @hookimpl
    def setup(self, event: ev.Setup) -> None:
        self.use_distributed_sampler = event.trainer.config.use_distributed_sampler

    @hookimpl
    def train_epoch_start(self, event: ev.TrainEpochStart) -> None:
        """Each epoch its own shuffle, the same on every rank (``DistributedSampler.set_epoch``)."""
        for sampler in _distributed_samplers(event.trainer.train_dataloader):
            sampler.set_epoch(event.epoch)


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
