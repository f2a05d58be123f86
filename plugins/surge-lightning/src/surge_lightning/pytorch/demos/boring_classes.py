"""``lightning.pytorch.demos.boring_classes``: Lightning's small models and data sets for tests, examples and bug
reports, written for Surge with Lightning's constructor arguments, layers and data, made in the same order: under
the same seed they hold the same numbers and train to the same weights as Lightning's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from surge_lightning._lazy import refusing
from surge_lightning.pytorch.core.datamodule import LightningDataModule
from surge_lightning.pytorch.core.module import LightningModule

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "ManualOptimBoringModel",
    "Net",
    "RandomDataset",
    "RandomDictDataset",
    "RandomIterableDataset",
    "RandomIterableDatasetWithLen",
]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class RandomDataset(Dataset):
    """``length`` random vectors of ``size`` numbers, drawn from the global generator when built."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(RandomDataset):
    """:class:`RandomDataset` whose items are dicts: ``{"a": x, "b": x + 2}``."""

    def __getitem__(self, index: int) -> dict[str, Tensor]:  # type: ignore[override]
        a = self.data[index]
        return {"a": a, "b": a + 2}


class RandomIterableDataset(IterableDataset):
    """``count`` random vectors of ``size`` numbers, drawn as they are read; no length."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """:class:`RandomIterableDataset` that has a length (``count``)."""

    def __len__(self) -> int:
        return self.count


class BoringModel(LightningModule):
    """One ``Linear(32, 2)`` trained towards ones (mean squared error), SGD at 0.1 with a ``StepLR`` stepped each
    epoch, and a loader of 64 random vectors for every stage: subclass it and override what a test is about."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        return F.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """:class:`BoringModel` optimized by hand in ``training_step`` (``automatic_optimization = False``)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


_STAGES = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}
"""The loaders each stage's ``setup`` prepares."""


class _BoringLoaders(LightningDataModule):
    """A loader of batch size 1 per stage over the data set ``setup`` put in ``random_<stage>``."""

    random_train: Dataset[Any]
    random_val: Dataset[Any]
    random_test: Dataset[Any]
    random_predict: Dataset[Any]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class BoringDataModule(_BoringLoaders):
    """256 random vectors of 32 numbers, drawn when built, split in four quarters: train, val, test, predict."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        for i, part in enumerate(("train", "val", "test", "predict")):
            if part in _STAGES.get(stage, ()):
                setattr(self, f"random_{part}", Subset(self.random_full, indices=range(64 * i, 64 * (i + 1))))


class BoringDataModuleNoLen(_BoringLoaders):
    """:class:`BoringDataModule` with data sets of no length (:class:`RandomIterableDataset`: 512 train, 128 val,
    256 test and 64 predict vectors, drawn as they are read)."""

    _COUNTS: ClassVar[dict[str, int]] = {"train": 512, "val": 128, "test": 256, "predict": 64}

    def setup(self, stage: str) -> None:
        for part in _STAGES.get(stage, ()):
            setattr(self, f"random_{part}", RandomIterableDataset(32, self._COUNTS[part]))


class IterableBoringDataModule(LightningDataModule):
    """Two loaders per stage, one over a :class:`RandomDataset` and one over a :class:`RandomIterableDataset` of
    4 numbers per item (16 train, 32 val, 64 test and 128 predict items each)."""

    _COUNTS: ClassVar[dict[str, int]] = {"train": 16, "val": 32, "test": 64, "predict": 128}

    def setup(self, stage: str) -> None:
        for part in _STAGES.get(stage, ()):
            count = self._COUNTS[part]
            setattr(self, f"{part}_datasets", [RandomDataset(4, count), RandomIterableDataset(4, count)])

    def _loaders(self, part: str) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in getattr(self, f"{part}_datasets")]

    def train_dataloader(self) -> list[DataLoader]:
        return self._loaders("train")

    def val_dataloader(self) -> list[DataLoader]:
        return self._loaders("val")

    def test_dataloader(self) -> list[DataLoader]:
        return self._loaders("test")

    def predict_dataloader(self) -> list[DataLoader]:
        return self._loaders("predict")


class DemoModel(LightningModule):
    """``relu(Linear(32, out_dim)(x))`` whose training loss is the output's sum, trained with Adam."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """A small convolutional classifier of 28x28 grey images (MNIST's) into 10 classes, returning log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)
