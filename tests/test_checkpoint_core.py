"""The core's checkpoint contract: the dict plugins add to, weights-only loading, plugin state keys."""

import hashlib
import os
import re
from pathlib import Path

import fsspec
import pytest
import surge
import torch
from surge import checkpoint
from surge.testing import TinyDataModule, TinyModule


class Counter:
    """A stateful participant: counts batches and checkpoints its count under its state key."""

    def __init__(self, key="counter"):
        self.state_key = key
        self.surge_name = key
        self.batches = 0

    @surge.hookimpl
    def train_batch_end(self, event):
        self.batches += 1

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state):
        self.batches = state["batches"]


class Extra:
    @surge.hookimpl
    def before_checkpoint_save(self, event):
        event.checkpoint["extra"] = {"note": torch.tensor([1, 2, 3])}

    @surge.hookimpl
    def after_checkpoint_load(self, event):
        self.loaded = event.checkpoint.get("extra", {}).get("note")


def test_save_and_resume_restores_weights_progress_and_plugin_state(make_trainer, tmp_path):
    counter, extra = Counter(), Extra()
    trainer = make_trainer(max_epochs=2, plugins=[counter, extra], num_sanity_val_steps=0)
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(str(path))

    raw = torch.load(path, weights_only=True)  # plain tensors and containers only
    assert raw["global_step"] == 16 and raw["epoch"] == 2
    assert raw["plugins"]["counter"] == {"batches": 16}
    assert torch.equal(raw["extra"]["note"], torch.tensor([1, 2, 3]))
    assert {p["name"] for p in raw["plugin_set"]} >= {"counter", "Extra", "devices.accelerator"}

    counter2, extra2 = Counter(), Extra()
    resumed = make_trainer(max_epochs=3, plugins=[counter2, extra2], num_sanity_val_steps=0)
    model2 = TinyModule()
    resumed.fit(model2, datamodule=TinyDataModule(), ckpt_path=str(path))
    assert resumed.current_epoch == 3 and resumed.global_step == 24  # one more epoch of 8 steps
    assert counter2.batches == 16 + 8
    assert torch.equal(extra2.loaded, torch.tensor([1, 2, 3]))


def test_module_hooks_see_the_checkpoint(make_trainer, tmp_path):
    class Hooked(TinyModule):
        def on_save_checkpoint(self, checkpoint):
            checkpoint["mine"] = 7

        def on_load_checkpoint(self, checkpoint):
            self.seen = checkpoint["mine"]

    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    model = Hooked()
    trainer.fit(model, datamodule=TinyDataModule())
    path = str(tmp_path / "a.ckpt")
    trainer.save_checkpoint(path)
    trainer.fit(model, datamodule=TinyDataModule(), ckpt_path=path)
    assert model.seen == 7


@pytest.mark.parametrize("damage", ["empty", "truncated", "bit_flipped", "uncommitted", "pickled_code"])
def test_damaged_or_unsafe_checkpoint_names_the_file(make_trainer, tmp_path, damage):
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    path = tmp_path / f"{damage}.ckpt"
    trainer.save_checkpoint(str(path))
    data = path.read_bytes()
    expected = {
        "empty": "is empty",
        "truncated": "truncated or corrupt",
        "bit_flipped": "truncated or corrupt",
        "uncommitted": "has no commit marker",
        "pickled_code": "holds pickled code",
    }[damage]
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "bit_flipped":
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
    elif damage == "uncommitted":
        Path(checkpoint.marker_url(str(path))).unlink()
    else:
        checkpoint.save({"state_dict": {}, "hook": print}, str(path))  # a callable needs unpickling of code
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(str(path))) as info:
        trainer.fit(model, datamodule=TinyDataModule(), ckpt_path=str(path))
    assert expected in str(info.value)
    assert not checkpoint.is_valid(str(path)) or damage == "pickled_code"


def _sharded_commit(make_trainer, path, **info):
    """The commit file a sharding strategy leaves: the checkpoint without its sharded entries, plus ``sharded``."""
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    trainer.save_checkpoint(str(path))
    commit = checkpoint.load(str(path))
    del commit["state_dict"], commit["optimizer_states"]
    commit[checkpoint.SHARDED] = {"shards": f"{path.name}.shards-abc", "world_size": 4, **info}
    checkpoint.save(commit, str(path))
    return trainer


def test_a_sharded_checkpoint_is_refused_with_the_hint_its_strategy_recorded(make_trainer, tmp_path):
    """The core knows no sharding strategy by name: what to do comes from the file's ``sharded`` entry."""
    path = tmp_path / "sharded.ckpt"
    hint = "make one file of it with `acme-unshard {path} OUT.ckpt`"
    trainer = _sharded_commit(make_trainer, path, strategy="acme-shard", restore_hint=hint)
    with pytest.raises(checkpoint.CheckpointError) as info:
        trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=str(path))
    message = str(info.value)
    assert f"checkpoint {path} is sharded: its weights are in sharded.ckpt.shards-abc" in message
    assert "written by the strategy 'acme-shard' across 4 processes" in message
    assert f"Restore it with strategy='acme-shard' on several processes, or make one file of it with `acme-unshard {path} OUT.ckpt`" in message  # fmt: skip
    with pytest.raises(checkpoint.CheckpointError) as loaded:
        TinyModule.load_from_checkpoint(str(path))
    assert str(loaded.value) == message


def test_a_sharded_checkpoint_without_a_hint_says_what_it_knows(make_trainer, tmp_path):
    path = tmp_path / "sharded.ckpt"
    trainer = _sharded_commit(make_trainer, path)
    with pytest.raises(checkpoint.CheckpointError, match="sharded") as info:
        trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=str(path))
    assert str(info.value) == (
        f"checkpoint {path} is sharded: its weights are in sharded.ckpt.shards-abc, written by a sharding strategy "
        "across 4 processes. Restore it with the strategy that wrote it on several processes"
    )
    assert checkpoint.sharded_message(str(path), {"state_dict": {}, checkpoint.SHARDED: {}}) is None  # a full file
    assert checkpoint.sharded_message(str(path), {"state_dict": {}}) is None


def test_two_stateful_plugins_with_one_state_key_are_refused(make_trainer):
    with pytest.raises(surge.SurgeError, match="share the state key 'counter'"):
        make_trainer(plugins=[Counter("counter"), _Renamed(Counter("counter"))])


def _Renamed(counter):
    counter.surge_name = "other"
    return counter


def test_atomic_save_leaves_no_temp_files(make_trainer, tmp_path):
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    target = tmp_path / "ckpts" / "x.ckpt"
    trainer.save_checkpoint(str(target))
    trainer.save_checkpoint(str(target))  # overwrite in place
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.ckpt", "x.ckpt.sha256"]


def test_resuming_with_another_plugin_set_warns_with_the_diff(make_trainer, tmp_path):
    from loguru import logger

    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0, plugins=[Counter()])
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    path = str(tmp_path / "a.ckpt")
    trainer.save_checkpoint(path)
    messages = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        other = make_trainer(max_epochs=1, num_sanity_val_steps=0, plugins=[Extra()])
        other.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path)
    finally:
        logger.remove(sink)
    text = "".join(messages)
    assert "different plugin set" in text
    assert "- counter" in text and "+ Extra" in text


def test_testing_a_checkpoint_on_a_fresh_trainer_is_no_resume_and_writes_nothing(tmp_path):
    """validate/test take a checkpoint's weights only: a Trainer with another plugin set does not warn about it
    (a test is no resume), and with ``logger=False`` it leaves nothing on disk, as Lightning's does."""
    from loguru import logger

    trainer = surge.Trainer(
        default_root_dir=str(tmp_path / "fit"), max_epochs=1, limit_train_batches=2, enable_progress_bar=False
    )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())  # its plugin set has the csv logger
    path = str(tmp_path / "a.ckpt")
    trainer.save_checkpoint(path)
    messages = []
    sink = logger.add(lambda m: messages.append(m.record["message"]), level="WARNING")
    try:
        fresh = surge.Trainer(default_root_dir=str(tmp_path / "mine"), logger=False, enable_progress_bar=False)
        fresh.test(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path, verbose=False)
        fresh.validate(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path, verbose=False)
    finally:
        logger.remove(sink)
    assert fresh.ckpt_path == path
    assert not [m for m in messages if "plugin set" in m], messages
    assert not (tmp_path / "mine").exists()

    import lightning

    class Theirs(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def test_step(self, batch, batch_idx):
            self.log("test_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    data = TinyDataModule()
    data.setup("fit")
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    fitted = lightning.Trainer(default_root_dir=str(tmp_path / "lfit"), max_epochs=1, limit_train_batches=2, **quiet)
    fitted.fit(Theirs(), train_dataloaders=data.train_dataloader())
    fitted.save_checkpoint(str(tmp_path / "theirs.ckpt"))
    reference = lightning.Trainer(default_root_dir=str(tmp_path / "theirs"), **quiet)
    reference.test(Theirs(), dataloaders=data.test_dataloader(), ckpt_path=str(tmp_path / "theirs.ckpt"), verbose=False)
    assert not (tmp_path / "theirs").exists()


# -- the file format and its IO (surge.checkpoint) --------------------------------------------------------


def test_save_writes_the_data_then_a_sha256sum_marker(tmp_path):
    path = tmp_path / "a.ckpt"
    assert checkpoint.save({"state_dict": {"w": torch.arange(4)}}, str(path)) == str(path)
    marker = Path(checkpoint.marker_url(str(path))).read_text()
    assert marker == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  a.ckpt\n"  # `sha256sum -c` reads it
    assert torch.load(path, weights_only=True)["state_dict"]["w"].tolist() == [0, 1, 2, 3]
    assert checkpoint.load(str(path))["state_dict"]["w"].tolist() == [0, 1, 2, 3]
    checkpoint.verify(str(path))


@pytest.mark.parametrize("sizes", [[4] * 40, [4] * 40 + [200_000, 3] + [500_000] * 3], ids=["small", "large"])
def test_the_marker_hashes_every_byte_whichever_thread_hashes_them(tmp_path, sizes):
    """A small checkpoint is hashed on the saving thread, a larger one past its first MiB by a helper thread; many
    small records are written together, large tensors at once: the marker's digest is the file's either way."""
    state = {f"t{i}": torch.full((n,), float(i)) for i, n in enumerate(sizes)}
    path = tmp_path / "a.ckpt"
    checkpoint.save({"state_dict": state}, str(path))
    marker = Path(checkpoint.marker_url(str(path))).read_text()
    assert marker == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  a.ckpt\n"
    loaded = checkpoint.load(str(path))["state_dict"]
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_the_hashing_writers_digest_covers_the_pieces_still_gathered(tmp_path):
    """Small pieces wait to be written together: asking for the digest writes them first, so the digest and the
    file never disagree, whether or not the caller flushed."""
    from surge.checkpoint import _HashingWriter

    with open(tmp_path / "f", "x+b", buffering=0) as f:
        writer = _HashingWriter(f, follow=False)
        writer.write(b"abc")
        digest = writer.hexdigest()
    assert (tmp_path / "f").read_bytes() == b"abc"
    assert digest == hashlib.sha256(b"abc").hexdigest()


def test_a_missing_checkpoint_names_the_file(tmp_path):
    missing = str(tmp_path / "nope.ckpt")
    with pytest.raises(checkpoint.CheckpointError, match=f"checkpoint {re.escape(missing)} does not exist"):
        checkpoint.load(missing)


def test_pickled_code_is_refused_with_an_explanation_and_loads_when_trusted(tmp_path):
    path = str(tmp_path / "code.ckpt")
    checkpoint.save({"state_dict": {}, "hook": print}, path)
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.load(path)
    message = str(info.value)
    assert path in message and "print" in message  # what was found
    assert "would run that code" in message and "trusted=True" in message  # why, and the way out
    assert checkpoint.load(path, trusted=True)["hook"] is print


def test_the_marker_is_written_last(tmp_path, monkeypatch):
    """If the marker's write fails (or the process dies before it), the data file alone is not a checkpoint."""
    path = str(tmp_path / "half.ckpt")
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(checkpoint.MARKER_SUFFIX):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save({"state_dict": {"w": torch.ones(2)}}, path)
    monkeypatch.undo()
    assert os.path.exists(path) and not os.path.exists(checkpoint.marker_url(path))  # the data went first
    assert sorted(os.listdir(tmp_path)) == ["half.ckpt"]  # and the failed save left no temp file
    with pytest.raises(checkpoint.CheckpointError, match="has no commit marker"):
        checkpoint.load(path)
    assert checkpoint.newest_valid([path]) is None


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_an_overwrite_cut_short_at_any_rename_leaves_a_valid_checkpoint(tmp_path, monkeypatch, crash_at):
    """The renames of an overwrite: the marker accepting old and new, the data, the final marker."""
    last = str(tmp_path / "last.ckpt")
    checkpoint.save({"state_dict": {"w": torch.ones(1)}}, last)
    real_replace, calls = os.replace, []

    def replace(src, dst):  # the process dies just before the crash_at-th rename
        calls.append(dst)
        if len(calls) == crash_at:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save({"state_dict": {"w": torch.full((1,), 2.0)}}, last)
    monkeypatch.undo()
    assert len(calls) == crash_at
    value = float(checkpoint.load(last)["state_dict"]["w"])
    assert value == (1.0 if crash_at <= 2 else 2.0)  # the old checkpoint until the new data is in place
    checkpoint.save({"state_dict": {"w": torch.full((1,), 3.0)}}, last)  # and the next save works as usual
    assert float(checkpoint.load(last)["state_dict"]["w"]) == 3.0
    assert Path(checkpoint.marker_url(last)).read_text().count("\n") == 1  # the interim line is gone


def test_a_marker_that_does_not_match_its_data_makes_last_fall_back(tmp_path):
    older, last = str(tmp_path / "epoch=0.ckpt"), str(tmp_path / "last.ckpt")
    checkpoint.save({"state_dict": {"w": torch.zeros(1)}}, older)
    checkpoint.save({"state_dict": {"w": torch.ones(1)}}, last)
    os.utime(checkpoint.marker_url(older), (1, 1))  # the older one was committed first
    torch.save({"state_dict": {"w": torch.full((1,), 2.0)}}, last)  # replaced behind the marker's back
    with pytest.raises(checkpoint.CheckpointError, match="last.ckpt is truncated or corrupt"):
        checkpoint.load(last)
    assert checkpoint.newest_valid([older, last]) == older


def test_newest_valid_takes_the_most_recently_committed_intact_one(tmp_path):
    paths = [str(tmp_path / f"{name}.ckpt") for name in ("a", "b", "c")]
    for i, path in enumerate(paths):
        checkpoint.save({"state_dict": {"i": torch.tensor(i)}}, path)
        os.utime(checkpoint.marker_url(path), (100 + i, 100 + i))
    assert checkpoint.newest_valid(paths) == paths[2]
    assert checkpoint.newest_valid(list(reversed(paths))) == paths[2]  # by commit time, not by position
    Path(paths[2]).write_bytes(Path(paths[2]).read_bytes()[:-10])
    assert checkpoint.newest_valid(paths) == paths[1]
    assert checkpoint.newest_valid([str(tmp_path / "missing.ckpt")]) is None


def test_sweep_removes_only_the_temp_files_of_crashed_saves(tmp_path):
    checkpoint.save({"state_dict": {}}, str(tmp_path / "keep.ckpt"))
    orphans = [f".keep.ckpt.{'a' * 32}.surge-tmp", f".keep.ckpt.sha256.{'b' * 32}.surge-tmp"]
    for name in [*orphans, ".hidden", "notes.tmp"]:
        (tmp_path / name).write_bytes(b"x")
    removed = checkpoint.sweep(str(tmp_path))
    assert sorted(Path(p).name for p in removed) == sorted(orphans)
    assert sorted(os.listdir(tmp_path)) == [".hidden", "keep.ckpt", "keep.ckpt.sha256", "notes.tmp"]
    assert checkpoint.sweep(str(tmp_path / "does-not-exist")) == []


def test_remove_deletes_the_marker_first(tmp_path, monkeypatch):
    path = str(tmp_path / "x.ckpt")
    checkpoint.save({"state_dict": {}}, path)
    fs = fsspec.filesystem("file")
    removed: list[str] = []
    real_rm = type(fs).rm_file
    monkeypatch.setattr(type(fs), "rm_file", lambda self, p: (removed.append(os.path.basename(p)), real_rm(self, p)))
    checkpoint.remove(path)
    checkpoint.remove(path)  # already gone: nothing to do
    assert removed[:2] == ["x.ckpt.sha256", "x.ckpt"]
    assert os.listdir(tmp_path) == []


def test_object_store_round_trip_writes_data_before_marker(monkeypatch):
    """A non-local fsspec filesystem (memory://, as s3:// or gs:// would be) gets no temp files: the data
    object first, the marker object last."""
    fs = fsspec.filesystem("memory")
    writes: list[str] = []
    real_pipe = type(fs).pipe_file

    def pipe_file(self, path, value, *args, **kwargs):
        writes.append(path.rsplit("/", 1)[-1])
        return real_pipe(self, path, value, *args, **kwargs)

    monkeypatch.setattr(type(fs), "pipe_file", pipe_file)
    url = "memory://bucket/run/model.ckpt"
    checkpoint.save({"state_dict": {"w": torch.arange(3)}}, url)
    assert writes == ["model.ckpt", "model.ckpt.sha256"]
    assert checkpoint.load(url)["state_dict"]["w"].tolist() == [0, 1, 2]
    assert checkpoint.newest_valid([url]) == url
    fs.pipe_file("/bucket/run/model.ckpt", fs.cat_file("/bucket/run/model.ckpt")[:-1])
    with pytest.raises(checkpoint.CheckpointError, match="memory://bucket/run/model.ckpt is truncated"):
        checkpoint.load(url)
    checkpoint.remove(url)
    assert not fs.exists("/bucket/run/model.ckpt.sha256")


def test_snapshot_is_independent_of_the_live_tensors():
    weight = torch.ones(3)
    snap = checkpoint.snapshot({"state_dict": {"w": weight}, "steps": [torch.tensor(1)], "note": "x"})
    weight.add_(1)
    assert snap["state_dict"]["w"].tolist() == [1.0, 1.0, 1.0] and snap["note"] == "x"


def test_checkpoint_pickle_is_torch_saves_byte_for_byte_and_cheaper() -> None:
    """``save`` gives ``torch.save`` a pickler whose ``persistent_id`` answers plain objects (keys, numbers,
    containers) at once: the bytes stay exactly those of a plain ``torch.save``, storages shared between tensors
    included, and torch's own ``persistent_id`` is asked only about the other objects."""
    import collections
    import io

    from surge.checkpoint import _PICKLE

    base = torch.arange(12.0)
    checkpoint = {
        "version": 2,
        "plain": [1, 2.5, None, True, "s", b"b", (1, (2, 3)), {"k": [float("inf")]}],
        "ordered": collections.OrderedDict(w=base, view=base[3:7], other=torch.ones(2, 3).t()),
        "param": torch.nn.Parameter(torch.zeros(4)),
        "ints": torch.arange(5, dtype=torch.int64),
        "bytes": torch.zeros(3, dtype=torch.uint8),
    }
    ours, theirs = io.BytesIO(), io.BytesIO()
    torch.save(checkpoint, ours, pickle_module=_PICKLE)
    torch.save(checkpoint, theirs)
    assert ours.getvalue() == theirs.getvalue()

    asked: list[type] = []

    class Counting(_PICKLE.Pickler):  # as torch.save's own pickler subclasses pickle_module.Pickler
        def persistent_id(self, obj: object) -> None:
            asked.append(type(obj))

    Counting(io.BytesIO(), protocol=2).dump(checkpoint)
    assert asked, "torch's persistent_id must still see the objects that may be storages"
    assert not {str, int, float, dict, list, tuple} & set(asked)
