"""Profiling and the debugging flags as Lightning's "Find bottlenecks in your code" and "Debug your model"
pages write them: a ``SimpleProfiler(dirpath=..., filename=...)`` passed to the Trainer and to the model,
which profiles a custom action with ``self.profiler.profile(...)`` (``PassThroughProfiler`` when none is
given), ``seed_everything(..., workers=True)``, ``Trainer(deterministic=True, detect_anomaly=True)``, and
``rank_zero_info``. ``tests/test_porting.py`` rewrites the Lightning imports, nothing else.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self, profiler=None):
        super().__init__()
        self.profiler = profiler or PassThroughProfiler()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def custom_processing_step(self, x):
        with self.profiler.profile("my_custom_action"):
            return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-6)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(self.custom_processing_step(x)), y)
        self.log("train_loss", loss)
        return loss

    def on_train_end(self):
        rank_zero_info(f"trained {self.global_step} steps")

    def configure_optimizers(self):
        return torch.optim.RMSprop(self.parameters(), lr=0.01)


def main(root_dir, max_epochs=2):
    L.seed_everything(42, workers=True)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(96, 8, generator=generator)
    y = x.pow(2).sum(dim=1, keepdim=True)
    profiler = SimpleProfiler(dirpath=root_dir, filename="perf_logs")
    model = LitModel(profiler)
    trainer = L.Trainer(
        max_epochs=max_epochs, default_root_dir=root_dir, profiler=profiler, deterministic=True, detect_anomaly=True
    )
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=12, shuffle=True))
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics), "profiler": profiler}
