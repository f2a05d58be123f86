"""The ``fsdp`` strategy: fully sharded data parallel training with torch's FSDP2 (``fully_shard``).

Each process holds a shard of every parameter, gradient and optimizer state; a module's parameters are
gathered for its forward and backward and freed afterwards. The launcher, process group, samplers and
collectives are those of the core's :class:`surge.ProcessGroupStrategy` (the base the ``ddp`` strategy stands on
too): under ``torchrun`` or SLURM each process joins the group its launcher describes, and a plain
``python script.py`` relaunches itself through ``torch.distributed.run``.

Checkpoints are **sharded** by default: every process writes its shards of the weights, optimizer states and
accumulated gradients through ``torch.distributed.checkpoint`` into ``<path>.shards-<id>/``, and global rank
zero then commits ``<path>`` itself (everything else: loop position, RNG, plugin states) with
:func:`surge.checkpoint.save`. That file is the commit: a crash before it leaves the previous checkpoint in
force. ``state_dict_type="full"`` instead gathers the whole state on rank zero into one ordinary checkpoint
file (readable without a process group; large models may not fit in one process's memory).
:func:`consolidate` turns a sharded checkpoint into one weights-only file.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import posixpath
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import fsspec
import surge
import torch
from surge import logger
from surge.checkpoint import shard_dirs
from torch import nn

__all__ = ["FSDPStrategy", "consolidate", "plugin"]

SHARDED_KEYS = ("state_dict", "optimizer_states", "accumulated_grads")
"""The checkpoint entries written as shards; the rest goes into the commit file."""
RESTORE_HINT = "make one weights-only file of it with `python -m surge_fsdp.consolidate {path} OUT.ckpt`"
"""Recorded in every sharded checkpoint: what an error about reading it without this strategy suggests."""

_FORWARD_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


class FSDPStrategy(surge.ProcessGroupStrategy):
    """Fully sharded data parallel (FSDP2), one process per device.

    Settings (keywords, or ``SURGE_FSDP_<NAME>`` environment variables for the by-name ``strategy="fsdp"``):

    * ``wrap``: module classes (or class names) sharded as units of their own, each gathered only around its
      own forward and backward (transformer blocks, typically). ``min_num_params``: also shard every submodule
      holding at least this many parameters not already in a unit. With neither, the whole model is one unit.
    * ``reshard_after_forward`` (default True): free gathered parameters after the forward (less memory, one
      more all-gather in the backward).
    * ``cpu_offload`` (default False): keep the shards and their gradients in host memory.
    * ``state_dict_type``: ``"sharded"`` (default) or ``"full"``, see the module docstring.
    * ``timeout``, ``process_group_backend``, ``sync_batchnorm``: those of :class:`surge.ProcessGroupStrategy`
      (``SURGE_FSDP_TIMEOUT``, ``SURGE_FSDP_BACKEND``, ``SURGE_FSDP_SYNC_BATCHNORM``).

    With one process nothing is sharded and the model trains as on a single device.
    """

    name: ClassVar[str] = "fsdp"
    inference_mode_ok: ClassVar[bool] = False  # gathered parameters are reused by autograd later

    def __init__(
        self,
        accelerator: surge.Accelerator,
        device_indices: Sequence[int],
        num_nodes: int = 1,
        *,
        wrap: Iterable[type[nn.Module] | str] | None = None,
        min_num_params: int | None = None,
        reshard_after_forward: bool | None = None,
        cpu_offload: bool | None = None,
        state_dict_type: Literal["sharded", "full"] | None = None,
        timeout: float | datetime.timedelta | None = None,
        process_group_backend: str | None = None,
        sync_batchnorm: bool | None = None,
    ) -> None:
        # settings are checked before the base class starts anything (it may relaunch the program)
        names = self.env_setting("WRAP")
        if wrap is None and names:
            wrap = [name.strip() for name in names.split(",") if name.strip()]
        self.wrap = tuple(wrap or ())
        number = self.env_setting("MIN_NUM_PARAMS")
        self.min_num_params = min_num_params if min_num_params is not None else (int(number) if number else None)
        self.reshard_after_forward = (
            self.env_flag("RESHARD_AFTER_FORWARD", True) if reshard_after_forward is None else reshard_after_forward
        )
        self.cpu_offload = self.env_flag("CPU_OFFLOAD", False) if cpu_offload is None else cpu_offload
        kind = state_dict_type or self.env_setting("STATE_DICT_TYPE") or "sharded"
        if kind not in ("sharded", "full"):
            raise surge.ConfigError(
                [("trainer.strategy.state_dict_type", f"got {kind!r}: use 'sharded' (default) or 'full'")]
            )
        self.state_dict_type = kind
        self.async_checkpoint_save = kind == "full"  # type: ignore[misc]
        bad = [
            w for w in self.wrap if not isinstance(w, str) and not (isinstance(w, type) and issubclass(w, nn.Module))
        ]
        if bad:
            raise surge.ConfigError([("trainer.strategy.wrap", f"got {bad!r}: list nn.Module classes or class names")])
        if self.min_num_params is not None and self.min_num_params < 1:
            raise surge.ConfigError([("trainer.strategy.min_num_params", "must be a positive number of parameters")])
        super().__init__(
            accelerator,
            device_indices,
            num_nodes,
            timeout=timeout,
            process_group_backend=process_group_backend,
            sync_batchnorm=sync_batchnorm,
        )
        self._units: list[nn.Module] = []
        self._loaded_full = True  # whether the checkpoint being restored holds full (unsharded) states

    # -- the model ------------------------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            FSDPModule,
            OffloadPolicy,
            fully_shard,
            register_fsdp_forward_method,
        )

        module = super().setup_module(module)  # on its device, BatchNorm synchronised if asked (before sharding)
        if self.world_size == 1 or isinstance(module, FSDPModule):
            return module
        mesh = init_device_mesh(self.root_device.type, (self.world_size,))
        options: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": self.reshard_after_forward,
            "offload_policy": CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy(),
        }
        self._units = self._units_of(module)
        for unit in self._units:
            fully_shard(unit, **options)
        fully_shard(module, **options)
        # The loop calls these methods, not forward: each gathers and frees the parameters as forward would.
        for method in _FORWARD_METHODS:
            if callable(getattr(module, method, None)):
                register_fsdp_forward_method(module, method)
        logger.debug("fsdp: {} units besides the root, sharded over {} processes", len(self._units), self.world_size)
        return module

    def _units_of(self, module: nn.Module) -> list[nn.Module]:
        """Submodules sharded as units of their own, children before parents (``fully_shard`` order)."""
        names = {w for w in self.wrap if isinstance(w, str)}
        types = tuple(w for w in self.wrap if isinstance(w, type))
        units: list[nn.Module] = []
        covered: set[int] = set()  # parameters already inside a unit

        def visit(sub: nn.Module) -> None:
            for child in sub.children():
                visit(child)
            if sub is module:
                return
            chosen = (types and isinstance(sub, types)) or type(sub).__name__ in names
            if not chosen and self.min_num_params is not None:
                own = sum(p.numel() for p in sub.parameters() if id(p) not in covered)
                chosen = own >= self.min_num_params
            if chosen and any(True for _ in sub.parameters()):
                units.append(sub)
                covered.update(id(p) for p in sub.parameters())

        visit(module)
        return units

    def accumulation_context(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        # Gradients are reduce-scattered after every micro-batch: a run may stop inside an accumulation window,
        # and its last step must still see every rank's gradients (what ddp repairs with an all-reduce, sharded
        # gradients cannot be repaired the same way).
        return contextlib.nullcontext()

    # -- checkpoints ----------------------------------------------------------------------------------
    def _options(self, full: bool) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=full, cpu_offload=full)

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if not self.distributed:
            return module.state_dict()
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module, options=self._options(self.state_dict_type == "full"))

    def load_module_state_dict(self, module: nn.Module, state: Mapping[str, Any]) -> None:
        if not self.distributed:
            module.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        full = self._loaded_full  # a full checkpoint file (this strategy's "full", or ddp's)
        set_model_state_dict(module, dict(state), options=StateDictOptions(full_state_dict=full))

    def optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        if not self.distributed:
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(module, optimizer, options=self._options(self.state_dict_type == "full"))

    def load_optimizer_state_dict(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        if not self.distributed:
            optimizer.load_state_dict(dict(state))
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        # Without per-parameter state (plain SGD) there is nothing to distribute, and torch's full-state path
        # needs a tensor to find the device: the sharded path loads the parameter groups alike.
        full = self._loaded_full and bool(state.get("state"))
        set_optimizer_state_dict(module, optimizer, dict(state), options=StateDictOptions(full_state_dict=full))

    def save_checkpoint(self, checkpoint: dict[str, Any], url: str) -> None:
        if not self.distributed or self.state_dict_type == "full":
            super().save_checkpoint(checkpoint, url)
            return
        import torch.distributed.checkpoint as dcp

        token = self.broadcast(uuid.uuid4().hex)
        shards = f"{url}{surge.checkpoint.SHARDS_INFIX}{token}"
        parts = {key: checkpoint[key] for key in SHARDED_KEYS if key in checkpoint}
        if "optimizer_states" in parts:  # numbered entries: a list is not a state-dict container for every planner
            parts["optimizer_states"] = {str(i): s for i, s in enumerate(parts["optimizer_states"])}
        dcp.save(parts, storage_writer=_writer(shards))
        commit = {key: value for key, value in checkpoint.items() if key not in SHARDED_KEYS}
        commit[surge.checkpoint.SHARDED] = {  # the core's description of a sharded checkpoint, and ours
            "shards": posixpath.basename(shards.rstrip("/")),
            "world_size": self.world_size,
            "strategy": self.name,
            "restore_hint": RESTORE_HINT,
            "keys": list(parts),
            "optimizers": len(checkpoint.get("optimizer_states", [])),
            "grads": sorted(checkpoint.get("accumulated_grads", {})),
        }
        self.barrier("fsdp shards written")  # every shard is on storage before the commit file names them
        if self.is_global_zero:
            surge.checkpoint.save(commit, url)
            _remove_shards(url, keep=shards)

    def load_checkpoint(
        self,
        url: str,
        module: nn.Module,
        optimizers: Sequence[torch.optim.Optimizer],
        *,
        trusted: bool = False,
    ) -> dict[str, Any]:
        checkpoint = surge.checkpoint.load(url, trusted=trusted)
        message = surge.checkpoint.sharded_message(url, checkpoint)
        info = checkpoint.pop(surge.checkpoint.SHARDED, None)
        self._loaded_full = info is None
        if info is None:
            return checkpoint  # one full file
        if message is not None and not self.distributed:  # one process cannot read shards: the core's message
            raise surge.checkpoint.CheckpointError(message)
        if info["world_size"] != self.world_size:
            logger.info("fsdp: resharding {} from {} to {} processes", url, info["world_size"], self.world_size)
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        target: dict[str, Any] = {"state_dict": get_model_state_dict(module)}
        if "optimizer_states" in info["keys"] and len(optimizers) == info["optimizers"]:
            target["optimizer_states"] = {
                str(i): get_optimizer_state_dict(module, opt) for i, opt in enumerate(optimizers)
            }
        if "accumulated_grads" in info["keys"] and optimizers:
            params = dict(module.named_parameters())
            target["accumulated_grads"] = {name: torch.zeros_like(params[name]) for name in info["grads"]}
        dcp.load(target, storage_reader=_reader(_sibling(url, info["shards"])))
        checkpoint["state_dict"] = target["state_dict"]
        if "optimizer_states" in target:
            checkpoint["optimizer_states"] = [target["optimizer_states"][str(i)] for i in range(len(optimizers))]
        elif "optimizer_states" in info["keys"]:
            checkpoint["optimizer_states"] = [None] * info["optimizers"]  # the core reports the count mismatch
        if "accumulated_grads" in target:
            checkpoint["accumulated_grads"] = target["accumulated_grads"]
        return checkpoint


def _sibling(url: str, name: str) -> str:
    """``name`` in the directory of ``url`` (a local path or an fsspec URL)."""
    return posixpath.join(posixpath.dirname(url), name) if "://" in url else os.path.join(os.path.dirname(url), name)


def _writer(url: str) -> Any:
    import torch.distributed.checkpoint as dcp

    if "://" not in url:
        return dcp.FileSystemWriter(url, sync_files=True)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter  # not re-exported by torch

    return FsspecWriter(url, sync_files=True)


def _reader(url: str) -> Any:
    import torch.distributed.checkpoint as dcp

    if "://" not in url:
        return dcp.FileSystemReader(url)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    return FsspecReader(url)


def _remove_shards(url: str, keep: str | None = None) -> None:
    """Remove the shard directories of earlier saves to ``url`` (and of saves a crash cut short)."""
    fs, path = fsspec.core.url_to_fs(url)
    kept = fsspec.core.url_to_fs(keep)[1].rstrip("/") if keep else None
    for candidate in shard_dirs(fs, path):
        if candidate.rstrip("/") != kept:
            with contextlib.suppress(FileNotFoundError):
                fs.rm(candidate, recursive=True)


def consolidate(url: str, out: str) -> str:
    """Write the weights of the sharded checkpoint ``url`` into one ordinary, weights-only Surge checkpoint
    ``out`` (no process group needed; the whole model must fit in this process's memory)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    checkpoint = surge.checkpoint.load(url)
    info = checkpoint.pop(surge.checkpoint.SHARDED, None)
    if info is None:
        raise surge.checkpoint.CheckpointError(f"checkpoint {url} is not sharded; use it as it is")
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        flat = os.path.join(scratch, "full.pt")
        dcp_to_torch_save(_sibling(url, info["shards"]), flat)
        full = torch.load(flat, weights_only=True)
    weights = full.get("state_dict", full)
    kept = {k: v for k, v in checkpoint.items() if k in ("surge_checkpoint_version", "epoch", "global_step", "hparams")}
    surge.checkpoint.save({**kept, "state_dict": weights, "plugin_set": checkpoint.get("plugin_set", [])}, out)
    return out


plugin = surge.Plugin(
    name="fsdp",
    kind="provider",
    provides={"strategy": {"fsdp": FSDPStrategy}},
    description="fully sharded data parallel (torch FSDP2 fully_shard), sharded checkpoints via torch.distributed.checkpoint",
)
