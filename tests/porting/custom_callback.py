"""A callback of one's own, as Lightning's "Callback" page writes it: a ``Callback`` subclass with hooks that
take ``(trainer, pl_module, ...)``, its state in ``state_dict``/``load_state_dict`` (saved in checkpoints
and restored by ``fit(ckpt_path=...)``), ``on_save_checkpoint``, a ``@rank_zero_only`` method, and the
callback found again through ``trainer.callbacks``. ``tests/test_porting.py`` rewrites the Lightning imports,
nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class HookTrace(Callback):
    """Records the hooks Lightning calls, with the epoch and step each one saw."""

    def __init__(self):
        self.calls = []
        self.batches_seen = 0
        self.saved_batches = []

    def _record(self, hook, trainer):
        self.calls.append((hook, trainer.current_epoch, trainer.global_step, trainer.sanity_checking))

    def on_fit_start(self, trainer, pl_module):
        self._record("on_fit_start", trainer)

    def on_train_start(self, trainer, pl_module):
        self._record("on_train_start", trainer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._record("on_train_epoch_start", trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches_seen += 1
        if batch_idx == 0:
            self._record("on_train_batch_end", trainer)

    def on_validation_epoch_start(self, trainer, pl_module):
        self._record("on_validation_epoch_start", trainer)

    def on_validation_epoch_end(self, trainer, pl_module):
        self._record("on_validation_epoch_end", trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self._record("on_train_epoch_end", trainer)
        self.report(trainer)

    def on_train_end(self, trainer, pl_module):
        self._record("on_train_end", trainer)

    def on_fit_end(self, trainer, pl_module):
        self._record("on_fit_end", trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.saved_batches.append(self.batches_seen)

    @rank_zero_only
    def report(self, trainer):
        print(f"epoch {trainer.current_epoch}: {self.batches_seen} batches")

    def state_dict(self):
        return {"batches_seen": self.batches_seen}

    def load_state_dict(self, state_dict):
        self.batches_seen = state_dict["batches_seen"]


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(6, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loaders():
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(80, 6, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x[:64], y[:64]), batch_size=16, shuffle=True), DataLoader(
        TensorDataset(x[64:], y[64:]), batch_size=8
    )


def main(root_dir, max_epochs=2):
    L.seed_everything(2)
    trace = HookTrace()
    trainer = L.Trainer(max_epochs=max_epochs, default_root_dir=root_dir, callbacks=[trace])
    model = LitModel()
    trainer.fit(model, *loaders())
    fit_metrics = dict(trainer.callback_metrics)
    found = [c for c in trainer.callbacks if isinstance(c, HookTrace)]

    # resume: a new callback gets its state back from the last checkpoint
    checkpoint = trainer.checkpoint_callback.last_model_path or trainer.checkpoint_callback.best_model_path
    resumed_trace = HookTrace()
    resumed = L.Trainer(max_epochs=max_epochs + 1, default_root_dir=root_dir, callbacks=[resumed_trace])
    resumed.fit(LitModel(), *loaders(), ckpt_path=checkpoint)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "trace": trace,
        "found": found,
        "resumed_trace": resumed_trace,
        "resumed": resumed,
    }
