"""Lightning callbacks and Lightning 1.x code under Surge: ``surge_lightning.pytorch.callbacks.Callback`` (and duck-typed objects with
Lightning's hooks) called as Lightning calls them, compared hook by hook with Lightning itself when it is
installed; their state in checkpoints; objects that would handle nothing refused; the Trainer's callback
accessors; the seed's (Lightning 1.x) Trainer arguments; and the removed ``*_epoch_end(outputs)`` hooks."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_lightning.pytorch
import torch
from loguru import logger
from surge.config import TrainerConfig
from surge.testing import TinyDataModule, TinyModule, quiet_trainer_args, tiny_dataset
from torch.utils.data import DataLoader, TensorDataset

QUIET = quiet_trainer_args()
HOOKS = [
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_predict_epoch_start", "on_predict_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end", "on_train_start",
    "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end", "on_predict_start",
    "on_predict_end", "on_exception", "on_save_checkpoint", "on_load_checkpoint", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
]  # fmt: skip
"""Lightning 2's callback hooks."""


def _summary(value: Any) -> Any:
    """What a recorded argument is, comparable across the two frameworks."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, dict):
        return ("dict", tuple(sorted(value)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, len(value))
    if isinstance(value, BaseException | torch.optim.Optimizer):
        return type(value).__name__
    return value


def _recorder(base: type) -> Any:
    """A callback of ``base`` recording every hook with its arguments, each call checked against the signature
    of Lightning's hook (``base``'s own, which is Lightning's for ``lightning.Callback``)."""

    def hook(name: str) -> Callable[..., None]:
        def record(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            inspect.signature(getattr(base, name)).bind(self, trainer, pl_module, *args, **kwargs)
            assert pl_module is trainer.lightning_module
            self.calls.append((name, *map(_summary, args), *sorted(kwargs.items())))

        return record

    def __init__(self: Any) -> None:
        self.calls = []

    return type("Recorder", (base,), {"__init__": __init__, **{name: hook(name) for name in HOOKS}})()


def _model(base: type) -> Any:
    class Model(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("val_loss", self(batch[0]).pow(2).mean())

        def test_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            return {"test_loss": self(batch[0]).pow(2).mean()}

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
            return self(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        # the Module's hooks, recorded beside the callback's: Lightning calls the callbacks first
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            self.calls.append(("module.on_train_batch_start", batch_idx))

        def on_train_epoch_end(self) -> None:
            self.calls.append(("module.on_train_epoch_end",))

        def on_validation_epoch_end(self) -> None:
            self.calls.append(("module.on_validation_epoch_end",))

    return Model()


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(8, 4, generator=torch.Generator().manual_seed(1))), batch_size=2)


def _run(framework: Any, root: Path) -> list[tuple[Any, ...]]:
    """fit (sanity check, two epochs of two batches, validation), validate on two loaders, test, predict."""
    recorder = _recorder(framework.Callback)
    options = {"limit_train_batches": 2, "limit_val_batches": 1, "limit_test_batches": 1, "limit_predict_batches": 1}
    trainer = framework.Trainer(
        max_epochs=2, num_sanity_val_steps=1, callbacks=[recorder], accelerator="cpu", devices=1,
        default_root_dir=str(root), **options, **QUIET,
    )  # fmt: skip
    model = _model(framework.LightningModule)
    model.calls = recorder.calls
    trainer.fit(model, _loader(), _loader())
    trainer.validate(model, [_loader(), _loader()])
    trainer.test(model, _loader())
    trainer.predict(model, _loader())
    return recorder.calls  # type: ignore[no-any-return]


def test_callback_hooks_are_called_as_lightning_calls_them(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    theirs_hooks = {n for n in vars(lightning.Callback) if n.startswith("on_") or n in ("setup", "teardown")}
    assert theirs_hooks == set(HOOKS)
    for name in HOOKS:  # the same parameters, kinds and defaults
        mine, lightnings = (
            inspect.signature(getattr(c, name)) for c in (surge_lightning.pytorch.Callback, lightning.Callback)
        )
        assert [(p.name, p.kind, p.default) for p in mine.parameters.values()] == [
            (p.name, p.kind, p.default) for p in lightnings.parameters.values()
        ], name
    ours, theirs = _run(surge_lightning.pytorch, tmp_path / "surge"), _run(lightning, tmp_path / "lightning")
    assert {call[0] for call in ours} >= set(HOOKS) - {
        "on_exception", "on_save_checkpoint", "on_load_checkpoint"
    }  # fmt: skip

    # The one documented difference (docs/porting.md): Surge zeroes the gradients after the optimizer step,
    # Lightning before the backward pass of the next window; each calls on_before_zero_grad once per step.
    def without_zero_grad(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [call for call in calls if call[0] != "on_before_zero_grad"]

    assert without_zero_grad(ours) == without_zero_grad(theirs)
    names = [call[0] for call in ours]
    zero_grads = [i for i, name in enumerate(names) if name == "on_before_zero_grad"]
    assert len(zero_grads) == 4 == [call[0] for call in theirs].count("on_before_zero_grad")
    assert all(names[i - 1] == "on_before_optimizer_step" for i in zero_grads)
    # spot checks of what the hooks receive, the same in both
    assert ("on_train_batch_end", ("dict", ("loss",)), ("list", 1), 0) in ours
    assert ("on_validation_batch_end", None, ("list", 1), 0, 1) in ours  # two loaders: dataloader_idx is passed
    assert ("on_validation_batch_end", None, ("list", 1), 0) in ours  # one loader: it is not
    assert ("setup", ("stage", "fit")) in ours and ("teardown", ("stage", "predict")) in ours
    at = ours.index(("module.on_train_epoch_end",))
    assert ours[at - 1] == ("on_train_epoch_end",)  # the callback's hook, then the Module's


class Failing(TinyModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 1:
            raise ValueError("boom")
        return super().training_step(batch, batch_idx)


def test_exception_and_ctrl_c_reach_on_exception(tmp_path: Path) -> None:
    recorder = _recorder(surge_lightning.pytorch.Callback)
    trainer = surge.Trainer(max_epochs=1, callbacks=[recorder], default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="boom"):
        trainer.fit(Failing(), datamodule=TinyDataModule())
    # Lightning stops at on_exception; Surge's teardown event always follows (documented)
    assert recorder.calls[-3:] == [
        ("on_train_batch_start", ("list", 2), 1), ("on_exception", "ValueError"), ("teardown", ("stage", "fit"))
    ]  # fmt: skip

    class CtrlC(surge_lightning.pytorch.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            trainer.state.interrupted = True  # what the first Ctrl-C does

    recorder = _recorder(surge_lightning.pytorch.Callback)
    trainer = surge.Trainer(max_epochs=1, callbacks=[CtrlC(), recorder], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert ("on_exception", "KeyboardInterrupt") in recorder.calls and trainer.interrupted


def test_callback_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    class Counter(surge_lightning.pytorch.Callback):
        """A stateful callback, as Lightning's documentation writes one."""

        def __init__(self) -> None:
            self.batches = 0
            self.loaded: list[str] = []

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.batches += 1

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            checkpoint["counter_note"] = self.batches

        def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            self.loaded.append(f"on_load_checkpoint {checkpoint['counter_note']}")

        def state_dict(self) -> dict[str, Any]:
            return {"batches": self.batches}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.loaded.append(f"load_state_dict {state_dict}")
            self.batches = state_dict["batches"]

    counter, quiet = Counter(), quiet_trainer_args(enable_checkpointing=True)
    trainer = surge.Trainer(max_epochs=1, callbacks=[counter], default_root_dir=str(tmp_path / "a"), **quiet)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    path = trainer.save_checkpoint(str(tmp_path / "counter.ckpt"))
    checkpoint = surge.checkpoint.load(path)
    assert counter.state_key == Counter.__qualname__  # as in Lightning
    assert checkpoint["plugins"][Counter.__qualname__] == {"batches": 8} and checkpoint["counter_note"] == 8

    resumed = Counter()
    trainer = surge.Trainer(max_epochs=2, callbacks=[resumed], default_root_dir=str(tmp_path / "b"), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path)
    # Lightning's order: on_load_checkpoint, then load_state_dict; then the second epoch counts on
    assert resumed.loaded == ["on_load_checkpoint 8", "load_state_dict {'batches': 8}"]
    assert resumed.batches == 16

    class Two(Counter):  # two instances with one state key would overwrite each other's state, as in Lightning
        pass

    with pytest.raises(
        surge.SurgeError, match=r"plugin 'Two' \(.*<locals>.Two\) and plugin 'Two-2' .* share the state key '.*Two'"
    ):
        surge.Trainer(callbacks=[Two(), Two()], default_root_dir=str(tmp_path / "c"), **QUIET)
    stateless = _recorder(surge_lightning.pytorch.Callback)  # overrides no state_dict: nothing in the checkpoint
    trainer = surge.Trainer(max_epochs=1, callbacks=[stateless, _recorder(surge_lightning.pytorch.Callback)], **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert "Recorder" not in trainer.dump_checkpoint()["plugins"]


def test_duck_typed_callbacks_and_lightning_1x_signatures_run(tmp_path: Path) -> None:
    class Plain:  # not a Callback subclass: Lightning's hooks are enough
        def __init__(self) -> None:
            self.calls: list[Any] = []

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.calls.append(("epoch_end", trainer.current_epoch))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: Any, dl: Any):  # type: ignore[no-untyped-def]
            self.calls.append(("batch_end", batch_idx, dl))  # Lightning 1.x's signature: dataloader_idx last

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):  # type: ignore[no-untyped-def]
            self.calls.append(("val_batch_end", batch_idx, dataloader_idx))

    plain = Plain()
    trainer = surge.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, callbacks=plain,
        default_root_dir=str(tmp_path), **QUIET,
    )  # fmt: skip
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert plain.calls == [("batch_end", 0, 0), ("batch_end", 1, 0), ("val_batch_end", 0, 0), ("epoch_end", 0)]
    assert trainer.callbacks == [plain]


def test_a_plugin_distribution_written_as_a_lightning_callback(plugin_env: Any, tmp_path: Path) -> None:
    seen: list[int] = []

    class EpochLogger(surge_lightning.pytorch.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            seen.append(trainer.current_epoch)

    plugin_env.add(surge.Plugin(name="epoch_logger", kind="participant", factory=EpochLogger))
    trainer = surge.Trainer(max_epochs=2, plugins=["epoch_logger"], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert seen == [0, 1] and "epoch_logger" in trainer.event_order("train_epoch_end")


def _refusal(tmp_path: Path, **options: Any) -> str:
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(default_root_dir=str(tmp_path), **options)
    assert not list(tmp_path.iterdir())  # refused before anything was written
    return str(info.value)


class Helper:
    def compute(self) -> int:
        return 1


def test_objects_that_would_handle_nothing_are_refused(tmp_path: Path) -> None:
    message = _refusal(tmp_path, callbacks=[Helper()])
    assert f"trainer.callbacks[0]: {__name__}.Helper handles nothing" in message
    assert "subclasses surge_lightning.pytorch.callbacks.Callback" in message and "@surge.hookimpl" in message
    assert f"trainer.plugins[1]: {__name__}.Helper handles nothing" in _refusal(
        tmp_path, plugins=["early_stopping", Helper()]
    )
    assert "handles nothing" in _refusal(
        tmp_path, callbacks=[type("Nothing", (surge_lightning.pytorch.Callback,), {})()]
    )
    assert "is a Module, not a callback: pass it to trainer.fit(model)" in _refusal(tmp_path, callbacks=[TinyModule()])
    assert "choose it with Trainer(precision=...)" in _refusal(tmp_path, plugins=[surge.Precision()])

    class Old(surge_lightning.pytorch.Callback):
        def on_epoch_end(self, trainer: Any, pl_module: Any) -> None: ...

    message = _refusal(tmp_path, callbacks=[Old()])
    assert "Old.on_epoch_end is a Lightning 1.x callback hook that Lightning 2 removed" in message
    assert "use on_train_epoch_end" in message

    class OldOutputs(surge_lightning.pytorch.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any, outputs: Any) -> None: ...

    message = _refusal(tmp_path, callbacks=[OldOutputs()])
    assert "OldOutputs.on_train_epoch_end(trainer, pl_module, outputs) does not take Lightning's arguments" in message
    assert "(trainer, pl_module)" in message and "collect them in on_train_batch_end" in message

    class Mixed(surge_lightning.pytorch.Callback):
        @surge.hookimpl
        def train_batch_end(self) -> None: ...

    assert "write it one way" in _refusal(tmp_path, callbacks=[Mixed()])


def test_trainer_callback_accessors(tmp_path: Path) -> None:
    from surge_callbacks import EarlyStopping
    from surge_checkpoint import ModelCheckpoint

    recorder = _recorder(surge_lightning.pytorch.Callback)
    quiet = {k: v for k, v in QUIET.items() if k != "enable_checkpointing"}
    trainer = surge.Trainer(callbacks=[recorder], default_root_dir=str(tmp_path), **quiet)
    assert recorder in trainer.callbacks
    default = trainer.checkpoint_callback
    assert isinstance(default, ModelCheckpoint) and trainer.checkpoint_callbacks == [default]
    assert trainer.early_stopping_callback is None and trainer.early_stopping_callbacks == []

    mine = [ModelCheckpoint(monitor="val_loss"), ModelCheckpoint(every_n_epochs=2)]
    stop = EarlyStopping(monitor="val_loss")
    trainer = surge.Trainer(callbacks=[*mine, stop], default_root_dir=str(tmp_path), **quiet)
    assert trainer.checkpoint_callbacks == mine and trainer.checkpoint_callback is mine[0]  # the default stands aside
    assert trainer.early_stopping_callback is stop and trainer.early_stopping_callbacks == [stop]
    assert surge.Trainer(**QUIET).checkpoint_callback is None
    legacy = ModelCheckpoint(monitor="val_loss", mode="max")  # Lightning 1.x took it as checkpoint_callback=
    assert (
        surge.Trainer(checkpoint_callback=legacy, default_root_dir=str(tmp_path), **quiet).checkpoint_callback is legacy
    )


# -- Lightning 1.x ------------------------------------------------------------------------------------------------

SEED_DEFAULTS: dict[str, Any] = {
    "logger": True, "checkpoint_callback": True, "callbacks": None, "default_root_dir": None,
    "gradient_clip_val": 0, "process_position": 0, "num_nodes": 1, "num_processes": 1, "gpus": None,
    "auto_select_gpus": False, "tpu_cores": None, "log_gpu_memory": None, "progress_bar_refresh_rate": None,
    "overfit_batches": 0.0, "track_grad_norm": -1, "check_val_every_n_epoch": 1, "fast_dev_run": False,
    "accumulate_grad_batches": 1, "max_epochs": None, "min_epochs": None, "max_steps": None, "min_steps": None,
    "limit_train_batches": 1.0, "limit_val_batches": 1.0, "limit_test_batches": 1.0, "limit_predict_batches": 1.0,
    "val_check_interval": 1.0, "flush_logs_every_n_steps": 100, "log_every_n_steps": 50, "accelerator": None,
    "sync_batchnorm": False, "precision": 32, "weights_summary": "top", "weights_save_path": None,
    "num_sanity_val_steps": 2, "truncated_bptt_steps": None, "resume_from_checkpoint": None, "profiler": None,
    "benchmark": False, "deterministic": False, "reload_dataloaders_every_epoch": False, "auto_lr_find": False,
    "replace_sampler_ddp": True, "terminate_on_nan": False, "auto_scale_batch_size": False,
    "prepare_data_per_node": True, "plugins": None, "amp_backend": "native", "amp_level": "O2",
    "distributed_backend": None, "move_metrics_to_cpu": False, "multiple_trainloader_mode": "max_size_cycle",
    "stochastic_weight_avg": False,
}  # fmt: skip
"""The seed Trainer's 53 arguments and their defaults (Lightning 1.2), as ``Trainer.from_argparse_args`` passes
them all."""


def _from_surge(record: Any) -> bool:
    """Records of Surge and of its plugin distributions (surge-lightning logs the 1.x warnings)."""
    return str(record["name"]).startswith("surge")


def _warnings(action: Callable[[], Any]) -> tuple[Any, list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", filter=_from_surge, format="{message}")
    try:
        return action(), lines
    finally:
        logger.remove(sink)


def test_every_seed_argument_at_its_default_is_accepted(tmp_path: Path) -> None:
    assert len(SEED_DEFAULTS) == 53
    options = dict(SEED_DEFAULTS)
    if "sync_batchnorm" not in TrainerConfig.model_fields:  # a modern flag another change adds
        del options["sync_batchnorm"]
    options.update(default_root_dir=str(tmp_path), max_epochs=1, logger=False)
    trainer, lines = _warnings(lambda: surge.Trainer(**options))
    assert len(lines) == 1 and "Lightning 1.x arguments" in lines[0]
    assert "gpus=None -> accelerator='cpu'" in lines[0]  # 1.x trained on the CPU unless gpus asked for more
    assert "amp_level='O2' -> nothing: it is Lightning 1.x's default; drop it" in lines[0]
    assert trainer.config.accelerator == "cpu" and trainer.config.max_steps == -1
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 8


# argument=value -> the modern arguments it means (checked on the validated TrainerConfig)
MAPPED: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"checkpoint_callback": False}, {"enable_checkpointing": False}),
    ({"weights_summary": None}, {"enable_model_summary": False}),
    ({"weights_summary": "full"}, {"plugins": [{"model_summary": {"mode": "full"}}]}),
    ({"progress_bar_refresh_rate": 0}, {"enable_progress_bar": False}),
    ({"progress_bar_refresh_rate": 5}, {"plugins": [{"progress": {"refresh_rate": 5}}]}),
    ({"reload_dataloaders_every_epoch": True}, {"reload_dataloaders_every_n_epochs": 1}),
    ({"replace_sampler_ddp": False}, {"use_distributed_sampler": False}),
    ({"flush_logs_every_n_steps": 10}, {}),
    ({"amp_level": "O1"}, {}),
    ({"max_steps": None}, {"max_steps": -1}),
    ({"gpus": 0}, {"accelerator": "cpu"}),
    ({"num_processes": 1}, {}),
    ({"accelerator": None}, {"accelerator": "auto"}),  # 1.x's default
]
# device arguments need the device to build a Trainer: checked on what translate() makes of them
DEVICES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"gpus": 2}, {"accelerator": "cuda", "devices": 2}),
    ({"gpus": [0, 2]}, {"accelerator": "cuda", "devices": [0, 2]}),
    ({"gpus": "0,1"}, {"accelerator": "cuda", "devices": [0, 1]}),
    ({"gpus": -1}, {"accelerator": "cuda", "devices": -1}),
    ({"gpus": 2, "accelerator": "ddp"}, {"accelerator": "cuda", "devices": 2, "strategy": "ddp"}),
    ({"gpus": 1, "accelerator": "gpu"}, {"accelerator": "gpu", "devices": 1}),
    ({"tpu_cores": 8}, {"accelerator": "tpu", "devices": 8}),
    ({"num_processes": 2, "distributed_backend": "ddp_cpu"}, {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}),
    ({"distributed_backend": "ddp"}, {"strategy": "ddp"}),
    ({"gpus": None, "accelerator": "gpu", "devices": 1}, {"accelerator": "gpu", "devices": 1}),
]
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"auto_select_gpus": True}, "devices=[0, 2] or CUDA_VISIBLE_DEVICES"),
    ({"amp_backend": "apex"}, "precision='16-mixed'"),
    ({"weights_save_path": "ckpts"}, "callbacks=[ModelCheckpoint(dirpath='ckpts')]"),
    ({"process_position": 1}, "enable_progress_bar=False"),
    ({"weights_summary": "deep"}, "1.x took None, 'top' or 'full'"),
    ({"checkpoint_callback": False, "enable_checkpointing": True}, "pass enable_checkpointing only"),
    ({"gpus": 2, "accelerator": "cpu"}, "pass accelerator= and devices= only"),
    ({"gpus": 2, "tpu_cores": 8}, "tpu_cores and gpus each choose a device"),
]


@pytest.mark.parametrize(("legacy", "modern"), MAPPED, ids=lambda v: repr(v))
def test_lightning_1x_argument_is_mapped_with_one_warning(
    tmp_path: Path, legacy: dict[str, Any], modern: dict[str, Any]
) -> None:
    trainer, lines = _warnings(lambda: surge.Trainer(default_root_dir=str(tmp_path), **legacy))
    for key, value in modern.items():
        assert getattr(trainer.config, key) == value
    assert len(lines) == 1 and all(f"{arg}={value!r} -> " in lines[0] for arg, value in legacy.items())
    assert all(f"{key}={value!r}" in lines[0] for key, value in modern.items() if key != "plugins")


@pytest.mark.parametrize(("legacy", "modern"), DEVICES, ids=lambda v: repr(v))
def test_lightning_1x_device_arguments(legacy: dict[str, Any], modern: dict[str, Any]) -> None:
    from surge_lightning._v1 import translate

    options = translate(legacy)
    assert options == modern


@pytest.mark.parametrize(("legacy", "pointer"), REFUSED, ids=lambda v: repr(v))
def test_lightning_1x_argument_without_an_honest_mapping_is_refused(
    tmp_path: Path, legacy: dict[str, Any], pointer: str
) -> None:
    message = _refusal(tmp_path, **legacy)
    assert any(f"trainer.{arg}: " in message for arg in legacy) and pointer in message


def test_resume_from_checkpoint_is_the_first_fits_ckpt_path(tmp_path: Path) -> None:
    trainer = surge.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    path = trainer.save_checkpoint(str(tmp_path / "one.ckpt"))
    resumed = surge.Trainer(max_epochs=2, resume_from_checkpoint=Path(path), default_root_dir=str(tmp_path), **QUIET)
    resumed.fit(TinyModule(), datamodule=TinyDataModule())
    assert resumed.global_step == 16  # continued from step 8: one more epoch

    missing = str(tmp_path / "none.ckpt")  # Lightning 1.x: no file there starts training from scratch
    fresh = surge.Trainer(max_epochs=1, resume_from_checkpoint=missing, default_root_dir=str(tmp_path), **QUIET)
    _, lines = _warnings(lambda: fresh.fit(TinyModule(), datamodule=TinyDataModule()))
    assert fresh.global_step == 8 and any("no file there; training starts from scratch" in line for line in lines)


def test_truncated_bptt_steps_becomes_the_modules_attribute(tmp_path: Path) -> None:
    from test_tbptt import Recurrent, _data

    class Plain(Recurrent):
        truncated_bptt_steps = 0

    model = Plain()
    trainer = surge.Trainer(max_epochs=1, truncated_bptt_steps=5, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(model, DataLoader(_data(), batch_size=4))
    assert model.truncated_bptt_steps == 5
    assert [length for _, length, _ in model.seen] == [5, 5] * 3  # three batches of 10 steps, cut in two


def test_removed_epoch_end_hooks_run_with_the_step_outputs(tmp_path: Path) -> None:
    class OldStyle(TinyModule):
        """Lightning 1.x's epoch-end hooks, as the seed ran them."""

        def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"loss": super().training_step(batch, batch_idx), "size": len(batch[0])}

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
            return self._loss(batch)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            return None  # nothing to collect

        def training_epoch_end(self, outputs: list[Any]) -> None:
            self.train_outputs = outputs

        def validation_epoch_end(self, outputs: list[Any]) -> None:
            self.val_outputs = outputs
            if isinstance(outputs[0], torch.Tensor):
                self.log("val_mean", torch.stack(outputs).mean())

        def test_epoch_end(self, outputs: list[Any]) -> None:
            self.test_outputs = outputs

    model = OldStyle()
    trainer = surge.Trainer(max_epochs=1, num_sanity_val_steps=0, default_root_dir=str(tmp_path), **QUIET)
    _, lines = _warnings(lambda: trainer.fit(model, datamodule=TinyDataModule()))
    assert len(model.train_outputs) == 8
    assert set(model.train_outputs[0]) == {"loss", "size"} and not model.train_outputs[0]["loss"].requires_grad
    assert len(model.val_outputs) == 4 and "val_mean" in trainer.callback_metrics
    assert torch.allclose(trainer.callback_metrics["val_mean"], torch.stack(model.val_outputs).mean())
    warned = [line for line in lines if "(outputs) is a Lightning 1.x hook" in line]
    assert len(warned) == 2 and all("in memory" in line for line in warned)
    assert "on_train_epoch_end(self)" in warned[0] and "on_validation_epoch_end(self)" in warned[1]

    val_set = tiny_dataset(32, 8, seed=2)
    trainer.validate(model, [DataLoader(val_set, batch_size=16)] * 2)  # two loaders: two lists
    assert [len(outputs) for outputs in model.val_outputs] == [2, 2]
    trainer.test(model, datamodule=TinyDataModule())
    assert model.test_outputs == []  # test_step returned nothing
