"""The ``swa`` plugin: the same weights as ``torch.optim.swa_utils`` driven by hand, the SWALR schedule in
place of the Module's, batch-norm statistics recomputed, bit-exact resume, settings errors, and
``Trainer(stochastic_weight_avg=True)``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.testing import TinyModule, assert_discovered
from surge_swa import StochasticWeightAveraging
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

EPOCHS, SWA_START, ANNEAL, SWA_LR = 4, 1, 2, 0.02  # swa_epoch_start=2 is Lightning's 1-based epoch: index 1


class LRs:
    """An observer: the learning rate each optimizer step used."""

    surge_name = "lrs"
    surge_kind = "observer"

    def __init__(self) -> None:
        self.lrs: list[float] = []

    @surge.hookimpl
    def before_optimizer_step(self, event: Any) -> None:
        self.lrs.append(event.optimizer.param_groups[0]["lr"])


def by_hand(kit: Any) -> tuple[surge.Module, AveragedModel, dict[str, torch.Tensor]]:
    """The run the Trainer makes, written out: StepLR until SWA starts, then SWALR and one
    ``AveragedModel.update_parameters`` per epoch; the average copied in; ``update_bn`` over one epoch."""
    torch.manual_seed(0)
    model = kit.BNModule()
    [optimizer], [step_lr] = model.configure_optimizers()
    average, swalr = None, None
    for epoch in range(EPOCHS):
        if epoch == SWA_START:
            average = AveragedModel(model)
            swalr = SWALR(optimizer, swa_lr=SWA_LR, anneal_epochs=ANNEAL, anneal_strategy="cos")
        model.train()
        for batch in kit.fixed_batches():
            loss = _mse(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if average is not None:
            average.update_parameters(model)
            swalr.step()
        else:
            step_lr.step()
    trained_bn = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    with torch.no_grad():
        for target, averaged in zip(model.parameters(), average.module.parameters()):
            target.copy_(averaged)
    update_bn(kit.fixed_batches(), model)
    return model, average, trained_bn


def test_swa_equals_swa_utils_driven_by_hand(fit: Any, kit: Any) -> None:
    # Bit-exact (torch.equal): both sides run the same float32 CPU kernels in the same order (the same
    # forward, backward, SGD step, SWALR rates, AveragedModel update and update_bn), so nothing may differ.
    settings = {"swa_lrs": SWA_LR, "swa_epoch_start": 2, "annealing_epochs": ANNEAL}
    trainer = fit({"swa": settings}, datamodule=kit.FixedOrder(), max_epochs=EPOCHS)
    swa = kit.plugin_of(trainer, "swa")
    model, average, trained_bn = by_hand(kit)

    assert swa.n_averaged == EPOCHS - SWA_START == int(average.n_averaged)
    for mine, theirs in zip(swa.average.module.parameters(), average.module.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    final = trainer.module.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(final[name], value), name
    # the statistics are the average's, from one pass over one epoch of batches, not the trained model's
    assert int(final["net.1.num_batches_tracked"]) == kit.BATCHES
    assert not torch.equal(final["net.1.running_mean"], trained_bn["net.1.running_mean"])


def test_swalr_replaces_the_modules_schedulers(fit: Any, kit: Any) -> None:
    class PerStep(kit.BNModule):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            decay = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
            return [optimizer], [{"scheduler": decay, "interval": "step"}]

    recorder = LRs()
    settings = dict(swa_lrs=SWA_LR, swa_epoch_start=2, annealing_epochs=ANNEAL)
    torch.manual_seed(0)
    fit([StochasticWeightAveraging(**settings), recorder], model=PerStep(), max_epochs=EPOCHS)
    # Epoch 0: the Module's per-step decay. From epoch 1 SWALR sets every step's rate: it starts from the
    # rate reached (0.05 * 0.9**4), stays there for the epoch, then anneals by cosine over two epochs to
    # 0.02, while the Module's scheduler keeps stepping without effect.
    start = 0.05 * 0.9**4
    alpha = (1 - math.cos(math.pi / ANNEAL)) / 2
    per_epoch = [start, SWA_LR * alpha + start * (1 - alpha), SWA_LR]
    expected = [0.05 * 0.9**k for k in range(kit.BATCHES)] + [lr for lr in per_epoch for _ in range(kit.BATCHES)]
    assert recorder.lrs == pytest.approx(expected, rel=1e-12)


def _swa() -> StochasticWeightAveraging:
    return StochasticWeightAveraging(swa_lrs=SWA_LR, swa_epoch_start=2, annealing_epochs=ANNEAL)


def test_resume_mid_averaging_is_bit_exact(fit: Any, kit: Any, tmp_path: Path) -> None:
    reference = fit([_swa()], max_epochs=EPOCHS)
    ref = kit.plugin_of(reference, "swa")
    ref_state = reference.module.state_dict()
    # (epoch, batch_idx) of the crash: mid-epoch in the first averaged epoch (SWALR made, nothing averaged
    # yet), mid-epoch with one epoch averaged, and between epochs (saved in train_epoch_end)
    for kill in [(1, 1), (2, 2), (2, None)]:
        path = str(tmp_path / f"kill-{kill[0]}-{kill[1]}.ckpt")
        with pytest.raises(kit.Killed):
            fit([_swa(), kit.SaveAt(*kill, path)], max_epochs=EPOCHS)
        torch.manual_seed(123)  # other initial weights: everything must come from the checkpoint
        resumed = fit([_swa()], model=kit.BNModule(), ckpt_path=path, max_epochs=EPOCHS)
        res = kit.plugin_of(resumed, "swa")
        assert res.n_averaged == ref.n_averaged == EPOCHS - SWA_START, kill
        for a, b in zip(ref.average.module.parameters(), res.average.module.parameters(), strict=True):
            assert torch.equal(a, b), kill
        res_state = resumed.module.state_dict()
        for name, value in ref_state.items():
            assert torch.equal(res_state[name], value), (kill, name)  # weights, recomputed batch-norm statistics
        assert ref.scheduler.state_dict() == res.scheduler.state_dict(), kill


def test_checkpoint_holds_plain_state(fit: Any, kit: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "mid.ckpt")
    with pytest.raises(kit.Killed):
        fit([_swa(), kit.SaveAt(2, 1, path)], max_epochs=EPOCHS)
    state = surge.checkpoint.load(path)["plugins"]["swa"]  # weights_only loading: plain tensors and containers
    assert state["started"] is True and state["n_averaged"] == 1
    assert list(state["average"]) == [name for name, _ in kit.BNModule().named_parameters()]
    assert state["scheduler"]["_step_count"] == 2 and len(state["lrs"]) == len(state["swa_lrs"]) == 1


def test_no_batch_norm_keeps_the_average_as_is(fit: Any, kit: Any) -> None:
    torch.manual_seed(0)
    trainer = fit([_swa()], model=TinyModule(), max_epochs=EPOCHS)
    swa = kit.plugin_of(trainer, "swa")
    for target, averaged in zip(trainer.module.parameters(), swa.average.module.parameters(), strict=True):
        assert torch.equal(target, averaged)


def test_stochastic_weight_avg_switch_activates_swa(fit: Any, kit: Any) -> None:
    trainer = fit(None, stochastic_weight_avg=True, max_epochs=2)
    swa = kit.plugin_of(trainer, "swa")
    assert isinstance(swa, StochasticWeightAveraging)
    assert swa.swa_epoch_start == 0.8 and swa.annealing_strategy == "cos"
    assert (swa.swa_start, swa.n_averaged) == (0, 2)  # int(2 * 0.8) = 1, Lightning's first epoch


def test_is_discovered() -> None:
    assert_discovered("swa", distribution="surge-swa", kind="participant")


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"annealing_strategy": "foo"}, "trainer.plugins.swa.annealing_strategy"),
        ({"swa_lrs": 0}, "trainer.plugins.swa.swa_lrs"),
        ({"swa_lrs": -0.1}, "trainer.plugins.swa.swa_lrs"),
        ({"swa_lrs": [0.1, 0.0]}, "trainer.plugins.swa.swa_lrs"),
        ({"swa_lrs": []}, "trainer.plugins.swa.swa_lrs"),
        ({"swa_epoch_start": 0}, "trainer.plugins.swa.swa_epoch_start"),
        ({"swa_epoch_start": 1.5}, "trainer.plugins.swa.swa_epoch_start"),
        ({"annealing_epochs": -1}, "trainer.plugins.swa.annealing_epochs"),
        ({"device": "nowhere"}, "trainer.plugins.swa.device"),
        ({"swa_lr": 0.1}, "trainer.plugins.swa.swa_lr"),
    ],
)
def test_bad_settings_name_their_path(make_trainer: Any, settings: dict[str, Any], path: str) -> None:
    with pytest.raises(surge.ConfigError) as info:
        make_trainer(plugins={"swa": settings})
    assert [p for p, _ in info.value.problems] == [path]
    assert path in str(info.value)


def test_fraction_without_max_epochs_is_refused(make_trainer: Any) -> None:
    with pytest.raises(surge.ConfigError, match=r"trainer\.plugins\.swa\.swa_epoch_start.*no max_epochs"):
        make_trainer(plugins={"swa": {"swa_epoch_start": 0.5}}, max_epochs=-1, max_steps=10)


def test_one_rate_per_parameter_group(fit: Any) -> None:
    with pytest.raises(surge.ConfigError, match=r"trainer\.plugins\.swa\.swa_lrs: gives 2 learning rates.*1 param"):
        fit({"swa": {"swa_lrs": [0.1, 0.2]}})


def _mse(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """TinyModule's loss, written out: the reference loop computes it itself."""
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
