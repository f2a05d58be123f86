"""surge-tpu on a real XLA device: run by `make test-tpu` with PJRT_DEVICE=CPU (XLA compiling for the host
CPU), in the .venv-tpu environment that has torch_xla. The main suite never collects this directory."""

from __future__ import annotations

import os
from typing import Any

import pytest
import surge
import surge_tpu
import torch
from surge.testing import EventRecorder, TinyDataModule, TinyModule

assert os.environ.get("PJRT_DEVICE"), "run with PJRT_DEVICE=CPU (or TPU): `make test-tpu`"

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False}


def fit(tmp_path: Any, accelerator: str, strategy: str = "auto", epochs: int = 4) -> tuple[surge.Trainer, TinyModule]:
    surge.seed_everything(0)
    module = TinyModule()
    trainer = surge.Trainer(
        accelerator=accelerator,
        strategy=strategy,
        max_epochs=epochs,
        default_root_dir=str(tmp_path / accelerator),
        **QUIET,
    )
    trainer.fit(module, datamodule=TinyDataModule())
    return trainer, module


def weights_on_cpu(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def test_the_plugin_provides_the_xla_classes() -> None:
    provides = surge_tpu.plugin.provides
    assert provides["accelerator"] == {"tpu": surge_tpu.TPUAccelerator, "xla": surge_tpu.XLAAccelerator}
    assert provides["strategy"] == {"xla": surge_tpu.XLAStrategy}
    assert surge_tpu.TPUAccelerator.is_available()


def test_trainer_runs_on_the_xla_device(make_trainer) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer(accelerator="tpu", strategy="xla", **QUIET)
    assert isinstance(trainer.accelerator, surge_tpu.TPUAccelerator)
    assert isinstance(trainer.strategy, surge_tpu.XLAStrategy)
    assert trainer.strategy.root_device.type == "xla"
    assert (trainer.global_rank, trainer.world_size) == (0, 1)


def test_evaluation_runs_under_no_grad_with_the_default_inference_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """XLA has no inference tensors: the accelerator declines inference_mode, so validation works with the
    Trainer's defaults and its tensors are ordinary ones."""
    seen: list[bool] = []

    class Probe(TinyModule):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen.append(torch.is_inference_mode_enabled() or torch.is_grad_enabled())
            super().validation_step(batch, batch_idx)

    trainer = surge.Trainer(accelerator="tpu", max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    assert trainer.config.inference_mode
    trainer.validate(Probe(), datamodule=TinyDataModule())
    assert seen and not any(seen)


def test_auto_prefers_the_xla_device(make_trainer) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer(**QUIET)
    assert trainer.accelerator.name == "tpu"


def test_fit_on_xla_matches_cpu_and_logs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recorder = EventRecorder(kind="observer")
    surge.seed_everything(0)
    module = TinyModule()
    start = weights_on_cpu(module)
    trainer = surge.Trainer(
        accelerator="tpu",
        strategy="xla",
        max_epochs=4,
        default_root_dir=str(tmp_path / "xla"),
        plugins=[recorder],
        **QUIET,
    )
    trainer.fit(module, datamodule=TinyDataModule())
    assert next(module.parameters()).device.type == "xla"
    assert trainer.state.global_step == 4 * 8

    # the loss decreases (each step's loss as training_step returned it)
    losses = [float(e.outputs.detach().cpu()) for e in recorder.of("train_batch_end")]
    assert len(losses) == 32
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < 0.5 * first, (first, last)

    # self.log works on XLA tensors: the logged values reach the trainer's metrics as host floats
    metrics = trainer.callback_metrics
    assert {"train_loss", "val_loss"} <= set(metrics), metrics
    assert all(isinstance(float(v), float) for v in metrics.values())
    assert float(metrics["train_loss"]) == pytest.approx(losses[-1], rel=1e-4)

    cpu_trainer, cpu_module = fit(tmp_path, "cpu")
    assert not torch.equal(start["net.0.weight"], weights_on_cpu(cpu_module)["net.0.weight"])  # it trained
    xla_weights, cpu_weights = weights_on_cpu(module), weights_on_cpu(cpu_module)
    for name, value in cpu_weights.items():
        torch.testing.assert_close(xla_weights[name], value, rtol=1e-3, atol=1e-4, msg=name)
    assert float(cpu_trainer.callback_metrics["val_loss"]) == pytest.approx(float(metrics["val_loss"]), rel=1e-3)


def test_single_device_strategy_also_syncs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # strategy="auto" on one device is surge-devices' single_device: the accelerator still cuts the graphs
    trainer, module = fit(tmp_path, "tpu", epochs=2)
    assert type(trainer.strategy).__name__ == "SingleDeviceStrategy"
    assert next(module.parameters()).device.type == "xla"
    _, cpu_module = fit(tmp_path, "cpu", epochs=2)
    for name, value in weights_on_cpu(cpu_module).items():
        torch.testing.assert_close(weights_on_cpu(module)[name], value, rtol=1e-3, atol=1e-4, msg=name)


def test_checkpoint_from_xla_loads_on_cpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trainer, module = fit(tmp_path, "tpu", strategy="xla", epochs=2)
    path = trainer.save_checkpoint(str(tmp_path / "xla.ckpt"))

    checkpoint = surge.checkpoint.load(path)
    tensors = [v for v in checkpoint["state_dict"].values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    for name, value in weights_on_cpu(module).items():
        torch.testing.assert_close(checkpoint["state_dict"][name], value)

    # a CPU Trainer resumes from it: the weights and the step count continue
    cpu_module = TinyModule()
    cpu = surge.Trainer(accelerator="cpu", max_epochs=3, default_root_dir=str(tmp_path / "resume"), **QUIET)
    cpu.fit(cpu_module, datamodule=TinyDataModule(), ckpt_path=path)
    assert cpu.state.global_step == 3 * 8
    assert next(cpu_module.parameters()).device.type == "cpu"

    plain = TinyModule()
    plain.load_state_dict(checkpoint["state_dict"])
    for name, value in weights_on_cpu(module).items():
        torch.testing.assert_close(plain.state_dict()[name], value)


def test_validate_and_predict_on_xla(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trainer, module = fit(tmp_path, "tpu", strategy="xla", epochs=1)
    results = trainer.validate(module, datamodule=TinyDataModule())
    assert "val_loss" in results[0]
    predictions = trainer.predict(module, datamodule=TinyDataModule())
    assert predictions and predictions[0].device.type in ("xla", "cpu")


def test_graphs_are_cut_per_step_and_compile_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # One graph per training step, validation batch and metric write: a few compilations in the first fit,
    # then a longer fit reuses them all. Without the accelerator's syncs the graph would grow every step.
    import torch_xla.debug.metrics as met

    fit(tmp_path, "tpu", strategy="xla", epochs=1)
    met.clear_all()
    trainer, _ = fit(tmp_path, "tpu", strategy="xla", epochs=3)
    assert trainer.state.global_step == 3 * 8
    assert not met.counter_value("UncachedCompile"), met.short_metrics_report()
    assert met.counter_value("CachedCompile") >= 3 * 8  # at least one executed graph per training step
