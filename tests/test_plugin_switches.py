"""Plugins own the Trainer arguments they serve (``surge.Plugin(switches=...)``): the core keeps no table of
which plugin serves ``max_time`` or ``stochastic_weight_avg`` and with which settings (issue 18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
from surge.errors import ConfigError, PluginConflictError, PluginError
from surge.testing import TinyDataModule, TinyModule


class NanWatch:
    def __init__(self, strict: bool = False) -> None:
        self.strict, self.batches = strict, 0

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.batches += 1


def _watch(name: str = "nan_watch") -> surge.Plugin:
    return surge.Plugin(
        name=name,
        kind="participant",
        factory=NanWatch,
        switches={"terminate_on_nan": lambda value: {"strict": True} if value else None},
    )


@pytest.fixture
def hidden(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    return plugin_env


def test_a_third_party_plugin_serves_a_seed_argument(hidden: Any, tmp_path: Path) -> None:
    hidden.add(_watch(), distribution="surge-nan-watch")
    off = surge.Trainer(default_root_dir=str(tmp_path))
    assert "nan_watch" not in off.plugin_names  # the argument at its default asks for nothing
    trainer = surge.Trainer(terminate_on_nan=True, max_epochs=1, limit_train_batches=3, default_root_dir=str(tmp_path))
    watch = trainer.plugin("nan_watch")
    assert isinstance(watch, NanWatch) and watch.strict  # the settings the plugin made of the value
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert watch.batches == 3
    # settings given in plugins= win over the switch's
    mine = surge.Trainer(
        terminate_on_nan=True, plugins={"nan_watch": {"strict": False}}, default_root_dir=str(tmp_path)
    )
    assert not mine.plugin("nan_watch").strict  # type: ignore[attr-defined]


def test_an_argument_no_installed_plugin_serves_names_the_distribution(hidden: Any, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"trainer\.stochastic_weight_avg: no installed plugin serves it; `pip install surge-swa`"
    ):
        surge.Trainer(stochastic_weight_avg=True, default_root_dir=str(tmp_path))
    assert not list(tmp_path.iterdir())
    surge.Trainer(accumulate_grad_batches=4, default_root_dir=str(tmp_path))  # an int is the loop's own
    with pytest.raises(ConfigError, match=r"trainer\.accumulate_grad_batches: no installed plugin serves it"):
        surge.Trainer(accumulate_grad_batches={0: 1, 2: 4}, default_root_dir=str(tmp_path))


def test_two_plugins_serving_one_argument_conflict(hidden: Any, tmp_path: Path) -> None:
    hidden.add(_watch(), distribution="surge-nan-watch")
    hidden.add(_watch("nan_watch_two"), distribution="surge-nan-watch-two")
    with pytest.raises(PluginConflictError, match=r"both serve the Trainer argument 'terminate_on_nan'"):
        surge.Trainer(default_root_dir=str(tmp_path))


def test_a_switched_off_plugin_cannot_serve(hidden: Any, tmp_path: Path) -> None:
    hidden.add(_watch(), distribution="surge-nan-watch")
    with pytest.raises(ConfigError, match=r"asks for the 'nan_watch' plugin, which trainer.plugins switches off"):
        surge.Trainer(terminate_on_nan=True, plugins={"nan_watch": False}, default_root_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        ({"max_tiem": lambda v: None}, r"`switches` names \['max_tiem'\], which are not Trainer arguments"),
        ({"max_time": "timer"}, r"`switches` maps \['max_time'\] to something that is not a function"),
        (["max_time"], r"`switches` must map Trainer arguments to functions"),
    ],
)
def test_a_malformed_switch_is_refused_when_declared(switches: Any, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        surge.Plugin(name="bad", kind="participant", factory=NanWatch, switches=switches)


def test_first_party_arguments_are_served_by_their_plugins(tmp_path: Path) -> None:
    # the installed first-party plugins claim the seed's switches themselves (surge-callbacks, surge-swa)
    trainer = surge.Trainer(
        max_time="00:00:01:00",
        terminate_on_nan=True,
        track_grad_norm=2,
        stochastic_weight_avg=True,
        accumulate_grad_batches={0: 1, 1: 2},
        default_root_dir=str(tmp_path),
    )
    for name in ("timer", "nan_guard", "grad_norm", "swa", "gradient_accumulation_scheduler"):
        assert name in trainer.plugin_names, name
    assert trainer.plugin("grad_norm").norm_type == 2.0  # type: ignore[attr-defined]


def test_without_autoload_an_argument_loads_only_its_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the distribution names its arguments in the surge.switches entry-point group: read without importing
    monkeypatch.setenv("SURGE_DISABLE_PLUGIN_AUTOLOAD", "1")
    trainer = surge.Trainer(stochastic_weight_avg=True, default_root_dir=str(tmp_path))
    assert "swa" in trainer.plugin_names
    loaded = {record.name for record in trainer.catalog.loaded()}
    assert "swa" in loaded and "timer" not in loaded and "early_stopping" not in loaded
