"""``summarize`` against counts worked out by hand, and the ``model_summary`` plugin in real fits."""

from __future__ import annotations

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule
from surge_progress import ModelSummary, summarize
from torch import nn


class Frozen(TinyModule):
    """Linear(8, 16) -> BatchNorm1d(16) -> Tanh -> Linear(16, 1), the last layer frozen.

    By hand: Linear(8, 16) has 8*16 + 16 = 144 parameters, BatchNorm1d(16) 16 + 16 = 32 (and buffers
    running_mean 16 and running_var 16 float32, num_batches_tracked one int64), Linear(16, 1) 16 + 1 = 17,
    frozen. Trainable 176, non-trainable 17, total 193; parameters 193 * 4 = 772 bytes, buffers
    16 * 4 + 16 * 4 + 8 = 136 bytes: 908 bytes = 0.000908 MB.
    """

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh())
        self.head = nn.Linear(16, 1)
        self.head.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x))  # type: ignore[no-any-return]


def test_counts_frozen_layers_and_size_by_hand():
    summary = summarize(Frozen())
    assert summary.trainable_params == 176
    assert summary.non_trainable_params == 17
    assert summary.total_params == 193
    assert summary.param_bytes == 772
    assert summary.buffer_bytes == 136
    assert summary.size_mb == pytest.approx(908 / 1e6)
    assert [(layer.name, layer.type, layer.params, layer.trainable_params) for layer in summary.layers] == [
        ("net", "Sequential", 176, 176),
        ("head", "Linear", 17, 0),
    ]
    assert not summary.lazy


def test_depths():
    model = Frozen()
    full = summarize(model, max_depth=-1)
    assert [(layer.name, layer.params) for layer in full.layers] == [
        ("net", 176),
        ("net.0", 144),
        ("net.1", 32),
        ("net.2", 0),
        ("head", 17),
    ]
    assert [layer.name for layer in summarize(model, max_depth=2).layers] == [layer.name for layer in full.layers]
    totals_only = summarize(model, max_depth=0)
    assert totals_only.layers == () and totals_only.total_params == 193
    assert "Name" not in str(totals_only) and "193" in str(totals_only)
    with pytest.raises(ValueError, match="max_depth=-2"):
        summarize(model, max_depth=-2)


def test_shared_parameters_count_once_and_half_precision_halves_the_size():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied: one 10 x 4 matrix
    assert summarize(model).total_params == 40
    assert summarize(model.half()).param_bytes == 80


def test_lazy_parameters_are_flagged_not_counted():
    summary = summarize(nn.Sequential(nn.LazyLinear(4), nn.Linear(4, 2)))
    assert summary.lazy and summary.total_params == 10
    assert "not initialized" in str(summary)


def test_shapes_from_example_input_array_leave_modes_and_randomness_alone():
    model = Frozen()
    model.example_input_array = torch.randn(5, 8)
    model.net[1].eval()  # a frozen batch norm inside a module in training mode stays in eval mode
    state = torch.get_rng_state()
    summary = summarize(model, max_depth=-1)
    shapes = {layer.name: (layer.in_shapes, layer.out_shapes) for layer in summary.layers}
    assert shapes["net"] == ([5, 8], [5, 16])
    assert shapes["net.1"] == ([5, 16], [5, 16])
    assert shapes["head"] == ([5, 16], [5, 1])
    assert model.training and model.net.training and not model.net[1].training
    assert torch.equal(torch.get_rng_state(), state)
    table = str(summary)
    assert "In sizes" in table and "[5, 16]" in table


def test_a_failing_example_forward_leaves_the_shapes_out():
    model = Frozen()
    model.example_input_array = torch.randn(5, 3)  # the wrong width
    summary = summarize(model)
    assert summary.total_params == 193 and all(layer.in_shapes is None for layer in summary.layers)
    assert "In sizes" not in str(summary)


def test_table_text():
    table = str(summarize(Frozen()))
    assert table.splitlines() == [
        "  | Name | Type       | Params",
        "------------------------------",
        "0 | net  | Sequential | 176",
        "1 | head | Linear     | 17",
        "------------------------------",
        "176    Trainable params",
        "17     Non-trainable params",
        "193    Total params",
        "0.001  Total estimated model params size (MB)",
    ]
    big = summarize(nn.Linear(1000, 1500))
    assert "1.5 M  Total params" in str(big)


def test_printed_on_stderr_when_fit_starts(tiny_fit, capsys):
    fit = tiny_fit(enable_progress_bar=False, logger=False, enable_checkpointing=False)
    captured = capsys.readouterr()
    plugin = fit.plugin("model_summary")
    assert isinstance(plugin, ModelSummary)
    assert plugin.summary == summarize(fit.trainer.module)
    assert captured.out == ""
    assert captured.err == f"{plugin.summary}\n"


def test_settings_mode_full_and_stdout(tiny_fit, capsys):
    fit = tiny_fit(
        plugins={"model_summary": {"mode": "full", "stream": "stdout"}},
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
    )
    out = capsys.readouterr().out
    assert fit.plugin("model_summary").max_depth == -1
    assert "net.0" in out and "net.2" in out


def test_settings_errors(make_trainer):
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.model_summary.*mode='top' means max_depth=1"):
        make_trainer(plugins={"model_summary": {"mode": "top", "max_depth": 3}})
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.model_summary.max_depth"):
        make_trainer(plugins={"model_summary": {"max_depth": -5}})
    assert ModelSummary(mode="full").max_depth == -1


def test_switched_off_by_the_trainer_flag(make_trainer, capsys):
    trainer = make_trainer(
        enable_model_summary=False, enable_progress_bar=False, logger=False, enable_checkpointing=False, max_epochs=1
    )
    assert "model_summary" not in trainer.plugin_names
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert capsys.readouterr().err == ""
