"""``lightning.pytorch.demos``: Lightning's demo models and data sets, written for Surge (the same weights and
training as Lightning's under the same seed); ``mnist_datamodule`` stays refused (it downloads MNIST)."""

from surge_lightning._lazy import served
from surge_lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from surge_lightning.pytorch.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from surge_lightning.pytorch.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "BoringDataModule",
    "BoringModel",
    "DemoModel",
    "LightningLSTM",
    "LightningTransformer",
    "SequenceSampler",
    "SimpleLSTM",
    "Transformer",
    "WikiText2",
]

__getattr__, __dir__ = served(__name__, {"mnist_datamodule": f"{__name__}.mnist_datamodule"})
