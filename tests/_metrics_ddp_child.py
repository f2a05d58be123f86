"""One rank of ``test_lightning_metrics.py``'s 2-process run (launched under torchrun; not collected by pytest).

``_metrics_ddp_child.py OUT``: fits a classifier that logs a torchmetrics ``Accuracy`` on the validation set
with ``reduce_fx="sum", sync_dist=True`` (which must not apply to a metric: it syncs itself) and a plain
validation loss without ``sync_dist``; each rank writes ``OUT/rank<R>.pt`` with its callback metrics and the
final weights.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import surge
import torch
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(40, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long())


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


class Classifier(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = net()
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        logits = self.net(x)
        self.val_acc.update(logits, y)
        self.log("val_acc", self.val_acc, reduce_fx="sum", sync_dist=True)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main(out: str) -> None:
    model = Classifier()
    trainer = surge.Trainer(
        strategy="ddp", devices=2, accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
    )  # fmt: skip
    trainer.fit(model, DataLoader(data(), batch_size=5), DataLoader(data(), batch_size=5))
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    weights = {name: value.detach().clone() for name, value in model.net.state_dict().items()}
    torch.save({"metrics": metrics, "weights": weights}, os.path.join(out, f"rank{trainer.global_rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
