from pathlib import Path

import pytest
import torch
from src.data.digits_datamodule import DigitsDataModule


@pytest.mark.parametrize("batch_size", [32, 128])
def test_digits_datamodule(batch_size: int, tmp_path: Path) -> None:
    dm = DigitsDataModule(data_dir=str(tmp_path), batch_size=batch_size)
    dm.prepare_data()
    assert not dm.data_train and not dm.data_val and not dm.data_test
    assert Path(tmp_path, "digits.pt").exists()

    dm.setup()
    assert dm.data_train and dm.data_val and dm.data_test
    assert dm.train_dataloader() and dm.val_dataloader() and dm.test_dataloader()
    assert len(dm.data_train) + len(dm.data_val) + len(dm.data_test) == 1797

    x, y = next(iter(dm.train_dataloader()))
    assert len(x) == len(y) == batch_size
    assert x.dtype == torch.float32 and y.dtype == torch.int64
