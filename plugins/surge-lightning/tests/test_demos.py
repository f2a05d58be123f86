"""``surge_lightning.pytorch.demos`` side by side with ``lightning.pytorch.demos`` (issue 25, item 4): under the same
seed every demo model has Lightning's weights, every demo data set Lightning's numbers, and a fit of the boring
models ends with Lightning's weights; ``WikiText2`` reads a file already on disk and refuses to download."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import surge_lightning.pytorch as spl
import surge_lightning.pytorch.demos as sdemos
import surge_lightning.pytorch.demos.boring_classes as sboring
import torch
from torch.utils.data import DataLoader

pl = pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (`make test` installs it)")
import lightning.pytorch.demos as ldemos  # noqa: E402
import lightning.pytorch.demos.boring_classes as lboring  # noqa: E402

QUIET = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def _seeded(make: Any) -> tuple[Any, torch.Tensor]:
    """What ``make()`` builds under seed 0, and the next number the generator gives (it drew as many)."""
    torch.manual_seed(0)
    built = make()
    return built, torch.rand(1)


def _assert_same_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    assert all(torch.equal(mine[k], other[k]) for k in mine)


@pytest.mark.parametrize(
    ("module", "name", "kwargs"),
    [
        ("demos", "Transformer", {"vocab_size": 40, "ninp": 16, "nhead": 2, "nhid": 24, "nlayers": 2, "dropout": 0.1}),
        ("demos", "LightningTransformer", {"vocab_size": 30}),
        ("demos", "SimpleLSTM", {"vocab_size": 30, "ninp": 8, "nhid": 12, "nlayers": 2}),
        ("demos", "LightningLSTM", {"vocab_size": 30}),
        ("demos", "BoringModel", {}),
        ("demos", "DemoModel", {"out_dim": 3, "learning_rate": 0.1}),
        ("boring", "ManualOptimBoringModel", {}),
        ("boring", "Net", {}),
    ],
)
def test_each_demo_model_has_lightnings_weights(module: str, name: str, kwargs: dict[str, Any]) -> None:
    ours_module, theirs_module = (sdemos, ldemos) if module == "demos" else (sboring, lboring)
    ours, after_ours = _seeded(lambda: getattr(ours_module, name)(**kwargs))
    theirs, after_theirs = _seeded(lambda: getattr(theirs_module, name)(**kwargs))
    _assert_same_weights(ours, theirs)
    assert torch.equal(after_ours, after_theirs)  # the same numbers drawn, in the same order


def test_the_transformer_and_the_lstm_compute_lightnings_outputs() -> None:
    inputs, target = torch.randint(40, (3, 9)), torch.randint(40, (3, 9))
    ours, _ = _seeded(lambda: sdemos.Transformer(vocab_size=40, ninp=16, nhid=16, nlayers=1))
    theirs, _ = _seeded(lambda: ldemos.Transformer(vocab_size=40, ninp=16, nhid=16, nlayers=1))
    torch.manual_seed(1)
    mine = ours(inputs, target)  # in training mode: the dropouts draw the same masks
    torch.manual_seed(1)
    assert torch.equal(mine, theirs(inputs, target)) and mine.shape == (3 * 9, 40)
    lstm, _ = _seeded(lambda: sdemos.SimpleLSTM(vocab_size=40, ninp=8, nhid=8, nlayers=2))
    their_lstm, _ = _seeded(lambda: ldemos.SimpleLSTM(vocab_size=40, ninp=8, nhid=8, nlayers=2))
    lstm.eval(), their_lstm.eval()
    (out, (h, c)), (their_out, (their_h, their_c)) = (
        lstm(inputs, lstm.init_hidden(3)),
        their_lstm(inputs, their_lstm.init_hidden(3)),
    )
    assert torch.equal(out, their_out) and torch.equal(h, their_h) and torch.equal(c, their_c)


@pytest.mark.parametrize(
    "name",
    ["RandomDataset", "RandomDictDataset", "RandomIterableDataset", "RandomIterableDatasetWithLen"],
)
def test_each_random_dataset_gives_lightnings_items(name: str) -> None:
    ours, _ = _seeded(lambda: getattr(sboring, name)(5, 7))
    theirs, _ = _seeded(lambda: getattr(lboring, name)(5, 7))
    torch.manual_seed(1)  # the iterable ones draw as they are read
    mine = [torch.utils._pytree.tree_leaves(item) for item in ours]
    torch.manual_seed(1)
    other = [torch.utils._pytree.tree_leaves(item) for item in theirs]
    assert [[t.tolist() for t in item] for item in mine] == [[t.tolist() for t in item] for item in other]
    assert len(mine) == 7 and hasattr(ours, "__len__") == hasattr(theirs, "__len__")


@pytest.mark.parametrize("name", ["BoringDataModule", "BoringDataModuleNoLen", "IterableBoringDataModule"])
def test_each_boring_datamodule_gives_lightnings_loaders(name: str) -> None:
    def batches(datamodule: Any) -> dict[str, list[Any]]:
        torch.manual_seed(1)  # IterableBoringDataModule draws in setup, the iterable data sets as they are read
        for stage in ("fit", "validate", "test", "predict"):
            datamodule.setup(stage)
        out = {}
        for part in ("train", "val", "test", "predict"):
            loaders = getattr(datamodule, f"{part}_dataloader")()
            loaders = loaders if isinstance(loaders, list) else [loaders]
            out[part] = [[batch.tolist() for batch in loader] for loader in loaders]
        return out

    ours, _ = _seeded(getattr(sboring, name))
    theirs, _ = _seeded(getattr(lboring, name))
    assert isinstance(ours, spl.LightningDataModule)
    assert batches(ours) == batches(theirs)


@pytest.mark.parametrize("name", ["BoringModel", "ManualOptimBoringModel", "DemoModel"])
def test_a_fit_of_a_boring_model_ends_with_lightnings_weights(tmp_path: Path, name: str) -> None:
    runs = {}
    for framework, boring in ((spl, sboring), (pl, lboring)):
        torch.manual_seed(0)
        model = getattr(boring, name)()
        trainer = framework.Trainer(max_epochs=2, limit_val_batches=4, default_root_dir=tmp_path, **QUIET)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's about workers and logging intervals
            if name == "DemoModel":
                trainer.fit(model, DataLoader(boring.RandomDataset(32, 16), batch_size=4))
            else:
                trainer.fit(model)
                trainer.test(model, verbose=False)
        runs[framework] = (model, trainer.global_step)
    assert runs[spl][1] == runs[pl][1] > 0
    _assert_same_weights(runs[spl][0], runs[pl][0])


def test_a_boring_datamodule_trains_the_boring_model_as_lightning(tmp_path: Path) -> None:
    weights = []
    for framework, boring in ((spl, sboring), (pl, lboring)):
        torch.manual_seed(0)
        model, data = boring.BoringModel(), boring.BoringDataModule()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            framework.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(model, datamodule=data)
        weights.append(model)
    _assert_same_weights(*weights)


def test_wikitext2_reads_the_file_on_disk_as_lightnings(tmp_path: Path) -> None:
    (tmp_path / "wikitext-2.txt").write_text(" = Valkyria = \n\n the game began in 2010 . \n the game ended \n")
    ours = sdemos.WikiText2(data_dir=tmp_path, block_size=4)
    theirs = ldemos.WikiText2(data_dir=tmp_path, block_size=4, download=False)
    assert ours.vocab_size == theirs.vocab_size and ours.dictionary.idx2word == theirs.dictionary.idx2word
    assert torch.equal(ours.data, theirs.data) and len(ours) == len(theirs) > 0
    assert [[t.tolist() for t in ours[i]] for i in range(len(ours))] == [
        [t.tolist() for t in theirs[i]] for i in range(len(theirs))
    ]


def test_wikitext2_refuses_to_download(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"wikitext-2\.txt does not exist, and surge_lightning downloads no"):
        sdemos.WikiText2(data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists()  # nothing written either


def test_the_mnist_datamodule_stays_refused_with_the_reason() -> None:
    with pytest.raises(ImportError, match="MNIST"):
        from surge_lightning.pytorch.demos.mnist_datamodule import MNISTDataModule  # noqa: F401


@pytest.mark.parametrize(("n", "batch_size"), [(20, 4), (23, 5), (3, 4)])
def test_the_sequence_sampler_gives_lightnings_batches(n: int, batch_size: int) -> None:
    data = list(range(n))
    ours, theirs = sdemos.SequenceSampler(data, batch_size), ldemos.SequenceSampler(data, batch_size)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
