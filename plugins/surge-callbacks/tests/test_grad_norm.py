"""The ``grad_norm`` plugin: what it writes, against norms computed by hand from the step's gradients."""

from __future__ import annotations

import math

import pytest
import surge
from surge.testing import EventRecorder, TinyModule
from surge_callbacks import GradNormTracker


class GradRecorder(TinyModule):
    """Keeps each optimizer step's gradients as Python floats, by the step's number (1-based)."""

    def __init__(self) -> None:
        super().__init__()
        self.grads: dict[int, dict[str, list[float]]] = {}

    def on_before_optimizer_step(self) -> None:
        self.grads[self.trainer.global_step + 1] = {
            name: p.grad.flatten().tolist() for name, p in self.named_parameters()
        }


def p_norm(values: list[float], p: float) -> float:
    if math.isinf(p):
        return max(abs(v) for v in values)
    return sum(abs(v) ** p for v in values) ** (1 / p)


def written(recorder: EventRecorder) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    for event in recorder.of("log_metrics"):
        if event.stage == "grad_norm":
            assert event.step not in rows, f"two writes at step {event.step}"
            rows[event.step] = dict(event.metrics)
    return rows


@pytest.mark.parametrize(("norm_type", "label", "p"), [(2, "2", 2.0), (1.5, "1.5", 1.5), ("inf", "inf", math.inf)])
def test_norms_match_a_hand_computation_at_the_logging_steps(fit, norm_type, label, p):
    recorder = EventRecorder("recorder", kind="observer")
    model = GradRecorder()
    fit({"grad_norm": {"norm_type": norm_type}}, model=model, logger=recorder, log_every_n_steps=3, max_epochs=2)
    rows = written(recorder)
    assert sorted(rows) == [3, 6]  # 8 steps, written every 3rd
    for step, metrics in rows.items():
        grads = model.grads[step]
        expected = {f"grad_{label}_norm/{name}": p_norm(values, p) for name, values in grads.items()}
        expected[f"grad_{label}_norm_total"] = p_norm([v for values in grads.values() for v in values], p)
        assert metrics == pytest.approx(expected, rel=1e-5)


def test_track_grad_norm_requests_the_plugin(fit):
    recorder = EventRecorder("recorder", kind="observer")
    trainer = fit(logger=recorder, track_grad_norm=2, log_every_n_steps=4, max_epochs=1)
    assert "grad_norm" in trainer.plugin_names
    rows = written(recorder)
    assert sorted(rows) == [4]
    assert sorted(rows[4]) == [
        "grad_2_norm/net.0.bias",
        "grad_2_norm/net.0.weight",
        "grad_2_norm/net.2.bias",
        "grad_2_norm/net.2.weight",
        "grad_2_norm_total",
    ]


def test_norms_are_taken_before_clipping(fit):
    recorder = EventRecorder("recorder", kind="observer")
    model = GradRecorder()  # its hook runs after grad_norm, before clipping: the same gradients
    fit([GradNormTracker(2)], model=model, logger=recorder, log_every_n_steps=1, gradient_clip_val=1e-3, max_epochs=1)
    rows = written(recorder)
    for step, metrics in rows.items():
        total = p_norm([v for values in model.grads[step].values() for v in values], 2.0)
        assert metrics["grad_2_norm_total"] == pytest.approx(total, rel=1e-5)
        assert total > 1e-3  # so clipping changed the gradients afterwards


def test_bad_norm_types_are_refused():
    with pytest.raises(surge.ConfigError, match="trainer.plugins.grad_norm.norm_type"):
        surge.Trainer(plugins={"grad_norm": {"norm_type": 0}}, logger=False)
    with pytest.raises(surge.ConfigError, match="GradNormTracker.norm_type"):
        GradNormTracker(norm_type="fro")  # type: ignore[arg-type]
    assert GradNormTracker(float("inf")).prefix == "grad_inf_norm"
