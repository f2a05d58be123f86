"""Where this process stands in the job, read from its launcher's environment (torchrun or SLURM), and the
self-relaunch through torch's own elastic launcher when there is no launcher."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import surge
from loguru import logger

RELAUNCH_ENV = "SURGE_DDP_RELAUNCH"
"""``0`` turns the self-relaunch off (an un-launched process with several devices then raises instead)."""


@dataclass(frozen=True)
class Topology:
    global_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    launcher: str  # "torchrun" (or any launcher setting RANK/WORLD_SIZE), "slurm", or "none"
    master_addr: str | None = None
    master_port: int | None = None


def detect(environ: dict[str, str] | os._Environ[str] | None = None) -> Topology:
    """The topology the environment describes; ``launcher="none"`` for a plain ``python script.py``."""
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


def relaunch(nproc: int, num_nodes: int) -> None:
    """Run this same program under ``python -m torch.distributed.run --standalone`` with ``nproc`` workers,
    wait for it, and leave with its exit status (``SystemExit``): the workers ran the whole program."""
    if os.environ.get(RELAUNCH_ENV, "1") == "0":
        raise surge.SurgeError(
            f"strategy 'ddp' needs {nproc * num_nodes} processes, but this process was not started by a launcher "
            f"and {RELAUNCH_ENV}=0 turns the self-relaunch off; start it with "
            f"`torchrun --nproc-per-node={nproc} script.py` (or srun under SLURM)"
        )
    if num_nodes > 1:
        raise surge.SurgeError(
            f"strategy 'ddp' with num_nodes={num_nodes} needs a launcher on every node: run "
            f"`torchrun --nnodes={num_nodes} --nproc-per-node={nproc} --rdzv-backend=c10d "
            "--rdzv-endpoint=HOST:PORT script.py` on each node, or srun under SLURM"
        )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    command += ["--", *_program()]  # "--": no argument of the program is read as a launcher option
    logger.info("strategy 'ddp': relaunching {} processes: {}", nproc, " ".join(command))
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


def _program() -> list[str]:
    """This program's command line for torchrun: the script and its arguments, or ``-m module``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # python -m package
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        raise surge.SurgeError(
            "strategy 'ddp' cannot relaunch an interactive session or `python -c`; put the code in a script and "
            "start it with `torchrun --nproc-per-node=N script.py` (or `python script.py`)"
        )
    return [script, *sys.argv[1:]]
