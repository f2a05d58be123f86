"""The ``fsdp`` strategy: settings and unit choice in process; real 2-process gloo runs on loopback (the
surge-ddp test program with ``--strategy fsdp``) checked against the hand-written torch DDP loop, and
sharded and full checkpoints resumed exactly."""

from __future__ import annotations

import ast
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import LAUNCHER_VARS, TinyDataModule, TinyModule, clean_env, launch_workers
from surge_fsdp import FSDPStrategy, consolidate
from torch import nn

PROGRAM = Path(__file__).parents[2] / "surge-ddp" / "tests" / "_program.py"


def _run(out: Path, *args: str, **env: str) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    done = launch_workers(PROGRAM, [args[0], str(out), *args[1:]], env=clean_env(**env))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def _assert_same_weights(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    for rank, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a["step"] == b["step"], rank
        for name, tensor in b["weights"].items():
            assert torch.equal(a["weights"][name], tensor), f"rank {rank}: weight {name} differs"


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


# -- in process ----------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(8), Block(8)])
        self.big = nn.Linear(32, 32)  # 1056 parameters
        self.head = nn.Linear(8, 1)  # 9 parameters


def _strategy(**settings: Any) -> FSDPStrategy:
    accelerator = surge.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False).accelerator
    return FSDPStrategy(accelerator, [0], **settings)


def test_units_are_the_named_classes_and_the_large_modules_children_first(no_launcher: None) -> None:
    net = Net()
    assert _strategy()._units_of(net) == []  # by default the whole model is one unit
    assert _strategy(wrap=[Block])._units_of(net) == list(net.blocks)
    assert _strategy(wrap=["Block"])._units_of(net) == list(net.blocks)
    assert _strategy(min_num_params=1000)._units_of(net) == [net.big]
    # a parent counts only the parameters its sharded children do not hold
    assert _strategy(wrap=[Block], min_num_params=100)._units_of(net) == [*net.blocks, net.big]


def test_bad_settings_are_refused_before_anything_starts(no_launcher: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(surge.ConfigError, match="state_dict_type"):
        _strategy(state_dict_type="partial")
    with pytest.raises(surge.ConfigError, match="min_num_params"):
        _strategy(min_num_params=0)
    with pytest.raises(surge.ConfigError, match="trainer.strategy.wrap"):
        _strategy(wrap=[42])
    monkeypatch.setenv("SURGE_FSDP_STATE_DICT_TYPE", "full")
    monkeypatch.setenv("SURGE_FSDP_WRAP", "Block, Linear")
    monkeypatch.setenv("SURGE_FSDP_CPU_OFFLOAD", "1")
    strategy = surge.Trainer(strategy="fsdp", devices=1, accelerator="cpu", logger=False).strategy
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.state_dict_type == "full" and strategy.wrap == ("Block", "Linear") and strategy.cpu_offload
    assert strategy.async_checkpoint_save and not strategy.inference_mode_ok


def test_fsdp_stands_on_the_core_base_beside_ddp() -> None:
    """The launcher, process group and collectives come from ``surge.ProcessGroupStrategy``: surge-fsdp neither
    subclasses, imports nor depends on surge-ddp."""
    assert FSDPStrategy.__mro__[1] is surge.ProcessGroupStrategy
    assert not [need for need in metadata.requires("surge-fsdp") or [] if need.startswith("surge-ddp")]
    for source in (Path(__file__).parents[1] / "src").rglob("*.py"):
        tree = ast.parse(source.read_text())
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [name for name in imported if name.startswith("surge_ddp")], source


def test_one_process_trains_unsharded(tmp_path: Path, no_launcher: None) -> None:
    trainer = surge.Trainer(
        strategy="fsdp", devices=1, accelerator="cpu", max_epochs=1, default_root_dir=str(tmp_path), logger=False
    )
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    assert trainer.module is model and trainer.global_step > 0 and not torch.distributed.is_initialized()
    assert list(tmp_path.glob("surge_runs/*/checkpoints/*.ckpt"))  # one ordinary file: nothing to shard


# -- two processes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _run(tmp_path_factory.mktemp("reference"), "reference")


@pytest.mark.slow
def test_fsdp_fit_matches_hand_written_ddp(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    """Sharded parameters, gathered for each forward and backward, reduce-scattered gradients: the same
    per-step losses and final weights as DDP on the same data (one unit: the same summation order)."""
    runs = _run(tmp_path, "surge", "--strategy", "fsdp")
    _assert_same_weights(runs, reference)
    for got, want in zip(runs, reference, strict=True):
        assert got["losses"] == want["losses"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _run(tmp_path_factory.mktemp("uninterrupted"), "surge", "--strategy", "fsdp", "--adam")


def _last(out: Path) -> Path:
    (last,) = out.glob("surge_runs/version_0/checkpoints/last.ckpt")
    return last


@pytest.mark.slow
def test_sharded_checkpoint_resumes_exactly(tmp_path: Path, uninterrupted: list[dict[str, Any]]) -> None:
    """Adam's moments are sharded too. Saved at step 5 (mid-epoch), resumed in a new job: the same weights as
    the uninterrupted run. Each checkpoint is a commit file plus one shard directory; the commit file alone
    tells a single process how to get the weights."""
    _run(tmp_path, "surge", "--strategy", "fsdp", "--adam", "--max-steps", "5", "--ckpt-every", "5")
    last = _last(tmp_path)
    shards = sorted(p.name for p in last.parent.glob("*.shards-*"))
    assert [name.split(".shards-")[0] for name in shards] == ["epoch=0-step=5.ckpt", "last.ckpt"]
    assert {p.name for p in (last.parent / shards[1]).iterdir()} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    info = surge.checkpoint.load(str(last))[surge.checkpoint.SHARDED]  # what the core's error message reads
    assert (info["shards"], info["world_size"], info["strategy"]) == (shards[1], 2, "fsdp")
    assert info["restore_hint"] == "make one weights-only file of it with `python -m surge_fsdp.consolidate {path} OUT.ckpt`"  # fmt: skip
    hint = f"make one weights-only file of it with `python -m surge_fsdp.consolidate {last} OUT.ckpt`"
    with pytest.raises(surge.checkpoint.CheckpointError, match=re.escape(hint)):
        trainer = surge.Trainer(
            accelerator="cpu", logger=False, enable_checkpointing=False, max_epochs=1, default_root_dir=str(tmp_path)
        )
        trainer.fit(_program_net(), train_dataloaders=_loader(), ckpt_path=str(last))

    resumed = _run(tmp_path, "surge", "--strategy", "fsdp", "--adam", "--resume", str(last))
    _assert_same_weights(resumed, uninterrupted)
    for got, want in zip(resumed, uninterrupted, strict=True):
        assert got["losses"] == want["losses"][5:]


@pytest.mark.slow
def test_full_checkpoint_resumes_exactly_and_equals_the_consolidated_shards(
    tmp_path: Path, uninterrupted: list[dict[str, Any]]
) -> None:
    full, sharded = tmp_path / "full", tmp_path / "sharded"
    _run(full, "surge", "--strategy", "fsdp", "--adam", "--max-steps", "5", "--ckpt-every", "5",
         SURGE_FSDP_STATE_DICT_TYPE="full")  # fmt: skip
    _run(sharded, "surge", "--strategy", "fsdp", "--adam", "--max-steps", "5", "--ckpt-every", "5")
    assert not list(_last(full).parent.glob("*.shards-*"))
    one_file = surge.checkpoint.load(str(_last(full)))  # an ordinary checkpoint: no process group needed
    consolidated = consolidate(str(_last(sharded)), str(tmp_path / "consolidated.ckpt"))
    weights = surge.checkpoint.load(consolidated)["state_dict"]
    assert weights.keys() == one_file["state_dict"].keys()
    assert all(torch.equal(weights[k], v) for k, v in one_file["state_dict"].items())

    resumed = _run(full, "surge", "--strategy", "fsdp", "--adam", "--resume", str(_last(full)),
                   SURGE_FSDP_STATE_DICT_TYPE="full")  # fmt: skip
    _assert_same_weights(resumed, uninterrupted)


def _program_net() -> surge.Module:
    class ProgramNet(surge.Module):  # the program's model: the same parameter names
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.binary_cross_entropy_with_logits(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    return ProgramNet()


def _loader() -> torch.utils.data.DataLoader[Any]:
    data = torch.utils.data.TensorDataset(torch.randn(8, 8), torch.ones(8, 1))
    return torch.utils.data.DataLoader(data, batch_size=4)
