"""The GPU check (issue 20): what Surge promises on CUDA, checked in one run on a machine that has CUDA.

``make test-gpu`` runs it (docs/guide.md, "GPU check"). Until it has run on a GPU machine, Surge on CUDA is untested:
the machines the project is developed on have no GPU. Each check is isolated (an exception fails that check,
with its traceback, and the next one runs), and all of them share one time budget (``--budget``, 540 s by
default): a check still running when it is spent fails, the checks after it are not run, and a check stuck in
native code (where Python's alarm cannot reach) ends the process ``--grace`` seconds later with the report so far.

a. ``parity``: single-device training (``accelerator="cuda"``, 32-true) equals a hand-written CUDA loop bit for
   bit: same seed, model (convolutions, batch norm, dropout), data order and AdamW; after the run every
   per-step loss and every tensor of the state dict are compared with ``torch.equal``. Deterministic kernels:
   ``CUBLAS_WORKSPACE_CONFIG`` is set before torch starts CUDA, ``torch.use_deterministic_algorithms(True)``,
   cuDNN deterministic and not benchmarking, TF32 off.
b. ``precision``: ``precision="bf16-mixed"`` and ``"16-mixed"`` against hand-written ``torch.autocast`` loops
   (16-mixed with a ``torch.amp.GradScaler``: scale the loss, backward, unscale, ``scaler.step``,
   ``scaler.update``, as Lightning and Surge do), compared the same way, with the final loss scale and the
   number of skipped steps. Bit identity is required: both sides run the same kernels in the same order
   under the same deterministic flags, and autocast and the scaler add no randomness.
c. ``ddp``: ``strategy="ddp"`` over NCCL on every GPU found (2 or more; with one it is SKIPPED and says so),
   launched with torchrun. Equal bit for bit to a hand-written torch DDP loop on NCCL (as plugins/surge-ddp/
   tests compare on gloo); and close to one process training on the same global batches (every rank's
   batch k together is the single process's batch k), within ``DDP_RTOL``/``DDP_ATOL``: DDP averages the
   ranks' gradients, a different order of float additions than one backward over the whole batch. Also
   reported: rank 0's host synchronisations per step.
d. ``syncs``: host-device synchronisations per training step: ``torch.cuda.set_sync_debug_mode("warn")`` makes
   every synchronising CUDA call warn, and the warnings are counted per step; Python-level reads of a tensor
   on the host (``item``, ``tolist``, ``float()``..., as tests/test_metric_host_sync.py counts them) beside
   them. Steps with a logging write (CSV every ``log_every_n_steps``, three ``self.log`` values per step) and
   steps without one are reported apart. PASS: none on steps without a write, in 32-true and bf16-mixed.
   16-mixed is reported, not judged: ``GradScaler.step`` reads its inf check on the host every step.
e. ``overhead``: benchmarks/overhead.py with ``--device cuda`` (the tiny and the medium model): Surge's
   variants against a raw CUDA loop in the same invocation. Figures only (a timing belongs to its machine):
   PASS means the benchmark ran and every variant took the same number of optimizer steps.

``--device cpu`` is a dry run of the same code on the CPU (ddp: 2 gloo processes; syncs: host reads only, as
the sync debug mode is CUDA's), so that the script's logic is tested where there is no GPU
(tests/test_gpu_check.py). It says nothing about CUDA.

Exit status: 0 every check passed or was skipped with its reason; 1 a check failed or was not run for want of
budget; 2 no CUDA device (``--device cuda`` where torch sees none): nothing checked.

Usage::

    python benchmarks/gpu_check.py --markdown gpu-check.md         # on a GPU machine: the report as markdown too
    python benchmarks/gpu_check.py --checks parity,precision        # some checks only
    python benchmarks/gpu_check.py --device cpu --quick             # the dry run, tiny sizes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import surge
import torch
import torch.distributed as dist
from surge.testing import quiet_trainer_args
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ORIGINAL_ENV = dict(os.environ)  # for the overhead benchmark's child: timed as a user runs it, no flags of ours
# Deterministic GEMMs: cuBLAS reads this when it creates its first handle (at the first CUDA matmul, not at
# `import torch`), so it is set before any check runs; the DDP children inherit it
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

SCRIPT = Path(__file__).resolve()
HERE = SCRIPT.parent
SEED = 1234
CLASSES = 10
DDP_RTOL, DDP_ATOL = 1e-4, 1e-6
"""DDP against one process on the same global batches: float32 sums of the same terms in another order differ
in their last bits (about 1e-7 relative per operation); over the steps of this check that stays orders of
magnitude below these bounds, while a wrong batch, sampler shard or gradient scale is far above them."""
SYNC_WARNING = "synchroniz"  # torch's message: "called a synchronizing CUDA operation"


@dataclass(frozen=True)
class Sizes:
    image: int = 16  # 3 x image x image inputs
    channels: int = 32
    batch: int = 32
    batches: int = 24  # per epoch
    epochs: int = 2
    ddp_width: int = 256
    ddp_batch: int = 16  # per rank
    ddp_batches: int = 16  # per rank and epoch
    sync_batches: int = 12  # per epoch (2 epochs)
    sync_every: int = 5  # log_every_n_steps of the syncs check


QUICK = Sizes(
    image=8, channels=4, batch=8, batches=4, ddp_width=8, ddp_batch=4, ddp_batches=4, sync_batches=6, sync_every=4
)


# -- the workload ---------------------------------------------------------------------------------------------


class GlobalMean(nn.Module):
    """Mean over the spatial dimensions (adaptive average pooling has no deterministic CUDA backward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


def make_net(sizes: Sizes) -> nn.Module:
    c = sizes.channels
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1),
        nn.BatchNorm2d(c),
        nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
        nn.ReLU(),
        GlobalMean(),
        nn.Dropout(0.1),
        nn.Linear(2 * c, CLASSES),
    )


def make_optimizer(params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def make_loader(sizes: Sizes, batches: int | None = None) -> DataLoader:
    n = (batches or sizes.batches) * sizes.batch
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(n, 3, sizes.image, sizes.image, generator=generator)
    y = torch.randint(0, CLASSES, (n,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=sizes.batch, shuffle=True)  # shuffles from the global RNG


class ConvModule(surge.Module):
    def __init__(self, net: nn.Module, log: bool = False) -> None:
        super().__init__()
        self.net = net
        self.log_values = log

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.log_values:  # per step, per epoch (a mean) and one for the progress bar
            self.log("train_loss", loss)
            self.log("loss_epoch", loss, on_step=False, on_epoch=True)
            self.log("shown", loss * 2, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.net.parameters())


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Deterministic kernels, cuDNN without benchmarking, no TF32; the previous settings afterwards."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (torch.are_deterministic_algorithms_enabled(), cudnn.deterministic, cudnn.benchmark)
    saved_tf32 = (matmul.allow_tf32, cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    matmul.allow_tf32 = cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        cudnn.deterministic, cudnn.benchmark = saved[1], saved[2]
        matmul.allow_tf32, cudnn.allow_tf32 = saved_tf32


@dataclass
class Run:
    """What one training run leaves to compare: per-step losses and the final state, on the CPU."""

    losses: torch.Tensor
    weights: dict[str, torch.Tensor]
    steps: int
    extra: dict[str, Any] = field(default_factory=dict)


def snapshot(net: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().cpu().clone() for key, value in net.state_dict().items()}


class LossRecorder:
    """Keeps each training step's loss (a device tensor: no copy to the host during the run)."""

    surge_name = "gpu_check_losses"

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.losses.append(event.outputs.detach().clone())


def surge_run(device: torch.device, sizes: Sizes, precision: str, root: Path) -> Run:
    torch.manual_seed(SEED)
    net = make_net(sizes)
    recorder = LossRecorder()
    trainer = surge.Trainer(
        accelerator=device.type,
        devices=1,
        precision=precision,
        max_epochs=sizes.epochs,
        deterministic=True,
        default_root_dir=str(root),
        plugins=[recorder],
        **quiet_trainer_args(),
    )
    trainer.fit(ConvModule(net), train_dataloaders=make_loader(sizes))
    extra = {}
    if precision == "16-mixed":
        scaler = trainer.precision_plugin
        extra = {"loss scale": scaler.scale, "skipped steps": scaler.skipped_steps}  # type: ignore[attr-defined]
    return Run(torch.stack(recorder.losses).cpu(), snapshot(net), trainer.global_step, extra)


def hand_run(device: torch.device, sizes: Sizes, precision: str) -> Run:
    """The loop a PyTorch user writes: same seed, model, loader and optimizer; each batch moved as Surge moves it."""
    torch.manual_seed(SEED)
    net = make_net(sizes).to(device)
    optimizer = make_optimizer(net.parameters())
    loader = make_loader(sizes)
    dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
    losses: list[torch.Tensor] = []
    steps = skipped = 0
    net.train()
    for _ in range(sizes.epochs):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                loss = F.cross_entropy(net(x), y)
            losses.append(loss.detach().clone())
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                scale = scaler.get_scale()
                scaler.step(optimizer)  # skipped when a gradient is inf/NaN; update() then lowers the scale
                scaler.update()
                skipped += scaler.get_scale() < scale
            optimizer.zero_grad(set_to_none=True)
            steps += 1
    extra = {"loss scale": scaler.get_scale(), "skipped steps": skipped} if scaler is not None else {}
    return Run(torch.stack(losses).cpu(), snapshot(net), steps, extra)


def differences(got: Run, want: Run, exact: bool = True, against: str = "hand-written") -> list[str]:
    """What differs between two runs (empty: nothing); ``exact=False`` compares within DDP_RTOL/DDP_ATOL."""

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return torch.equal(a, b) if exact else torch.allclose(a, b, rtol=DDP_RTOL, atol=DDP_ATOL)

    problems = []
    if got.steps != want.steps:
        problems.append(f"optimizer steps: surge {got.steps}, {against} {want.steps}")
    if got.losses.shape != want.losses.shape:
        problems.append(f"losses recorded: surge {tuple(got.losses.shape)}, {against} {tuple(want.losses.shape)}")
    elif not same(got.losses, want.losses):
        off = got.losses != want.losses if exact else ~torch.isclose(got.losses, want.losses, DDP_RTOL, DDP_ATOL)
        i = int(off.nonzero()[0, 0])
        problems.append(
            f"per-step losses differ from step {i + 1}: surge {got.losses[i].item()!r}, {against} "
            f"{want.losses[i].item()!r}"
        )
    for key, value in want.weights.items():
        mine = got.weights.get(key)
        if mine is None or mine.shape != value.shape:
            problems.append(f"state tensor {key}: missing or of another shape in surge's run")
        elif not same(mine, value):
            diff = (mine.double() - value.double()).abs().max().item()
            problems.append(f"state tensor {key} differs: max |difference| {diff:.3g}")
    for key, value in want.extra.items():
        if got.extra.get(key) != value:
            problems.append(f"{key}: surge {got.extra.get(key)!r}, {against} {value!r}")
    return problems


# -- the checks -----------------------------------------------------------------------------------------------


@dataclass
class Context:
    device: torch.device
    sizes: Sizes
    quick: bool
    tmp: Path
    deadline: float  # time.monotonic() when the budget is spent

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def folder(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.tmp))
        return path


@dataclass
class Result:
    status: str  # PASS, FAIL or SKIPPED
    summary: str
    details: list[str] = field(default_factory=list)


def check_parity(ctx: Context) -> Result:
    with deterministic():
        got = surge_run(ctx.device, ctx.sizes, "32-true", ctx.folder("parity"))
        want = hand_run(ctx.device, ctx.sizes, "32-true")
    figures = [
        f"{want.steps} optimizer steps ({ctx.sizes.epochs} epochs of {ctx.sizes.batches} batches of "
        f"{ctx.sizes.batch}), {len(want.weights)} state tensors; final loss {want.losses[-1].item():.6f}",
        "flags: CUBLAS_WORKSPACE_CONFIG="
        + os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
        + ", torch.use_deterministic_algorithms(True), cudnn.deterministic=True, cudnn.benchmark=False, TF32 off",
    ]
    problems = differences(got, want)
    if problems:
        return Result("FAIL", problems[0], [*problems, *figures])
    return Result("PASS", f"{want.steps} steps: every loss and state tensor bit-identical", figures)


def check_precision(ctx: Context) -> Result:
    parts, details, failed = [], [], False
    for precision in ("bf16-mixed", "16-mixed"):
        if precision == "bf16-mixed" and ctx.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            parts.append("bf16-mixed SKIPPED (this GPU has no bfloat16)")
            continue
        with deterministic():
            got = surge_run(ctx.device, ctx.sizes, precision, ctx.folder(precision))
            want = hand_run(ctx.device, ctx.sizes, precision)
        problems = differences(got, want)
        failed = failed or bool(problems)
        parts.append(f"{precision} {'FAIL' if problems else 'bit-identical'}")
        extra = ", ".join(f"{k} {v}" for k, v in want.extra.items())
        details.append(
            f"{precision}: {want.steps} steps, final loss {want.losses[-1].item():.6f}"
            + (f", {extra}" if extra else "")
        )
        details += [f"{precision}: {problem}" for problem in problems]
    return Result("FAIL" if failed else "PASS", "; ".join(parts), details)


class HostReads(TorchFunctionMode):
    """Counts Python-level reads of a tensor's value on the host by code outside torch (each one a
    device-to-host copy and a stall on an accelerator), as tests/test_metric_host_sync.py does."""

    READS = frozenset(
        {
            torch.Tensor.item,
            torch.Tensor.tolist,
            torch.Tensor.__float__,
            torch.Tensor.__int__,
            torch.Tensor.__bool__,
            torch.Tensor.__index__,
            torch.Tensor.numpy,
            torch.Tensor.cpu,
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.where: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in self.READS:
            frame = sys._getframe(1)
            if not frame.f_globals.get("__name__", "").startswith("torch."):  # torch's own CPU bookkeeping
                self.count += 1
                self.where[f"{frame.f_code.co_filename}:{frame.f_lineno}"] += 1
        return func(*args, **(kwargs or {}))


class SyncWarnings:
    """Counts synchronising CUDA calls: under ``torch.cuda.set_sync_debug_mode("warn")`` each one warns
    (warnings from autograd's backward threads are replayed in the calling thread). On the CPU: nothing."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.records: list[warnings.WarningMessage] = []
        self._catch = warnings.catch_warnings(record=True)

    def __enter__(self) -> SyncWarnings:
        if self.cuda:
            self.records = self._catch.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            self._catch.__exit__(*exc)

    def syncs(self) -> list[str]:
        return [f"{w.filename}:{w.lineno}" for w in self.records if SYNC_WARNING in str(w.message)]


@dataclass
class Step:
    step: int
    wrote: bool
    syncs: int
    reads: int


class StepWindows:
    """Counts syncs and host reads per training step: from its batch's ``train_batch_start`` (or the epoch's start)
    to the next batch's (or the epoch's end), so a step's window holds its forward, backward and optimizer step,
    every handler of its end, the writing of its row (which follows those handlers) and the fetching and moving of
    the next batch. A ``log_metrics`` of the train stage inside the window makes it a step with a write."""

    surge_name = "gpu_check_step_windows"
    surge_kind = "observer"

    def __init__(self, reads: HostReads, syncs: SyncWarnings) -> None:
        self.reads, self.syncs = reads, syncs
        self.steps: list[Step] = []
        self.where: Counter[str] = Counter()  # sync or read locations on steps without a write
        self._step: int | None = None  # the global step of the batch whose window is open, once it has ended
        self._open()

    def _open(self) -> None:
        self._wrote, self._reads, self._syncs = False, self.reads.count, len(self.syncs.syncs())
        self._read_where = Counter(self.reads.where)
        self._step = None

    def _close(self) -> None:
        if self._step is None:
            return
        syncs = self.syncs.syncs()
        step = Step(self._step, self._wrote, len(syncs) - self._syncs, self.reads.count - self._reads)
        if not step.wrote:
            self.where.update(f"sync {s}" for s in syncs[self._syncs :])
            self.where.update({f"read {k}": n for k, n in (self.reads.where - self._read_where).items()})
        self.steps.append(step)
        self._open()

    @surge.hookimpl
    def train_epoch_start(self, event: Any) -> None:
        self._open()

    @surge.hookimpl
    def log_metrics(self, event: Any) -> None:
        if event.stage == "train":
            self._wrote = True

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self._close()  # the previous step's window: its row is written by now

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self._step = event.trainer.global_step

    @surge.hookimpl
    def train_epoch_end(self, event: Any) -> None:
        self._close()


def _spread(values: list[int]) -> str:
    return f"{min(values)}/{statistics.median(values):g}/{max(values)}" if values else "-"


def count_syncs(ctx: Context, precision: str) -> tuple[StepWindows, int, int, list[str]]:
    """One fit with the CSV logger writing every ``sync_every`` steps; returns the windows, the syncs and reads
    outside any step (set-up, epoch ends, teardown) and the run's plugins."""
    cuda = ctx.device.type == "cuda"
    reads, syncs = HostReads(), SyncWarnings(cuda)
    windows = StepWindows(reads, syncs)
    trainer = surge.Trainer(
        accelerator=ctx.device.type,
        devices=1,
        precision=precision,
        max_epochs=2,
        log_every_n_steps=ctx.sizes.sync_every,
        enable_checkpointing=False,
        enable_progress_bar=False,  # its refreshes copy the shown values to the host by design
        enable_model_summary=False,
        default_root_dir=str(ctx.folder(f"syncs-{precision}")),
        plugins=[windows],
    )
    torch.manual_seed(SEED)
    module = ConvModule(make_net(ctx.sizes), log=True)
    with syncs, reads:
        trainer.fit(module, train_dataloaders=make_loader(ctx.sizes, ctx.sizes.sync_batches))
        total_syncs, total_reads = len(syncs.syncs()), reads.count
    outside_syncs = total_syncs - sum(s.syncs for s in windows.steps)
    outside_reads = total_reads - sum(s.reads for s in windows.steps)
    return windows, outside_syncs, outside_reads, trainer.plugin_names


def check_syncs(ctx: Context) -> Result:
    cuda = ctx.device.type == "cuda"
    details = [
        f"2 epochs of {ctx.sizes.sync_batches} steps, CSV written every {ctx.sizes.sync_every} steps, 3 self.log "
        "values per step; progress bar off. Per step: syncs = synchronising CUDA calls "
        + ("(torch.cuda.set_sync_debug_mode)" if cuda else "(n/a on the CPU: CUDA's sync debug mode)")
        + ", reads = Python-level host reads of tensors (item, tolist, float()...)"
    ]
    # the counters must see a known read, or their zeros below would mean nothing
    reads, syncs = HostReads(), SyncWarnings(cuda)
    with syncs, reads:
        torch.ones(1, device=ctx.device).item()
    seen = f"one .item() counted as {reads.count} read(s)" + (f" and {len(syncs.syncs())} sync(s)" if cuda else "")
    details.append(f"counters checked first: {seen}")
    if reads.count != 1 or (cuda and not syncs.syncs()):
        return Result("FAIL", f"the counters do not see a known host read: {seen}; no count could be trusted", details)
    judged = [("32-true", True), ("bf16-mixed", True), ("16-mixed", False)]
    if cuda and not torch.cuda.is_bf16_supported():
        judged = [("32-true", True), ("16-mixed", False)]
        details.append("bf16-mixed not measured: this GPU has no bfloat16")
    failed, parts = False, []
    for precision, judge in judged:
        windows, outside_syncs, outside_reads, plugins = count_syncs(ctx, precision)
        plain = [s for s in windows.steps if not s.wrote]
        writes = [s for s in windows.steps if s.wrote]
        bad = [s.step for s in plain if s.syncs or s.reads]
        how = "judged" if judge else "reported only: torch.amp.GradScaler.step reads its inf check on the host"
        details.append(
            f"{precision} ({how}): {len(plain)} steps without a write: syncs {sum(s.syncs for s in plain)}, "
            f"reads {sum(s.reads for s in plain)} in all; {len(writes)} steps with a write: syncs "
            f"{_spread([s.syncs for s in writes])}, reads {_spread([s.reads for s in writes])} (min/median/max per "
            f"step); outside the steps (set-up, epoch ends, teardown): syncs {outside_syncs}, reads {outside_reads}"
        )
        if bad:
            details.append(f"{precision}: steps without a write that synchronised: {bad}")
            details += [f"{precision}:   {n} x {where}" for where, n in windows.where.most_common(8)]
        if judge and (not plain or not writes):
            failed = True
            details.append(f"{precision}: the run needs steps with and without a write to judge; plugins {plugins}")
        failed = failed or (judge and bool(bad))
        if judge:
            parts.append(f"{precision}: {len(bad)} of {len(plain)} steps without a write synchronised")
    details.append(f"plugins of the runs: {plugins}")
    return Result("FAIL" if failed else "PASS", "; ".join(parts), details)


# -- c: DDP, in torchrun children -----------------------------------------------------------------------------


def make_mlp(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def ddp_data(sizes: Sizes, world: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(world * sizes.ddp_batch * sizes.ddp_batches, sizes.ddp_width, generator=generator)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


def ddp_optimizer(params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


class MLPModule(surge.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = make_mlp(width)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.binary_cross_entropy_with_logits(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return ddp_optimizer(self.net.parameters())


def _hand_ddp_loop(
    net: nn.Module, model: nn.Module, sampler: DistributedSampler[Any], batch: int, device: torch.device, epochs: int
) -> Run:
    optimizer = ddp_optimizer(model.parameters())
    loader = DataLoader(sampler.dataset, batch_size=batch, sampler=sampler)
    losses, steps = [], 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.binary_cross_entropy_with_logits(model(x), y)
            losses.append(loss.detach().clone())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
    return Run(torch.stack(losses).cpu(), snapshot(net), steps)


def ddp_child(mode: str, out: Path, device_type: str, world: int, sizes: Sizes) -> None:
    """``reference`` and ``surge`` run under torchrun (one process per device); ``single`` alone, on the global
    batch. Each process writes ``out/rank<R>.pt``."""
    cuda = device_type == "cuda"
    data = ddp_data(sizes, world)
    rank = int(os.environ.get("RANK", 0))
    with deterministic():
        if mode == "surge":
            surge.seed_everything(0)  # the DistributedSampler's seed (SURGE_GLOBAL_SEED), as the reference's
            module, recorder = MLPModule(sizes.ddp_width), LossRecorder()
            reads, syncs = HostReads(), SyncWarnings(cuda)
            windows = StepWindows(reads, syncs)
            trainer = surge.Trainer(
                strategy="ddp",
                accelerator=device_type,
                devices=world,
                max_epochs=sizes.epochs,
                deterministic=True,
                default_root_dir=str(out),
                plugins=[recorder, windows],
                **quiet_trainer_args(),
            )
            with syncs, reads:
                trainer.fit(module, train_dataloaders=DataLoader(data, batch_size=sizes.ddp_batch, shuffle=True))
            run = Run(torch.stack(recorder.losses).cpu(), snapshot(module.net), trainer.global_step)
            run.extra = {"syncs": [s.syncs for s in windows.steps], "reads": [s.reads for s in windows.steps]}
        elif mode == "reference":
            local = int(os.environ["LOCAL_RANK"])
            device = torch.device("cuda", local) if cuda else torch.device("cpu")
            if cuda:
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
            net = make_mlp(sizes.ddp_width).to(device)
            model = nn.parallel.DistributedDataParallel(net, device_ids=[device] if cuda else None)
            sampler: DistributedSampler[Any] = DistributedSampler(data, world, rank, shuffle=True, seed=0)
            run = _hand_ddp_loop(net, model, sampler, sizes.ddp_batch, device, sizes.epochs)
        else:  # one process, the global batch: every rank's batch k together, in the same permutation
            device = torch.device("cuda", 0) if cuda else torch.device("cpu")
            net = make_mlp(sizes.ddp_width).to(device)
            sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
            run = _hand_ddp_loop(net, net, sampler, sizes.ddp_batch * world, device, sizes.epochs)
    torch.save(run.__dict__, out / f"rank{rank}.pt")
    if dist.is_initialized():  # leave together: a rank tearing its group down under a busy peer can abort it
        dist.barrier()
        dist.destroy_process_group()


def _load(out: Path, ranks: int) -> list[Run]:
    return [Run(**torch.load(out / f"rank{rank}.pt", weights_only=True)) for rank in range(ranks)]


def _launch(args: list[str], nproc: int, torchrun: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    """This script as a DDP child, under torchrun (``nproc`` workers) or alone; on a timeout or an interruption
    the whole process group goes (torchrun's workers with it)."""
    from surge_ddp.testing import clean_env  # the plugin under test: its own tests launch the same way

    # NCCL chooses its algorithm by message size and topology, the same for both runs; pinned all the same, so
    # that the comparison does not rest on its tuning (a user's own setting wins)
    env = clean_env(NCCL_ALGO=os.environ.get("NCCL_ALGO", "Ring"), NCCL_PROTO=os.environ.get("NCCL_PROTO", "Simple"))
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    command = [*(launcher if torchrun else [sys.executable]), str(SCRIPT), *args]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, env=env, stdout=pipe, stderr=pipe, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def check_ddp(ctx: Context) -> Result:
    cuda = ctx.device.type == "cuda"
    if cuda:
        world = torch.cuda.device_count()
        if world < 2:
            return Result(
                "SKIPPED",
                f"{world} CUDA device found: DDP over NCCL needs 2 or more, so it is NOT checked on this machine",
                ["run the check on a machine with 2+ GPUs; the CPU (gloo) path is tested by plugins/surge-ddp/tests"],
            )
        if not dist.is_nccl_available():
            return Result("FAIL", "this torch build has no NCCL: strategy='ddp' on CUDA cannot run")
    else:
        world = 2
    runs: dict[str, list[Run]] = {}
    for mode in ("reference", "surge", "single"):
        out = ctx.folder(f"ddp-{mode}")
        args = ["--ddp-child", mode, str(out), "--device", ctx.device.type, "--world", str(world)]
        if ctx.quick:
            args.append("--quick")
        torchrun = mode != "single"
        done = _launch(args, world, torchrun, timeout=max(1.0, ctx.remaining()))
        if done.returncode != 0:
            tail = (done.stdout[-3000:] + "\n" + done.stderr[-6000:]).strip()
            return Result("FAIL", f"the {mode} run exited with status {done.returncode}", [code(tail)])
        runs[mode] = _load(out, world if torchrun else 1)
    backend = "NCCL" if cuda else "gloo"
    problems = [
        f"rank {rank}: {p}"
        for rank, (got, want) in enumerate(zip(runs["surge"], runs["reference"], strict=True))
        for p in differences(got, want, against="torch DDP")
    ]
    ranks_mean = Run(
        torch.stack([r.losses for r in runs["surge"]]).mean(dim=0), runs["surge"][0].weights, runs["surge"][0].steps
    )
    single = runs["single"][0]
    close = differences(ranks_mean, single, exact=False, against="one process")
    gap = max((ranks_mean.weights[k].double() - v.double()).abs().max().item() for k, v in single.weights.items())
    syncs, reads = runs["surge"][0].extra["syncs"], runs["surge"][0].extra["reads"]
    details = [
        f"{world} processes ({backend}), {runs['reference'][0].steps} steps of {ctx.sizes.ddp_batch} per rank "
        f"(MLP width {ctx.sizes.ddp_width}, SGD with momentum); the single process: batches of "
        f"{ctx.sizes.ddp_batch * world}",
        f"surge vs torch DDP: {'bit-identical on every rank' if not problems else 'DIFFERENT'}",
        f"surge (rank 0) vs one process: max |weight difference| {gap:.3g} "
        f"(tolerance: rtol {DDP_RTOL:g}, atol {DDP_ATOL:g}; losses: the mean over ranks)",
        f"rank 0 per step: syncs {_spread(syncs)}, host reads {_spread(reads)} (min/median/max; "
        + ("CUDA sync debug mode)" if cuda else "syncs n/a on the CPU)"),
        *problems,
        *[f"vs one process: {p}" for p in close],
    ]
    if problems or close:
        return Result("FAIL", (problems or close)[0], details)
    return Result("PASS", f"{world} x {backend}: equal to torch DDP bit for bit; one process within {gap:.2g}", details)


# -- e: the overhead benchmark --------------------------------------------------------------------------------


def check_overhead(ctx: Context) -> Result:
    if ctx.quick:
        runs = {"tiny": ["--rounds", "1", "--epochs", "1", "--batches", "5"]}  # a smoke run
    else:
        runs = {
            "tiny": ["--rounds", "5", "--epochs", "2", "--batches", "200"],
            "medium": ["--model", "medium", "--rounds", "5", "--epochs", "1", "--batches", "100"],
        }
    details = [
        "| model | variant | us/step | ratio vs raw (wall) | ratio vs raw (host CPU time) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    goals, problems, parts = [], [], []
    for model, extra in runs.items():
        out = ctx.folder("overhead") / "overhead.json"
        command = [sys.executable, str(HERE / "overhead.py"), "--device", ctx.device.type, "--no-empty-plugins"]
        done = subprocess.run(
            [*command, "--json", str(out), *extra],
            capture_output=True,
            text=True,
            env=ORIGINAL_ENV,
            timeout=max(1.0, ctx.remaining()),
        )
        if done.returncode != 0:
            return Result("FAIL", f"overhead.py ({model}) exited with {done.returncode}", [code(done.stderr[-6000:])])
        result = json.loads(out.read_text())
        wall, cpu = result["summary"]["wall"], result["summary"]["cpu"]
        for name, row in wall.items():
            details.append(
                f"| {model} | {name} | {row['median_us_per_step']:.1f} | {row['ratio_vs_raw']:.3f} | "
                f"{cpu[name]['ratio_vs_raw']:.3f} |"
            )
        steps = {name: info["global_step"] for name, info in result["info"].items() if "global_step" in info}
        if len(set(steps.values())) != 1:
            problems.append(f"{model}: the variants took different numbers of steps: {steps}")
        goals += [f"{model}: {line[2:]}" for line in done.stdout.splitlines() if line.startswith("- goal")]
        parts.append(", ".join(f"{n} {wall[n]['ratio_vs_raw']:.2f}x" for n in ("surge-minimal", "surge-default")))
    details += ["", *goals, "timing is the machine's: figures only, no threshold", *problems]
    summary = "vs raw: " + "; ".join(f"{m} {p}" for m, p in zip(runs, parts, strict=True))
    return Result("FAIL" if problems else "PASS", problems[0] if problems else summary, details)


# -- the runner and the report ---------------------------------------------------------------------------------


def code(text: str) -> str:
    """A detail line that is a block of output (a traceback, a child's stderr), shown verbatim."""
    return f"```\n{text.strip()}\n```"


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: Callable[[Context], Result]


CHECKS = (
    Check("parity", "a. single-device training vs a hand-written loop, bit for bit", check_parity),
    Check("precision", "b. 16-mixed and bf16-mixed vs hand-written autocast loops", check_precision),
    Check("ddp", "c. DDP vs hand-written torch DDP and vs one process", check_ddp),
    Check("syncs", "d. host-device synchronisations per training step", check_syncs),
    Check("overhead", "e. per-step overhead vs a raw loop on the device", check_overhead),
)


@dataclass
class Outcome:
    check: Check
    result: Result
    seconds: float


class BudgetSpent(Exception):
    pass


class Report:
    def __init__(self, header: list[str], markdown: Path | None) -> None:
        self.header, self.markdown = header, markdown
        self.outcomes: list[Outcome] = []
        self.started = time.monotonic()

    @property
    def failed(self) -> bool:
        return any(o.result.status == "FAIL" for o in self.outcomes)

    def render(self, note: str | None = None) -> str:
        counts = Counter(o.result.status for o in self.outcomes)
        verdict = "FAIL" if self.failed else "PASS"
        lines = [
            "# Surge GPU check",
            "",
            *self.header,
            f"- time: {time.monotonic() - self.started:.1f} s",
            f"- result: **{verdict}** ({counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIPPED']} skipped)",
            "",
            "| check | result | seconds | summary |",
            "| --- | --- | ---: | --- |",
        ]
        lines += [
            f"| {o.check.title} | {o.result.status} | {o.seconds:.1f} | {o.result.summary.replace('|', '/')} |"
            for o in self.outcomes
        ]
        for o in self.outcomes:
            lines += ["", f"## {o.check.title}: {o.result.status}", "", o.result.summary]
            if o.result.details:
                lines += ["", *(d if d.startswith(("|", "```")) or not d else f"- {d}" for d in o.result.details)]
        if note:
            lines += ["", note]
        return "\n".join(lines) + "\n"

    def finish(self, note: str | None = None) -> None:
        text = self.render(note)
        print(text, flush=True)
        if self.markdown is not None:
            self.markdown.write_text(text)


def run_checks(checks: list[Check], ctx: Context, report: Report, budget: float, grace: float = 30.0) -> None:
    """Run ``checks`` in order, each in isolation, within ``budget`` seconds from ``ctx.deadline``'s start.

    A check that raises fails with its traceback; one still running when the budget is spent is interrupted
    (SIGALRM) and fails; the checks after it are not run (and fail: an incomplete check is not a pass). One
    that Python cannot interrupt (stuck in native code) ends the process ``grace`` seconds later, with the
    report of what finished."""
    running: list[Check] = []

    def hard_stop() -> None:
        name = running[-1].name if running else "?"
        report.finish(f"**HARD STOP**: the check `{name}` did not return within the budget + {grace:g} s; exiting")
        os._exit(1)

    def alarm(signum: int, frame: Any) -> None:
        raise BudgetSpent(f"the budget of {budget:g} s (--budget) was spent while this check ran")

    watchdog = threading.Timer(max(0.0, ctx.remaining()) + grace, hard_stop)
    watchdog.daemon = True
    watchdog.start()
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        for check in checks:
            left = ctx.remaining()
            started = time.monotonic()
            if left <= 0:
                result = Result("FAIL", f"not run: the budget of {budget:g} s was spent before it (--budget, --checks)")
            else:
                running.append(check)
                signal.setitimer(signal.ITIMER_REAL, left)
                try:
                    result = check.run(ctx)
                except BaseException as exc:  # every failure is reported, then the next check runs
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    summary = f"{type(exc).__name__}: {exc}".splitlines()[0]
                    result = Result("FAIL", summary, [code(traceback.format_exc())])
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            report.outcomes.append(Outcome(check, result, time.monotonic() - started))
            print(f"[{check.name}] {result.status}: {result.summary}", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGALRM, previous)
        watchdog.cancel()


def _nccl_version() -> str:
    if not dist.is_nccl_available():
        return "none"
    try:
        version = torch.cuda.nccl.version()
    except Exception as exc:  # the header must not stop the checks
        return f"unknown ({type(exc).__name__}: {exc})"
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def header(device: torch.device) -> list[str]:
    lines = []
    if device.type == "cuda":
        names = Counter(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        nccl = _nccl_version()
        lines += [
            "- mode: CUDA",
            f"- devices: {', '.join(f'{n} x {name}' for name, n in names.items())} (CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}, NCCL {nccl})",
        ]
    else:
        lines += ["- mode: **CPU dry run**: the script's logic on the CPU; it says nothing about CUDA"]
    lines.append(
        f"- torch {torch.__version__}, surge {surge.__version__}, Python {platform.python_version()}, "
        f"{platform.platform()}"
    )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the dry run (default cuda)")
    parser.add_argument("--markdown", type=Path, help="also write the report to this markdown file")
    names = [c.name for c in CHECKS]
    parser.add_argument(
        "--checks", default=",".join(names), help=f"comma-separated, of {', '.join(names)} (default: all)"
    )
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all the checks (default 540)")
    parser.add_argument("--grace", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (numbers meaningless)")
    parser.add_argument("--ddp-child", nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.checks = [name.strip() for name in args.checks.split(",") if name.strip()]
    unknown = sorted(set(args.checks) - set(names))
    if unknown:
        parser.error(f"--checks: unknown {unknown}; choose among {names}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    surge.configure_logging()  # warnings and errors only, as the `surge` command
    sizes = QUICK if args.quick else Sizes()
    if args.ddp_child:
        mode, out = args.ddp_child
        ddp_child(mode, Path(out), args.device, args.world, sizes)
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        text = (
            "# Surge GPU check\n\nno CUDA device: nothing checked (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda}). Run it on a GPU machine with a CUDA build of "
            'torch (`make test-gpu TORCH_SPEC=... TORCH_INDEX_URL=...`, docs/guide.md, "GPU check"), or the CPU dry run: '
            "--device cpu. Exit status 2.\n"
        )
        print(text, end="")
        if args.markdown is not None:
            args.markdown.write_text(text)
        return 2
    report = Report(
        [*header(device), f"- budget: {args.budget:g} s, sizes: {'quick' if args.quick else 'full'}"], args.markdown
    )
    with tempfile.TemporaryDirectory(prefix="surge-gpu-check-") as tmp:
        ctx = Context(device, sizes, args.quick, Path(tmp), time.monotonic() + args.budget)
        chosen = [c for c in CHECKS if c.name in args.checks]
        run_checks(chosen, ctx, report, args.budget, args.grace)
    for check in CHECKS:
        if check not in chosen:
            report.outcomes.append(Outcome(check, Result("SKIPPED", "not selected (--checks)"), 0.0))
    report.outcomes.sort(key=lambda o: CHECKS.index(o.check))
    report.finish()
    return 1 if report.failed else 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Without interpreter finalization: a DDP child's process group (gloo's threads) can abort a finishing
    # process there, after all its work is done (see plugins/surge-ddp/tests/_program.py)
    os._exit(status)
