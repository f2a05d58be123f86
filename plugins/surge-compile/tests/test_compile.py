"""surge-compile through the Trainer: real fits of tiny models on the CPU, compiled by inductor with the system C
compiler. A graph takes seconds to compile, so the eager and compiled runs are module-scoped fixtures shared by
the tests that read them, and each scenario that compiles another graph has its own Module class (torch keeps
compiled code per function, so classes with their own ``forward`` do not share it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import surge
import surge_compile
import torch
import torch._dynamo
from loguru import logger
from surge.testing import EventRecorder, TinyDataModule, TinyModule, assert_discovered, launch_workers
from torch import nn

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
EPOCHS = 3
N_TRAIN = 60
"""Training samples: seven batches of 8 and one of 4 per epoch (8 steps), so the training graph compiled for 8
rows is compiled again when the short batch arrives, at global step 8."""
STEPS = EPOCHS * 8

LOSS_RTOL = 1e-5
"""Compiled against eager, float32: inductor fuses the bias add and tanh into one kernel with its own vectorised
tanh, which rounds differently from eager's in the last bits, and SGD carries such differences from step to step.
Measured: at most 5e-7 relative difference of the per-step losses over the 24 steps (float32's epsilon is
1.2e-7); allowed: 1e-5."""
BF16_RTOL = 0.05
"""Compiled against eager, both bf16-mixed: eager rounds every autocast op's output to bfloat16, while inductor
keeps the values between the ops of a fused kernel in float32 and rounds once. Measured: 2% at most (bfloat16's
epsilon is 0.8%); allowed: 5%, the tolerance surge-precision's tests give bf16-mixed against float32."""


class Recorder(TinyModule):
    """TinyModule recording each training step's loss, and how many steps ran with the compiled forward in place."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[torch.Tensor] = []
        self.compiled_steps = 0
        self.example_input_array = torch.zeros(8, 8)  # a model summary's example pass: eval(), no_grad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.compiled_steps += "forward" in self.__dict__  # the plugin's instance attribute shadows the method
        loss = super().training_step(batch, batch_idx)
        self.losses.append(loss.detach().clone())
        return loss


class Killed(Exception):
    """Ends a run right after its checkpoint, as a crash would."""


class SaveAt:
    """Saves a checkpoint once ``global_step`` reaches ``step`` (at ``train_batch_end``), then raises ``Killed``."""

    surge_name = "save_at"

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, str(path)

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if event.trainer.global_step == self.step:
            event.trainer.save_checkpoint(self.path)
            raise Killed


@dataclass
class Run:
    trainer: surge.Trainer
    module: Recorder
    events: EventRecorder
    warnings: list[str]

    @property
    def plugin(self) -> surge_compile.CompiledForward:
        return next(c for c in self.trainer.callbacks if isinstance(c, surge_compile.CompiledForward))

    @property
    def losses(self) -> torch.Tensor:
        return torch.stack(self.module.losses)


def fit(
    root: Path,
    settings: dict[str, Any] | None,
    model: Any = None,
    *,
    plugins: tuple[Any, ...] = (),
    ckpt_path: Path | None = None,
    **kwargs: Any,
) -> Run:
    """A fit of ``EPOCHS`` epochs with two validation batches; ``settings``: the compile plugin's, or ``None``
    (not requested); ``model``: a Module made after ``torch.manual_seed(0)`` by default."""
    torch.manual_seed(0)
    model = model if model is not None else Recorder()
    events = EventRecorder()
    requested = [{"compile": settings}] if settings is not None else []
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        options = {**QUIET, "max_epochs": EPOCHS, "limit_val_batches": 2, **kwargs}
        trainer = surge.Trainer(plugins=[*requested, events, *plugins], default_root_dir=str(root), **options)
        torch.manual_seed(1)
        try:
            trainer.fit(
                model, datamodule=TinyDataModule(n_train=N_TRAIN), ckpt_path=str(ckpt_path) if ckpt_path else None
            )
        except Killed:
            pass
    finally:
        logger.remove(sink)
    module = trainer.module
    assert isinstance(module, Recorder)
    return Run(trainer, module, events, messages)


def compile_reports(events: EventRecorder) -> list[surge.events.LogMetrics]:
    """The plugin's writes to the loggers: ``log_metrics`` events whose source (``stage``) is ``compile``."""
    return [e for e in events.of("log_metrics") if isinstance(e, surge.events.LogMetrics) and e.stage == "compile"]


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return fit(tmp_path_factory.mktemp("eager"), None)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Run:
    torch._dynamo.reset()  # no compiled code nor shape history of Recorder.forward from another test
    return fit(tmp_path_factory.mktemp("compiled"), {}, enable_model_summary=True)


def test_discovered_as_an_on_request_participant() -> None:
    plugin = assert_discovered("compile", distribution="surge-compile", kind="participant")
    assert plugin is surge_compile.plugin and not plugin.default


# -- numbers ---------------------------------------------------------------------------------------------------


def test_compiled_losses_follow_the_eager_run(eager: Run, compiled: Run) -> None:
    assert compiled.module.compiled_steps == STEPS and eager.module.compiled_steps == 0
    assert compiled.plugin.compile_seconds > 0
    torch.testing.assert_close(compiled.losses, eager.losses, rtol=LOSS_RTOL, atol=0)
    for name, value in eager.module.state_dict().items():
        torch.testing.assert_close(compiled.module.state_dict()[name], value, rtol=LOSS_RTOL, atol=1e-7)
    assert "forward" not in compiled.module.__dict__  # the Module's own forward is back after the run


def test_a_compiled_run_stopped_and_resumed_equals_the_uninterrupted_one_bit_for_bit(
    compiled: Run, tmp_path: Path
) -> None:
    first = fit(tmp_path / "first", {}, plugins=(SaveAt(3, tmp_path / "step3.ckpt"),))
    resumed = fit(tmp_path / "resumed", {}, ckpt_path=tmp_path / "step3.ckpt")
    assert first.trainer.global_step == 3 and resumed.trainer.global_step == STEPS
    assert resumed.module.compiled_steps == STEPS - 3
    assert torch.equal(torch.cat([first.losses, resumed.losses]), compiled.losses)
    for name, value in compiled.module.state_dict().items():
        assert torch.equal(resumed.module.state_dict()[name], value), name


def test_checkpoints_hold_the_modules_own_keys_and_load_across_compiled_and_eager_runs(
    compiled: Run, tmp_path: Path
) -> None:
    keys = list(Recorder().state_dict())
    first = fit(tmp_path / "compiled", {}, plugins=(SaveAt(3, tmp_path / "compiled.ckpt"),))
    assert list(surge.checkpoint.load(str(tmp_path / "compiled.ckpt"))["state_dict"]) == keys  # no "_orig_mod."
    middle = fit(  # compiled -> eager
        tmp_path / "eager", None, plugins=(SaveAt(12, tmp_path / "eager.ckpt"),), ckpt_path=tmp_path / "compiled.ckpt"
    )
    assert middle.module.compiled_steps == 0 and len(middle.module.losses) == 12 - 3
    last = fit(tmp_path / "again", {}, ckpt_path=tmp_path / "eager.ckpt")  # eager -> compiled
    assert last.trainer.global_step == STEPS and last.module.compiled_steps == STEPS - 12
    losses = torch.cat([first.losses, middle.losses, last.losses])
    torch.testing.assert_close(losses, compiled.losses, rtol=LOSS_RTOL, atol=0)
    assert list(last.trainer.dump_checkpoint()["state_dict"]) == keys


# -- what is reported ------------------------------------------------------------------------------------------


def test_a_recompilation_is_counted_logged_and_explained(compiled: Run) -> None:
    plugin = compiled.plugin
    assert plugin.recompiles == 1
    [reason] = plugin.reasons
    assert "size mismatch at index 0. expected 8, actual 4" in reason
    # the model summary's example pass (eval(), no_grad), the sanity check (eval(), inference_mode) and the
    # training steps each compile a graph of their own: not recompilations
    [warning] = [m for m in compiled.warnings if m.startswith("compile:")]
    assert "recompiled forward" in warning and "for train() calls with gradients at global step 8" in warning
    assert "expected 8, actual 4" in warning and "dynamic=True" in warning
    rows = [(e.step, e.metrics) for e in compile_reports(compiled.events)]
    assert [step for step, _ in rows] == [0, 1, 8]  # summary and sanity check, training, the recompilation
    assert [m["compile/recompiles"] for _, m in rows] == [0.0, 0.0, 1.0]
    seconds = [m["compile/seconds"] for _, m in rows]
    assert 0 < seconds[0] < seconds[1] < seconds[2] == pytest.approx(plugin.compile_seconds)


# -- settings and the compiled module passed in ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "path", "hint"),
    [
        ({"mode": "fastest"}, "trainer.plugins.compile.mode", "max-autotune"),
        ({"backend": "inductr"}, "trainer.plugins.compile.backend", "inductor"),
        ({"dynamic": "sometimes"}, "trainer.plugins.compile.dynamic", ""),
        ({"full_graph": True}, "trainer.plugins.compile.full_graph", ""),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(
    settings: dict[str, Any], path: str, hint: str, tmp_path: Path
) -> None:
    with pytest.raises(surge.ConfigError) as raised:
        surge.Trainer(plugins={"compile": settings}, default_root_dir=str(tmp_path / "root"))
    assert path in str(raised.value) and hint in str(raised.value)
    assert not (tmp_path / "root").exists()


def test_fit_of_a_torch_compile_wrapper_trains_the_module_inside_with_the_wrappers_settings(
    eager: Run, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = Recorder()
    run = fit(tmp_path, None, torch.compile(model, backend="eager"))  # the plugin is not requested
    assert run.trainer.module is model and model.compiled_steps == STEPS
    assert "compile" in run.trainer.event_order("setup")  # the plugin, built for this run
    reports = [e.metrics for e in compile_reports(run.events)]
    assert reports and reports[-1]["compile/seconds"] > 0
    # backend="eager" replays the captured graph with the same operators, so its numbers are eager's exactly
    # (inductor's, the plugin's default, are not: see the first test)
    assert torch.equal(run.losses, eager.losses)
    assert list(run.trainer.dump_checkpoint()["state_dict"]) == list(model.state_dict())
    assert "forward" not in model.__dict__


class StepOnly(surge.Module):
    """Computes in training_step only, without a forward (common in Lightning code)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_module_without_forward_is_left_alone_with_a_warning(tmp_path: Path) -> None:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        trainer = surge.Trainer(
            plugins=["compile"], max_epochs=1, limit_train_batches=2, default_root_dir=str(tmp_path), **QUIET
        )
        trainer.fit(StepOnly(), datamodule=TinyDataModule())
    finally:
        logger.remove(sink)
    assert trainer.global_step == 2
    assert any("StepOnly has no forward" in m and "nothing is compiled" in m for m in messages)


# -- composition: precision, DDP ------------------------------------------------------------------------------


class BF16Recorder(Recorder):
    """Recorder with a forward of its own (its own compiled code) that records the dtype it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.dtypes.add(self(batch[0]).dtype)
        return super().training_step(batch, batch_idx)


def test_bf16_mixed_autocasts_the_compiled_forward(tmp_path: Path) -> None:
    runs = {}
    for name, settings in (("eager", None), ("compiled", {})):
        torch.manual_seed(0)
        runs[name] = fit(tmp_path / name, settings, BF16Recorder(), precision="bf16-mixed", max_epochs=1)
    assert runs["compiled"].module.compiled_steps == 8
    assert runs["compiled"].module.dtypes == runs["eager"].module.dtypes == {torch.bfloat16}
    torch.testing.assert_close(runs["compiled"].losses, runs["eager"].losses, rtol=BF16_RTOL, atol=0)


@pytest.mark.slow
def test_two_process_ddp_compiles_inside_ddps_forward(tmp_path: Path) -> None:
    program = Path(__file__).with_name("_ddp_program.py")
    runs = {}
    for mode in ("eager", "compiled"):
        out = tmp_path / mode
        out.mkdir()
        done = launch_workers(program, [mode, str(out)])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        runs[mode] = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for rank in (0, 1):
        got, want = runs["compiled"][rank], runs["eager"][rank]
        # torch's DDPOptimizer compiled the graph: the compiled forward ran inside DistributedDataParallel.forward
        assert any("DDPOptimizer used bucket cap" in m for m in got["ddp_optimizer"]) and not want["ddp_optimizer"]
        torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=LOSS_RTOL, atol=0)
    weights = [run["weights"] for run in runs["compiled"]]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])  # gradients were all-reduced
