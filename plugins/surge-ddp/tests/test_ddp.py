"""The ``ddp`` strategy: environment detection in process, and real 2-process gloo runs on loopback checked
against a hand-written torch DDP loop (``_program.py reference``) on the same data, seeds and sampler."""

from __future__ import annotations

import concurrent.futures
import csv
import socket
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import LAUNCHER_VARS, TinyDataModule, TinyModule, clean_env, launch, launch_workers
from surge_ddp import DDPStrategy, detect, first_host

PROGRAM = Path(__file__).with_name("_program.py")


def _run(out: Path, *args: str, via: str = "workers", env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The program on 2 processes: started by ``launch_workers`` (``via="workers"``: the job without torchrun's
    agent), under torchrun (``"torchrun"``), or as plain ``python`` that relaunches itself (``"python"``)."""
    out.mkdir(parents=True, exist_ok=True)
    argv, full_env = [args[0], str(out), *args[1:]], {**clean_env(), **(env or {})}
    if via == "workers":
        done = launch_workers(PROGRAM, argv, env=full_env)
    elif via in ("torchrun", "python"):
        done = launch(PROGRAM, argv, torchrun=via == "torchrun", env=full_env)
    else:
        raise ValueError(f"via={via!r}: use 'workers', 'torchrun' or 'python'")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def _assert_same(surge_run: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    for rank, (got, want) in enumerate(zip(surge_run, reference, strict=True)):
        assert got["step"] == want["step"], rank
        assert got["losses"] == want["losses"], f"rank {rank}: per-step losses differ"
        for name, tensor in want["weights"].items():
            assert torch.equal(got["weights"][name], tensor), f"rank {rank}: weight {name} differs"


# -- in process ----------------------------------------------------------------------------------------


def test_detects_torchrun_environment() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    topo = detect(env)
    assert (topo.global_rank, topo.local_rank, topo.node_rank, topo.world_size, topo.launcher) == (
        3,
        1,
        1,
        4,
        "torchrun",
    )


def test_detects_slurm_environment_and_its_master_address() -> None:
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_NODELIST": "gpu[017-020,31],cpu1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
    }
    topo = detect(env)
    assert (topo.global_rank, topo.local_rank, topo.node_rank, topo.world_size) == (5, 1, 2, 8)
    assert topo.launcher == "slurm" and topo.master_addr == "gpu017" and topo.master_port == 15000 + 4242
    assert detect({**env, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}).master_addr == "10.0.0.1"
    assert detect({**env, "SLURM_JOB_NAME": "bash"}).launcher == "none"  # an interactive salloc shell
    assert detect({}).launcher == "none"


@pytest.mark.parametrize(
    ("nodelist", "host"), [("node1", "node1"), ("a,b", "a"), ("n[3-5]", "n3"), ("n[7,9]x,m", "n7x"), ("", "127.0.0.1")]
)
def test_first_host_of_a_slurm_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def test_one_device_trains_in_process_without_a_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    trainer = surge.Trainer(
        strategy="ddp",
        devices=1,
        accelerator="cpu",
        max_epochs=1,
        default_root_dir=str(tmp_path),
        plugins={"progress": False},
    )
    assert isinstance(trainer.strategy, DDPStrategy) and trainer.world_size == 1 and trainer.is_global_zero
    assert trainer.strategy.timeout.total_seconds() == 300
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    assert trainer.module is model and trainer.global_step > 0
    assert not torch.distributed.is_initialized()


def test_without_launcher_and_relaunch_off_says_how_to_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SURGE_DDP_RELAUNCH", "0")
    with pytest.raises(surge.SurgeError, match="torchrun --nproc-per-node=2"):
        surge.Trainer(strategy="ddp", devices=2, accelerator="cpu")


def test_settings_come_from_the_environment_for_the_named_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SURGE_DDP_TIMEOUT", "42")
    monkeypatch.setenv("SURGE_DDP_FIND_UNUSED_PARAMETERS", "1")
    strategy = surge.Trainer(strategy="ddp", devices=1, accelerator="cpu").strategy
    assert isinstance(strategy, DDPStrategy)
    assert strategy.timeout.total_seconds() == 42 and strategy.find_unused_parameters
    assert strategy.process_group_backend == "gloo"


# -- two processes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _run(tmp_path_factory.mktemp("reference"), "reference")


@pytest.mark.slow
def test_torchrun_fit_matches_hand_written_ddp(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    """Also: a test after fit reuses the group, and only rank 0 writes the CSV log and the checkpoint."""
    runs = _run(tmp_path, "surge", "--log-metrics", "--test", via="torchrun")
    _assert_same(runs, reference)
    assert runs[1]["run_dir"] is None and runs[0]["run_dir"] is not None
    assert runs[0]["test"] == runs[1]["test"]  # test_loss logged with sync_dist: the same on both ranks
    assert list(tmp_path.glob("surge_runs/*")) == [Path(runs[0]["run_dir"])]
    rows = list(csv.DictReader((Path(runs[0]["run_dir"]) / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows if r["train_loss"]] == list(range(1, reference[0]["step"] + 1))
    assert len(list(tmp_path.glob("surge_runs/*/checkpoints/*.ckpt"))) == 1


@pytest.mark.slow
def test_plain_python_relaunches_itself_under_torchrun(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    _assert_same(_run(tmp_path, "surge", via="python"), reference)


@pytest.mark.slow
def test_gradient_accumulation_skips_sync_between_steps(tmp_path: Path) -> None:
    # 8 batches per rank and epoch, 3 per step: the last window of each epoch is partial
    want = _run(tmp_path / "reference", "reference", "--accumulate", "3")
    _assert_same(_run(tmp_path / "surge", "surge", "--accumulate", "3"), want)


@pytest.mark.slow
@pytest.mark.parametrize(("interval", "stopped"), [(None, 8), ("2", 5)])
def test_a_stop_requested_on_one_rank_stops_every_rank_at_the_same_step(
    tmp_path: Path, interval: str | None, stopped: int
) -> None:
    """Rank 1 alone requests a stop during step 4 (2 epochs of 8 steps). By default (an agreement every 16
    batches and at every epoch's end) both ranks stop at the end of epoch 0; with an agreement every 2 batches,
    the one started after batch 4 carries it and is applied after batch 5."""
    env = {} if interval is None else {"SURGE_DDP_AGREEMENT_INTERVAL": interval}
    runs = _run(tmp_path, "surge", "--stop-at", "3", env=env)
    assert [run["step"] for run in runs] == [stopped, stopped]


@pytest.mark.slow
def test_two_torchrun_agents_on_loopback_make_one_job(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    """``torchrun --nnodes=2``: two elastic agents (two "nodes", one worker each) meet through c10d rendezvous
    on loopback; the job equals the hand-written DDP loop, and each worker knows its node."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rendezvous = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=surge-test"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        agents = [
            pool.submit(launch, PROGRAM, ["surge", str(tmp_path)], nproc=1, launcher_args=rendezvous) for _ in range(2)
        ]
        for agent in agents:
            done = agent.result()
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    runs = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    _assert_same(runs, reference)
    assert sorted(run["node_rank"] for run in runs) == [0, 1]


@pytest.mark.slow
def test_a_killed_rank_restarts_the_job_from_the_last_checkpoint(
    tmp_path: Path, reference: list[dict[str, Any]]
) -> None:
    """``torchrun --max-restarts=1``: rank 1 is SIGKILLed during step 5. The survivor's next collective fails at
    once (the peer's socket is gone; the 5-minute timeout bounds the worse case of a peer that hangs), the
    agent restarts both workers, and they resume from the last checkpoint (step 4) to the same result as an
    uninterrupted run."""
    done = launch(
        PROGRAM, ["surge", str(tmp_path), "--kill-at", "5"], launcher_args=["--standalone", "--max-restarts=1"]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Connection reset by peer" in done.stderr or "Connection closed by peer" in done.stderr  # the survivor
    resumed = [torch.load(tmp_path / f"resumed{rank}.pt") for rank in (0, 1)]
    assert resumed == [{"first_step": 4, "restart": 1}] * 2
    runs = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for got, want in zip(runs, reference, strict=True):
        assert got["step"] == want["step"] and got["losses"] == want["losses"][4:]
        assert all(torch.equal(got["weights"][k], v) for k, v in want["weights"].items())
