"""A logger of one's own, as Lightning's "Logging" page writes it ("Make a custom logger"): a ``Logger``
subclass with ``name``, ``version``, ``@rank_zero_only`` ``log_hyperparams``/``log_metrics``, ``save`` and
``finalize``, passed in ``Trainer(logger=...)`` and written to from a step with ``self.logger.log_metrics``.
It records every call, to compare what the Trainer calls it with: a fit, a ``validate``, and a fit that fails.
``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MyLogger(Logger):
    def __init__(self):
        super().__init__()
        self.calls = []

    @property
    def name(self):
        return "MyLogger"

    @property
    def version(self):
        return "0.1"

    @property
    @rank_zero_experiment
    def experiment(self):
        return self.calls

    @rank_zero_only
    def log_hyperparams(self, params):
        self.calls.append(("log_hyperparams", dict(params)))

    @rank_zero_only
    def log_metrics(self, metrics, step):
        self.calls.append(("log_metrics", dict(metrics), step))

    def log_graph(self, model, input_array=None):
        self.calls.append(("log_graph", type(model).__name__))

    @rank_zero_only
    def save(self):
        self.calls.append(("save",))

    @rank_zero_only
    def finalize(self, status):
        self.calls.append(("finalize", status))

    def after_save_checkpoint(self, checkpoint_callback):
        self.calls.append(("after_save_checkpoint", checkpoint_callback.__class__.__name__))


class LitModel(L.LightningModule):
    def __init__(self, lr: float = 0.1, fail_at_step: int = -1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step == self.hparams.fail_at_step:
            raise RuntimeError("the data ran out")
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def on_train_epoch_end(self):
        self.logger.log_metrics({"bias": self.layer.bias.item()}, step=self.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def loaders():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(48, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=8), DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8)


def main(root_dir):
    L.seed_everything(0)
    logger = MyLogger()
    model = LitModel()
    trainer = L.Trainer(max_epochs=2, default_root_dir=root_dir, logger=logger, log_every_n_steps=2)
    train, val = loaders()
    trainer.fit(model, train, val)
    fit_metrics, fit_calls = dict(trainer.callback_metrics), list(logger.calls)
    trainer.validate(model, val, verbose=False)
    validate_calls = logger.calls[len(fit_calls) :]

    failing = MyLogger()
    broken = LitModel(fail_at_step=3)
    try:
        L.Trainer(max_epochs=1, default_root_dir=root_dir, logger=failing, log_every_n_steps=2).fit(broken, train)
    except RuntimeError as error:
        failure = str(error)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": fit_metrics,
        "logger": logger,
        "fit_calls": fit_calls,
        "validate_calls": validate_calls,
        "failed_calls": failing.calls,
        "failure": failure,
    }
