"""The LightningModule's overridable steps, each as Lightning's documentation shows it: learning-rate warm-up in
``optimizer_step`` (the example of ``LightningModule.optimizer_step`` in the API reference, Lightning 1.x and 2.0,
https://lightning.ai/docs/pytorch/2.0.0/api/lightning.pytorch.core.LightningModule.html#lightning.pytorch.core.LightningModule.optimizer_step),
``lr_scheduler_step`` for a scheduler with its own API and ``configure_gradient_clipping`` with a stronger clip after
some epochs (the "Optimization" page, https://lightning.ai/docs/pytorch/stable/common/optimization.html),
``optimizer_zero_grad(set_to_none=True)`` and ``backward`` (their API reference examples), and
``on_before_batch_transfer``/``transfer_batch_to_device``/``on_after_batch_transfer`` with a custom batch class
(https://lightning.ai/docs/pytorch/stable/api/lightning.pytorch.core.hooks.DataHooks.html).

Kept: the documented bodies and signatures; each override also counts its calls, so that a run shows which were
called. The warm-up is 40 steps where the reference has 500; the Optimization page's clipping example doubles the
Trainer's ``gradient_clip_val`` after epoch 5, which Lightning 2 refuses (``clip_gradients`` with another value than
the Trainer's raises), so the values here are the hook's own (0.5, then 1.0 after epoch 1), as the page's note allows;
the timm ``TanhLRScheduler`` of the Optimization page is a small scheduler with the same ``step(epoch=...)`` API.
"""

import math
from collections import Counter

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

WARMUP_STEPS = 40


class TanhScheduler:
    """A scheduler that is not a ``torch.optim.lr_scheduler.LRScheduler`` (like timm's): stepped with the epoch."""

    def __init__(self, optimizer, t_initial, lb=-3.0, ub=3.0):
        self.optimizer = optimizer
        self.t_initial = t_initial
        self.lb, self.ub = lb, ub
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.epochs_seen = []

    def step(self, epoch):
        self.epochs_seen.append(epoch)
        t = min(epoch / self.t_initial, 1.0)
        factor = 0.5 * (1 - math.tanh(self.lb + (self.ub - self.lb) * t))
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * factor

    def state_dict(self):
        return {"epochs_seen": list(self.epochs_seen)}

    def load_state_dict(self, state_dict):
        self.epochs_seen = list(state_dict["epochs_seen"])


class CustomBatch:
    """A batch of the validation loader: samples and targets, also reachable as ``batch["x"]``/``batch["y"]``."""

    def __init__(self, items):
        self.samples = torch.stack([item["x"] for item in items])
        self.targets = torch.stack([item["y"] for item in items])

    def __getitem__(self, key):
        return {"x": self.samples, "y": self.targets}[key]

    def __setitem__(self, key, value):
        setattr(self, {"x": "samples", "y": "targets"}[key], value)


class Points(Dataset):
    def __init__(self, n, seed):
        generator = torch.Generator().manual_seed(seed)
        self.y = torch.randint(2, (n,), generator=generator)
        self.x = 3 + 2 * torch.randn(n, 4, generator=generator) + self.y.unsqueeze(1).float()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


class LitModel(L.LightningModule):
    def __init__(self, learning_rate=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.learning_rate = learning_rate
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
        self.calls = Counter()
        self.lrs = []

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.net(batch["x"]), batch["y"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch["x"], batch["y"]
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), batch_size=len(y))  # a custom batch

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.learning_rate)
        scheduler = TanhScheduler(optimizer, t_initial=3)
        return [optimizer], [{"scheduler": scheduler, "interval": "epoch"}]

    # learning rate warm-up
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.calls["optimizer_step"] += 1
        # update params
        optimizer.step(closure=optimizer_closure)

        # manually warm up lr without a scheduler
        if self.trainer.global_step < WARMUP_STEPS:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / WARMUP_STEPS)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.learning_rate
        self.lrs.append(optimizer.param_groups[0]["lr"])

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.calls["optimizer_zero_grad"] += 1
        optimizer.zero_grad(set_to_none=True)

    def backward(self, loss):
        self.calls["backward"] += 1
        loss.backward()

    def lr_scheduler_step(self, scheduler, metric):
        self.calls["lr_scheduler_step"] += 1
        scheduler.step(epoch=self.current_epoch)  # the scheduler needs the epoch

    def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):
        self.calls["configure_gradient_clipping"] += 1
        # values of one's own: the Trainer has none (Lightning 2 refuses other values than the Trainer's)
        gradient_clip_val = 0.5 if self.current_epoch <= 1 else 1.0
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm="norm")

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.calls["on_before_batch_transfer"] += 1
        batch["x"] = (batch["x"] - 3) / 2  # the transforms of the CPU
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.calls["transfer_batch_to_device"] += 1
        if isinstance(batch, CustomBatch):
            # move all tensors in the custom data structure to the device
            batch.samples = batch.samples.to(device)
            batch.targets = batch.targets.to(device)
        else:
            batch = super().transfer_batch_to_device(batch, device, dataloader_idx)
        return batch

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.calls["on_after_batch_transfer"] += 1
        batch["x"] = batch["x"].clamp(-2.5, 2.5)  # the transforms of the device
        return batch


def main(root_dir, max_epochs=3):
    L.seed_everything(3)
    model = LitModel()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    train = DataLoader(Points(160, seed=1), batch_size=8, shuffle=True)
    val = DataLoader(Points(48, seed=2), batch_size=16, collate_fn=CustomBatch)
    trainer.fit(model, train, val)
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "calls": dict(model.calls),
        "lrs": model.lrs,
        "scheduler_epochs": trainer.lr_scheduler_configs[0].scheduler.epochs_seen,
    }
