"""surge-devices: the cpu/cuda/mps accelerators and the single_device strategy, through the Trainer."""

from __future__ import annotations

import ast
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
import surge
import surge_devices
import torch
from surge.errors import ProviderError
from surge.plugins.backends import move_to_device
from surge.testing import TinyDataModule, TinyModule

CUDA = torch.cuda.is_available()
MPS = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def test_installed_entry_point_points_to_the_provider() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="surge.plugins") if ep.name == "devices"]
    assert ep.value == "surge_devices:plugin"
    assert ep.dist is not None and ep.dist.metadata["Name"] == "surge-devices"
    plugin = ep.load()
    assert plugin is surge_devices.plugin
    assert plugin.kind == "provider"
    assert {slot: sorted(names) for slot, names in plugin.provides.items()} == {
        "accelerator": ["cpu", "cuda", "gpu", "mps"],
        "strategy": ["single_device"],
    }


def test_cpu_accelerator_by_name(make_trainer) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer(accelerator="cpu")
    assert isinstance(trainer.accelerator, surge_devices.CPUAccelerator)
    assert isinstance(trainer.strategy, surge_devices.SingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("cpu")
    assert trainer.catalog.records["devices"].status == "active"
    assert {"devices.accelerator", "devices.strategy"} <= set(trainer.plugin_names)


def test_auto_picks_the_best_available_accelerator(make_trainer) -> None:  # type: ignore[no-untyped-def]
    expected = "cuda" if CUDA else "mps" if MPS else "cpu"
    trainer = make_trainer()  # accelerator="auto" is the default
    assert trainer.accelerator.name == expected
    assert trainer.strategy.root_device.type == expected


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_unavailable_is_a_clear_error(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError, match="'cuda' is installed but not available on this machine") as info:
        make_trainer(accelerator="cuda")
    assert "accelerator='auto' or 'cpu'" in str(info.value)


@pytest.mark.skipif(MPS, reason="this machine has MPS")
def test_mps_unavailable_is_a_clear_error(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError, match="'mps' is installed but not available on this machine"):
        make_trainer(accelerator="mps")


def test_unknown_accelerator_lists_the_valid_names(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError, match=r"no accelerator named 'npu'\..* Valid names: cpu, cuda, gpu, mps\b"):
        make_trainer(accelerator="npu")


# -- devices ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("devices", ["auto", 1, -1, "1", "-1", "0,", [0]])
def test_cpu_devices_that_mean_one_process(make_trainer, devices) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer(accelerator="cpu", devices=devices)
    assert trainer.strategy.device_indices == [0]
    assert trainer.strategy.root_device == torch.device("cpu")


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("0", "selects no cpu device"),
        ([], "selects no cpu device"),
        ([1], r"asks for cpu device\(s\) \[1\], but 1 is available"),
        ([0, 0], "names a device twice"),
        ("two", "is not 'auto', a count or a comma-separated index list"),
    ],
)
def test_bad_cpu_devices_name_the_config_path(make_trainer, devices, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(surge.ConfigError, match=message) as info:
        make_trainer(accelerator="cpu", devices=devices)
    assert [path for path, _ in info.value.problems] == ["trainer.devices"]


@pytest.mark.parametrize("devices", [2, "2"])
def test_several_cpu_devices_need_a_distributed_strategy(make_trainer, plugin_env, devices) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(surge.ConfigError) as info:  # surge-ddp is installed here: an argument to add
        make_trainer(accelerator="cpu", devices=devices)
    assert "strategy='ddp'" in str(info.value) and [p for p, _ in info.value.problems] == ["trainer.strategy"]
    plugin_env.hide_installed()
    with pytest.raises(ProviderError, match="pip install surge-ddp") as info:
        make_trainer(accelerator="cpu", devices=devices)  # without it: how to install it


def test_single_device_strategy_refuses_several_devices(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(surge.ConfigError, match="single_device.*surge-ddp"):
        make_trainer(accelerator="cpu", devices=2, strategy="single_device")
    with pytest.raises(surge.ConfigError, match="single_device"):
        make_trainer(accelerator="cpu", num_nodes=2, strategy="single_device")


# -- the single_device strategy -----------------------------------------------------------------------


def test_single_device_strategy_is_one_process(make_trainer) -> None:  # type: ignore[no-untyped-def]
    strategy = make_trainer(accelerator="cpu", strategy="single_device").strategy
    assert isinstance(strategy, surge_devices.SingleDeviceStrategy)
    assert strategy.name == "single_device"
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (0, 0, 0, 1)
    assert strategy.is_global_zero
    value = torch.tensor([1.0, 3.0])
    assert torch.equal(strategy.reduce(value, "sum"), value)
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.reduce_boolean_decision(True) is True
    strategy.barrier("nothing to wait for")


def test_fit_runs_on_the_chosen_device(make_trainer) -> None:  # type: ignore[no-untyped-def]
    seen: list[torch.device] = []

    class Probe(TinyModule):
        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            seen.append(batch[0].device)
            return super().training_step(batch, batch_idx)

    trainer = make_trainer(accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    model = Probe()
    trainer.fit(model, datamodule=TinyDataModule())
    assert seen == [torch.device("cpu")] * 2
    assert model.device == torch.device("cpu")
    assert trainer.global_step == 2


# -- moving batches ----------------------------------------------------------------------------------------

Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    meta: dict = field(default_factory=dict)
    tag: str = "train"


def _nested_batch() -> dict:
    return {
        "pair": Pair(torch.ones(2), torch.zeros(2)),
        "list": [torch.arange(3), (torch.ones(1), "text", 7)],
        "ordered": OrderedDict(w=torch.ones(1, 1)),
        "sample": Sample(torch.ones(2, 2), torch.tensor(1), meta={"mask": torch.ones(2)}),
        "none": None,
    }


def _tensors(obj: object) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    if isinstance(obj, Sample):
        return [*_tensors(obj.image), *_tensors(obj.label), *_tensors(obj.meta)]
    return []


def test_move_to_device_reaches_every_tensor_and_keeps_the_containers() -> None:
    # The meta device makes a real move observable on a CPU-only machine.
    moved = move_to_device(_nested_batch(), torch.device("meta"))
    assert len(_tensors(moved)) == 8
    assert all(t.device.type == "meta" for t in _tensors(moved))
    assert isinstance(moved["pair"], Pair) and moved["pair"].x.shape == (2,)
    assert isinstance(moved["list"], list) and isinstance(moved["list"][1], tuple)
    assert moved["list"][1][1:] == ("text", 7)
    assert isinstance(moved["ordered"], OrderedDict)
    assert isinstance(moved["sample"], Sample) and moved["sample"].tag == "train"
    assert moved["sample"].meta["mask"].device.type == "meta"
    assert moved["none"] is None


def test_strategy_moves_batches_to_its_root_device(make_trainer) -> None:  # type: ignore[no-untyped-def]
    strategy = make_trainer(accelerator="cpu").strategy
    batch = _nested_batch()
    moved = strategy.batch_to_device(batch)
    assert all(t.device == strategy.root_device for t in _tensors(moved))
    assert isinstance(moved["pair"], Pair) and isinstance(moved["sample"], Sample)


# -- public API only -----------------------------------------------------------------------------------


def test_the_plugin_uses_only_surges_public_api() -> None:
    source_dir = Path(surge_devices.__file__).parent
    for path in sorted(source_dir.rglob("*.py")):
        text = path.read_text()
        assert "surge._" not in text, f"{path} reaches into a private surge module"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "surge":
                assert not any(part.startswith("_") for part in node.module.split(".")), (path, node.module)
                assert not any(alias.name.startswith("_") for alias in node.names), (path, node.module)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "surge":
                        assert not any(p.startswith("_") for p in alias.name.split(".")), (path, alias.name)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "surge":
                assert not node.attr.startswith("_"), (path, node.attr)
