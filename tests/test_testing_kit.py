"""``surge.testing`` as a pytest plugin: opt-in (``pytest_plugins = ["surge.testing"]`` or ``-p surge.testing``),
so that an unrelated test suite in an environment where surge is installed imports neither surge nor torch;
and its tiny fit, which trains the same weights every time.

The pytest sessions are real ones, in child processes of this venv's interpreter (where surge is installed),
in a temporary directory outside this repository (so that its conftest files do not apply).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
import torch
from surge.testing import PluginEnv, launch_workers, quiet_trainer_args, run_tiny_fit

UNRELATED_TEST = """
import json, sys

def test_an_unrelated_suite():
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("surge", "torch"))
    finders = [repr(f) for f in sys.meta_path if getattr(f, "__module__", "").startswith("surge")]
    with open("host.json", "w") as out:
        json.dump({"loaded": loaded, "finders": finders}, out)
"""

KIT_TEST = """
import surge
from loguru import logger

def test_the_kit(tiny_fit, plugin_env, make_trainer):
    assert tiny_fit().trainer.global_step == 2

def test_surge_records_reach_a_test_sink():
    seen = []
    sink = logger.add(lambda message: seen.append(message.record["message"]), level="DEBUG")
    try:
        surge.seed_everything(0)
    finally:
        logger.remove(sink)
    assert "seed set to 0" in seen
"""


def _pytest(directory: Path, *args: str) -> str:
    rc, out, err = dists.start(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], dists.child_env(), directory
    ).wait()
    assert rc == 0, f"pytest {' '.join(args)} in {directory} failed (rc={rc})\n{out}\n{err}"
    return out


@pytest.mark.slow
def test_an_unrelated_pytest_session_imports_neither_surge_nor_torch(tmp_path: Path) -> None:
    (tmp_path / "test_unrelated.py").write_text(UNRELATED_TEST)
    _pytest(tmp_path)
    host = json.loads((tmp_path / "host.json").read_text())
    assert host == {"loaded": [], "finders": []}


@pytest.mark.slow
@pytest.mark.parametrize("opt_in", ["conftest", "-p"])
def test_a_session_that_opts_in_gets_the_fixtures(tmp_path: Path, opt_in: str) -> None:
    (tmp_path / "test_kit.py").write_text(KIT_TEST)
    if opt_in == "conftest":
        (tmp_path / "conftest.py").write_text('pytest_plugins = ["surge.testing"]\n')
    out = _pytest(tmp_path, *(["-p", "surge.testing"] if opt_in == "-p" else []))
    assert "2 passed" in out


def test_the_failing_import_finder_is_installed_only_while_a_plugin_env_needs_it() -> None:
    def kit_finders() -> list[object]:
        return [f for f in sys.meta_path if getattr(f, "__module__", "") == "surge.testing"]

    assert kit_finders() == []  # importing surge.testing adds nothing to sys.meta_path
    with PluginEnv() as env:
        env.add_failing("kit-broken", error="kit-broken is broken on purpose")
        assert len(kit_finders()) == 1
        with pytest.raises(RuntimeError, match="kit-broken is broken on purpose"):
            __import__("_surge_testing_missing_kit_broken")
    assert kit_finders() == []
    with pytest.raises(ModuleNotFoundError):
        __import__("_surge_testing_missing_kit_broken")


def test_two_tiny_fits_train_the_same_weights(tmp_path: Path) -> None:
    host_rng = torch.random.get_rng_state()
    first, second, other = (
        run_tiny_fit(default_root_dir=str(tmp_path / name), seed=seed)
        for name, seed in (("first", 0), ("second", 0), ("other", 1))
    )
    assert torch.equal(torch.random.get_rng_state(), host_rng)  # the test's own generator is left as it was

    def weights(fit: object) -> dict[str, torch.Tensor]:
        return fit.trainer.lightning_module.state_dict()  # type: ignore[attr-defined,no-any-return]

    a, b, c = weights(first), weights(second), weights(other)
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # another seed, other weights


def test_quiet_trainer_args_turn_off_what_prints_or_writes(tmp_path: Path) -> None:
    loud = run_tiny_fit(default_root_dir=str(tmp_path / "loud"))
    (tmp_path / "quiet").mkdir()
    quiet = run_tiny_fit(default_root_dir=str(tmp_path / "quiet"), **quiet_trainer_args())
    assert set(loud.trainer.plugin_names) - set(quiet.trainer.plugin_names) == {
        "checkpoint",
        "csv",
        "model_summary",
        "progress",
    }
    assert list((tmp_path / "quiet").iterdir()) == []  # no run directory: nothing was written
    with_csv = run_tiny_fit(default_root_dir=str(tmp_path / "csv"), **quiet_trainer_args(logger=["csv"]))
    assert set(with_csv.trainer.plugin_names) - set(quiet.trainer.plugin_names) == {"csv"}
    log_dir = with_csv.trainer.log_dir
    assert log_dir is not None and (Path(log_dir) / "metrics.csv").exists()


# -- issue 26: the tiny fit records the events plugins publish, as the docs say ---------------------------------

from dataclasses import dataclass  # noqa: E402
from typing import ClassVar  # noqa: E402

import surge  # noqa: E402
from surge.events import Event  # noqa: E402


@dataclass(frozen=True, slots=True)
class BatchNoted(Event):
    """After the noter noted a training batch: fires from its ``train_batch_end`` handler. ``batch_idx``: the batch.

    May change: nothing."""

    name: ClassVar[str] = "batch_noted"
    batch_idx: int


class Noter:
    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        event.trainer.emit(BatchNoted(event.trainer, event.batch_idx))


@pytest.mark.parametrize("by", ["name", "settings"])
def test_the_tiny_fit_records_the_events_plugins_publish(plugin_env: PluginEnv, tmp_path: Path, by: str) -> None:
    plugin_env.add(surge.Plugin(name="noter", kind="participant", factory=Noter, events=[BatchNoted]))
    fit = run_tiny_fit(["noter"] if by == "name" else {"noter": {}}, default_root_dir=str(tmp_path))
    assert [e.batch_idx for e in fit.of("batch_noted")] == [0, 1]  # type: ignore[attr-defined]
    names = fit.names()
    assert names.count("batch_noted") == 2
    # in call order: each one between its batch's train_batch_end (the noter's handler emits it there) and the next
    first = names.index("batch_noted")
    assert names[first - 1] != "train_batch_end" or names[first + 1] == "train_batch_end"
    assert fit.trainer.event_order("batch_noted")[-1] == "tiny_fit_recorder"


def test_a_run_without_the_publisher_records_no_such_event(tmp_path: Path) -> None:
    fit = run_tiny_fit(default_root_dir=str(tmp_path))  # the class exists, no plugin of the run declares it
    assert fit.of("batch_noted") == [] and "batch_noted" not in fit.names()


# -- launch_workers: torchrun's single-node job without its agent ---------------------------------------------

_WORKER = """
import os, pathlib, signal, sys, time
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
say = lambda text: os.write(1, (text + "\\n").encode())  # one write a line: the workers share one file
say(" ".join(f"{n}={os.environ.get(n)}" for n in names))
mode, rank, here = sys.argv[1], os.environ["RANK"], pathlib.Path(sys.argv[0]).parent
if mode == "fail" and rank == "1":
    while len(list(here.glob("ready-*"))) < 2:  # the others are waiting with their handlers in place
        time.sleep(0.01)
    sys.exit(3)
if mode in ("fail", "hang"):
    def stop(signum, frame):
        say(f"rank {rank} got SIGTERM")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    (here / f"ready-{rank}").touch()
    time.sleep(120)
"""


def _workers(tmp_path: Path, mode: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "worker.py"
    program.write_text(_WORKER)
    return launch_workers(program, [mode], nproc=3, **kwargs)


def test_launch_workers_gives_each_worker_torchruns_variables(tmp_path: Path) -> None:
    done = _workers(tmp_path, "ok")
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert [line.split()[:2] for line in lines] == [[f"RANK={r}", f"LOCAL_RANK={r}"] for r in range(3)]
    ports = {line.split()[-1] for line in lines}
    assert len(ports) == 1 and ports != {"MASTER_PORT=None"}  # one rendezvous address for the job
    assert all("WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1" in line for line in lines)


def test_launch_workers_stops_the_job_when_one_worker_fails(tmp_path: Path) -> None:
    start = time.monotonic()
    done = _workers(tmp_path, "fail")
    assert time.monotonic() - start < 60  # the others were stopped, not waited for (they sleep 120 s)
    assert done.returncode == 1  # torchrun's code for a failed job
    assert sorted(line for line in done.stdout.splitlines() if "SIGTERM" in line) == [
        "rank 0 got SIGTERM",
        "rank 2 got SIGTERM",
    ]
    assert "launch_workers: rank 1 exited with 3" in done.stderr


def test_launch_workers_kills_every_worker_past_the_timeout(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        _workers(tmp_path, "hang", timeout=3)
