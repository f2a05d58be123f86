"""Asynchronous saving (a snapshot to a background writer, one save in flight, errors at the next step,
the last save awaited) and preemption signals (a checkpoint at the next step boundary, then Preempted)."""

from __future__ import annotations

import collections
import itertools
import signal
import threading
import time

import pytest
import surge
import torch
from surge import checkpoint as store
from surge.testing import TinyModule
from surge_checkpoint import ModelCheckpoint, Preempted, WriteError, snapshot


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "surge-checkpoint-writer"]


@pytest.fixture
def slow_saves(monkeypatch):
    """store.save takes at least ``delay`` seconds; ``log`` holds (url, thread name, start, end)."""
    log: list[tuple[str, str, float, float]] = []
    save = store.save
    settings = {"delay": 0.3}

    def slow(checkpoint, url):
        start = time.perf_counter()
        time.sleep(settings["delay"])
        result = save(checkpoint, url)
        log.append((url, threading.current_thread().name, start, time.perf_counter()))
        return result

    monkeypatch.setattr(store, "save", slow)
    slow.log, slow.settings = log, settings  # type: ignore[attr-defined]
    return slow


# -- asynchronous saving ----------------------------------------------------------------------------------


def test_async_files_equal_the_synchronous_ones(fit, names, tmp_path):
    fit([ModelCheckpoint(dirpath=tmp_path / "sync", every_n_train_steps=2, save_top_k=-1)], max_epochs=2)
    fit(
        [ModelCheckpoint(dirpath=tmp_path / "async", every_n_train_steps=2, save_top_k=-1, async_save=True)],
        max_epochs=2,
    )
    assert (
        names(tmp_path / "sync")
        == names(tmp_path / "async")
        == [
            "epoch=0-step=2.ckpt",
            "epoch=0-step=4.ckpt",
            "epoch=1-step=6.ckpt",
            "epoch=1-step=8.ckpt",
        ]
    )
    for name in names(tmp_path / "sync"):
        a, b = store.load(str(tmp_path / "sync" / name)), store.load(str(tmp_path / "async" / name))
        assert a["global_step"] == b["global_step"]
        for key in a["state_dict"]:
            assert torch.equal(a["state_dict"][key], b["state_dict"][key])
        for (ka, va), (kb, vb) in zip(
            a["optimizer_states"][0]["state"].items(), b["optimizer_states"][0]["state"].items()
        ):
            assert ka == kb and all(torch.equal(va[s], vb[s]) for s in va)
        assert len(a["plugins"]) == len(b["plugins"]) == 1  # this instance's state (the default stood aside)


def test_training_goes_on_while_one_save_is_in_flight(fit, tmp_path, slow_saves):
    batch_ends: list[float] = []

    class Timed(TinyModule):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            batch_ends.append(time.perf_counter())

    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, async_save=True)
    fit([callback], model=Timed(), max_epochs=2)
    saves = sorted(slow_saves.log, key=lambda entry: entry[2])
    assert len(saves) == 4 and {thread for _, thread, _, _ in saves} == {"surge-checkpoint-writer"}
    for (_, _, _, end), (_, _, next_start, _) in itertools.pairwise(saves):
        assert end <= next_start  # never two at once: the next save waits for the previous
    during = [t for t in batch_ends if any(start < t < end for _, _, start, end in saves)]
    assert during  # steps ran while a save was being written
    assert not _writer_threads()  # the last save was awaited before fit returned
    for url, *_ in saves:
        store.verify(url)


def test_a_strategy_whose_ranks_all_write_gets_synchronous_saves(fit, tmp_path, slow_saves):
    """``Strategy.async_checkpoint_save = False`` (fsdp's sharded checkpoints: every rank writes its shards)
    turns ``async_save`` into saves through the strategy on the loop's own thread."""

    class EveryRankWrites:
        @surge.hookimpl
        def setup(self, event):
            event.trainer.strategy.async_checkpoint_save = False

    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, async_save=True)
    fit([EveryRankWrites(), callback], max_epochs=1)
    threads = {thread for _, thread, _, _ in slow_saves.log}
    assert len(slow_saves.log) == 2 and threads == {threading.main_thread().name}
    assert not _writer_threads()


def test_a_failed_background_save_surfaces_at_the_next_step_naming_the_file(fit, tmp_path, monkeypatch):
    steps_seen: list[int] = []

    def failing(checkpoint, url):
        raise OSError(28, "No space left on device")

    class Counting(TinyModule):
        def on_train_batch_start(self, batch, batch_idx):
            steps_seen.append(self.trainer.global_step)

    monkeypatch.setattr(store, "save", failing)
    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, async_save=True)
    with pytest.raises(WriteError, match=r"epoch=0-step=2\.ckpt failed: OSError: .*No space left on device") as info:
        fit([callback], model=Counting(), max_epochs=3)
    assert any("train_batch_end" in note for note in getattr(info.value, "__notes__", []))
    assert max(steps_seen) <= 4  # raised in the training loop, not at the end of the run
    assert not _writer_threads()


def test_the_final_save_is_awaited_and_its_failure_raised(fit, tmp_path, monkeypatch, slow_saves):
    callback = ModelCheckpoint(dirpath=tmp_path, async_save=True)
    fit([callback], max_epochs=1)
    store.verify(callback.best_model_path)  # written by the end of fit, in the background
    assert not _writer_threads()

    def failing(checkpoint, url):
        time.sleep(0.2)
        raise OSError("bucket gone")

    monkeypatch.setattr(store, "save", failing)
    with pytest.raises(WriteError, match="bucket gone"):
        fit([ModelCheckpoint(dirpath=tmp_path / "b", async_save=True)], max_epochs=1)


def test_the_save_in_flight_completes_when_the_run_fails(fit, tmp_path, slow_saves):
    class Crashing(TinyModule):
        def training_step(self, batch, batch_idx):
            if self.trainer.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, async_save=True)
    with pytest.raises(RuntimeError, match="boom"):
        fit([callback], model=Crashing())
    store.verify(str(tmp_path / "epoch=0-step=2.ckpt"))
    assert not _writer_threads()


def test_snapshot_is_independent_of_the_live_tensors():
    weight = torch.arange(6.0).reshape(2, 3)
    state = collections.OrderedDict(w=weight, row=weight[1], step=torch.tensor(3))
    state._metadata = {"": {"version": 1}}
    Pair = collections.namedtuple("Pair", "a b")
    copied = snapshot({"state": state, "pair": Pair(weight, 1), "list": [weight], "n": 1, "s": "x"})
    weight.add_(100)
    assert torch.equal(copied["state"]["w"], torch.arange(6.0).reshape(2, 3))
    assert copied["state"]["row"].untyped_storage().data_ptr() == copied["state"]["w"].untyped_storage().data_ptr()
    assert torch.equal(copied["state"]["row"], torch.tensor([3.0, 4.0, 5.0]))
    assert isinstance(copied["state"], collections.OrderedDict) and copied["state"]._metadata == {"": {"version": 1}}
    assert isinstance(copied["pair"], Pair) and copied["n"] == 1 and copied["s"] == "x"


# -- preemption -------------------------------------------------------------------------------------------


@pytest.fixture
def fallback_handlers():
    """Handlers of our own for the test signals, so that a missing handler cannot kill the test process."""
    seen: list[int] = []
    signals = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)

    def handler(signum, frame):
        seen.append(signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    yield handler, seen
    for s, h in previous.items():
        signal.signal(s, h)


class SignalAt(TinyModule):
    """Sends itself ``sig`` inside the training step of global batch ``at``."""

    def __init__(self, sig: int, at: int) -> None:
        super().__init__()
        self.sig, self.at, self.handler_inside = sig, at, None

    def training_step(self, batch, batch_idx):
        if self.trainer.state.total_batches == self.at:
            self.handler_inside = signal.getsignal(self.sig)
            signal.raise_signal(self.sig)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_preemption_signal_saves_at_the_next_step_boundary_and_stops(fit, names, tmp_path, fallback_handlers, sig):
    handler, seen = fallback_handlers
    callback = ModelCheckpoint(dirpath=tmp_path)
    model = SignalAt(sig, at=5)  # the second batch of the second epoch
    with pytest.raises(Preempted, match=rf"preempted by {sig.name}: saved .*last\.ckpt at epoch 1, step 6") as info:
        fit([callback], model=model, max_epochs=3)
    assert info.value.checkpoint == str(tmp_path / "last.ckpt") and info.value.signal == sig.name
    assert model.handler_inside is not handler and not seen  # ours handled it, the previous one did not
    assert signal.getsignal(sig) is handler  # restored at teardown
    assert names(tmp_path) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    assert store.load(str(tmp_path / "last.ckpt"))["global_step"] == 6

    resumed = fit([ModelCheckpoint(dirpath=tmp_path)], max_epochs=3, ckpt_path="last")
    assert resumed.global_step == 12 and resumed.state.status == "finished"


def test_preemption_signals_are_configurable(fit, tmp_path, fallback_handlers):
    handler, seen = fallback_handlers
    with pytest.raises(Preempted, match="SIGUSR2"):
        fit([ModelCheckpoint(dirpath=tmp_path, preemption_signals=["USR2"])], model=SignalAt(signal.SIGUSR2, at=1))
    model = SignalAt(signal.SIGTERM, at=1)
    fit([ModelCheckpoint(dirpath=tmp_path / "off", preemption_signals=[])], model=model)  # none handled
    assert model.handler_inside is handler and seen == [signal.SIGTERM]


def test_preemption_waits_for_the_save_in_flight(fit, names, tmp_path, fallback_handlers, slow_saves):
    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, async_save=True)
    with pytest.raises(Preempted):
        fit([callback], model=SignalAt(signal.SIGTERM, at=2), max_epochs=2)
    assert names(tmp_path) == ["epoch=0-step=2.ckpt", "last.ckpt"]
    for name in names(tmp_path):
        store.verify(str(tmp_path / name))


def test_one_instance_handles_preemption(fit, names, tmp_path, fallback_handlers):
    a = ModelCheckpoint(dirpath=tmp_path / "a")
    b = ModelCheckpoint(dirpath=tmp_path / "b", every_n_train_steps=1)
    with pytest.raises(Preempted):
        fit([a, b], model=SignalAt(signal.SIGTERM, at=2))
    assert names(tmp_path / "a") == ["last.ckpt"] and "last.ckpt" not in names(tmp_path / "b")


def test_no_handlers_outside_the_main_thread(fit, tmp_path, fallback_handlers):
    handler, _ = fallback_handlers
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fit([ModelCheckpoint(dirpath=tmp_path)])))
    thread.start()
    thread.join()
    assert isinstance(result[0], surge.Trainer) and signal.getsignal(signal.SIGTERM) is handler
