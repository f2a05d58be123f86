"""The programs the multi-process tests and the benchmark launch (run as a script; not collected by pytest).

``_program.py MODE OUT [--accumulate N] [--epochs N] [--stop-at STEP] [--size N] [--batch N] [--width N]``

* ``surge``: a Surge fit with ``strategy="ddp"`` (or ``--strategy fsdp``), ``devices=2, accelerator="cpu"`` (under torchrun, or started
  plainly so that it relaunches itself);
* ``reference``: the same training written by hand on torch DDP (started under torchrun);
* ``lightning``: the same training on Lightning's ``Trainer(strategy="ddp")`` (under torchrun; the benchmark's
  third row, when Lightning is installed);

Each rank writes ``OUT/rank<R>.pt``: its per-step losses, the final weights, the global step it stopped at,
and the seconds its training loop took.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_data(size: int, width: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(size, width, generator=generator)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


def make_net(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def reference(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = make_data(args.size, args.width)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    net = make_net(args.width)
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses: list[float] = []
    step = 0
    start = time.perf_counter()  # like Surge's on_train_start: after set-up
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        n = len(loader)
        for batch_idx, (x, y) in enumerate(loader):
            last = (batch_idx + 1) % args.accumulate == 0 or batch_idx + 1 == n
            with model.no_sync() if not last else _null():
                loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
                losses.append(loss.detach().item() if args.record else 0.0)
                (loss / args.accumulate if args.accumulate > 1 else loss).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
    seconds = time.perf_counter() - start
    _write(args.out, rank, losses, net, step, seconds)
    dist.barrier()  # leave together: a rank tearing gloo down while its peer still talks can abort the peer
    dist.destroy_process_group()


def _null():  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.nullcontext()


def lightning_fit(args: argparse.Namespace) -> None:
    """The same training on Lightning 2.x with every optional feature off; timed as Surge's, from
    ``on_train_start`` to the end of ``fit``."""
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net(args.width)
            self.started = 0.0

        def on_train_start(self) -> None:
            self.started = time.perf_counter()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            x, y = batch
            return nn.functional.binary_cross_entropy_with_logits(self(x), y)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.1)

    pl.seed_everything(0, verbose=False)
    model = Net()
    loader = DataLoader(make_data(args.size, args.width), batch_size=args.batch, shuffle=True)
    trainer = pl.Trainer(
        strategy="ddp",
        devices=2,
        accelerator="cpu",
        max_epochs=args.epochs,
        accumulate_grad_batches=args.accumulate,
        default_root_dir=args.out,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_dataloaders=loader)
    seconds = time.perf_counter() - model.started
    _write(args.out, trainer.global_rank, [], model.net, trainer.global_step, seconds)


def surge_fit(args: argparse.Namespace) -> None:
    import surge

    class Net(surge.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net(args.width)
            self.losses: list[float] = []
            self.started = 0.0
            self.first_step: int | None = None

        def on_train_start(self) -> None:
            self.started = time.perf_counter()  # after set-up: the process group, DDP wrapping, loaders

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            x, y = batch
            if self.first_step is None:
                self.first_step = self.trainer.global_step
            restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
            if args.kill_at == self.trainer.global_step and self.trainer.global_rank == 1 and restart == 0:
                os.kill(os.getpid(), signal.SIGKILL)  # a dead peer: the elastic agents restart the job
            loss = nn.functional.binary_cross_entropy_with_logits(self(x), y)
            if args.record:
                self.losses.append(loss.detach().item())
            if args.log:
                self.log("train_loss", loss, sync_dist=True)
            if args.stop_at is not None and self.trainer.global_rank == 1 and self.trainer.global_step == args.stop_at:
                self.trainer.request_stop("rank 1 alone decided to stop")
            return loss

        def test_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            x, y = batch
            self.log("test_loss", nn.functional.binary_cross_entropy_with_logits(self(x), y), sync_dist=True)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            if args.adam:
                return torch.optim.Adam(self.parameters(), lr=0.01)
            return torch.optim.SGD(self.parameters(), lr=0.1)

    plugins: dict[str, object] = {"progress": False}
    if args.kill_at is not None or args.ckpt_every:
        plugins["checkpoint"] = {"every_n_train_steps": args.ckpt_every or 2, "save_last": True}
    elif not args.log:
        plugins["checkpoint"] = False
    surge.seed_everything(0)
    model = Net()
    loader = DataLoader(make_data(args.size, args.width), batch_size=args.batch, shuffle=True)
    trainer = surge.Trainer(
        strategy=args.strategy,
        devices=2,
        accelerator="cpu",
        max_epochs=args.epochs,
        max_steps=args.max_steps,
        accumulate_grad_batches=args.accumulate,
        default_root_dir=args.out,
        log_every_n_steps=1,
        plugins=plugins,
    )
    start = time.perf_counter()
    resume = args.resume or ("last" if args.kill_at is not None else None)
    trainer.fit(model, train_dataloaders=loader, ckpt_path=resume)
    end = time.perf_counter()
    seconds = end - model.started
    if trainer.global_rank == 0:
        print(f"fit: {end - start:.3f} s, of which set-up {model.started - start:.3f} s")
    assert trainer.module is model, "trainer.module must stay the user's Module"
    if trainer.global_rank == 0 and args.ckpt_every:
        print(f"last checkpoint: {trainer.default_root_dir}")
    tested = (
        trainer.test(model, DataLoader(make_data(args.size, args.width), batch_size=args.batch)) if args.test else None
    )
    _write(
        args.out,
        trainer.global_rank,
        model.losses,
        model.net,
        trainer.global_step,
        seconds,
        trainer.run_dir,
        tested,
        trainer.node_rank,
    )
    if args.kill_at is not None:  # what the restarted attempt began from
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        resumed = {"first_step": model.first_step, "restart": restart}
        torch.save(resumed, os.path.join(args.out, f"resumed{trainer.global_rank}.pt"))


def _write(
    out: str,
    rank: int,
    losses: list[float],
    net: nn.Module,
    step: int,
    seconds: float,
    run_dir: str | None = None,
    tested: object = None,
    node_rank: int = 0,
) -> None:
    # full_tensor(): the whole parameter from its shards (fsdp), a collective every rank takes in the same order
    state = {k: getattr(v, "full_tensor", v.detach)().detach().clone() for k, v in net.state_dict().items()}
    result = {
        "losses": losses,
        "weights": state,
        "step": step,
        "seconds": seconds,
        "run_dir": run_dir,
        "test": tested,
        "node_rank": node_rank,
    }
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["surge", "reference", "lightning"])
    parser.add_argument("out")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--stop-at", type=int, default=None)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--strategy", default="ddp", help="ddp or fsdp")
    parser.add_argument("--adam", action="store_true", help="Adam (per-parameter optimizer state) instead of SGD")
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--ckpt-every", type=int, default=0, help="save last.ckpt every N steps")
    parser.add_argument("--resume", default=None, help="ckpt_path for fit")
    parser.add_argument("--kill-at", type=int, default=None, help="rank 1 SIGKILLs itself at this step, once")
    parser.add_argument("--no-record", dest="record", action="store_false")
    parser.add_argument("--log-metrics", dest="log", action="store_true")
    parser.add_argument("--test", action="store_true", help="trainer.test() after fit (a second process group)")
    args = parser.parse_args()
    {"reference": reference, "lightning": lightning_fit, "surge": surge_fit}[args.mode](args)


if __name__ == "__main__":
    main()
    # Leave without interpreter finalization. With gloo, torch's worker threads can still hold finished async
    # work whose tensors reference Python objects; freeing them while the interpreter tears down aborts the
    # process (SIGABRT, "terminate called without an active exception") after all the work is done, in about
    # one run in ten here, for the hand-written reference loop as much as for Surge. A torch issue.
    import torch.distributed as _dist
    from surge.plugins.distributed import leave_process_group

    leave_process_group() if _dist.is_initialized() else None
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
