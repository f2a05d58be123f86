"""The event catalogue and what a run emits: names, payloads, order, the Module as a subscriber, stopping.

The full-fit order below is the documented contract (docs/events.md carries the same listing; a test keeps
the two equal). Installed plugins are hidden (``plugin_env.hide_installed()``, which keeps the device
provider) so that only the subscribers a test names take part.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import signal
import threading
import typing
from pathlib import Path
from typing import Any

import pytest
import surge
import surge.events as ev
import torch
from surge.events import bus as bus_module
from surge.events import markdown
from surge.events import specs as hookspecs
from surge.events.__main__ import main as surge_events_main
from surge.testing import EventRecorder, TinyDataModule, TinyModule

DOCS = Path(__file__).resolve().parents[1] / "docs" / "events.md"

# -- the catalogue ---------------------------------------------------------------------------------------

REQUIRED = [
    "init_start",
    "init_end",
    "setup",
    "teardown",
    "fit_start",
    "fit_end",
    "sanity_check_start",
    "sanity_check_end",
    *(
        f"{stage}{scope}_{edge}"
        for stage in ("train", "validation", "test", "predict")
        for scope in ("", "_epoch", "_batch")
        for edge in ("start", "end")
    ),
    "before_backward",
    "after_backward",
    "before_optimizer_step",
    "before_zero_grad",
    "before_checkpoint_save",
    "after_checkpoint_load",
    "exception",
    "keyboard_interrupt",
]

# Every span the grammar allows: scopes (``<span>_start``/``<span>_end``) and operations (``before_``/``after_``).
SCOPES = {"init", "fit", "sanity_check"} | {
    f"{stage}{scope}" for stage in ("train", "validation", "test", "predict") for scope in ("", "_epoch", "_batch")
}
OPERATIONS = {"backward", "optimizer_step", "zero_grad", "checkpoint_save", "checkpoint_load"}
OUTSIDE_GRAMMAR = {"setup", "teardown", "exception", "keyboard_interrupt", "log_hyperparams", "log_metrics"}


def _specs() -> dict[str, Any]:
    """The hook specs the bus registers with pluggy for the core's events and questions."""
    return {
        name: fn for name, fn in vars(hookspecs.CORE).items() if inspect.isfunction(fn) and hasattr(fn, "surge_spec")
    }


@pytest.mark.parametrize("name", REQUIRED)
def test_required_event_exists(name: str) -> None:
    assert name in ev.EVENTS
    assert ev.EVENTS[name].name == name


def test_catalogue_covers_exactly_the_grammar() -> None:
    expected = (
        OUTSIDE_GRAMMAR
        | {f"{s}_{e}" for s in SCOPES for e in ("start", "end")}
        | {f"{p}_{op}" for op in OPERATIONS for p in ("before", "after")}
    )
    assert set(ev.EVENTS) == expected


@pytest.mark.parametrize("name", list(ev.EVENTS))
def test_event_is_a_frozen_slots_dataclass(name: str) -> None:
    cls = ev.EVENTS[name]
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" in vars(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    assert fields[0] == "trainer"
    event = cls(*[object()] * len(fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, fields[-1], None)
    # No ad-hoc attributes either. (CPython 3.11's frozen+slots __setattr__ raises TypeError here rather
    # than FrozenInstanceError: its super() refers to the class before slots were added.)
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        event.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(event, "__dict__")


def test_one_documented_hookspec_per_event() -> None:
    specs = _specs()
    assert set(specs) == set(ev.EVENTS) | set(ev.QUERIES)
    classes = {**ev.EVENTS, **ev.QUERIES}
    for name, fn in specs.items():
        assert list(inspect.signature(fn).parameters) == ["event"], name
        assert typing.get_type_hints(fn)["event"] is classes[name], name
        firstresult = fn.surge_spec["firstresult"]  # type: ignore[attr-defined]
        assert firstresult == (name in ev.QUERIES), f"{name}: a question is firstresult, an event is not"
        doc = inspect.getdoc(fn) or ""
        assert len(doc.splitlines()[0]) > 10, f"{name}: the docstring must say when it fires"
        assert "May change:" in doc, f"{name}: the docstring must say what a handler may change"


@pytest.mark.parametrize("name", list(ev.EVENTS))
def test_names_follow_the_grammar(name: str) -> None:
    span = ev.span_of(name)
    if name in OUTSIDE_GRAMMAR:
        assert span is None
        return
    assert span is not None, name
    inner, edge = span
    if name.startswith(("before_", "after_")):
        assert inner in OPERATIONS
        partner = f"after_{inner}" if edge == "start" else f"before_{inner}"
    else:
        assert inner in SCOPES
        partner = f"{inner}_end" if edge == "start" else f"{inner}_start"
    assert partner in ev.EVENTS, f"{name} has no partner {partner}"


@pytest.mark.parametrize(
    ("name", "span"),
    [
        ("train_batch_end", ("train_batch", "end")),
        ("sanity_check_start", ("sanity_check", "start")),
        ("before_backward", ("backward", "start")),
        ("after_checkpoint_load", ("checkpoint_load", "end")),
        ("init_start", ("init", "start")),
        ("setup", None),
        ("exception", None),
        ("keyboard_interrupt", None),
    ],
)
def test_span_of(name: str, span: tuple[str, str] | None) -> None:
    assert ev.span_of(name) == span


def test_payload_fields(hidden: Any, make_trainer: Any, tmp_path: Path) -> None:
    """Each event declares its fields and a run fills them with its own objects: the batch and the loss of the
    step, the optimizer it steps, the checkpoint written, the error that ended the run and the stage."""

    def fields(name: str) -> list[str]:
        return [f.name for f in dataclasses.fields(ev.EVENTS[name])]

    assert fields("train_batch_end") == ["trainer", "outputs", "batch", "batch_idx"]
    assert fields("validation_batch_start") == ["trainer", "batch", "batch_idx", "dataloader_idx"]
    assert fields("before_optimizer_step") == ["trainer", "optimizer", "optimizer_idx"]
    assert fields("before_backward") == ["trainer", "loss"]
    assert fields("exception") == ["trainer", "error", "stage"]
    assert fields("teardown") == ["trainer", "stage"]
    assert fields("before_checkpoint_save") == ["trainer", "checkpoint"]

    error, path = RuntimeError("the second step fails"), str(tmp_path / "mid.ckpt")
    step: dict[str, Any] = {}  # what the first training step got and returned

    class FailsAtTheSecondStep(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                self.trainer.save_checkpoint(path)
                raise error
            step.update(batch=batch, loss=super().training_step(batch, batch_idx))
            return step["loss"]

    recorder, data = EventRecorder(), TinyDataModule()
    trainer = make_trainer(
        plugins=[recorder], max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1
    )
    with pytest.raises(RuntimeError) as raised:
        trainer.fit(FailsAtTheSecondStep(), datamodule=data)
    assert raised.value is error

    def once(name: str) -> Any:
        (event,) = recorder.of(name)
        return event

    sanity = once("validation_batch_start")
    assert torch.equal(sanity.batch[0], data.val_set.tensors[0][:8])
    assert (sanity.batch_idx, sanity.dataloader_idx) == (0, 0)
    batch_end = once("train_batch_end")
    assert batch_end.batch is step["batch"] and batch_end.outputs is step["loss"] and batch_end.batch_idx == 0
    backward = once("before_backward")
    assert backward.loss is step["loss"]
    optimizer_step = once("before_optimizer_step")
    assert optimizer_step.optimizer is trainer.optimizers[0] and optimizer_step.optimizer_idx == 0
    save = once("before_checkpoint_save")
    assert save.checkpoint["global_step"] == surge.checkpoint.load(path)["global_step"] == 1
    failure = once("exception")
    assert failure.error is error and failure.stage == "fit"
    teardown = once("teardown")
    assert teardown.stage == "fit"


# -- the order of a run --------------------------------------------------------------------------------

# Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1), one optimizer,
# automatic optimization, no gradient accumulation. One event a line, then payload fields that must match.
# Validation during fit runs inside the training epoch: after its last batch, before train_epoch_end.
FIT_ORDER = """
init_start
init_end
setup                    stage=fit
log_hyperparams
fit_start
sanity_check_start
validation_start
validation_epoch_start   epoch=0
validation_batch_start   batch_idx=0 dataloader_idx=0
validation_batch_end     batch_idx=0 dataloader_idx=0
validation_epoch_end     epoch=0
validation_end
sanity_check_end
train_start
train_epoch_start        epoch=0
train_batch_start        batch_idx=0
before_backward
after_backward
before_optimizer_step    optimizer_idx=0
after_optimizer_step     optimizer_idx=0
before_zero_grad         optimizer_idx=0
after_zero_grad          optimizer_idx=0
train_batch_end          batch_idx=0
train_batch_start        batch_idx=1
before_backward
after_backward
before_optimizer_step    optimizer_idx=0
after_optimizer_step     optimizer_idx=0
before_zero_grad         optimizer_idx=0
after_zero_grad          optimizer_idx=0
train_batch_end          batch_idx=1
validation_start
validation_epoch_start   epoch=0
validation_batch_start   batch_idx=0 dataloader_idx=0
validation_batch_end     batch_idx=0 dataloader_idx=0
validation_epoch_end     epoch=0
log_metrics              stage=validation step=2
validation_end
train_epoch_end          epoch=0
train_epoch_start        epoch=1
train_batch_start        batch_idx=0
before_backward
after_backward
before_optimizer_step    optimizer_idx=0
after_optimizer_step     optimizer_idx=0
before_zero_grad         optimizer_idx=0
after_zero_grad          optimizer_idx=0
train_batch_end          batch_idx=0
train_batch_start        batch_idx=1
before_backward
after_backward
before_optimizer_step    optimizer_idx=0
after_optimizer_step     optimizer_idx=0
before_zero_grad         optimizer_idx=0
after_zero_grad          optimizer_idx=0
train_batch_end          batch_idx=1
validation_start
validation_epoch_start   epoch=1
validation_batch_start   batch_idx=0 dataloader_idx=0
validation_batch_end     batch_idx=0 dataloader_idx=0
validation_epoch_end     epoch=1
log_metrics              stage=validation step=4
validation_end
train_epoch_end          epoch=1
train_end
fit_end
teardown                 stage=fit
"""

# Trainer(limit_val_batches=2 / limit_test_batches=2 / limit_predict_batches=2), a fresh Trainer each.
VALIDATE_ORDER = """
init_start
init_end
setup                    stage=validate
log_hyperparams
validation_start
validation_epoch_start   epoch=0
validation_batch_start   batch_idx=0 dataloader_idx=0
validation_batch_end     batch_idx=0 dataloader_idx=0
validation_batch_start   batch_idx=1 dataloader_idx=0
validation_batch_end     batch_idx=1 dataloader_idx=0
validation_epoch_end     epoch=0
log_metrics              stage=validation step=0
validation_end
teardown                 stage=validate
"""

TEST_ORDER = (
    VALIDATE_ORDER.replace("validation_", "test_").replace("=validate", "=test").replace("=validation", "=test")
)
# predict logs no hyper-parameters and TinyModule's predict_step logs nothing
PREDICT_ORDER = "\n".join(
    line
    for line in VALIDATE_ORDER.replace("validation_", "predict_").replace("=validate", "=predict").splitlines()
    if not line.startswith("log_")
)


def _parse(listing: str) -> list[tuple[str, dict[str, str]]]:
    parsed = []
    for line in listing.strip().splitlines():
        name, *pairs = line.split()
        parsed.append((name, dict(pair.split("=", 1) for pair in pairs)))
    return parsed


def _check_order(recorder: EventRecorder, listing: str) -> None:
    expected = _parse(listing)
    assert recorder.names() == [name for name, _ in expected]
    for i, ((name, fields), (_, event)) in enumerate(zip(expected, recorder.events)):
        for field, value in fields.items():
            assert str(getattr(event, field)) == value, f"event #{i} {name}: {field}"


@pytest.fixture
def hidden(plugin_env: Any) -> Any:
    plugin_env.hide_installed()
    return plugin_env


def test_full_fit_order(hidden: Any, make_trainer: Any) -> None:
    recorder = EventRecorder()
    trainer = make_trainer(
        plugins=[recorder], max_epochs=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    _check_order(recorder, FIT_ORDER)
    # the run as handlers see it: trainer.view, which equals the Trainer (tests/test_run_view.py)
    assert all(event.trainer is trainer.view for _, event in recorder.events)  # every event carries the view


@pytest.mark.parametrize(
    ("stage", "listing", "limit"),
    [
        ("validate", VALIDATE_ORDER, "limit_val_batches"),
        ("test", TEST_ORDER, "limit_test_batches"),
        ("predict", PREDICT_ORDER, "limit_predict_batches"),
    ],
)
def test_evaluation_orders(hidden: Any, make_trainer: Any, stage: str, listing: str, limit: str) -> None:
    recorder = EventRecorder()
    trainer = make_trainer(plugins=[recorder], **{limit: 2})
    getattr(trainer, stage)(TinyModule(), datamodule=TinyDataModule())
    _check_order(recorder, listing)


def test_fit_order_is_the_one_in_the_docs() -> None:
    text = DOCS.read_text()
    blocks = re.findall(r"```text\n(.*?)```", text, flags=re.DOTALL)
    documented = [block for block in blocks if block.lstrip().startswith("init_start")]
    assert documented, "docs/events.md must list the full-fit order in a ```text block"
    assert _parse(documented[0]) == _parse(FIT_ORDER)
    for name in ev.EVENTS:
        assert f"`{name}`" in text, f"docs/events.md does not document {name}"


def test_docs_tables_are_the_generated_ones() -> None:
    text = DOCS.read_text()
    assert markdown.update(text) == text, (
        f"docs/events.md's events tables differ from the event classes' docstrings; run `{markdown.COMMAND}`"
    )


def test_docs_table_matches_hookspecs() -> None:
    """Each row of docs/events.md says what the hook spec pluggy registers says: the spec's docstring before
    and after ``May change:``, and every field of the payload."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| `(\w+)` \|", line)
        if match:
            cells = re.split(r"(?<!\\) \| ", line.strip().strip("|"))
            rows[match.group(1)] = [cell.strip().replace("\\|", "|") for cell in cells]
    specs = _specs()
    for name, cls in {**ev.EVENTS, **ev.QUERIES}.items():
        _, payload, when, may = rows[name]
        doc = (inspect.getdoc(specs[name]) or "").replace("``", "`")
        documented_when, _, documented_may = doc.partition("May change:")
        assert when == " ".join(documented_when.split()), name
        assert may == " ".join(documented_may.split()), name
        for field in dataclasses.fields(cls):
            assert field.name == "trainer" or f"`{field.name}`" in payload, (name, field.name)


def test_a_stale_docs_table_is_rewritten_and_missing_markers_named(tmp_path: Path) -> None:
    text = DOCS.read_text()
    stale = text.replace(
        "| `train_end` | `TrainEnd` | After the last training epoch.", "| `train_end` | `TrainEnd` | Old."
    )
    assert stale != text and markdown.update(stale) == text
    path = tmp_path / "events.md"
    path.write_text(stale)
    assert surge_events_main(["--markdown", str(path)]) == 0
    assert path.read_text() == text
    with pytest.raises(ValueError, match="markers of the generated 'questions' table are missing"):
        markdown.update(text.replace("<!-- end of the questions table -->", ""))


def test_the_bus_types_one_attribute_per_core_event() -> None:
    """bus.Bus's TYPE_CHECKING block (attributes typed for the loops) lists exactly the core's events, in order."""
    tree = ast.parse(inspect.getsource(bus_module.Bus))
    (guard,) = [
        node for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    typed = [
        node.target.id for node in guard.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    assert typed == list(ev.EVENTS)


def test_plugin_events_get_their_spec_as_the_core_events_do() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Scored(ev.Event):
        """After a batch is scored.

        May change: nothing."""

        name: typing.ClassVar[str] = "batch_scored"
        score: float

    fn = hookspecs.specs_of({Scored.name: Scored}).batch_scored
    core = _specs()["train_batch_end"]
    assert fn.surge_spec == core.surge_spec  # type: ignore[attr-defined]
    assert typing.get_type_hints(fn)["event"] is Scored and fn.__doc__ == Scored.__doc__
    said = ev.contract(Scored)
    assert (said.when, said.may_change, said.fields) == ("After a batch is scored.", "nothing.", ("score",))
    assert "| `batch_scored` | `Scored`: `score` | After a batch is scored. | nothing. |" in markdown.table([Scored])


def test_manual_optimization_order(hidden: Any, make_trainer: Any) -> None:
    class Manual(TinyModule):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self._loss(batch))
            opt.step()

    recorder = EventRecorder()
    trainer = make_trainer(plugins=[recorder], max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    trainer.fit(Manual(), datamodule=TinyDataModule())
    names = recorder.names()
    start = names.index("train_batch_start")
    assert names[start : names.index("train_batch_end") + 1] == [
        "train_batch_start",
        "before_backward",
        "after_backward",
        "before_optimizer_step",
        "after_optimizer_step",
        "train_batch_end",
    ]
    assert trainer.global_step == 1


class StateProbe:
    """Records what a handler can observe of the trainer at a few events."""

    surge_name = "probe"

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, bool, bool]] = []

    def _note(self, event: Any) -> None:
        trainer = event.trainer
        self.seen.append((event.name, trainer.global_step, trainer.sanity_checking, trainer.module.training))

    @surge.hookimpl
    def before_optimizer_step(self, event: ev.BeforeOptimizerStep) -> None:
        self._note(event)
        assert all(p.grad is not None for p in event.module.parameters())

    @surge.hookimpl
    def after_optimizer_step(self, event: ev.AfterOptimizerStep) -> None:
        self._note(event)

    @surge.hookimpl
    def after_zero_grad(self, event: ev.AfterZeroGrad) -> None:
        self._note(event)
        assert all(p.grad is None for p in event.module.parameters())

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        self._note(event)

    @surge.hookimpl
    def validation_batch_end(self, event: ev.ValidationBatchEnd) -> None:
        self._note(event)


def test_what_handlers_observe(hidden: Any, make_trainer: Any) -> None:
    probe = StateProbe()
    trainer = make_trainer(plugins=[probe], max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert probe.seen == [
        ("validation_batch_end", 0, True, False),  # sanity check, model in eval mode
        ("before_optimizer_step", 0, False, True),
        ("after_optimizer_step", 0, False, True),  # global_step not yet incremented
        ("after_zero_grad", 0, False, True),
        ("train_batch_end", 1, False, True),
        ("validation_batch_end", 1, False, False),
    ]


def test_payload_is_read_only_for_handlers(hidden: Any, make_trainer: Any) -> None:
    class Poker:
        @surge.hookimpl
        def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
            event.batch_idx = 99  # type: ignore[misc]

    trainer = make_trainer(plugins=[Poker()], max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    with pytest.raises(dataclasses.FrozenInstanceError) as info:
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert any("Poker" in note and "train_batch_end" in note for note in info.value.__notes__)


# -- the user's Module as a subscriber ------------------------------------------------------------------


class HookedModule(TinyModule):
    """Lightning-style hooks, each recording what it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []
        self.last_loss: torch.Tensor | None = None
        self.last_batch: Any = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.last_batch, self.last_loss = batch, super().training_step(batch, batch_idx)
        return self.last_loss

    def setup(self, stage: str) -> None:
        self.calls.append(("setup", stage))

    def on_fit_start(self, event: ev.FitStart) -> None:
        self.calls.append(("on_fit_start", type(event).__name__, event.trainer is self.trainer))

    def on_train_start(self, trainer: surge.Trainer, pl_module: surge.Module) -> None:
        self.calls.append(("on_train_start", trainer is self.trainer, pl_module is self))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(("on_train_batch_end", outputs is self.last_loss, batch is self.last_batch, batch_idx))

    def on_validation_epoch_end(self) -> None:
        self.calls.append(
            ("on_validation_epoch_end", self.trainer.sanity_checking, "val_loss" in self.trainer.callback_metrics)
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append(("on_save_checkpoint", "state_dict" in checkpoint))
        checkpoint["hooked"] = {"note": torch.tensor([7])}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls.append(("on_load_checkpoint", int(checkpoint["hooked"]["note"][0])))

    def teardown(self, stage: str) -> None:
        self.calls.append(("teardown", stage))


def test_module_hooks_get_lightning_style_arguments(hidden: Any, make_trainer: Any, tmp_path: Path) -> None:
    model = HookedModule()
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1)
    trainer.fit(model, datamodule=TinyDataModule())
    assert model.calls == [
        ("setup", "fit"),
        ("on_fit_start", "FitStart", True),
        ("on_validation_epoch_end", True, True),  # the sanity check's epoch values are read here, as in Lightning
        ("on_train_start", True, True),
        ("on_train_batch_end", True, True, 0),
        ("on_train_batch_end", True, True, 1),
        ("on_validation_epoch_end", False, True),
        ("teardown", "fit"),
    ]
    assert "module" in trainer.event_order("train_batch_end")

    model.calls.clear()
    path = tmp_path / "hooked.ckpt"
    trainer.save_checkpoint(str(path))
    assert model.calls == [("on_save_checkpoint", True)]
    assert torch.load(path, weights_only=True)["hooked"]["note"].tolist() == [7]

    resumed, recorder = HookedModule(), EventRecorder()
    make_trainer(plugins=[recorder], max_epochs=1, limit_train_batches=2, limit_val_batches=0).fit(
        resumed, datamodule=TinyDataModule(), ckpt_path=str(path)
    )
    assert ("on_load_checkpoint", 7) in resumed.calls
    assert recorder.names()[2:7] == [  # TinyModule saved hyper-parameters: logged after the load
        "setup",
        "before_checkpoint_load",
        "after_checkpoint_load",
        "log_hyperparams",
        "fit_start",
    ]
    assert not any(call[0] == "on_train_batch_end" for call in resumed.calls)  # the epoch was already done


def test_module_hook_with_unknown_parameter_is_rejected(hidden: Any, make_trainer: Any) -> None:
    class Bad(TinyModule):
        def on_train_batch_end(self, outputs: Any, bogus: int) -> None:
            pass

    trainer = make_trainer(max_epochs=1, limit_train_batches=1)
    with pytest.raises(surge.SurgeError) as info:
        trainer.fit(Bad(), datamodule=TinyDataModule())
    message = str(info.value)
    assert "Bad.on_train_batch_end" in message
    assert "'bogus'" in message
    assert "train_batch_end" in message
    assert "batch_idx" in message  # lists the fields it could have asked for


def test_module_hook_keyword_and_defaulted_parameters(hidden: Any, make_trainer: Any) -> None:
    class Flexible(TinyModule):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[Any, ...]] = []

        def on_train_batch_start(self, batch: Any, unused: int = -1, batch_idx: int = -1) -> None:
            self.seen.append(("start", unused, batch_idx))

        def on_train_batch_end(self, *, batch_idx: int, trainer: surge.Trainer) -> None:
            self.seen.append(("end", batch_idx, trainer is self.trainer))

    model = Flexible()
    make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0).fit(model, datamodule=TinyDataModule())
    assert model.seen == [("start", -1, 0), ("end", 0, True), ("start", -1, 1), ("end", 1, True)]


# -- request_stop ---------------------------------------------------------------------------------------


class Stopper:
    """Asks to stop at ``event_name`` once ``global_step`` reaches ``at_step``."""

    surge_name = "stopper"

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step
        self.batches_started = 0
        self.batches_ended = 0

    def _maybe_stop(self, event: Any) -> None:
        if event.trainer.global_step >= self.at_step:
            event.trainer.request_stop(f"step {self.at_step} reached")

    @surge.hookimpl
    def train_batch_start(self, event: ev.TrainBatchStart) -> None:
        self.batches_started += 1

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        self.batches_ended += 1
        self._maybe_stop(event)


@pytest.mark.parametrize(
    ("limits", "expected_step", "expected_epoch"),
    [
        ({}, 1, 1),  # stops right after the batch that asked
        ({"min_steps": 3}, 3, 1),  # ... but not before min_steps
        ({"min_epochs": 2}, 8, 2),  # ... nor before min_epochs (two full epochs of 4 batches)
    ],
)
def test_request_stop_from_train_batch_end(
    hidden: Any, make_trainer: Any, limits: dict[str, int], expected_step: int, expected_epoch: int
) -> None:
    stopper, recorder = Stopper(at_step=1), EventRecorder(kind="observer")
    trainer = make_trainer(
        plugins=[stopper, recorder], max_epochs=5, limit_train_batches=4, limit_val_batches=0, **limits
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == expected_step
    assert trainer.current_epoch == expected_epoch
    assert stopper.batches_started == stopper.batches_ended == expected_step
    assert trainer.should_stop and trainer.state.stop_reason == "step 1 reached"
    assert trainer.state.status == "finished"
    assert recorder.names()[-3:] == ["train_end", "fit_end", "teardown"]


def test_request_stop_from_train_batch_start_skips_that_step(hidden: Any, make_trainer: Any) -> None:
    class StopBeforeThird:
        def __init__(self) -> None:
            self.ends = 0

        @surge.hookimpl
        def train_batch_start(self, event: ev.TrainBatchStart) -> None:
            if event.batch_idx == 2:
                event.trainer.request_stop("third batch")

        @surge.hookimpl
        def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
            self.ends += 1

    plugin = StopBeforeThird()
    trainer = make_trainer(plugins=[plugin], max_epochs=3, limit_train_batches=4, limit_val_batches=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.global_step == 2
    assert plugin.ends == 2
    assert trainer.current_epoch == 1


def test_request_stop_from_validation_epoch_end(hidden: Any, make_trainer: Any) -> None:
    class EarlyStop:
        @surge.hookimpl
        def validation_epoch_end(self, event: ev.ValidationEpochEnd) -> None:
            if not event.trainer.sanity_checking:
                event.trainer.request_stop("val_loss plateaued")

    trainer = make_trainer(plugins=[EarlyStop()], max_epochs=4, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert (trainer.current_epoch, trainer.global_step) == (1, 2)
    assert trainer.state.stop_reason == "val_loss plateaued"


# -- Ctrl-C ---------------------------------------------------------------------------------------------


def test_ctrl_c_stops_at_a_step_boundary_and_returns(hidden: Any, make_trainer: Any) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT handlers can only be installed from the main thread")

    class PressCtrlC:
        @surge.hookimpl
        def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
            if event.batch_idx == 1:
                signal.raise_signal(signal.SIGINT)

    recorder = EventRecorder(kind="observer")
    data = TinyDataModule()
    trainer = make_trainer(plugins=[PressCtrlC(), recorder], max_epochs=3, limit_train_batches=4, limit_val_batches=0)
    previous = signal.getsignal(signal.SIGINT)
    assert trainer.fit(TinyModule(), datamodule=data) is None  # control returns to the caller
    assert signal.getsignal(signal.SIGINT) is previous
    assert trainer.interrupted and trainer.state.status == "interrupted"
    assert trainer.global_step == 2
    names = recorder.names()
    assert names.count("train_batch_end") == 2
    assert names.count("keyboard_interrupt") == 1
    assert names[-2:] == ["keyboard_interrupt", "teardown"]
    assert "fit_end" not in names and "exception" not in names
    assert recorder.of("keyboard_interrupt")[0].stage == "fit"  # type: ignore[attr-defined]
    assert data.calls[-1] == "teardown:fit"


def test_the_per_batch_event_built_directly_is_the_same_event() -> None:
    """``TrainBatchEnd`` is built on every batch by setting its slots directly (surge.engine.loops): the same
    type, fields, equality, hash and immutability as the dataclass's own constructor; classes that could differ
    get their own constructor back."""
    import dataclasses

    from surge import events as ev

    build = ev._direct_builder(ev.TrainBatchEnd)
    assert build is not ev.TrainBatchEnd
    outputs, batch = {"loss": 1.5}, ("x", "y")
    fast, slow = build("run", outputs, batch, 7), ev.TrainBatchEnd("run", outputs, batch, 7)
    assert type(fast) is ev.TrainBatchEnd
    assert fast == slow and hash(ev.TrainBatchEnd("run", 1, 2, 7)) == hash(build("run", 1, 2, 7))
    assert repr(fast) == repr(slow)
    assert dataclasses.asdict(build("run", 1, 2, 3)) == {"trainer": "run", "outputs": 1, "batch": 2, "batch_idx": 3}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.batch_idx = 8  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked(ev.TrainBatchEnd):
        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Defaulted(ev.Event):
        a: int = 0
        b: int = 0
        c: int = 0

    assert ev._direct_builder(Checked) is Checked
    assert ev._direct_builder(Defaulted) is Defaulted
    assert ev._direct_builder(ev.TrainBatchStart) is ev.TrainBatchStart  # three fields
