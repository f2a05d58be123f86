"""A ``class_path`` inside ``init_args``: an argument annotated with a class, given as an object to build
(what jsonargparse resolves too; benchmarks/runconfig_compare.py), checked with lines, all problems at once."""

from __future__ import annotations

import pytest
import torch
from surge.cli import runconfig
from surge.errors import ConfigError
from surge.examples.digits import DigitsClassifier


class WithActivation(DigitsClassifier):
    def __init__(self, activation: torch.nn.Module | None = None, lr: float = 0.003) -> None:
        super().__init__(lr=lr)
        self.activation = activation


def _resolve(text: str) -> runconfig.RunConfig:
    layer = runconfig.parse_yaml(text, "run.yaml")
    return runconfig.resolve([layer], lab=False, classes={"mine.WithActivation": WithActivation})


def test_a_nested_class_path_is_built_and_written_back() -> None:
    config = _resolve(
        "model:\n  class_path: mine.WithActivation\n  init_args:\n"
        "    activation: {class_path: torch.nn.LeakyReLU, init_args: {negative_slope: 0.2}}\n"
    )
    model = config.model.build()
    assert isinstance(model.activation, torch.nn.LeakyReLU) and model.activation.negative_slope == 0.2
    assert config.to_dict()["model"]["init_args"]["activation"] == {
        "class_path": "torch.nn.LeakyReLU",
        "init_args": {"negative_slope": 0.2, "inplace": False},
    }


def test_nested_problems_are_reported_at_once_with_their_lines() -> None:
    text = (
        "model:\n  class_path: mine.WithActivation\n  init_args:\n"
        "    activation:\n      class_path: torch.nn.LeakyReLU\n      init_args:\n        negative_slop: 0.2\n"
        "    lr: fast\n"
    )
    with pytest.raises(ConfigError) as info:
        _resolve(text)
    message = str(info.value)
    assert (
        "model.init_args.activation.init_args.negative_slop: unknown argument; did you mean 'negative_slope'? "
        "(run.yaml, line 7)" in message
    )
    assert "model.init_args.lr: got 'fast'" in message and "(run.yaml, line 8)" in message
    with pytest.raises(ConfigError) as info:
        _resolve(
            "model:\n  class_path: mine.WithActivation\n  init_args:\n    activation: {class_path: pathlib.Path}\n"
        )
    assert (
        "model.init_args.activation.class_path: pathlib.Path is not a torch.nn.modules.module.Module "
        "(run.yaml, line 4)" in str(info.value)
    )
