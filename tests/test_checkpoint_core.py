"""The core's checkpoint contract: the dict plugins add to, weights-only loading, plugin state keys."""

import pytest
import surge
import torch
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


@pytest.mark.parametrize("damage", ["empty", "truncated", "pickled_code"])
def test_damaged_or_unsafe_checkpoint_names_the_file(make_trainer, tmp_path, damage):
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule())
    path = tmp_path / f"{damage}.ckpt"
    trainer.save_checkpoint(str(path))
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        torch.save({"state_dict": {}, "hook": print}, path)  # a callable needs unpickling of code
    with pytest.raises(surge.SurgeError, match=str(path).replace(".", r"\.")):
        trainer.fit(model, datamodule=TinyDataModule(), ckpt_path=str(path))


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
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.ckpt"]


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
