"""Helpers for tests that launch real multi-process jobs on one machine (used by surge-ddp's and surge-fsdp's
own tests; usable by any plugin that needs a distributed test)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LAUNCHER_VARS", "clean_env", "launch"]

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID")
"""What a launcher sets: a test's child must not inherit them from a test runner started under one."""


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without launcher and SLURM variables, one thread per process, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def launch(
    program: str | Path,
    args: Sequence[str],
    *,
    nproc: int = 2,
    torchrun: bool = True,
    launcher_args: Sequence[str] = ("--standalone",),
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``program`` with ``args`` under ``python -m torch.distributed.run`` (``nproc`` workers), or plainly
    (``torchrun=False``), and return the finished process with its output captured."""
    launcher = [sys.executable, "-m", "torch.distributed.run", *launcher_args, f"--nproc-per-node={nproc}"]
    command = [*(launcher if torchrun else [sys.executable]), str(program), *args]
    return subprocess.run(command, env=env or clean_env(), capture_output=True, text=True, timeout=timeout)
