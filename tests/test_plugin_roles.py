"""Roles and provider slots a third party can fill (issue 18, item 5): an object passed in that fills a role
replaces that role's default plugin when the run's plugins are selected; ``checkpoint_io`` is a real provider slot
(``surge.events.protocols.CheckpointIO``, Lightning's shape) and ``logger`` is none; the ``tuner`` slot and the
``compiler`` role are typed protocols the core calls, so a plugin other than surge-tuner or surge-compile serves
``Trainer.tune`` and ``trainer.fit(torch.compile(model))``.

Every plugin here is written in this file from the public API alone, as an out-of-tree distribution would be,
and made discoverable with ``surge.testing.PluginEnv``."""

from __future__ import annotations

import ast
import io
from pathlib import Path
from typing import Any, ClassVar

import pytest
import surge
import torch
from surge.checkpoint import FileCheckpointIO
from surge.testing import PluginEnv, TinyDataModule, TinyModule, quiet_trainer_args
from surge_lightning.pytorch.callbacks import Callback
from test_public_contract import problems_in  # tests/ is on sys.path (pytest `pythonpath`)

ROOT = Path(__file__).resolve().parents[1]


# -- a role: an object passed in replaces the role's default plugin -------------------------------------------------


class AcmeBar:
    """A progress display, as a plugin's object and as an object passed in."""

    surge_kind = "observer"
    surge_callback_role = "progress"

    def __init__(self, name: str = "acme_bar") -> None:
        self.surge_name = name
        self.batches = 0

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.batches += 1


class LightningStyleBar(Callback):
    """The same, written as a Lightning callback (it joins the bus through an adapter)."""

    surge_callback_role = "progress"

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


@pytest.fixture
def acme_bar(plugin_env: PluginEnv) -> None:
    """An installed default plugin in the ``progress`` role (the first-party ones hidden)."""
    plugin_env.hide_installed()
    plugin_env.add(
        surge.Plugin(name="acme-bar", kind="observer", factory=AcmeBar, default=True, role="progress"),
        distribution="acme-bar",
    )


def _fit(**kwargs: Any) -> surge.Trainer:
    trainer = surge.Trainer(
        **quiet_trainer_args(enable_progress_bar=True, max_epochs=1, limit_train_batches=2, **kwargs)
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return trainer


def test_the_default_plugin_of_a_role_runs_without_an_object_filling_it(acme_bar: None, tmp_path: Path) -> None:
    trainer = _fit(default_root_dir=str(tmp_path))
    assert "acme-bar" in trainer.event_order("train_batch_end")
    assert trainer.plugin("acme-bar").batches == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("argument", ["callbacks", "plugins"])
@pytest.mark.parametrize("bar_class", [AcmeBar, LightningStyleBar])
def test_an_object_filling_the_role_replaces_the_default_plugin(
    acme_bar: None, tmp_path: Path, argument: str, bar_class: type
) -> None:
    mine = bar_class()
    trainer = _fit(default_root_dir=str(tmp_path), **{argument: [mine]})
    assert mine.batches == 2
    # decided by the selection: the default is not built, so it is in no event's order and not active
    assert "acme-bar" not in trainer.plugin_names
    assert all("acme-bar" not in trainer.event_order(event) for event in trainer.event_names)
    assert trainer.catalog.records["acme-bar"].status == "available"
    assert "stands aside" in trainer.catalog.records["acme-bar"].reason


def test_several_objects_fill_one_role_and_all_of_them_run(acme_bar: None, tmp_path: Path) -> None:
    first, second = AcmeBar("bar_one"), AcmeBar("bar_two")
    trainer = _fit(default_root_dir=str(tmp_path), callbacks=[first, second])
    assert (first.batches, second.batches) == (2, 2)
    assert [n for n in trainer.event_order("train_batch_end") if "bar" in n] == ["bar_one", "bar_two"]


def test_naming_the_default_plugin_keeps_it_beside_the_object(acme_bar: None, tmp_path: Path) -> None:
    mine = AcmeBar("mine")
    trainer = _fit(default_root_dir=str(tmp_path), plugins=["acme-bar", mine])
    assert trainer.plugin("acme-bar").batches == mine.batches == 2  # type: ignore[attr-defined]


def test_the_first_party_checkpoint_default_stands_aside_for_model_checkpoints(tmp_path: Path) -> None:
    from surge_checkpoint import ModelCheckpoint  # what a user of the installed surge-checkpoint writes

    mine = [ModelCheckpoint(dirpath=tmp_path / "a"), ModelCheckpoint(dirpath=tmp_path / "b", every_n_epochs=1)]
    trainer = surge.Trainer(**quiet_trainer_args(enable_checkpointing=True, callbacks=mine))
    assert "checkpoint" not in trainer.plugin_names and trainer.checkpoint_callbacks == mine
    assert "checkpoint" in surge.Trainer(**quiet_trainer_args(enable_checkpointing=True)).plugin_names


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("chekpoint", r"surge_callback_role must be one of .*got 'chekpoint'\. did you mean 'checkpoint'\?"),
        (3, r"surge_callback_role must be one of .*got 3\."),
    ],
)
def test_a_malformed_role_is_refused_naming_the_member(role: Any, expected: str) -> None:
    bar = AcmeBar()
    bar.surge_callback_role = role  # type: ignore[assignment]
    with pytest.raises(surge.ConfigError, match=expected) as info:
        surge.Trainer(**quiet_trainer_args(callbacks=[bar]))
    assert [path for path, _ in info.value.problems] == ["trainer.callbacks[0]"]


def test_a_plugin_declaring_an_unknown_role_is_refused() -> None:
    with pytest.raises(surge.PluginError, match=r"role 'spinner' must be one of \['logger', 'progress'"):
        surge.Plugin(name="spinner", kind="observer", factory=AcmeBar, role="spinner")


def test_no_plugin_keeps_a_registry_of_runs_in_a_module_global() -> None:
    """Role replacement is the core's selection: no plugin module holds Trainers (or their objects) in a global."""
    found = []
    for path in sorted(ROOT.glob("plugins/*/src/**/*.py")):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in {
                "WeakKeyDictionary",
                "WeakValueDictionary",
                "WeakSet",
            }:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


# -- checkpoint_io: how checkpoint files reach storage ----------------------------------------------------------


class MemoryIO:
    """An out-of-tree CheckpointIO (Lightning's shape): checkpoints as bytes in a dict, nothing on disk."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None:
        self.calls.append(("save", path))
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        self.files[path] = buffer.getvalue()

    def load_checkpoint(self, path: str, *, trusted: bool = False) -> dict[str, Any]:
        self.calls.append(("load", path))
        return torch.load(io.BytesIO(self.files[path]), weights_only=not trusted)  # type: ignore[no-any-return]

    def remove_checkpoint(self, path: str) -> None:
        self.calls.append(("remove", path))
        del self.files[path]


class RecordingIO(FileCheckpointIO):
    """The default files, with every call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None:
        self.calls.append(("save", Path(path).name))
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path: str) -> None:
        self.calls.append(("remove", Path(path).name))
        super().remove_checkpoint(path)


def _steps(trainer: surge.Trainer, **fit: Any) -> surge.Trainer:
    torch.manual_seed(0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule(), **fit)
    return trainer


@pytest.mark.parametrize("how", ["argument", "lightning_plugins", "provider_name"])
def test_a_checkpoint_io_writes_and_reads_every_checkpoint(plugin_env: PluginEnv, tmp_path: Path, how: str) -> None:
    plugin_env.add(surge.Plugin(name="acme-io", kind="provider", provides={"checkpoint_io": {"memory": MemoryIO}}))
    store = MemoryIO()
    chosen = {
        "argument": {"checkpoint_io": store},
        "lightning_plugins": {"plugins": [store]},  # Lightning's Trainer(plugins=[MyCheckpointIO()])
        "provider_name": {"checkpoint_io": "memory"},
    }[how]
    args = quiet_trainer_args(default_root_dir=str(tmp_path), max_epochs=1, limit_train_batches=3, **chosen)
    first = _steps(surge.Trainer(**args))
    used = first.strategy.checkpoint_io
    assert isinstance(used, MemoryIO) and (used is store) == (how != "provider_name")
    first.save_checkpoint("runs/a.ckpt")
    assert list(used.files) == ["runs/a.ckpt"] and not list(tmp_path.rglob("*.ckpt"))

    resumed = surge.Trainer(**{**args, "max_epochs": 2, "checkpoint_io": used, "plugins": None})
    _steps(resumed, ckpt_path="runs/a.ckpt")
    assert resumed.global_step == 6 and used.calls == [("save", "runs/a.ckpt"), ("load", "runs/a.ckpt")]


def test_the_checkpoint_plugin_saves_and_removes_through_the_checkpoint_io(tmp_path: Path) -> None:
    recording = RecordingIO()
    args = quiet_trainer_args(default_root_dir=str(tmp_path), enable_checkpointing=True, checkpoint_io=recording)
    _steps(surge.Trainer(**args, max_epochs=2, limit_train_batches=2))  # save_top_k=1: the newest replaces the older
    assert recording.calls == [
        ("save", "epoch=0-step=2.ckpt"),
        ("save", "epoch=1-step=4.ckpt"),
        ("remove", "epoch=0-step=2.ckpt"),
    ]


def test_without_a_checkpoint_io_the_strategy_writes_crash_safe_files() -> None:
    trainer = surge.Trainer(**quiet_trainer_args())
    assert type(trainer.strategy.checkpoint_io) is FileCheckpointIO


class HalfIO:
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None: ...

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        return {}


def test_a_checkpoint_io_missing_members_is_refused_naming_them() -> None:
    with pytest.raises(
        surge.ConfigError,
        match=r"trainer.checkpoint_io: .*HalfIO is no checkpoint IO: it lacks "
        r"load_checkpoint\(path, \*, trusted=False\), remove_checkpoint\(path\)",
    ):
        surge.Trainer(**quiet_trainer_args(checkpoint_io=HalfIO()))
    with pytest.raises(
        surge.PluginError, match=r"checkpoint_io 'half': HalfIO lacks load_checkpoint.*remove_checkpoint"
    ):
        surge.Plugin(name="half-io", kind="provider", provides={"checkpoint_io": {"half": HalfIO}})


def test_two_checkpoint_ios_are_refused() -> None:
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins\[0\]: a second checkpoint IO"):
        surge.Trainer(**quiet_trainer_args(checkpoint_io=MemoryIO(), plugins=[MemoryIO()]))


def test_logger_is_no_provider_slot() -> None:
    with pytest.raises(
        surge.PluginError,
        match=r"'logger' is not a provider slot: a logger is an observer plugin with "
        r"role='logger'",
    ):
        surge.Plugin(name="acme-log", kind="provider", provides={"logger": {"acme": AcmeBar}})


# -- the tuner slot: Trainer.tune is the tuner's ----------------------------------------------------------------


class AcmeTuner:
    """An out-of-tree tuner: what Trainer.tune hands it, and what it returns."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def tune(
        self,
        trainer: Any,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        **options: Any,
    ) -> dict[str, Any]:
        AcmeTuner.calls.append({"trainer": trainer, "model": model, "datamodule": datamodule, **options})
        model.lr = options.get("lr", 0.5)
        return {"acme": model.lr}


@pytest.fixture
def acme_tuner(plugin_env: PluginEnv) -> None:
    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="acme-tuner", kind="provider", provides={"tuner": {"acme": AcmeTuner}}))
    AcmeTuner.calls.clear()


@pytest.mark.parametrize("plugins", [None, ["acme-tuner"]])
def test_trainer_tune_calls_the_tuner_provider(acme_tuner: None, plugins: Any) -> None:
    trainer = surge.Trainer(**quiet_trainer_args(plugins=plugins))
    model, data = TinyModule(), TinyDataModule()
    assert trainer.tune(model, datamodule=data, lr=0.25) == {"acme": 0.25} and model.lr == 0.25
    assert AcmeTuner.calls == [{"trainer": trainer, "model": model, "datamodule": data, "lr": 0.25}]
    assert trainer.catalog.records["acme-tuner"].status == "active"


def test_several_tuners_and_none_chosen_are_refused(acme_tuner: None, plugin_env: PluginEnv) -> None:
    plugin_env.add(surge.Plugin(name="other-tuner", kind="provider", provides={"tuner": {"other": AcmeTuner}}))
    with pytest.raises(surge.SurgeError, match=r"several tuners could run .*acme-tuner.*other-tuner.*plugins="):
        surge.Trainer(**quiet_trainer_args()).tune(TinyModule())
    assert surge.Trainer(**quiet_trainer_args(plugins=["other-tuner"])).tune(TinyModule()) == {"acme": 0.5}


def test_a_tuner_without_tune_is_refused_naming_the_member() -> None:
    with pytest.raises(surge.PluginError, match=r"tuner 'bad': AcmeBar lacks tune\(trainer, model, "):
        surge.Plugin(name="bad-tuner", kind="provider", provides={"tuner": {"bad": AcmeBar}})


# -- the compiler role: trainer.fit(torch.compile(model)) -------------------------------------------------------


class AcmeCompiler:
    """An out-of-tree compiler: adopts the wrapper, compiles nothing."""

    built: ClassVar[list[AcmeCompiler]] = []

    def __init__(self) -> None:
        self.adopted: list[Any] = []
        AcmeCompiler.built.append(self)

    def adopt(self, compiled: Any) -> None:
        self.adopted.append(compiled)

    @surge.hookimpl
    def setup(self, event: Any) -> None: ...


@pytest.fixture
def acme_compiler(plugin_env: PluginEnv) -> None:
    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="acme-compiler", kind="participant", factory=AcmeCompiler, role="compiler"))
    AcmeCompiler.built.clear()


def test_a_third_party_compiler_serves_a_torch_compile_wrapper(acme_compiler: None, tmp_path: Path) -> None:
    model = TinyModule()
    compiled: Any = torch.compile(model)
    trainer = surge.Trainer(**quiet_trainer_args(default_root_dir=str(tmp_path), max_epochs=1, limit_train_batches=2))
    trainer.fit(compiled, datamodule=TinyDataModule())
    [compiler] = AcmeCompiler.built
    assert compiler.adopted == [compiled] and trainer.module is model and trainer.global_step == 2


def test_several_compilers_to_choose_from_are_refused(acme_compiler: None, plugin_env: PluginEnv) -> None:
    plugin_env.add(surge.Plugin(name="other-compiler", kind="participant", factory=AcmeCompiler, role="compiler"))
    trainer = surge.Trainer(**quiet_trainer_args())
    with pytest.raises(surge.SurgeError, match=r"several are installed .*acme-compiler.*other-compiler"):
        trainer.fit(torch.compile(TinyModule()), datamodule=TinyDataModule())  # type: ignore[arg-type]
    assert AcmeCompiler.built == []


def test_a_compiler_without_adopt_is_refused_naming_the_member() -> None:
    with pytest.raises(surge.PluginError, match=r"role 'compiler': AcmeBar lacks adopt\(compiled\)"):
        surge.Plugin(name="bad-compiler", kind="participant", factory=AcmeBar, role="compiler")


def test_this_file_uses_the_public_api_only() -> None:
    assert problems_in(Path(__file__)) == []
