"""Real fits with the TensorBoard logger, their event files read back with TensorBoard's own reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import surge
import torch
from loguru import logger
from surge import events
from surge.testing import EventRecorder, TinyDataModule, TinyModule, assert_discovered
from surge_tensorboard import TensorBoardLogger
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups


def test_is_discovered_as_an_observer_logger_off_by_default():
    plugin = assert_discovered("tensorboard", distribution="surge-tensorboard", kind="observer")
    assert plugin.role == "logger"
    assert plugin.default is False


@pytest.mark.slow
def test_importing_the_plugin_or_building_a_trainer_does_not_import_tensorboard(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        import surge, surge_tensorboard
        surge.Trainer(logger="tensorboard", default_root_dir={str(tmp_path)!r})
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "tensorboard" or m.startswith("torch.utils.tensorboard"))
        print(loaded)
        """
    )
    # only this plugin (and the device provider a Trainer needs) is imported: another installed plugin that
    # imports tensorboard must not decide this test
    env = {**os.environ, "SURGE_PLUGINS": "tensorboard,devices"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]", out.stdout


def test_off_by_default(make_trainer, tmp_path, tb):
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, log_every_n_steps=1)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert "tensorboard" not in trainer.plugin_names
    assert trainer.run_dir is not None
    assert tb.files(tmp_path) == []


@pytest.mark.parametrize(
    "selection",
    [
        {"logger": "tensorboard"},
        {"logger": ["tensorboard"]},
        {"logger": True, "plugins": ["tensorboard"]},
        {"logger": True, "plugins": {"tensorboard": {}}},
        {"logger": True, "plugins": {"tensorboard": True}},
        {"logger": "instance"},
    ],
    ids=["logger=name", "logger=[name]", "plugins=[name]", "plugins={name: {}}", "plugins={name: True}", "instance"],
)
def test_each_way_of_asking_for_it_writes_event_files_into_the_run_directory(fit, tb, selection):
    if selection["logger"] == "instance":
        selection = {"logger": [TensorBoardLogger()]}
    trainer = fit(**selection)
    assert [path.parent for path in tb.files(Path(trainer.run_dir).parent.parent)] == [Path(trainer.run_dir)]
    assert Path(trainer.run_dir).parent.name == "surge_runs"


def test_alongside_another_logger(fit, tb, plugin_env):
    seen: list[dict[str, float]] = []

    class OtherLogger:
        @surge.hookimpl
        def log_metrics(self, event: events.LogMetrics) -> None:
            seen.append(dict(event.metrics))

    plugin_env.add(surge.Plugin(name="other-logger", kind="observer", factory=OtherLogger, role="logger"))
    trainer = fit(logger=["other-logger", "tensorboard"])
    assert {"other-logger", "tensorboard"} <= set(trainer.plugin_names)
    scalars = tb.Run(trainer.run_dir).scalars()
    assert [tb.f32(m["train_loss"]) for m in seen if "train_loss" in m] == [v for _, v in scalars["train_loss"]]


def test_scalars_are_written_at_their_steps_with_the_logged_values(fit, tb):
    recorder = EventRecorder()
    trainer = fit(max_epochs=2, plugins=[recorder])
    run = tb.Run(trainer.run_dir)
    scalars = run.scalars()
    written = tb.writes(recorder)
    assert written, "the fit wrote no metrics"
    metric_points = {(tag, step): value for tag, series in scalars.items() if tag != "epoch" for step, value in series}
    assert set(metric_points) == set(written)
    for point, value in metric_points.items():
        assert value == tb.f32(written[point]), point
    assert [step for step, _ in scalars["train_loss"]] == list(range(1, 9))
    assert [step for step, _ in scalars["val_loss"]] == [4, 8]
    # Lightning's ``epoch`` series: once per step written, the epoch the step belongs to
    assert scalars["epoch"] == [(step, 0.0) for step in range(1, 5)] + [(step, 1.0) for step in range(5, 9)]
    for tag, value in trainer.logged_metrics.items():
        assert scalars[tag][-1][1] == tb.f32(float(value)), tag
    points = run.points()
    assert len(points) == len(set(points)), "a (tag, step) was written twice"


def test_test_after_fit_writes_into_the_same_run(fit, tb):
    trainer = fit()
    trainer.test(datamodule=TinyDataModule())
    assert len(tb.files(trainer.run_dir)) == 2  # one per run (fit, test), both read as one TensorBoard run
    scalars = tb.Run(trainer.run_dir).scalars()
    assert [step for step, _ in scalars["test_loss"]] == [4]
    assert scalars["test_loss"][0][1] == tb.f32(float(trainer.logged_metrics["test_loss"]))


def _hparams_tab(root: Path) -> tuple[api_pb2.Experiment, api_pb2.ListSessionGroupsResponse]:
    """What TensorBoard's HPARAMS tab asks its backend for: the experiment and the session groups."""
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(root))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(root))
    backend = backend_context.Context(base_plugin.TBContext(logdir=str(root), multiplexer=mux, data_provider=provider))
    ctx = context.RequestContext()
    experiment = get_experiment.Handler(ctx, backend, "", api_pb2.GetExperimentRequest()).run()
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0,
        slice_size=100,
        allowed_statuses=[
            api_pb2.STATUS_SUCCESS,
            api_pb2.STATUS_FAILURE,
            api_pb2.STATUS_UNKNOWN,
            api_pb2.STATUS_RUNNING,
        ],
        col_params=[api_pb2.ColParams(hparam=h.name) for h in experiment.hparam_infos]
        + [api_pb2.ColParams(metric=m.name) for m in experiment.metric_infos],
    )
    return experiment, list_session_groups.Handler(ctx, backend, "", request).run()


def test_hparams_tab_compares_the_versions_with_their_metrics(fit, tmp_path):
    first = fit(TinyModule(lr=0.05))
    second = fit(TinyModule(lr=0.1))
    experiment, groups = _hparams_tab(tmp_path / "root" / "surge_runs")
    assert {h.name for h in experiment.hparam_infos} == {"in_features", "hidden", "lr"}
    assert {"train_loss", "val_loss"} <= {m.name.tag for m in experiment.metric_infos}
    by_name = {group.name: group for group in groups.session_groups}
    assert set(by_name) == {"version_0", "version_1"}
    for name, trainer, lr in (("version_0", first, 0.05), ("version_1", second, 0.1)):
        group = by_name[name]
        assert group.hparams["lr"].number_value == lr
        assert [s.status for s in group.sessions] == [api_pb2.STATUS_SUCCESS]
        val_loss = {m.name.tag: m.value for m in group.metric_values}["val_loss"]
        assert val_loss == pytest.approx(float(trainer.logged_metrics["val_loss"]), rel=1e-6)


class Configured(TinyModule):
    def __init__(self) -> None:
        super().__init__()  # TinyModule saved its own arguments; these join them
        self.hparams.update(
            optimizer={"name": "sgd", "momentum": 0.9}, layers=[16, 16], note=None, flag=True, scale=torch.tensor(0.5)
        )


def test_hparams_nested_and_non_scalar_values(fit, tb):
    trainer = fit(Configured())
    hparams = tb.Run(trainer.run_dir).hparams()
    values = {name: getattr(v, v.WhichOneof("kind")) for name, v in hparams["session_start_info"].hparams.items()}
    assert values == {
        "in_features": 8.0,
        "hidden": 16.0,
        "lr": 0.05,
        "optimizer/name": "sgd",
        "optimizer/momentum": 0.9,
        "layers": "[16, 16]",
        "note": "None",
        "flag": True,
        "scale": 0.5,
    }
    assert hparams["session_end_info"].status == api_pb2.STATUS_SUCCESS
    assert "hp_metric" not in tb.Run(trainer.run_dir).scalars()


def test_default_hp_metric_writes_lightnings_placeholder(fit, tb):
    trainer = fit(**tb.settings(default_hp_metric=True))
    assert tb.Run(trainer.run_dir).scalars()["hp_metric"] == [(0, -1.0)]


def test_graph_when_asked_and_the_module_has_an_example_input(fit, tb):
    model = TinyModule()
    model.example_input_array = torch.zeros(3, 8)
    trainer = fit(model, **tb.settings(log_graph=True))
    graph = tb.Run(trainer.run_dir).acc.Graph()
    ops = [node.op for node in graph.node]
    assert ops.count("aten::linear") == 2 and "aten::tanh" in ops


def _warnings() -> tuple[list[str], int]:
    messages: list[str] = []
    return messages, logger.add(lambda m: messages.append(str(m)), level="WARNING")


def test_graph_without_example_input_or_untraceable_warns_and_trains_on(fit, tb):
    messages, sink = _warnings()
    try:
        plain = fit(**tb.settings(log_graph=True))
        bad = TinyModule()
        bad.example_input_array = (torch.zeros(2, 8), torch.zeros(2, 8))  # forward takes one input
        untraceable = fit(bad, **tb.settings(log_graph=True))
    finally:
        logger.remove(sink)
    assert any("has no example_input_array" in m for m in messages), messages
    assert any("could not trace TinyModule" in m for m in messages), messages
    for trainer in (plain, untraceable):
        run = tb.Run(trainer.run_dir)
        assert not run.acc.Tags()["graph"]
        assert [step for step, _ in run.scalars()["train_loss"]] == [1, 2, 3, 4]


def test_no_graph_unless_asked(fit, tb):
    model = TinyModule()
    model.example_input_array = torch.zeros(3, 8)
    assert not tb.Run(fit(model).run_dir).acc.Tags()["graph"]


class GradientSpy:
    """Copies the gradients the optimizer sees at one step (a participant: it runs before the logger)."""

    surge_name = "gradient_spy"

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step
        self.grads: dict[str, torch.Tensor] = {}

    @surge.hookimpl
    def before_optimizer_step(self, event: events.BeforeOptimizerStep) -> None:
        if event.trainer.global_step + 1 == self.at_step:
            self.grads = {n: p.grad.clone() for n, p in event.module.named_parameters()}


def _assert_summarises(histogram, tensor: torch.Tensor) -> None:
    assert histogram.num == tensor.numel()
    assert histogram.min == pytest.approx(tensor.min().item())
    assert histogram.max == pytest.approx(tensor.max().item())
    assert histogram.sum == pytest.approx(tensor.sum().item(), rel=1e-5, abs=1e-6)


def test_weight_and_gradient_histograms_every_n_epochs(fit, tb):
    spy = GradientSpy(at_step=13)  # the first step of epoch 3, the second histogram epoch
    trainer = fit(max_epochs=4, logger=[TensorBoardLogger(histograms_every_n_epochs=2)], plugins=[spy])
    run = tb.Run(trainer.run_dir)
    params = dict(trainer.module.named_parameters())
    assert sorted(run.tags("histograms")) == sorted(
        [f"weights/{n}" for n in params] + [f"gradients/{n}" for n in params]
    )
    for name, param in params.items():
        assert run.histogram_steps(f"weights/{name}") == [8, 16]  # the ends of epochs 1 and 3
        assert run.histogram_steps(f"gradients/{name}") == [5, 13]  # their first steps
        _assert_summarises(run.acc.Histograms(f"weights/{name}")[-1].histogram_value, param.detach())
        _assert_summarises(run.acc.Histograms(f"gradients/{name}")[-1].histogram_value, spy.grads[name])


def test_weight_histograms_only_and_no_per_step_handler_without_gradients(fit, tb):
    trainer = fit(max_epochs=2, **tb.settings(histograms_every_n_epochs=1, histogram_gradients=False))
    run = tb.Run(trainer.run_dir)
    assert run.tags("histograms") and all(tag.startswith("weights/") for tag in run.tags("histograms"))
    assert run.histogram_steps("weights/net.0.weight") == [4, 8]
    assert "tensorboard" not in trainer.event_order("before_optimizer_step")
    assert "tensorboard" in trainer.event_order("train_epoch_end")


def test_no_histograms_and_no_epoch_handlers_by_default(fit, tb):
    trainer = fit()
    assert tb.Run(trainer.run_dir).tags("histograms") == []
    for event in ("train_epoch_start", "before_optimizer_step", "train_epoch_end"):
        assert "tensorboard" not in trainer.event_order(event)


def test_sub_dir(fit, tb):
    trainer = fit(**tb.settings(sub_dir="tb"))
    assert [path.parent for path in tb.files(trainer.run_dir)] == [Path(trainer.run_dir) / "tb"]


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"histograms_every_n_epoch": 1}, "trainer.plugins.tensorboard.histograms_every_n_epoch"),
        ({"histograms_every_n_epochs": 0}, "trainer.plugins.tensorboard.histograms_every_n_epochs"),
        ({"sub_dir": "../elsewhere"}, "trainer.plugins.tensorboard.sub_dir"),
        ({"flush_secs": 0}, "trainer.plugins.tensorboard.flush_secs"),
    ],
)
def test_bad_settings_are_configuration_errors(make_trainer, settings, path):
    with pytest.raises(surge.ConfigError, match=path.replace(".", r"\.")):
        make_trainer(logger="tensorboard", plugins={"tensorboard": settings})


def test_writer_for_records_of_ones_own(fit, tb):
    tensorboard = TensorBoardLogger()

    class Note:
        surge_name = "note"

        @surge.hookimpl
        def train_end(self, event: events.TrainEnd) -> None:
            tensorboard.writer.add_text("note", "hello", event.trainer.global_step)

    trainer = fit(logger=[tensorboard], plugins=[Note()])
    assert tensorboard.writer is None  # closed at teardown
    assert tensorboard.log_dir == trainer.run_dir
    assert "note/text_summary" in tb.Run(trainer.run_dir).tags("tensors")


def test_nothing_is_written_on_a_rank_other_than_zero(fit, tb, monkeypatch):
    """A participant makes the run directory while this process is rank zero (reading ``run_dir``), then turns
    it into rank one (before the logger's ``setup``), and feeds the logger events the core would only send rank
    zero."""
    rank = {"zero": True}
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: rank["zero"]))
    tensorboard = TensorBoardLogger(log_graph=True, histograms_every_n_epochs=1)

    class BecomeRankOne:
        surge_name = "rank_one"

        @surge.hookimpl
        def setup(self, event: events.Setup) -> None:
            assert event.trainer.run_dir is not None
            rank["zero"] = False

        @surge.hookimpl
        def train_batch_end(self, event: events.TrainBatchEnd) -> None:
            tensorboard.log_metrics(events.LogMetrics(event.trainer, {"x": 1.0}, event.trainer.global_step, 0, "train"))
            tensorboard.log_hyperparams(events.LogHyperparams(event.trainer, {"lr": 0.1}))

    model = TinyModule()
    model.example_input_array = torch.zeros(2, 8)
    trainer = fit(model, logger=[tensorboard], plugins=[BecomeRankOne()])
    assert trainer.run_dir is not None and Path(trainer.run_dir).is_dir()
    assert tb.files(Path(trainer.run_dir).parent) == []
    assert tensorboard.log_dir is None and tensorboard.writer is None


class Failing(TinyModule):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 3:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_a_failed_run_keeps_its_writes_and_says_it_failed(fit, tb, tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        fit(Failing())
    run = tb.Run(tmp_path / "root" / "surge_runs" / "version_0")
    assert [step for step, _ in run.scalars()["train_loss"]] == [1, 2, 3]
    assert run.hparams()["session_end_info"].status == api_pb2.STATUS_FAILURE


class CtrlC(TinyModule):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: the run stops after this batch
        return super().training_step(batch, batch_idx)


def test_an_interrupted_run_keeps_its_writes(fit, tb):
    trainer = fit(CtrlC(), max_epochs=3)
    assert trainer.interrupted
    run = tb.Run(trainer.run_dir)
    assert [step for step, _ in run.scalars()["train_loss"]] == [1, 2, 3]
    assert run.hparams()["session_end_info"].status == api_pb2.STATUS_UNKNOWN  # neither success nor failure
