"""A third party's distributed strategy, written from the public API alone (``surge.ProcessGroupStrategy``,
``surge.Plugin``, ``surge.hookimpl``, ``surge.events``): what a distribution "acme-replicate" would ship.

Every process keeps a whole copy of the model, starting from rank 0's weights; before each optimizer step the
gradients are averaged over the processes with one all-reduce of all of them, flattened. No model wrapper, no
DistributedDataParallel, no dependency on surge-ddp: launching, the process group, the sampler that gives each
process its shard of the data, and the collectives come from the base class.
"""

from __future__ import annotations

from typing import ClassVar

import surge
import torch
import torch.distributed as dist
from torch import nn


class ReplicateStrategy(surge.ProcessGroupStrategy):
    """Replicas on every process; gradients averaged by ``all_reduce`` before every optimizer step."""

    name: ClassVar[str] = "replicate"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.averaged_steps = 0

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = super().setup_module(module)
        if self.distributed:  # every replica starts from rank 0's weights and buffers
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)
        return module

    @surge.hookimpl
    def before_optimizer_step(self, event: surge.events.BeforeOptimizerStep) -> None:
        if not self.distributed:
            return
        grads = [p.grad for group in event.optimizer.param_groups for p in group["params"] if p.grad is not None]
        flat = torch.cat([grad.flatten() for grad in grads]) / self.world_size  # divided first, as DDP does
        flat = self.reduce(flat, "sum")
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        self.averaged_steps += 1


plugin = surge.Plugin(
    name="replicate",
    kind="provider",
    provides={"strategy": {"replicate": ReplicateStrategy}},
    description="replicas on every process, gradients averaged by all_reduce (a third-party strategy in a test)",
)
