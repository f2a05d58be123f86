"""Values logged in ``on_train_batch_end`` (issue 25, item 2): by a Callback (``pl_module.log``), by a Surge
plugin's ``train_batch_end`` handler (``event.module.log``) or by the Module's own ``on_train_batch_end``.

As in Lightning, such a value belongs to the step of the batch it was logged after: it is in
``callback_metrics`` at once (the handler that logged it and every handler after it read it), in
``logged_metrics``, and in that step's logger row beside what ``training_step`` logged; its epoch aggregate
counts every batch. The pattern that exposed it: an online probe (a linear classifier trained on the model's
detached features inside ``on_train_batch_end``, as self-supervised tutorials do) logging its accuracy.

The same program runs under Surge and Lightning 2.6 (installed by the test set-up), with validation every
three batches in between; the metric dicts read inside the hooks after every batch, at the end, and every
``metrics.csv`` row are compared. The one documented difference (docs/porting.md, "Metrics"): a fit's rows are
at ``global_step``, one more than Lightning's.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge.compat import Callback  # moved by lightning-move
from surge.testing import quiet_trainer_args
from surge_csv import read_metrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

lightning: Any = pytest.importorskip("lightning")  # the test set-up installs it (the `bench` extra)

Numbers = dict[str, float]
FIT = {"max_epochs": 2, "val_check_interval": 3, "num_sanity_val_steps": 0}


def loader() -> DataLoader:
    """Seven batches of 8 (the last of 4), two classes, no shuffling."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(52, 6, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long()), batch_size=8)


def numbers(metrics: Any) -> Numbers:
    return {name: float(value) for name, value in metrics.items()}


class OnlineProbe:
    """A linear probe on the encoder's detached features, trained one SGD step per training batch; logs its
    accuracy on that batch per step and per epoch. Its weights come from a generator of its own, so that it
    draws nothing from the global RNG (the two frameworks' orders of drawing differ)."""

    def __init__(self) -> None:
        self.linear = nn.Linear(16, 2)
        generator = torch.Generator().manual_seed(11)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(2, 16, generator=generator) * 0.1)
            self.linear.bias.zero_()
        self.optimizer = torch.optim.SGD(self.linear.parameters(), lr=0.5)
        self.seen: list[Numbers] = []  # callback_metrics right after each log

    def train_step(self, module: Any, batch: Any) -> None:
        x, y = batch
        with torch.no_grad():
            features = module.encoder(x)
        with torch.enable_grad():
            logits = self.linear(features)
            loss = nn.functional.cross_entropy(logits, y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        accuracy = (logits.argmax(-1) == y).float().mean()
        module.log("probe_acc", accuracy, on_step=True, on_epoch=True, prog_bar=True)
        module.log("probe_loss", loss.detach())  # per step only (the training default)
        self.seen.append(numbers(module.trainer.callback_metrics))


def encoder_model(base: type, log_in_hook: bool = False) -> Any:
    """An encoder and a head; with ``log_in_hook`` the Module's own ``on_train_batch_end`` runs the probe."""

    class Encoder(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(5)
            self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
            self.head = nn.Linear(16, 2)
            with torch.no_grad():
                for param in self.parameters():
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
            self.probe = OnlineProbe() if log_in_hook else None

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self.head(self.encoder(x)), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.head(self.encoder(x)), y))

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.probe is not None:
                self.probe.train_step(self, batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.2)

    return Encoder()


def probe_callback(base: type) -> Any:
    class ProbeCallback(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.probe = OnlineProbe()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.probe.train_step(pl_module, batch)

    return ProbeCallback()


def reader_callback(base: type) -> Any:
    """Runs after the probe: what a later handler (a checkpoint's ``monitor``, early stopping) reads."""

    class Reader(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[Numbers, Numbers]] = []

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.seen.append((numbers(trainer.callback_metrics), numbers(trainer.progress_bar_metrics)))

    return Reader()


class ProbePlugin:
    """The probe as a Surge plugin object: its ``train_batch_end`` handler logs through ``event.module.log``."""

    def __init__(self) -> None:
        self.probe = OnlineProbe()

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.probe.train_step(event.module, event.batch)


Row = tuple[int, int, Numbers]


def rows_of(rows: list[dict[str, Any]]) -> list[Row]:
    """(step, epoch, values) of each CSV row, empty cells left out."""
    out = []
    for row in rows:
        values = {k: float(v) for k, v in row.items() if v not in ("", None) and k not in ("step", "epoch")}
        out.append((int(float(row["step"])), int(float(row["epoch"])), values))
    return out


def run_lightning(root: Path, where: str, **flags: Any) -> dict[str, Any]:
    from lightning.pytorch.loggers import CSVLogger

    lightning.seed_everything(0)
    LCallback = lightning.pytorch.Callback
    model = encoder_model(lightning.LightningModule, log_in_hook=where == "module")
    probe = probe_callback(LCallback) if where == "callback" else None
    reader = reader_callback(LCallback)
    csv_logger = CSVLogger(str(root))
    trainer = lightning.Trainer(
        default_root_dir=str(root),
        callbacks=[c for c in (probe, reader) if c is not None],
        **quiet_trainer_args(logger=csv_logger),
        **FIT,
        **flags,
    )
    trainer.fit(model, loader(), loader())
    with open(Path(csv_logger.log_dir) / "metrics.csv", newline="") as f:
        rows = rows_of(list(csv.DictReader(f)))
    return _outcome(trainer, (probe or model).probe, reader, rows, model)


def run_surge(root: Path, where: str, **flags: Any) -> dict[str, Any]:
    surge.seed_everything(0)
    model = encoder_model(surge.Module, log_in_hook=where == "module")
    probe: Any = {"callback": lambda: probe_callback(Callback), "plugin": ProbePlugin}.get(where, lambda: None)()
    reader = reader_callback(Callback)
    trainer = surge.Trainer(
        default_root_dir=str(root),
        callbacks=[c for c in (probe, reader) if c is not None],
        **quiet_trainer_args(logger=True),
        **FIT,
        **flags,
    )
    trainer.fit(model, loader(), loader())
    rows = rows_of(read_metrics(trainer.run_dir))  # type: ignore[arg-type]
    return _outcome(trainer, (probe or model).probe, reader, rows, model)


def _outcome(trainer: Any, probe: OnlineProbe, reader: Any, rows: list[Row], model: Any) -> dict[str, Any]:
    return {
        "global_step": trainer.global_step,
        "callback_metrics": numbers(trainer.callback_metrics),
        "logged_metrics": numbers(trainer.logged_metrics),
        "progress_bar_metrics": numbers(trainer.progress_bar_metrics),
        "seen_by_logger": probe.seen,
        "seen_after": reader.seen,
        "rows": rows,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
    }


def assert_same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["global_step"] == theirs["global_step"]
    for name, value in theirs["weights"].items():
        assert torch.equal(ours["weights"][name], value), name
    for key in ("callback_metrics", "logged_metrics", "progress_bar_metrics", "seen_by_logger", "seen_after"):
        assert ours[key] == theirs[key], key
    # every row: the same values at the same place; a fit's rows one step later than Lightning's (docs/porting.md)
    assert [(step - 1, epoch, values) for step, epoch, values in ours["rows"]] == theirs["rows"]


@pytest.mark.parametrize("where", ["callback", "module"])
@pytest.mark.parametrize("log_every_n_steps", [1, 2])
def test_values_logged_in_on_train_batch_end_belong_to_their_step_as_in_lightning(
    tmp_path: Path, where: str, log_every_n_steps: int
) -> None:
    theirs = run_lightning(tmp_path / "lightning", where, log_every_n_steps=log_every_n_steps)
    ours = run_surge(tmp_path / "surge", where, log_every_n_steps=log_every_n_steps)
    assert_same(ours, theirs)
    # what the comparison covers: the probe's value of each batch is in that batch's row, with the training loss
    probe_rows = [(step, values) for step, _, values in ours["rows"] if "probe_acc_step" in values]
    assert [step for step, _ in probe_rows] == list(range(log_every_n_steps, 15, log_every_n_steps))
    assert all("train_loss_step" in values and "probe_loss" in values for _, values in probe_rows)
    steps = [step for step, _, _ in ours["rows"]]
    assert steps == sorted(steps)  # validation in between never sends the step column back
    for seen, (after, bar) in zip(ours["seen_by_logger"], ours["seen_after"], strict=True):
        assert seen["probe_acc"] == seen["probe_acc_step"]  # at once, in the handler that logged it
        if where == "callback":  # and in the handlers after it (the Module's hook runs after every callback)
            assert after["probe_acc"] == seen["probe_acc"] and bar["probe_acc_step"] == seen["probe_acc"]


def test_a_plugins_train_batch_end_handler_logs_as_a_lightning_callback(tmp_path: Path) -> None:
    """``event.module.log`` from a plugin object's handler: what the Lightning callback gets under Lightning."""
    theirs = run_lightning(tmp_path / "lightning", "callback", log_every_n_steps=1)
    ours = run_surge(tmp_path / "surge", "plugin", log_every_n_steps=1)
    assert_same(ours, theirs)


def test_the_online_probes_epoch_accuracy_counts_every_batch(tmp_path: Path) -> None:
    """The epoch value is the batch-size-weighted mean of every batch's accuracy, each batch's own."""
    ours = run_surge(tmp_path, "callback", log_every_n_steps=1)
    per_batch = [seen["probe_acc_step"] for seen in ours["seen_by_logger"]]
    assert len(per_batch) == 14
    sizes = torch.tensor([8.0] * 6 + [4.0])
    second_epoch = torch.tensor(per_batch[7:], dtype=torch.float32)
    expected = float((second_epoch * sizes).sum() / sizes.sum())
    assert ours["callback_metrics"]["probe_acc_epoch"] == pytest.approx(expected, abs=1e-6)
    epoch_rows = [values["probe_acc_epoch"] for _, _, values in ours["rows"] if "probe_acc_epoch" in values]
    assert epoch_rows[-1] == ours["callback_metrics"]["probe_acc_epoch"]


class LogsTheHead(Callback):
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pl_module.log("head", pl_module.head.weight.sum(), on_step=True, on_epoch=True)


class SaveAt:
    """Saves a checkpoint in ``train_batch_end`` at one step: before the step's row is written."""

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        if event.trainer.global_step == self.step:
            event.trainer.save_checkpoint(self.path)


def test_a_fit_resumed_from_a_checkpoint_saved_in_train_batch_end_has_the_uninterrupted_rows(tmp_path: Path) -> None:
    """The step's row is written after its ``train_batch_end`` handlers, so a checkpoint saved by one of them
    predates it: the resumed run writes it (after the rows it copies from the checkpoint's run), once, with
    what the handlers logged, and its ``metrics.csv`` is the uninterrupted run's (docs/resume.md)."""

    def fit(root: Path, callbacks: list[Any], ckpt_path: str | None = None) -> list[Row]:
        surge.seed_everything(0)
        trainer = surge.Trainer(
            default_root_dir=str(root),
            callbacks=callbacks,
            log_every_n_steps=1,
            **quiet_trainer_args(logger=True),
            **FIT,
        )
        trainer.fit(encoder_model(surge.Module), loader(), loader(), ckpt_path=ckpt_path)
        return rows_of(read_metrics(trainer.run_dir))  # type: ignore[arg-type]

    path = str(tmp_path / "step4.ckpt")
    uninterrupted = fit(tmp_path / "saves", [LogsTheHead(), SaveAt(4, path)])
    (row,) = [values for step, _, values in uninterrupted if step == 4]
    assert set(row) == {"train_loss_step", "head_step"}  # the row of the step the checkpoint was saved in
    resumed = fit(tmp_path / "resumed", [LogsTheHead()], ckpt_path=path)
    assert resumed == uninterrupted
