import os
from typing import Any

import torch
from lightning import LightningDataModule
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split


class DigitsDataModule(LightningDataModule):
    """scikit-learn's 8x8 digits (1797 images of ten classes), split into train, validation and test sets: the
    template's MNIST data module, with a data set that ships with scikit-learn."""

    def __init__(
        self,
        data_dir: str = "data/",
        train_val_test_split: tuple[int, int, int] = (1200, 300, 297),
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        # the init arguments as self.hparams (and in the checkpoint), not sent to the loggers
        self.save_hyperparameters(logger=False)
        self.data_train: Dataset | None = None
        self.data_val: Dataset | None = None
        self.data_test: Dataset | None = None
        self.batch_size_per_device = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def _path(self) -> str:
        return os.path.join(self.hparams.data_dir, "digits.pt")

    def prepare_data(self) -> None:
        """Write the data set to ``data_dir`` once (where the MNIST template downloads)."""
        if not os.path.exists(self._path()):
            os.makedirs(self.hparams.data_dir, exist_ok=True)
            images, labels = load_digits(return_X_y=True)
            x = (torch.tensor(images, dtype=torch.float32) / 16.0 - 0.3) / 0.4
            torch.save((x.view(-1, 1, 8, 8), torch.tensor(labels)), self._path())

    def setup(self, stage: str | None = None) -> None:
        # the batch size of each device
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError(
                    f"Batch size ({self.hparams.batch_size}) is not divisible by the number of devices "
                    f"({self.trainer.world_size})."
                )
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size

        # load and split only once: setup runs for trainer.fit and for trainer.test
        if not self.data_train and not self.data_val and not self.data_test:
            images, labels = torch.load(self._path())
            self.data_train, self.data_val, self.data_test = random_split(
                dataset=TensorDataset(images, labels),
                lengths=self.hparams.train_val_test_split,
                generator=torch.Generator().manual_seed(42),
            )

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(
            dataset=self.data_train,
            batch_size=self.batch_size_per_device,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=True,
        )

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(
            dataset=self.data_val,
            batch_size=self.batch_size_per_device,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=False,
        )

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(
            dataset=self.data_test,
            batch_size=self.batch_size_per_device,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=False,
        )

    def teardown(self, stage: str | None = None) -> None:
        pass

    def state_dict(self) -> dict[Any, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass
