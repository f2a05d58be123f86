"""``surge.ProcessGroupStrategy``, the public base of torch.distributed strategies (issue 18): a third-party
strategy written on it from the public API alone (``_replicate_plugin.py``: replicas whose gradients are averaged
by one all-reduce before each optimizer step) trains like surge-ddp's ``ddp`` on the same data in real 2-process
gloo runs; its settings, refusals and collectives come from the base; the core names no sharding strategy."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest
import surge
import torch
from _replicate_plugin import ReplicateStrategy, plugin
from surge.testing import LAUNCHER_VARS, PluginEnv, TinyDataModule, TinyModule, launch_workers, quiet_trainer_args
from test_public_contract import problems_in  # tests/ is on sys.path (pytest `pythonpath`)

HERE = Path(__file__).parent
CHILD = HERE / "_replicate_child.py"


@pytest.fixture
def replicate(plugin_env: PluginEnv, monkeypatch: pytest.MonkeyPatch) -> PluginEnv:
    """The third-party plugin discoverable as if installed, in a process no launcher started."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    plugin_env.add(plugin, distribution="acme-replicate")
    return plugin_env


# -- in process ----------------------------------------------------------------------------------------------


def test_the_plugin_is_written_from_the_public_api_alone() -> None:
    for source in (HERE / "_replicate_plugin.py", HERE / "_replicate_child.py"):
        assert problems_in(source) == []
        imported = {
            alias.name if isinstance(node, ast.Import) else node.module or ""
            for node in ast.walk(ast.parse(source.read_text()))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        assert not [name for name in imported if name.startswith("surge_")], imported  # no first-party plugin


def test_settings_come_from_variables_named_after_the_strategy(
    replicate: PluginEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SURGE_REPLICATE_TIMEOUT", "42")
    monkeypatch.setenv("SURGE_REPLICATE_SYNC_BATCHNORM", "yes")
    monkeypatch.setenv("SURGE_DDP_TIMEOUT", "7")  # another strategy's: not read
    strategy = surge.Trainer(strategy="replicate", devices=1, accelerator="cpu", **quiet_trainer_args()).strategy
    assert isinstance(strategy, ReplicateStrategy) and isinstance(strategy, surge.ProcessGroupStrategy)
    assert strategy.timeout.total_seconds() == 42 and strategy.sync_batchnorm
    assert strategy.process_group_backend == "gloo" and strategy.env_name("BACKEND") == "SURGE_REPLICATE_BACKEND"
    monkeypatch.setenv("SURGE_REPLICATE_BACKEND", "mpi")
    strategy = surge.Trainer(strategy="replicate", devices=1, accelerator="cpu", **quiet_trainer_args()).strategy
    assert isinstance(strategy, ReplicateStrategy) and strategy.process_group_backend == "mpi"


def test_the_agreement_interval_is_a_setting_and_a_bad_one_is_refused_naming_it(
    replicate: PluginEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def strategy() -> surge.Strategy:
        args = {**quiet_trainer_args(), "default_root_dir": str(tmp_path)}
        return surge.Trainer(strategy="replicate", devices=1, accelerator="cpu", **args).strategy

    assert strategy().agreement_interval == 16  # the documented default
    monkeypatch.setenv("SURGE_REPLICATE_AGREEMENT_INTERVAL", "4")
    assert strategy().agreement_interval == 4
    for bad in ("0", "four", "-2"):
        monkeypatch.setenv("SURGE_REPLICATE_AGREEMENT_INTERVAL", bad)
        with pytest.raises(surge.ConfigError, match=f"SURGE_REPLICATE_AGREEMENT_INTERVAL: '{bad}' is not a whole"):
            strategy()
    monkeypatch.delenv("SURGE_REPLICATE_AGREEMENT_INTERVAL")
    with pytest.raises(surge.ConfigError, match="agreement_interval: 0 is not a whole number"):
        ReplicateStrategy(surge.Trainer(**quiet_trainer_args()).accelerator, [0], agreement_interval=0)
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_one_process_trains_without_a_process_group_and_collectives_are_local(
    replicate: PluginEnv, tmp_path: Path
) -> None:
    trainer = surge.Trainer(
        strategy="replicate",
        devices=1,
        accelerator="cpu",
        max_epochs=1,
        **quiet_trainer_args(default_root_dir=str(tmp_path)),
    )
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    strategy = trainer.strategy
    assert isinstance(strategy, ReplicateStrategy)
    assert trainer.global_step > 0 and strategy.averaged_steps == 0 and not torch.distributed.is_initialized()
    assert (strategy.global_rank, strategy.local_rank, strategy.world_size, strategy.distributed) == (0, 0, 1, False)
    value = torch.tensor([1.0, 2.0])
    assert torch.equal(strategy.all_gather(value), value.unsqueeze(0))
    assert strategy.reduce(value) is value and strategy.reduce_async(value, "max")() is value
    assert strategy.broadcast("x") == "x" and strategy.reduce_boolean_decision(True)


def test_without_launcher_and_relaunch_off_names_the_strategy_and_its_switch(
    replicate: PluginEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SURGE_REPLICATE_RELAUNCH", "0")
    with pytest.raises(surge.SurgeError) as info:
        surge.Trainer(strategy="replicate", devices=2, accelerator="cpu")
    assert str(info.value).startswith(
        "strategy 'replicate' needs 2 processes, but this process was not started by a launcher and "
        "SURGE_REPLICATE_RELAUNCH=0 turns the self-relaunch off; start it with `torchrun --nproc-per-node=2"
    )


def test_a_strategy_without_a_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Nameless(surge.ProcessGroupStrategy):
        pass

    accelerator = surge.Trainer(accelerator="cpu", **quiet_trainer_args()).accelerator
    with pytest.raises(surge.ConfigError, match=re.escape("Nameless sets no `name`")):
        Nameless(accelerator, [0])


def test_a_strategy_of_several_processes_without_all_gather_says_so() -> None:
    class Pretend(surge.Strategy):
        name: ClassVar[str] = "pretend"

        @property
        def world_size(self) -> int:
            return 2

    accelerator = surge.Trainer(accelerator="cpu", **quiet_trainer_args()).accelerator
    with pytest.raises(surge.SurgeError, match="strategy 'pretend' runs 2 processes but does not implement all_gather"):
        Pretend(accelerator, [0]).all_gather(torch.zeros(1))
    assert surge.Strategy(accelerator, [0]).all_gather(torch.ones(2)).shape == (1, 2)


def test_the_core_names_no_sharding_strategy() -> None:
    """What a sharded checkpoint needs is in its file (``surge.checkpoint.sharded_message``); the one table of
    first-party names, for install hints, is the exception."""
    core = HERE.parent / "core" / "surge"
    named = [
        f"{path.relative_to(core)}:{number}"
        for path in sorted(core.rglob("*.py"))
        if path.name != "_first_party.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "fsdp" in line.lower()
    ]
    assert named == []


# -- two processes -------------------------------------------------------------------------------------------


def _run(out: Path, strategy: str) -> list[dict[str, Any]]:
    out.mkdir(parents=True)
    done = launch_workers(CHILD, [strategy, str(out)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


@pytest.mark.slow
def test_a_third_party_strategy_trains_like_ddp(tmp_path: Path) -> None:
    """Same data, seeds and sampler: per-step losses and final weights equal to surge-ddp's on both replicas,
    bit for bit (both divide each gradient by the world size, then sum it over two processes: one addition,
    whatever the order; the flat buffer and DDP's buckets only place the elements differently)."""
    mine, ddp = _run(tmp_path / "replicate", "replicate"), _run(tmp_path / "ddp", "ddp")
    assert [run["strategy"] for run in mine + ddp] == ["ReplicateStrategy"] * 2 + ["DDPStrategy"] * 2
    steps = 2 * 64 // 2 // 4  # 2 epochs of 64 samples, half per process, batches of 4
    for rank, (got, want) in enumerate(zip(mine, ddp, strict=True)):
        assert got["batches"] == want["batches"] == [8, 8], rank  # each process trained on its half
        assert got["averaged_steps"] == steps and len(got["losses"]) == len(want["losses"]) == steps
        assert got["losses"] == want["losses"], rank
        for name, tensor in want["weights"].items():
            assert torch.equal(got["weights"][name], tensor), f"rank {rank}: weight {name} differs"
    for name, tensor in mine[0]["weights"].items():
        assert torch.equal(mine[1]["weights"][name], tensor), f"the replicas differ in {name}"
    assert mine[0]["losses"] != mine[1]["losses"]  # different data on each process, one model
    for run in mine + ddp:  # the base class's collectives over the real group
        assert torch.equal(run["gathered"], torch.tensor([[0, 0], [1, 10]]))
        assert (run["mean"], run["max_async"], run["broadcast"]) == (0.5, 1, "from rank 0")
        assert run["any"] and not run["all"]
