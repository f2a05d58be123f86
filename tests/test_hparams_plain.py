"""Hyper-parameters holding paths, enums, dataclasses and numpy values: the checkpoint Surge writes loads with
the safe loader (``torch.load(weights_only=True)``), resumes, rebuilds the module, and the CSV logger writes them;
a value that cannot be made plain is refused when the run starts, before any run directory exists."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import io
import math
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pytest
import surge
import torch
import yaml
from _fuzzing import examples  # tests/ is on sys.path (pytest `pythonpath`)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surge import checkpoint
from surge.testing import quiet_trainer_args, tiny_dataset
from torch import nn
from torch.utils.data import DataLoader

QUIET = quiet_trainer_args(limit_train_batches=2)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Cfg:
    width: int = 4
    tags: tuple[str, ...] = ("a", "b")
    sub: Path = Path("sub")


class Model(surge.Module):
    def __init__(self, root: Path, kind: Color, cfg: Cfg, scale: np.float64, n: np.int64, arr: np.ndarray) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.training_step(batch, batch_idx))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self.training_step(batch, batch_idx))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _model(root: Path) -> Model:
    return Model(root, Color.RED, Cfg(), np.float64(0.5), np.int64(3), np.array([[1.0, 2.0], [3.0, 4.0]]))


def _expected(root: Path) -> dict[str, Any]:
    return {
        "root": str(root),
        "kind": "red",
        "cfg": {"width": 4, "tags": ("a", "b"), "sub": "sub"},
        "scale": 0.5,
        "n": 3,
        "arr": [[1.0, 2.0], [3.0, 4.0]],
    }


def _loader() -> DataLoader:
    return DataLoader(tiny_dataset(16), batch_size=8)


def _fit(tmp_path: Path, model: surge.Module, **kwargs: Any) -> surge.Trainer:
    trainer = surge.Trainer(**{"max_epochs": 1, "default_root_dir": str(tmp_path), **QUIET, **kwargs})
    trainer.fit(model, _loader())
    return trainer


def _exact_types(value: Any) -> bool:
    """Every leaf is exactly str, int, float, bool or None (no subclass: no enum, no numpy scalar)."""
    if isinstance(value, dict):
        return all(_exact_types(k) and _exact_types(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_exact_types(v) for v in value)
    return type(value) in (str, int, float, bool, bytes, type(None)) or type(value) is torch.Tensor


# -- a run with such hyper-parameters --------------------------------------------------------------------


def test_checkpoint_with_rich_hparams_loads_with_the_safe_loader(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, _model(tmp_path / "data"))
    path = trainer.save_checkpoint(str(tmp_path / "rich.ckpt"))
    saved = checkpoint.load(path)  # weights_only, not trusted
    assert saved["hparams"] == _expected(tmp_path / "data")
    assert _exact_types(saved["hparams"])
    assert type(saved["hparams"]["scale"]) is float and type(saved["hparams"]["n"]) is int


def test_fit_resumes_from_such_a_checkpoint(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, _model(tmp_path / "data"))
    path = trainer.save_checkpoint(str(tmp_path / "rich.ckpt"))
    resumed = surge.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET)
    resumed.fit(_model(tmp_path / "data"), _loader(), ckpt_path=path)
    assert resumed.current_epoch == 2 and resumed.global_step == 4


def test_load_from_checkpoint_rebuilds_the_module_with_plain_values(tmp_path: Path) -> None:
    model = _model(tmp_path / "data")
    trainer = _fit(tmp_path, model)
    path = trainer.save_checkpoint(str(tmp_path / "rich.ckpt"))
    loaded = Model.load_from_checkpoint(path)
    assert dict(loaded.hparams) == _expected(tmp_path / "data")
    assert Color(loaded.hparams.kind) is Color.RED  # the enum's value goes to __init__
    assert Path(loaded.hparams.root) == tmp_path / "data"
    assert torch.equal(loaded.net.weight, model.net.weight)


def test_csv_logger_writes_plain_hparams(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **{**QUIET, "logger": True})  # csv
    trainer.fit(_model(tmp_path / "data"), _loader())
    assert trainer.run_dir is not None
    written = yaml.safe_load((Path(trainer.run_dir) / "hparams.yaml").read_text())
    expected = _expected(tmp_path / "data")
    expected["cfg"]["tags"] = ["a", "b"]  # YAML has no tuples
    assert written == expected


def test_csv_logger_writes_numpy_scalars_as_numbers() -> None:
    from surge_csv import _plain

    text = yaml.safe_dump(_plain({"scale": np.float64(0.5), "n": np.int64(3), "on": np.bool_(True), "inf": np.inf}))
    assert yaml.safe_load(text) == {"scale": 0.5, "n": 3, "on": True, "inf": "inf"}


class Opaque:
    pass


@dataclasses.dataclass
class WithFn:
    fn: Any = None
    width: int = 2


class Bad(Model):
    def __init__(self, fn: Any, obj: Any, optimizer_cfg: WithFn, fine: Path = Path("x")) -> None:
        surge.Module.__init__(self)
        self.save_hyperparameters()
        self.net = nn.Linear(8, 1)


@pytest.mark.parametrize("stage", ["fit", "validate", "test"])
def test_unconvertible_hparams_are_all_refused_before_any_run_directory(tmp_path: Path, stage: str) -> None:
    model = Bad(lambda x: x, Opaque(), WithFn(fn=len))
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **{**QUIET, "logger": True})  # csv logger on
    with pytest.raises(surge.ConfigError) as info:
        getattr(trainer, stage)(model, _loader())
    paths = [path for path, _ in info.value.problems]
    assert paths == ["hparams.fn", "hparams.obj", "hparams.optimizer_cfg.fn"]
    message = str(info.value)
    assert "function" in message and "Opaque" in message and "builtin_function_or_method" in message
    assert "save_hyperparameters(ignore=[" in message and "str/number/list/dict" in message
    assert list(tmp_path.iterdir()) == []


def test_datamodule_hparams_are_checked_too(tmp_path: Path) -> None:
    class Data(surge.DataModule):
        def __init__(self, transform: Any = None) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self) -> DataLoader:
            return _loader()

    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(surge.ConfigError, match=r"datamodule\.hparams\.transform"):
        trainer.fit(_model(tmp_path), datamodule=Data(transform=Opaque()))
    assert list(tmp_path.iterdir()) == []


# -- the conversion itself --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Path("/a/b"), "/a/b"),
        (PurePosixPath("rel/x"), "rel/x"),
        (Color.BLUE, "blue"),
        (Level.HIGH, 2),
        (Cfg(), {"width": 4, "tags": ("a", "b"), "sub": "sub"}),
        (np.float32(0.25), 0.25),
        (np.int8(-3), -3),
        (np.bool_(False), False),
        (np.str_("s"), "s"),
        (np.arange(3), [0, 1, 2]),
        (np.array(2.5), 2.5),
        ((1, Path("p")), (1, "p")),
        ({3, 1, 2}, [1, 2, 3]),
        (frozenset({"b", "a"}), ["a", "b"]),
        (dt.datetime(2024, 5, 6, 7, 8, 9), "2024-05-06T07:08:09"),
        (dt.date(2024, 5, 6), "2024-05-06"),
        (dt.timedelta(minutes=1, milliseconds=500), 60.5),
        (torch.float16, "torch.float16"),
        (torch.device("cpu"), "cpu"),
        ({Color.RED: 1, Level.LOW: 2, np.int64(7): 3}, {"red": 1, 1: 2, 7: 3}),
        ("s", "s"),
        (None, None),
        (True, True),
        (math.inf, math.inf),
    ],
)
def test_conversion_per_type(value: Any, expected: Any) -> None:
    from surge._plain import plain_hparams

    converted = plain_hparams({"x": value})["x"]
    assert converted == expected and type(converted) is type(expected)
    assert _exact_types(converted)


def test_tensors_stay_tensors() -> None:
    from surge._plain import plain_hparams

    t = torch.arange(3)
    assert plain_hparams({"t": t, "nested": [t]}) == {"t": t, "nested": [t]}
    assert plain_hparams({"t": t})["t"] is t


def test_bad_values_are_reported_with_their_paths() -> None:
    from surge._plain import plain_hparams

    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    with pytest.raises(surge.ConfigError) as info:
        plain_hparams(
            {"a": [1, {"f": print}], "m": {(1, 2): 3, Color.RED: 1, "red": 2}, "mod": math, "c": cyclic, "z": 1 + 2j},
            "datamodule.hparams",
        )
    paths = [path for path, _ in info.value.problems]
    assert paths == [
        "datamodule.hparams.a[1].f",
        "datamodule.hparams.m[(1, 2)]",
        "datamodule.hparams.m.red",  # Color.RED converts to "red" too
        "datamodule.hparams.mod",
        "datamodule.hparams.c[1]",
        "datamodule.hparams.z",
    ]
    assert "save_hyperparameters(ignore=['a'])" in str(info.value)


# -- property: whatever converts, the safe loader and yaml.safe_dump accept ----------------------------------

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.builds(Path, st.text(alphabet="abc/._-", min_size=1, max_size=10)),
    st.sampled_from([*Color, *Level]),
    st.builds(np.float64, st.floats(allow_nan=False)),
    st.builds(np.float32, st.floats(allow_nan=False, width=32)),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.builds(np.bool_, st.booleans()),
    st.lists(st.integers(-1000, 1000), max_size=4).map(np.array),
    st.datetimes(),
    st.dates(),
    st.timedeltas(),
    st.sampled_from([torch.float32, torch.bfloat16, torch.device("cpu"), torch.device("cuda", 1)]),
    st.frozensets(st.integers(-5, 5), max_size=4),
    st.sets(st.text(max_size=3), max_size=3),
)
# Keys that cannot collide once converted (Color.RED is "red", Level.LOW is 1).
_keys = st.one_of(st.text(alphabet="xyz", max_size=4), st.integers(3, 9), st.sampled_from([*Color, *Level]))


def _nested(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=3),
        st.builds(Cfg, width=st.integers(0, 9), tags=st.lists(st.text(max_size=3), max_size=2).map(tuple)),
        st.builds(WithFn, fn=children, width=st.integers(0, 9)),
    )


_values = st.recursive(_leaves, _nested, max_leaves=12)


def _yaml_form(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _yaml_form(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_form(v) for v in value]
    return value


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(min_size=1, max_size=6), _values, max_size=4))
def test_converted_hparams_round_trip_through_the_safe_loader_and_yaml(params: dict[str, Any]) -> None:
    from surge._plain import plain_hparams

    converted = plain_hparams(params)
    assert _exact_types(converted)
    buffer = io.BytesIO()
    torch.save({"hparams": converted}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["hparams"] == converted
    assert yaml.safe_load(yaml.safe_dump(converted)) == _yaml_form(converted)
    assert plain_hparams(converted) == converted  # idempotent
