"""One rank of ``test_process_group_strategy.py``'s 2-process runs (launched as a 2-process job; not collected).

``_replicate_child.py STRATEGY OUT``: a 2-epoch fit with ``strategy=STRATEGY`` (``ddp`` from surge-ddp, or the
third-party ``replicate`` of ``_replicate_plugin.py``, made discoverable with ``surge.testing.PluginEnv``) on
``devices=2, accelerator="cpu"``. Each rank writes ``OUT/rank<R>.pt``: its per-step losses, the final weights,
the batches it trained on per epoch, and what the base class's collectives returned.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from _replicate_plugin import plugin
from surge.plugins.distributed import leave_process_group
from surge.testing import PluginEnv
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, SIZE, BATCH, WIDTH = 2, 64, 4, 8


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(SIZE, WIDTH, generator=generator)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
        self.losses: list[float] = []
        self.batches = [0] * EPOCHS

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = nn.functional.binary_cross_entropy_with_logits(self.net(x), y)
        self.losses.append(loss.detach().item())
        self.batches[self.trainer.current_epoch] += 1
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(strategy: str, out: str) -> None:
    with PluginEnv() as env:
        env.add(plugin, distribution="acme-replicate")
        surge.seed_everything(0)
        model = Net()
        trainer = surge.Trainer(
            strategy=strategy,
            devices=2,
            accelerator="cpu",
            max_epochs=EPOCHS,
            default_root_dir=out,
            enable_progress_bar=False,
            enable_checkpointing=False,
            logger=False,
        )
        trainer.fit(model, train_dataloaders=DataLoader(data(), batch_size=BATCH, shuffle=True))
        base = trainer.strategy
        assert isinstance(base, surge.ProcessGroupStrategy)
        rank = trainer.global_rank
        result = {
            "strategy": type(base).__name__,
            "losses": model.losses,
            "batches": model.batches,
            "weights": {k: v.detach().clone() for k, v in model.net.state_dict().items()},
            "averaged_steps": getattr(base, "averaged_steps", None),
            "gathered": base.all_gather(torch.tensor([rank, 10 * rank])),
            "mean": base.reduce(torch.tensor(float(rank)), "mean").item(),
            "max_async": base.reduce_async(torch.tensor(rank), "max")().item(),
            "broadcast": base.broadcast(f"from rank {rank}"),
            "any": base.reduce_boolean_decision(rank == 1, all=False),
            "all": base.reduce_boolean_decision(rank == 1),
        }
        base.barrier("written")
        torch.save(result, os.path.join(out, f"rank{rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Leave without interpreter finalization, as surge-ddp's test programs do: gloo can abort a process that tears
    # down with finished asynchronous work still referenced (a torch issue; see surge-ddp's tests/_program.py).
    leave_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
