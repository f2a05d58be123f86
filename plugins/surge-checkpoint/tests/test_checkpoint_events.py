"""The events the checkpoint plugin publishes, ``checkpoint_saved`` and ``checkpoint_removed``, seen by a subscriber
of another plugin through real fits: the payload, the moment (the file committed, on the training thread), the
asynchronous and overwriting saves, preemption, and runs where nothing publishes them."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest
import surge
import surge_checkpoint
from surge import checkpoint as store
from surge.testing import TinyModule
from surge_checkpoint import CheckpointRemoved, CheckpointSaved, ModelCheckpoint, Preempted


class Listener:
    """Another plugin's subscriber: records each event, and what was true of the file when it came."""

    surge_name = "listener"
    surge_kind = "observer"  # as the loggers are: their teardown runs after the checkpoint plugin's

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.at: list[tuple[str, int, bool]] = []  # (event, the run's global_step then, on the main thread)

    @surge.hookimpl(optional=True)
    def checkpoint_saved(self, event: CheckpointSaved) -> None:
        assert store.is_valid(event.path), f"{event.path} is not committed when checkpoint_saved fires"
        name = os.path.basename(event.path)
        self.seen.append(("saved", name, event.kind, event.monitor, event.score, event.global_step, event.epoch))
        self._when("saved", event)

    @surge.hookimpl(optional=True)
    def checkpoint_removed(self, event: CheckpointRemoved) -> None:
        assert not os.path.exists(event.path) and not os.path.exists(event.path + store.MARKER_SUFFIX)
        self.seen.append(("removed", os.path.basename(event.path), event.global_step, event.epoch))
        self._when("removed", event)

    @surge.hookimpl
    def teardown(self, event: Any) -> None:
        self._when("teardown", event)

    def _when(self, what: str, event: Any) -> None:
        self.at.append((what, event.trainer.global_step, threading.current_thread() is threading.main_thread()))


def test_the_plugin_declares_its_events():
    assert surge_checkpoint.plugin.events == [CheckpointSaved, CheckpointRemoved]
    assert CheckpointSaved.name == "checkpoint_saved" and CheckpointRemoved.name == "checkpoint_removed"


def test_top_k_saves_and_evictions_are_published_in_order(fit, scored, tmp_path):
    listener = Listener()
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    fit([callback, listener], model=scored([5, 3, 4, 1]), max_epochs=4)
    assert listener.seen == [
        ("saved", "epoch=0.ckpt", "top_k", "score", 5.0, 4, 0),
        ("saved", "last.ckpt", "last", "score", 5.0, 4, 0),
        ("saved", "epoch=1.ckpt", "top_k", "score", 3.0, 8, 1),
        ("saved", "last.ckpt", "last", "score", 3.0, 8, 1),
        ("saved", "epoch=2.ckpt", "top_k", "score", 4.0, 12, 2),  # 4 beats 5, the 2nd best: epoch=0 leaves
        ("saved", "last.ckpt", "last", "score", 4.0, 12, 2),
        ("removed", "epoch=0.ckpt", 12, 2),  # after the file replacing it is committed
        ("saved", "epoch=3.ckpt", "top_k", "score", 1.0, 16, 3),
        ("saved", "last.ckpt", "last", "score", 1.0, 16, 3),
        ("removed", "epoch=2.ckpt", 16, 3),
    ]
    assert all(on_main and step == listener.seen[i][-2] for i, (_, step, on_main) in enumerate(listener.at[:-1]))


def test_the_default_plugin_publishes_periodic_saves_into_the_run_directory(fit, names):
    listener = Listener()
    trainer = fit([listener], max_epochs=2)
    directory = f"{trainer.run_dir}/checkpoints"
    assert listener.seen == [
        ("saved", "epoch=0-step=4.ckpt", "periodic", None, None, 4, 0),
        ("saved", "epoch=1-step=8.ckpt", "periodic", None, None, 8, 1),
        ("removed", "epoch=0-step=4.ckpt", 8, 1),
    ]
    assert names(directory) == ["epoch=1-step=8.ckpt"]


def test_a_last_save_without_a_top_k_save_carries_no_score(fit, scored, tmp_path):
    listener = Listener()
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_last=True, every_n_epochs=2)
    fit([callback, listener], model=scored([5, 3]), max_epochs=2)
    assert [(s[1], s[2], s[4]) for s in listener.seen] == [
        ("last.ckpt", "last", None),  # epoch 0: only last.ckpt is due, the score is not read
        ("epoch=1-step=8.ckpt", "top_k", 3.0),
        ("last.ckpt", "last", 3.0),
    ]


def test_an_asynchronous_save_is_published_once_committed_on_the_training_thread(fit, tmp_path):
    listener = Listener()
    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, async_save=True)
    fit([callback, listener], max_epochs=2)
    assert [(s[1], s[2], s[5]) for s in listener.seen] == [
        ("epoch=0-step=2.ckpt", "periodic", 2),
        ("epoch=0-step=4.ckpt", "periodic", 4),
        ("epoch=1-step=6.ckpt", "periodic", 6),
        ("epoch=1-step=8.ckpt", "periodic", 8),
    ]
    # collected at a later step (the writer runs beside training), the last one before the observers' teardown
    *saves, teardown = listener.at
    assert all(on_main for _, _, on_main in listener.at) and teardown[0] == "teardown"
    assert all(step > saved[5] for (_, step, _), saved in zip(saves[:3], listener.seen)) and saves[-1][1] == 8


def test_the_asynchronous_save_in_flight_when_the_run_fails_is_published_before_teardown(fit, tmp_path):
    class Crashing(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.trainer.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    listener = Listener()
    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, async_save=True)
    with pytest.raises(RuntimeError, match="boom"):
        fit([callback, listener], model=Crashing())
    assert listener.seen == [("saved", "epoch=0-step=2.ckpt", "periodic", None, None, 2, 0)]
    assert [what for what, _, _ in listener.at] == ["saved", "teardown"]


def test_an_overwrite_on_an_object_store_publishes_the_file_not_its_guard(fit, tmp_path):
    url = f"memory://surge-events/{tmp_path.name}"
    seen: list[tuple[str, str]] = []

    class Remote:
        surge_name = "remote_listener"

        @surge.hookimpl(optional=True)
        def checkpoint_saved(self, event: CheckpointSaved) -> None:
            store.verify(event.path)
            seen.append(("saved", event.path))

        @surge.hookimpl(optional=True)
        def checkpoint_removed(self, event: CheckpointRemoved) -> None:
            seen.append(("removed", event.path))

    fit([ModelCheckpoint(dirpath=url, save_top_k=0, save_last=True), Remote()], max_epochs=2)
    # the second save overwrites last.ckpt: a guard (last.new.ckpt) is committed and removed around it, unseen
    assert seen == [("saved", f"{url}/last.ckpt"), ("saved", f"{url}/last.ckpt")]


class SignalAt(TinyModule):
    """Sends itself SIGTERM inside the training step of global batch ``at``, once the checkpoint plugin's
    handler is installed (never the default one, which would end the test process)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.trainer.state.total_batches == self.at:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
                raise RuntimeError("no preemption handler is installed")
            signal.raise_signal(signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def test_the_preemption_checkpoint_is_published_before_the_run_stops(fit, tmp_path):
    listener = Listener()
    with pytest.raises(Preempted):
        fit([ModelCheckpoint(dirpath=tmp_path), listener], model=SignalAt(at=5), max_epochs=3)
    assert listener.seen[-1] == ("saved", "last.ckpt", "preemption", None, None, 6, 1)
    assert [a[0] for a in listener.at[-2:]] == ["saved", "teardown"]


def test_an_instance_without_the_checkpoint_plugin_saves_and_publishes(fit, tmp_path, names):
    listener = Listener()
    trainer = fit([ModelCheckpoint(dirpath=tmp_path), listener], enable_checkpointing=False, max_epochs=2)
    assert "checkpoint_saved" in trainer.event_names  # declared while surge-checkpoint is installed
    assert names(tmp_path) == ["epoch=1-step=8.ckpt"]
    assert [(s[0], s[1]) for s in listener.seen if s[0] == "saved"][-1] == ("saved", "epoch=1-step=8.ckpt")
