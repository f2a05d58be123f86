"""The ``progress`` plugin: a rich display in a real pseudo-terminal, plain lines through a real pipe and in
captured streams, silence off rank zero, and the metric reads it makes (none on the per-batch path)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import surge
from surge.events import EVENTS
from surge.testing import TinyDataModule, TinyModule, assert_discovered
from surge_progress import ProgressBar
from torch.utils.data import DataLoader, IterableDataset

CHILD = str(Path(__file__).with_name("_child.py"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RATE = r"\d+(\.\d+)? (it/s|s/it)"
CLOCK = r"\d+:\d\d:\d\d"
LINE = re.compile(
    rf"^(epoch \d+|validation|sanity check|test|predict)  \d+/(\d+|\?)(  {RATE})?(  (eta|elapsed) {CLOCK})?"
    r"(  [\w/]+=\S+)*$"
)


def child_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_") and k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(CHILD_ROOT=str(tmp_path), TERM="xterm-256color", COLUMNS="120", LINES="40")
    return env


def run_in_terminal(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, bytes]:
    """Run ``args`` with stdin, stdout and stderr on a new pseudo-terminal (120x40); return its exit status
    and everything it wrote to the terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    child = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                out += data
            elif child.poll() is not None:
                break
        return child.wait(timeout=10), bytes(out)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(master)


# -- discovery and activation ---------------------------------------------------------------------------


def test_the_three_plugins_are_discovered():
    assert_discovered("progress", distribution="surge-progress", kind="observer")
    assert_discovered("model_summary", distribution="surge-progress", kind="observer")
    assert_discovered("lr_monitor", distribution="surge-progress", kind="observer")


def test_on_by_default_and_switched_off_by_the_trainer_flag(make_trainer):
    assert "progress" in make_trainer().plugin_names
    assert "progress" not in make_trainer(enable_progress_bar=False).plugin_names
    assert "progress" not in make_trainer(plugins={"progress": False}).plugin_names


def test_refresh_rate_zero_switches_every_handler_off(fit, capsys):
    trainer = fit(plugins={"progress": {"refresh_rate": 0}})
    assert "progress" in trainer.plugin_names
    assert not [event for event in EVENTS if "progress" in trainer.event_order(event)]
    assert capsys.readouterr().err == ""


def test_settings_are_validated_with_their_dotted_path(make_trainer):
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.progress.refresh_rat.*did you mean 'refresh_rate'"):
        make_trainer(plugins={"progress": {"refresh_rat": 5}})
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.progress.mode"):
        make_trainer(plugins={"progress": {"mode": "fancy"}})
    with pytest.raises(ValueError, match="refresh_interval"):
        ProgressBar(refresh_interval=-1)


def test_importing_the_plugins_does_not_import_rich(tmp_path):
    code = (
        "import sys, surge, surge_progress\n"
        "surge.Trainer(default_root_dir=sys.argv[1])\n"
        "assert 'rich' not in sys.modules, sorted(m for m in sys.modules if m.startswith('rich'))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=child_env(tmp_path), timeout=120)


# -- a terminal and a pipe, in real child processes ---------------------------------------------------------


@pytest.mark.slow
def test_rich_display_in_a_real_terminal(tmp_path):
    status, out = run_in_terminal([sys.executable, CHILD, json.dumps({"refresh_interval": 0})], child_env(tmp_path))
    text = out.decode("utf-8", "replace")
    assert status == 0, text
    assert "\x1b[" in text  # styles and cursor movement: a live display, not lines
    assert "\x1b[2K" in text  # lines are cleared and redrawn in place
    screen = ANSI.sub("", text)
    assert "━" in screen  # the bars
    for expected in ("Sanity Checking", "Epoch 0/1", "Epoch 1/1", "Validation", "Testing", "4/4", "loss="):
        assert expected in screen, expected
    assert re.search(rf"Epoch 1/1 ━+ 4/4  {RATE} • elapsed {CLOCK}  loss=\d\.\d{{4}}", screen), screen
    assert "Total params" in screen  # the model summary goes to the terminal too
    assert "printed while training" in screen  # printed above the bars, through rich
    assert "child done" in screen


@pytest.mark.slow
def test_plain_lines_through_a_real_pipe(tmp_path):
    child = subprocess.run(
        [sys.executable, CHILD, json.dumps({"plain_every_n_batches": 2, "plain_interval": None})],
        capture_output=True,
        text=True,
        env=child_env(tmp_path),
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "printed while training\nchild done\n"  # the bar and the summary use stderr
    assert "\x1b" not in child.stderr and "\r" not in child.stderr
    lines = [line for line in child.stderr.splitlines() if LINE.match(line)]
    assert [line.split("  ")[:2] for line in lines] == [
        ["sanity check", "2/2"],
        ["epoch 0", "2/4"],
        ["validation", "2/2"],
        ["epoch 0", "4/4"],
        ["epoch 1", "2/4"],
        ["validation", "2/2"],
        ["epoch 1", "4/4"],
        ["test", "2/4"],
        ["test", "4/4"],
    ]
    for line in lines:  # a bar's last line says how long it took, the others how long it will take
        done, total = line.split("  ")[1].split("/")
        assert ("elapsed" in line) == (done == total) and ("eta" in line) == (done != total), line
    assert re.search(rf"^epoch 1  4/4  {RATE}  elapsed {CLOCK}  loss=\d\.\d{{4}}$", child.stderr, re.M)


def test_rich_leave_keeps_each_finished_epoch(fit, capsys):
    fit(plugins=[ProgressBar(mode="rich", leave=True, refresh_interval=0)], enable_progress_bar=False)
    screen = ANSI.sub("", capsys.readouterr().err)  # 80 columns: the metrics wrap
    for epoch in (0, 1):
        assert re.search(rf"Epoch {epoch}/1 ━+ 4/4  {RATE} • elapsed {CLOCK}\s+loss=\S+  val_loss=\S+", screen)


def test_a_failing_run_ends_the_display_with_its_last_state(fit, capsys):
    class Failing(TinyModule):
        def training_step(self, batch, batch_idx):
            if self.trainer.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    bar = ProgressBar(mode="rich", refresh_interval=0)
    with pytest.raises(RuntimeError, match="boom"):
        fit(plugins=[bar], enable_progress_bar=False, model=Failing(), num_sanity_val_steps=0)
    assert bar._display is None  # stopped by teardown
    screen = ANSI.sub("", capsys.readouterr().err)
    assert re.search(r"Epoch 0/1 ━+ 3/4", screen)


# -- plain lines in-process (pytest's captured stream is not a terminal) --------------------------------


def plain_lines(err: str) -> list[str]:
    lines = err.splitlines()
    assert all(LINE.match(line) for line in lines), lines
    return lines


def test_plain_lines_every_n_batches_and_at_each_end(fit, capsys):
    fit(
        plugins={"progress": {"plain_every_n_batches": 3, "plain_interval": None}},
        max_epochs=1,
        limit_train_batches=8,
        limit_val_batches=4,
    )
    lines = plain_lines(capsys.readouterr().err)
    assert [line.split("  ")[:2] for line in lines] == [
        ["sanity check", "2/2"],
        ["epoch 0", "3/8"],
        ["epoch 0", "6/8"],
        ["validation", "3/4"],
        ["validation", "4/4"],
        ["epoch 0", "8/8"],
    ]
    assert re.search(rf"  eta {CLOCK}  loss=", lines[1])
    assert "val_loss" not in lines[2] and "val_loss=" in lines[-1]  # known once validation ended
    assert "elapsed" in lines[-1]


def test_plain_lines_without_a_schedule_only_at_the_ends(fit, capsys):
    fit(plugins={"progress": {"plain_interval": None}})
    lines = plain_lines(capsys.readouterr().err)
    assert [line.split("  ")[0] for line in lines] == [
        "sanity check",
        "validation",
        "epoch 0",
        "validation",
        "epoch 1",
    ]


def test_stdout_when_asked(fit, capsys):
    fit(plugins={"progress": {"stream": "stdout", "plain_interval": None}})
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "epoch 1  4/4" in captured.out


def test_the_training_total_stops_at_max_steps(fit, capsys):
    fit(plugins={"progress": {"plain_interval": None}}, max_steps=5, max_epochs=None, num_sanity_val_steps=0)
    lines = plain_lines(capsys.readouterr().err)
    assert [line.split("  ")[:2] for line in lines if line.startswith("epoch")] == [
        ["epoch 0", "4/4"],
        ["epoch 1", "1/1"],
    ]


def test_test_and_predict_totals_follow_their_limits(make_trainer, capsys):
    trainer = make_trainer(limit_test_batches=3, plugins={"progress": {"plain_interval": None}})
    trainer.test(TinyModule(), datamodule=TinyDataModule())
    trainer.predict(TinyModule(), datamodule=TinyDataModule())
    err = capsys.readouterr().err
    assert "test  3/3" in err and "predict  4/4" in err


class Streaming(TinyDataModule):
    """20 training samples from an iterable dataset: 3 batches the loader cannot count in advance."""

    def train_dataloader(self) -> DataLoader:
        samples = self.train_set

        class Stream(IterableDataset):
            def __iter__(self):
                return (samples[i] for i in range(20))

        return DataLoader(Stream(), batch_size=8)


def test_a_loader_without_length_has_an_unknown_total(fit, capsys):
    fit(
        plugins={"progress": {"plain_interval": None}},
        max_epochs=1,
        limit_train_batches=None,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        datamodule=Streaming(),
    )
    assert re.search(rf"^epoch 0  3/\?  {RATE}  elapsed", capsys.readouterr().err, re.M)


def test_a_fit_resumed_mid_epoch_counts_on_from_there(fit, capsys, tmp_path):
    class SaveAndStop:
        surge_name = "save_and_stop"

        @surge.hookimpl
        def train_batch_end(self, event):
            if event.trainer.global_step == 3:
                event.trainer.save_checkpoint(str(tmp_path / "mid.ckpt"))
                event.trainer.request_stop("saved")

    settings = {"progress": {"plain_every_n_batches": 2, "plain_interval": None}}
    fit(
        plugins=[SaveAndStop(), ProgressBar(**settings["progress"])],
        enable_progress_bar=False,
        max_epochs=1,
        limit_train_batches=None,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    lines = plain_lines(capsys.readouterr().err)
    assert [line.split("  ")[:2] for line in lines] == [["epoch 0", "2/8"], ["epoch 0", "3/8"]]
    trainer = surge.Trainer(
        plugins=settings,
        default_root_dir=str(tmp_path),
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=str(tmp_path / "mid.ckpt"))
    lines = plain_lines(capsys.readouterr().err)
    assert [line.split("  ")[:2] for line in lines] == [["epoch 0", "4/8"], ["epoch 0", "6/8"], ["epoch 0", "8/8"]]


# -- rank zero only, and what it reads ----------------------------------------------------------------------


def test_silent_on_every_rank_but_global_zero(fit, capsys, monkeypatch):
    monkeypatch.setattr(surge.Trainer, "is_global_zero", property(lambda self: False))
    trainer = fit(plugins={"progress": {"plain_every_n_batches": 1}}, enable_model_summary=True)
    assert {"progress", "model_summary"} <= set(trainer.plugin_names)
    trainer.test(datamodule=TinyDataModule())
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_plain_mode_reads_metrics_only_for_the_lines_it_writes(fit, capsys, metric_reads):
    trainer = fit(
        plugins={"progress": {"plain_interval": None}}, datamodule=TinyDataModule(n_train=256), limit_train_batches=None
    )
    assert trainer.global_step == 64
    lines = plain_lines(capsys.readouterr().err)
    with_metrics = [line for line in lines if "=" in line]
    assert len(with_metrics) == 4  # two validation ends, two epoch ends
    assert len(metric_reads) == 4
    assert metric_reads == [32, 32, 64, 64]  # after the last batch of each epoch, none on the way


def test_rich_mode_reads_metrics_only_when_it_redraws(fit, capsys, metric_reads):
    bar = ProgressBar(mode="rich", refresh_rate=8, refresh_interval=0)
    trainer = fit(
        plugins=[bar], enable_progress_bar=False, datamodule=TinyDataModule(n_train=256), limit_train_batches=None
    )
    assert trainer.global_step == 64
    err = capsys.readouterr().err
    assert "\x1b[" in err and "Epoch 1/1" in ANSI.sub("", err)  # forced rich into a captured stream
    # per epoch: refreshes after batches 8, 16, 24 and 32, the training bar brought up to date when
    # validation starts and again when it ends, and the epoch's end; the sanity check reads nothing
    per_epoch = [8, 16, 24, 32, 32, 32, 32]
    assert metric_reads == per_epoch + [32 + n for n in per_epoch]


def test_the_per_batch_handler_only_compares(fit, metric_reads, monkeypatch):
    """Between refreshes ``train_batch_end`` neither reads metrics nor looks at the clock."""
    import surge_progress._bar as bar_module

    clock_reads: list[int] = []

    def perf_counter() -> float:
        clock_reads.append(1)
        return time.perf_counter()

    monkeypatch.setattr(bar_module, "time", SimpleNamespace(perf_counter=perf_counter))
    bar = ProgressBar(mode="plain", refresh_rate=1000, refresh_interval=0, plain_interval=None)
    trainer = fit(
        plugins=[bar],
        enable_progress_bar=False,
        datamodule=TinyDataModule(n_train=256),
        num_sanity_val_steps=0,
        limit_val_batches=0,
        limit_train_batches=None,
    )
    assert trainer.global_step == 64
    assert len(clock_reads) == 4  # the start and the end of each epoch, none per batch
    assert metric_reads == [32, 64]  # one line at each epoch's end


def test_plain_lines_refresh_only_on_the_way_to_the_next_timed_line(fit, capsys, monkeypatch):
    """Plain mode draws nothing between lines: the bar looks at the clock a few times on the way to each timed
    line (not every ``refresh_interval``), and each line still comes at most ``refresh_interval`` late."""
    import surge_progress._bar as bar_module

    clock = [0.0]
    monkeypatch.setattr(bar_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    class Timed(TinyModule):  # 0.05 s a batch by the bar's clock
        def training_step(self, batch, batch_idx):
            clock[0] += 0.05
            return super().training_step(batch, batch_idx)

    bar = ProgressBar(mode="plain", refresh_interval=0.1, plain_interval=2.0)
    refreshes: list[int] = []
    train_refresh = bar._train_refresh

    def counted(trainer: surge.Trainer, n: int) -> None:
        refreshes.append(n)
        train_refresh(trainer, n)

    monkeypatch.setattr(bar, "_train_refresh", counted)
    fit(
        plugins=[bar],
        enable_progress_bar=False,
        model=Timed(),
        datamodule=TinyDataModule(n_train=1024),
        max_epochs=1,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        limit_train_batches=None,
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch 0")]
    done = [int(line.split()[2].split("/")[0]) for line in lines]
    assert done[-1] == 128 and len(done) == 4  # three timed lines (every 2 s = 40 batches) and the epoch's end
    gaps = [b - a for a, b in zip([0, *done[:2]], done[:3], strict=True)]
    assert all(40 <= gap <= 42 for gap in gaps), done  # 2 s after the previous line, at most 0.1 s late
    assert len(refreshes) < 128 * 0.05 / 0.1 / 2, refreshes  # under half of one per refresh_interval
