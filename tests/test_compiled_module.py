"""``trainer.fit(torch.compile(model))``, as Lightning accepts it: the core runs the Module inside the wrapper and
hands the wrapper to the ``compile`` plugin, or refuses before anything happens when no such plugin is available.
The plugin here is a stand-in that compiles nothing (surge-compile's own tests compile for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import surge
import torch
from surge.testing import EventRecorder, PluginEnv, TinyDataModule, TinyModule

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


class StandIn:
    """Records what the core hands a ``compile`` plugin, and the Module its run sets up."""

    surge_name = "compile"
    built: ClassVar[list[StandIn]] = []

    def __init__(self) -> None:
        self.adopted: list[Any] = []
        self.set_up: list[Any] = []
        StandIn.built.append(self)

    def adopt(self, compiled: torch.nn.Module) -> None:
        self.adopted.append(compiled)

    @surge.hookimpl
    def setup(self, event: Any) -> None:
        self.set_up.append(event.trainer.module)


@pytest.fixture
def stand_in(plugin_env: PluginEnv) -> type[StandIn]:
    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="compile", kind="participant", factory=StandIn, default=False, role="compiler"))
    StandIn.built.clear()
    return StandIn


def test_fit_runs_the_module_inside_and_hands_the_wrapper_to_the_compile_plugin(
    stand_in: type[StandIn], tmp_path: Path
) -> None:
    model = TinyModule()
    compiled: Any = torch.compile(model)  # typed as a callable by torch
    trainer = surge.Trainer(max_epochs=1, limit_train_batches=2, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(compiled, datamodule=TinyDataModule())
    [plugin] = stand_in.built  # not requested, so built for this run
    assert plugin.adopted == [compiled] and plugin.set_up == [model]
    assert trainer.module is model and trainer.global_step == 2
    assert list(trainer.dump_checkpoint()["state_dict"]) == list(model.state_dict())  # no "_orig_mod." prefix
    trainer.validate(datamodule=TinyDataModule(), verbose=False)  # the next run has no wrapper: no plugin either
    assert len(stand_in.built) == 1 and plugin.set_up == [model]


def test_an_active_compile_plugin_is_handed_the_wrapper(stand_in: type[StandIn], tmp_path: Path) -> None:
    model = TinyModule()
    trainer = surge.Trainer(
        plugins=["compile"], max_epochs=1, limit_train_batches=1, default_root_dir=str(tmp_path), **QUIET
    )
    [plugin] = stand_in.built
    compiled: Any = torch.compile(model)
    trainer.validate(compiled, datamodule=TinyDataModule(), verbose=False)
    assert stand_in.built == [plugin] and plugin.adopted == [compiled] and plugin.set_up == [model]


def test_without_the_compile_plugin_a_wrapper_is_refused_before_anything_runs(
    plugin_env: PluginEnv, tmp_path: Path
) -> None:
    plugin_env.hide_installed()
    recorder = EventRecorder()
    trainer = surge.Trainer(plugins=[recorder], default_root_dir=str(tmp_path / "root"), **QUIET)
    with pytest.raises(surge.SurgeError, match=r"torch.compile\(TinyModule\).*`pip install surge-compile`"):
        trainer.fit(torch.compile(TinyModule()), datamodule=TinyDataModule())  # type: ignore[arg-type]
    assert recorder.names() == ["init_start", "init_end"] and trainer.module is None
    assert not (tmp_path / "root").exists()
