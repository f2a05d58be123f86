"""surge-precision through the Trainer: real fits of surge.testing's TinyModule on the CPU."""

from __future__ import annotations

import copy
import math
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import surge
import surge_precision
import torch
from loguru import logger
from surge.errors import ProviderError
from surge.testing import TinyDataModule, TinyModule, assert_discovered, quiet_trainer_args

QUIET = quiet_trainer_args()
EPOCHS = 5

# Relative difference of the final validation loss (the trained weights evaluated in float32 on the whole
# validation set) from a 32-true run with the same seed; the README lists the same numbers.
TOLERANCE = {"64-true": 1e-4, "16-mixed": 0.02, "bf16-mixed": 0.05, "16-true": 0.05, "bf16-true": 0.10}


def seeded_module() -> TinyModule:
    torch.manual_seed(0)
    return TinyModule()


def fit(precision: Any, tmp_path: Any, module: TinyModule | None = None, **kwargs: Any) -> surge.Trainer:
    torch.manual_seed(0)
    module = module or TinyModule()
    kwargs = {**QUIET, "max_epochs": EPOCHS, "limit_val_batches": 0, **kwargs}
    trainer = surge.Trainer(precision=precision, default_root_dir=str(tmp_path), **kwargs)
    trainer.fit(module, datamodule=TinyDataModule())
    return trainer


def val_loss_fp32(module: torch.nn.Module) -> float:
    data = TinyDataModule()
    data.setup("validate")
    x, y = data.val_set.tensors
    reference = TinyModule()
    reference.load_state_dict({key: value.float() for key, value in module.state_dict().items()})
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(reference(x), y))


def grad_norm(module: torch.nn.Module) -> float:
    grads = [p.grad.detach().float() for p in module.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


# -- discovery and names ------------------------------------------------------------------------------------


def test_discovered_as_a_provider_of_the_precision_slot() -> None:
    plugin = assert_discovered("precision", distribution="surge-precision", kind="provider")
    assert plugin is surge_precision.plugin
    assert sorted(plugin.provides) == ["precision"]
    assert sorted(plugin.provides["precision"]) == ["16-mixed", "16-true", "64-true", "bf16-mixed", "bf16-true"]


ALIASES = {
    "64": surge_precision.DoublePrecision,
    64: surge_precision.DoublePrecision,
    "64-true": surge_precision.DoublePrecision,
    "16": surge_precision.FP16MixedPrecision,
    16: surge_precision.FP16MixedPrecision,
    "16-mixed": surge_precision.FP16MixedPrecision,
    "bf16": surge_precision.BF16MixedPrecision,
    "bf16-mixed": surge_precision.BF16MixedPrecision,
    "16-true": surge_precision.FP16TruePrecision,
    "bf16-true": surge_precision.BF16TruePrecision,
    "32": surge.Precision,
    32: surge.Precision,
    "32-true": surge.Precision,
}


@pytest.mark.parametrize("name", list(ALIASES), ids=lambda name: repr(name))
def test_names_and_aliases_resolve(make_trainer, name) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer(precision=name)
    assert type(trainer.precision_plugin) is ALIASES[name]
    if ALIASES[name] is not surge.Precision:  # 32-true stays the core's own
        assert trainer.catalog.records["precision"].status == "active"
        assert "precision.precision" in trainer.plugin_names


def test_unknown_name_lists_every_name_and_alias(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as info:
        make_trainer(precision="fp8-mixed")
    message = str(info.value)
    assert "no precision named 'fp8-mixed'" in message
    for name in ["16", "16-mixed", "16-true", "32", "32-true", "64", "64-true", "bf16", "bf16-mixed", "bf16-true"]:
        assert f" {name}," in message or f" {name}." in message
    assert "a plugin that provides it" in message  # surge-precision is installed and does not add it


def test_without_the_plugin_the_error_names_it(plugin_env, make_trainer) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed()
    with pytest.raises(ProviderError, match=r"no precision named 'bf16-mixed'.*pip install surge-precision"):
        make_trainer(precision="bf16-mixed")


class _FakeFP8(surge.Precision):
    """A third party's precision: its own names, reached through the same `provides` slot."""

    name: ClassVar[str] = "fp8-fake"
    aliases: ClassVar[tuple[str, ...]] = ("fp8-fake", "fp8")

    def __init__(self) -> None:
        self.calls: list[str] = []

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self.calls.append("convert_module")
        return module

    def backward(self, loss: torch.Tensor) -> None:
        self.calls.append("backward")
        loss.backward()


def test_a_third_party_precision_registers_its_own_names(plugin_env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(
        surge.Plugin(name="fp8-fake", kind="provider", provides={"precision": {"fp8-fake": _FakeFP8}}),
        distribution="surge-fp8-fake",
    )
    trainer = fit("fp8", tmp_path, max_epochs=1)
    assert type(trainer.precision_plugin) is _FakeFP8
    assert trainer.precision_plugin.calls.count("backward") == 8 and "convert_module" in trainer.precision_plugin.calls
    assert trainer.catalog.records["fp8-fake"].status == "active"
    assert type(surge.Trainer(precision="16", **QUIET).precision_plugin) is surge_precision.FP16MixedPrecision
    with pytest.raises(ProviderError, match=r"Valid names: .*bf16-true.*fp8, fp8-fake"):
        surge.Trainer(precision="fp9", **QUIET)


class _OtherFP8(_FakeFP8):
    name: ClassVar[str] = "fp8-other"
    aliases: ClassVar[tuple[str, ...]] = ("fp8-other", "fp8")


def test_two_plugins_claiming_one_precision_name_is_an_error_naming_both(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(
        surge.Plugin(name="fp8-fake", kind="provider", provides={"precision": {"fp8-fake": _FakeFP8}}),
        distribution="surge-fp8-fake",
    )
    plugin_env.add(
        surge.Plugin(name="fp8-other", kind="provider", provides={"precision": {"fp8-other": _OtherFP8}}),
        distribution="surge-fp8-other",
    )
    with pytest.raises(
        surge.errors.PluginConflictError, match=r"precision 'fp8' is claimed by .*surge-fp8-fake.*surge-fp8-other"
    ):
        surge.Trainer(precision="fp8", **QUIET)
    # the name fails alone (issue 26): a run that does not ask for it, and each plugin's own name, still work
    assert type(surge.Trainer(precision="16", **QUIET).precision_plugin).__name__ != "_FakeFP8"
    assert type(surge.Trainer(precision="fp8-fake", **QUIET).precision_plugin) is _FakeFP8


# -- training in each mode ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fp32_loss(tmp_path_factory) -> dict[int, float]:  # type: ignore[no-untyped-def]
    """The 32-true baseline per accumulate_grad_batches."""
    losses = {}
    for accumulate in (1, 2):
        module = seeded_module()
        fit("32-true", tmp_path_factory.mktemp("fp32"), module, accumulate_grad_batches=accumulate)
        losses[accumulate] = val_loss_fp32(module)
    return losses


@pytest.mark.parametrize(
    ("precision", "accumulate"), [(name, 1) for name in TOLERANCE] + [("16-mixed", 2), ("bf16-mixed", 2)]
)
def test_trains_close_to_fp32(precision, accumulate, fp32_loss, tmp_path) -> None:  # type: ignore[no-untyped-def]
    module = seeded_module()
    initial = val_loss_fp32(module)
    fit(precision, tmp_path, module, accumulate_grad_batches=accumulate)
    loss, reference = val_loss_fp32(module), fp32_loss[accumulate]
    assert loss < initial / 5  # it trained
    assert abs(loss - reference) <= TOLERANCE[precision] * reference, (precision, loss, reference)


class _Probe(TinyModule):
    """Records the dtypes a training and a validation step see."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[Any]] = {}

    def _record(self, stage: str, batch: Any) -> None:
        x, y = batch
        layer = self.net[0]
        for key, value in {
            "matmul": (x.to(layer.weight.dtype) @ layer.weight.T).dtype,
            "input": x.dtype,
            "target": y.dtype,
            "param": layer.weight.dtype,
            "default": torch.zeros(1).dtype,
            "autocast": torch.is_autocast_enabled("cpu"),
        }.items():
            self.seen.setdefault(f"{stage}.{key}", set()).add(value)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._record("train", batch)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._record("val", batch)
        super().validation_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("64-true", torch.float64), ("16-true", torch.float16), ("bf16-true", torch.bfloat16)],
)
def test_true_modes_convert_weights_inputs_and_default_dtype(precision, dtype, tmp_path) -> None:  # type: ignore[no-untyped-def]
    module = _Probe()
    fit(precision, tmp_path, module, max_epochs=1, limit_val_batches=2)
    assert {p.dtype for p in module.parameters()} == {dtype}
    for stage in ("train", "val"):
        for key in ("matmul", "input", "target", "param", "default"):
            assert module.seen[f"{stage}.{key}"] == {dtype}, (stage, key)
        assert module.seen[f"{stage}.autocast"] == {False}
    assert torch.get_default_dtype() == torch.float32  # restored after every step


@pytest.mark.parametrize(("precision", "dtype"), [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)])
def test_mixed_modes_run_steps_under_autocast(precision, dtype, tmp_path) -> None:  # type: ignore[no-untyped-def]
    module = _Probe()
    trainer = fit(precision, tmp_path, module, max_epochs=1, limit_val_batches=2)
    assert {p.dtype for p in module.parameters()} == {torch.float32}
    for stage in ("train", "val"):
        assert module.seen[f"{stage}.matmul"] == {dtype}, stage
        assert module.seen[f"{stage}.input"] == {torch.float32}
        assert module.seen[f"{stage}.autocast"] == {True}
    assert not torch.is_autocast_enabled("cpu")
    # one autocast object for the whole run, not one per step
    assert trainer.precision_plugin.autocast(torch.device("cpu")) is trainer.precision_plugin.autocast(
        torch.device("cpu")
    )


def test_16_mixed_on_the_cpu_stays_float16_and_says_once_how_lightning_differs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A decision (README, "*-mixed"): float16 with its GradScaler, as asked, where Lightning 2.x switches to
    bf16-mixed on the CPU; one warning per Trainer, with the way to Lightning's numbers."""
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        trainer = fit("16-mixed", tmp_path, _Probe(), max_epochs=1)
        trainer.validate(trainer.module, datamodule=TinyDataModule())
        told = [m for m in messages if "Lightning switches to 'bf16-mixed' on the CPU" in m]
        fit("bf16-mixed", tmp_path, max_epochs=1)
    finally:
        logger.remove(sink)
    assert trainer.module.seen["train.matmul"] == {torch.float16} and trainer.precision_plugin.scale is not None
    assert len(told) == 1 and "Pass precision='bf16-mixed' for Lightning's numbers" in told[0]
    assert [m for m in messages if "Lightning switches" in m] == told  # bf16-mixed: nothing to say
    try:
        import lightning
    except ImportError:  # the claim about Lightning is checked where it is installed (the bench extra)
        return
    with pytest.warns(UserWarning, match="Using `precision='bf16-mixed'` instead"):
        reference = lightning.Trainer(accelerator="cpu", precision="16-mixed", logger=False)
    assert reference.precision == "bf16-mixed"


def test_cast_floating_keeps_structure_and_non_float_tensors() -> None:
    Pair = namedtuple("Pair", "x y")

    @dataclass
    class Batch:
        x: torch.Tensor
        label: torch.Tensor

    out = surge_precision.cast_floating(
        {"a": [torch.ones(2), Pair(torch.ones(1), torch.arange(3))], "b": Batch(torch.ones(1), torch.ones(1).bool())},
        torch.float16,
    )
    assert out["a"][0].dtype == torch.float16 and out["a"][1].x.dtype == torch.float16
    assert isinstance(out["a"][1], Pair) and out["a"][1].y.dtype == torch.int64
    assert isinstance(out["b"], Batch) and out["b"].x.dtype == torch.float16 and out["b"].label.dtype == torch.bool


# -- 16-mixed: the GradScaler ---------------------------------------------------------------------------


class _InfAt:
    """Writes inf into a gradient after the backward of the given optimizer steps; records each step."""

    surge_name = "inf_injector"

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps
        self.records: list[dict[str, Any]] = []
        self._before: dict[str, Any] = {}

    @surge.hookimpl
    def after_backward(self, event: Any) -> None:
        if event.trainer.global_step in self.steps:
            next(event.trainer.module.parameters()).grad[0, 0] = math.inf

    @surge.hookimpl
    def before_optimizer_step(self, event: Any) -> None:
        self._before = {
            "params": [p.detach().clone() for p in event.trainer.module.parameters()],
            "scale": event.trainer.precision_plugin.scale,
        }

    @surge.hookimpl
    def after_optimizer_step(self, event: Any) -> None:
        precision, params = event.trainer.precision_plugin, list(event.trainer.module.parameters())
        self.records.append(
            {
                **self._before,
                "step": event.trainer.global_step,
                "changed": any(not torch.equal(a, b) for a, b in zip(self._before["params"], params)),
                "scale_after": precision.scale,
                "skipped": precision.last_step_skipped,
            }
        )


def test_inf_gradient_skips_the_step_and_lowers_the_scale(tmp_path) -> None:  # type: ignore[no-untyped-def]
    injector = _InfAt({3})
    trainer = fit("16-mixed", tmp_path, max_epochs=1, plugins=[injector])
    assert len(injector.records) == 8
    for record in injector.records:
        if record["step"] == 3:
            assert not record["changed"] and record["skipped"]
            assert record["scale_after"] == record["scale"] / 2
        else:
            assert record["changed"] and not record["skipped"]
            assert record["scale_after"] == record["scale"]
    assert trainer.precision_plugin.skipped_steps == 1
    assert trainer.global_step == 8  # a skipped step still counts, as in Lightning
    assert all(torch.isfinite(p).all() for p in trainer.module.parameters())


def test_a_skipped_step_does_not_step_per_step_schedulers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    class Scheduled(TinyModule):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    trainer = fit("16-mixed", tmp_path, module=Scheduled(), max_epochs=1, plugins=[_InfAt({3})])
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    skipped = trainer.precision_plugin.skipped_steps
    assert skipped >= 1  # the injected one (and any the scaler's first, too large scale overflowed)
    assert trainer.global_step == 8 and scheduler.last_epoch == 8 - skipped  # a skipped step steps no scheduler
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.05 * 0.5 ** (8 - skipped)


def test_scaler_state_round_trips_through_a_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trainer = fit("16-mixed", tmp_path, max_epochs=1, plugins=[_InfAt({0, 2})])
    saved = trainer.precision_plugin.state_dict()
    assert saved["scale"] == 65536.0 / 4 and saved["_growth_tracker"] == 5
    path = trainer.save_checkpoint(str(tmp_path / "run.ckpt"))
    on_disk = torch.load(path, weights_only=True)["precision"]
    assert on_disk == saved and all(type(v) in (int, float) for v in on_disk.values())

    seen: dict[str, Any] = {}

    class Peek:
        @surge.hookimpl
        def train_start(self, event: Any) -> None:
            seen["restored"] = event.trainer.precision_plugin.scale

    resumed = surge.Trainer(
        precision="16-mixed",
        max_epochs=2,
        limit_val_batches=0,
        plugins=[Peek()],
        default_root_dir=str(tmp_path),
        **QUIET,
    )
    resumed.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path)
    assert seen["restored"] == 65536.0 / 4
    state = resumed.precision_plugin.state_dict()
    assert state["scale"] == 65536.0 / 4  # growth_interval (2000) not reached
    assert state["_growth_tracker"] == 5 + 8  # the count continued from the checkpoint's


class _GradNorms:
    """In before_optimizer_step: the gradient norm handlers see, the weights, and the step's batches."""

    surge_name = "grad_norms"

    def __init__(self) -> None:
        self.window: list[Any] = []
        self.steps: list[dict[str, Any]] = []

    @surge.hookimpl
    def train_batch_start(self, event: Any) -> None:
        self.window.append(event.batch)

    @surge.hookimpl
    def before_optimizer_step(self, event: Any) -> None:
        trainer = event.trainer
        norm = grad_norm(trainer.module)
        trainer.precision_plugin.unscale_gradients(event.optimizer)  # idempotent within a step
        self.steps.append(
            {
                "norm": norm,
                "norm_again": grad_norm(trainer.module),
                "scale": trainer.precision_plugin.scale,
                "state": copy.deepcopy(trainer.module.state_dict()),
                "batches": self.window,
            }
        )
        self.window = []

    @surge.hookimpl
    def after_optimizer_step(self, event: Any) -> None:
        self.steps[-1]["norm_after"] = grad_norm(event.trainer.module)
        self.steps[-1]["delta"] = float(
            torch.linalg.vector_norm(
                torch.cat(
                    [
                        (p.detach() - self.steps[-1]["state"][name]).flatten()
                        for name, p in event.trainer.module.named_parameters()
                    ]
                )
            )
        )


def fp32_grad_norm(state: dict[str, torch.Tensor], batches: list[Any], accumulate: int) -> float:
    module = TinyModule()
    module.load_state_dict(state)
    for x, y in batches:
        (torch.nn.functional.mse_loss(module(x), y) / accumulate).backward()
    return grad_norm(module)


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("clip", [None, 1e6])
def test_handlers_and_clipping_see_true_scale_gradients(accumulate, clip, tmp_path) -> None:  # type: ignore[no-untyped-def]
    probe = _GradNorms()
    fit(
        "16-mixed",
        tmp_path,
        max_epochs=1,
        plugins=[probe],
        accumulate_grad_batches=accumulate,
        gradient_clip_val=clip,
    )
    assert len(probe.steps) == 8 // accumulate
    finite = [step for step in probe.steps if math.isfinite(step["norm"])]
    assert len(finite) >= len(probe.steps) - 1  # a float16 overflow (the scaler then skips) is rare here
    for step in finite:
        assert step["scale"] >= 32768.0  # the scaler was active
        assert len(step["batches"]) == accumulate
        reference = fp32_grad_norm(step["state"], step["batches"], accumulate)
        assert step["norm"] == pytest.approx(reference, rel=0.02)
        assert step["norm_again"] == step["norm"]


def test_clipping_acts_on_unscaled_gradients(tmp_path) -> None:  # type: ignore[no-untyped-def]
    probe = _GradNorms()
    fit("16-mixed", tmp_path, max_epochs=1, plugins=[probe], gradient_clip_val=0.01)
    lr = TinyModule().lr
    finite = [step for step in probe.steps if math.isfinite(step["norm"])]
    assert len(finite) >= len(probe.steps) - 1  # a float16 overflow (the scaler then skips) is rare here
    for step in finite:
        assert step["norm"] > 0.05  # clipping had something to do
        assert step["norm_after"] == pytest.approx(0.01, rel=1e-3)  # clipped to the true-scale threshold
        assert step["delta"] == pytest.approx(lr * 0.01, rel=1e-2)  # and SGD stepped with those gradients


# -- manual optimization ----------------------------------------------------------------------------------


class _Manual(TinyModule):
    """Steps by hand through ``self.optimizers()``; writes inf into a gradient at the batches ``inf_at``."""

    def __init__(self, inf_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.inf_at = inf_at
        self.autocast: list[bool] = []
        self.steps: list[dict[str, Any]] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.autocast.append(torch.is_autocast_enabled("cpu"))
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self._loss(batch))
        if batch_idx in self.inf_at:
            next(self.parameters()).grad[0, 0] = math.inf
        before = [p.detach().clone() for p in self.parameters()]
        scale = getattr(self.trainer.precision_plugin, "scale", None)
        opt.step()
        precision = self.trainer.precision_plugin
        moved = any(not torch.equal(a, b) for a, b in zip(before, self.parameters(), strict=True))
        after = getattr(precision, "scale", None)
        self.steps.append({"moved": moved, "skipped": precision.last_step_skipped, "scale": (scale, after)})


def test_16_mixed_manual_optimization_steps_through_the_scaler(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``self.optimizers()`` steps through the precision plugin: the inf step skipped and the scale halved, and
    otherwise the same weights as automatic optimization."""
    manual = _Manual(inf_at=(3,))
    fit("16-mixed", tmp_path, manual, max_epochs=1)
    assert all(manual.autocast)
    assert len(manual.steps) == 8 and manual.steps[3]["skipped"]  # (the first scale, 2**16, may overflow too)
    for step in manual.steps:  # a skipped step leaves the weights and halves the scale; others step
        before, after = step["scale"]
        assert step["moved"] != step["skipped"]
        assert after == before / 2 if step["skipped"] else after >= before
    assert sum(s["skipped"] for s in manual.steps) < 4
    # without the injected inf, stepping by hand is exactly what the automatic loop does
    torch.manual_seed(0)
    by_hand = _Manual()
    torch.manual_seed(0)
    automatic = TinyModule()
    fit("16-mixed", tmp_path / "manual", by_hand, max_epochs=2)
    fit("16-mixed", tmp_path / "automatic", automatic, max_epochs=2)
    for (name, a), b in zip(by_hand.state_dict().items(), automatic.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_bf16_mixed_runs_manual_training_steps_under_autocast(tmp_path) -> None:  # type: ignore[no-untyped-def]
    manual = _Manual()
    fit("bf16-mixed", tmp_path, manual, max_epochs=1)
    assert manual.autocast and all(manual.autocast)
    assert type(manual.optimizers(use_pl_optimizer=False)) is torch.optim.SGD


def test_resuming_inside_an_accumulation_window_matches_an_uninterrupted_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "mid-window.ckpt")

    class SaveAt:
        @surge.hookimpl
        def train_batch_end(self, event: Any) -> None:
            if event.batch_idx == 2:  # after the first backward of the window {2, 3}: scaled gradients pending
                event.trainer.save_checkpoint(path)

    whole = seeded_module()
    trainer = fit("16-mixed", tmp_path, whole, max_epochs=1, accumulate_grad_batches=2, plugins=[_InfAt({0}), SaveAt()])
    assert torch.load(path, weights_only=True)["precision"]["scale"] == 65536.0 / 2
    resumed_module = seeded_module()
    resumed = surge.Trainer(
        precision="16-mixed",
        max_epochs=1,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        **QUIET,
    )
    torch.manual_seed(0)
    resumed.fit(resumed_module, datamodule=TinyDataModule(), ckpt_path=path)
    assert resumed.precision_plugin.state_dict() == trainer.precision_plugin.state_dict()
    for a, b in zip(whole.parameters(), resumed_module.parameters()):
        assert torch.equal(a, b)
