"""Fuzzing the run-config loader: any YAML text, any nested mapping, any list of command-line overrides gives
a resolved config or a :class:`surge.ConfigError`, never another exception. Nothing is built or run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from _fuzzing import examples  # tests/ is on sys.path (pytest `pythonpath`)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surge.cli import runconfig
from surge.config import TrainerConfig
from surge.errors import ConfigError
from surge.plugins import discover
from surge.settings import load_settings

FUZZ = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Keys a real config has, and some near misses: random keys alone would almost never reach the validators.
KEYS = [
    *runconfig.SECTIONS,
    *TrainerConfig.model_fields,
    "class_path",
    "init_args",
    "lr",
    "hidden",
    "batch_size",
    "checkpoint",
    "csv",
    "progress",
    "save_top_k",
    "refresh_rate",
    "max_epocs",
]
# Class paths are drawn from a list: importing random module names could run anything importable.
CLASS_PATHS = [
    "surge.testing.TinyModule",
    "surge.testing.TinyDataModule",
    "surge.examples.digits.DigitsClassifier",
    "surge.testing.TinyModul",
    "surge.testing",
    "no_such_package_xyz.Net",
    "surge.Trainer",
    "1.2",
    "",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from([*CLASS_PATHS, "auto", "cpu", "ddp", "32-true", "bf16-mixed", "last", "norm"])
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6) | st.integers(), children, max_size=5)
    ),
    max_leaves=20,
)
CONFIGS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), VALUES, max_size=6)


@pytest.fixture(scope="module")
def catalog() -> Iterator[Any]:
    """One discovery for all examples (the same catalog a run would use)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SURGE_TRAINER_") or k == "SURGE_LAB"}
    yield discover(load_settings())
    os.environ.update(saved)


def _resolve_or_config_error(layers: list[runconfig.Layer], overrides: runconfig.Layer | None, catalog: Any) -> None:
    try:
        run = runconfig.resolve(layers, overrides, environ={}, catalog=catalog, lab=False)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError names at least one problem"
        return
    run.to_yaml()  # a resolved config always serialises


@FUZZ
@given(
    text=st.text(max_size=200)
    | st.lists(st.sampled_from(["a:", " b", "- ", "[", "{", "&x", "*x", ": 1", "\n", "  "]), max_size=30).map("".join)
)
def test_any_yaml_text_gives_a_layer_or_a_config_error(text: str) -> None:
    try:
        layer = runconfig.parse_yaml(text, "fuzz.yaml")
    except ConfigError as exc:
        assert exc.problems
        return
    assert isinstance(layer.data, dict)


@FUZZ
@given(data=CONFIGS, second=st.none() | CONFIGS)
def test_any_nested_mapping_gives_a_config_or_a_config_error(catalog: Any, data: dict[Any, Any], second: Any) -> None:
    layers = [runconfig.Layer(data, {}, "fuzz.yaml")]
    if second is not None:
        layers.append(runconfig.Layer(second, {}, "fuzz2.yaml"))
    _resolve_or_config_error(layers, None, catalog)


OVERRIDE_KEYS = st.lists(st.sampled_from(KEYS) | st.text(max_size=5), min_size=1, max_size=4).map(".".join)
TOKENS = st.lists(
    st.tuples(
        OVERRIDE_KEYS, st.text(max_size=10) | st.sampled_from(["1", "0.5", "true", "null", "[0, 1]", "{a: 1}"])
    ).map(lambda kv: f"--{kv[0]}={kv[1]}")
    | st.text(max_size=10),
    max_size=6,
)


@FUZZ
@given(tokens=TOKENS)
def test_any_overrides_give_a_config_or_a_config_error(catalog: Any, tokens: list[str]) -> None:
    base = runconfig.Layer({"model": {"class_path": "surge.testing.TinyModule"}}, {}, "base.yaml")
    try:
        overrides = runconfig.parse_overrides(tokens)
    except ConfigError as exc:
        assert exc.problems
        return
    _resolve_or_config_error([base], overrides, catalog)
