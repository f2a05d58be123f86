"""A 2-process DDP fit (gloo, CPU), eager or with the compile plugin; test_compile.py launches it as a 2-process
job (a script, not collected by pytest).

``_ddp_program.py eager|compiled OUT``: each rank writes ``OUT/rank<R>.pt`` with its per-step losses, its final
weights and the messages of torch's DDPOptimizer, which only compiles a graph when the compiled code runs inside
``DistributedDataParallel.forward`` (it then splits the graph at the gradient buckets, so that the all-reduce of
one bucket overlaps the backward of the next).
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def main(mode: str, out: str) -> None:
    ddp_optimizer = logging.getLogger("torch._dynamo.backends.distributed")
    messages = Messages()
    ddp_optimizer.addHandler(messages)
    ddp_optimizer.setLevel(logging.INFO)
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(128, 8, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())
    surge.seed_everything(0)
    model = Net()
    trainer = surge.Trainer(
        strategy="ddp",
        devices=2,
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        plugins={"compile": {}} if mode == "compiled" else None,
    )
    trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=16, shuffle=True))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result = {"losses": model.losses, "weights": weights, "ddp_optimizer": messages.seen}
    torch.save(result, os.path.join(out, f"rank{trainer.global_rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Leave without interpreter finalization, as surge-ddp's test programs do: gloo can abort a process that
    # tears down with finished asynchronous work still referenced (a torch issue; see surge-ddp's _program.py).
    import torch.distributed as dist
    from surge.plugins.distributed import leave_process_group

    leave_process_group() if dist.is_initialized() else None
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
