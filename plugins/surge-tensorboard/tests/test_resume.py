"""A resumed fit writes a new run directory whose events begin where the checkpoint was saved."""

from __future__ import annotations

import surge
from surge import events
from surge_tensorboard import TensorBoardLogger


class SaveAt:
    """Saves a full checkpoint mid-epoch, in the ``train_batch_end`` of step ``step`` (before that step's row
    is written, after the handlers, as in Lightning)."""

    surge_name = "save_at"

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    @surge.hookimpl
    def train_batch_end(self, event: events.TrainBatchEnd) -> None:
        if event.trainer.global_step == self.step:
            event.trainer.save_checkpoint(self.path)


def test_resume_from_a_mid_epoch_checkpoint(fit, tb, tmp_path):
    path = str(tmp_path / "step3.ckpt")
    first = fit(max_epochs=2, logger=[TensorBoardLogger(histograms_every_n_epochs=1)], plugins=[SaveAt(3, path)])
    second = fit(max_epochs=2, logger=[TensorBoardLogger(histograms_every_n_epochs=1)], ckpt_path=path)
    assert second.run_dir != first.run_dir
    original, resumed = tb.Run(first.run_dir), tb.Run(second.run_dir)

    points = resumed.points()
    assert min(step for _, step in points) == 3  # step 3's row: written after the save, so by the resumed run
    assert len(points) == len(set(points)), "a (tag, step) was written twice"
    for tag in resumed.tags("histograms"):
        assert min(resumed.histogram_steps(tag)) > 3, tag
    # the resumed run goes on exactly where the first one was: the same steps with the same values
    expected = {tag: [(s, v) for s, v in series if s >= 3] for tag, series in original.scalars().items()}
    assert resumed.scalars() == expected
    assert [step for step, _ in resumed.scalars()["train_loss"]] == [3, 4, 5, 6, 7, 8]
    assert "session_start_info" in resumed.hparams()


def test_resume_from_the_checkpoint_plugins_last_checkpoint(fit, tb):
    first = fit(enable_checkpointing=True)  # one epoch; the checkpoint plugin saves after its validation
    second = fit(enable_checkpointing=True, max_epochs=2, ckpt_path="last")
    assert second.run_dir != first.run_dir
    assert max(step for _, step in tb.Run(first.run_dir).points()) == 4
    resumed = tb.Run(second.run_dir)
    points = resumed.points()
    assert min(step for _, step in points) == 5
    assert len(points) == len(set(points))
    scalars = resumed.scalars()
    assert [step for step, _ in scalars["train_loss"]] == [5, 6, 7, 8]
    assert [step for step, _ in scalars["val_loss"]] == [8]
