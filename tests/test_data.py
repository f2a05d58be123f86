"""DataModule hooks, where loaders come from, several loaders per stage, reloading, and prepare_data ranks."""

from __future__ import annotations

from typing import ClassVar

import pytest
import surge
import torch
from surge.testing import TinyDataModule, TinyModule, tiny_dataset
from torch.utils.data import DataLoader, IterableDataset, TensorDataset


def loader(n: int, batch_size: int = 8, offset: float = 0.0, shuffle: bool = False) -> DataLoader:
    """``n`` samples whose features are all ``offset + index`` (so a batch tells where it came from)."""
    x = (torch.arange(n, dtype=torch.float32) + offset).unsqueeze(1).repeat(1, 8)
    return DataLoader(TensorDataset(x, torch.zeros(n, 1)), batch_size=batch_size, shuffle=shuffle)


# -- DataModule hooks ---------------------------------------------------------------------------------------


def test_datamodule_hooks_per_stage(make_trainer):
    model, data = TinyModule(), TinyDataModule()
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, datamodule=data)
    assert data.calls == ["prepare_data", "setup:fit", "teardown:fit"]
    data.calls.clear()
    trainer.validate(model, datamodule=data)
    trainer.test(model, datamodule=data)
    trainer.predict(model, datamodule=data)
    assert data.calls == [
        "prepare_data",
        "setup:validate",
        "teardown:validate",
        "prepare_data",
        "setup:test",
        "teardown:test",
        "prepare_data",
        "setup:predict",
        "teardown:predict",
    ]
    assert trainer.datamodule is data


def test_setup_runs_before_the_loaders_are_asked_for(make_trainer, event_recorder):
    order: list[str] = []

    class Data(TinyDataModule):
        def setup(self, stage):
            order.append(f"setup:{stage}")
            super().setup(stage)

        def train_dataloader(self):
            order.append("train_dataloader")
            return super().train_dataloader()

        def val_dataloader(self):
            order.append("val_dataloader")
            return super().val_dataloader()

    class Model(TinyModule):
        def configure_optimizers(self):
            order.append("configure_optimizers")
            return super().configure_optimizers()

        def on_fit_start(self):
            order.append("fit_start")

    make_trainer(max_epochs=1, limit_train_batches=1).fit(Model(), datamodule=Data())
    assert order == ["setup:fit", "train_dataloader", "val_dataloader", "configure_optimizers", "fit_start"]


def test_teardown_runs_when_training_fails(make_trainer):
    class Boom(TinyModule):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    data = TinyDataModule()
    with pytest.raises(RuntimeError, match="boom"):
        make_trainer(max_epochs=1).fit(Boom(), datamodule=data)
    assert data.calls[-1] == "teardown:fit"


def test_loaders_from_the_module_itself(make_trainer):
    calls: list[str] = []

    class SelfContained(TinyModule):
        def prepare_data(self):
            calls.append("prepare_data")

        def train_dataloader(self):
            calls.append("train")
            return DataLoader(tiny_dataset(32), batch_size=8)

        def val_dataloader(self):
            calls.append("val")
            return DataLoader(tiny_dataset(16), batch_size=8)

        def test_dataloader(self):
            return DataLoader(tiny_dataset(16), batch_size=4)

    model = SelfContained()
    trainer = make_trainer(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model)
    assert calls == ["prepare_data", "train", "val"]
    assert trainer.global_step == 4
    assert trainer.num_val_batches == [2]
    (result,) = trainer.test(model)
    assert "test_loss" in result


def test_passed_loaders_win_over_the_modules(make_trainer):
    class WithOwn(TinyModule):
        def train_dataloader(self):
            raise AssertionError("not asked: loaders were passed")

    trainer = make_trainer(max_epochs=1)
    trainer.fit(WithOwn(), train_dataloaders=loader(24), val_dataloaders=loader(8))
    assert trainer.global_step == 3


def test_missing_data_and_ambiguous_sources(make_trainer):
    with pytest.raises(surge.SurgeError, match="found no training data"):
        make_trainer().fit(TinyModule())
    with pytest.raises(surge.SurgeError, match="either dataloaders or a datamodule"):
        make_trainer().fit(TinyModule(), train_dataloaders=loader(8), datamodule=TinyDataModule())
    with pytest.raises(surge.SurgeError, match="found no validation data"):
        make_trainer().validate(TinyModule())
    with pytest.raises(surge.SurgeError, match="found no test data"):
        make_trainer().test(TinyModule())
    with pytest.raises(surge.SurgeError, match="must subclass surge.Module"):
        make_trainer().fit(torch.nn.Linear(1, 1))  # type: ignore[arg-type]


# -- several evaluation loaders -------------------------------------------------------------------------------


class MultiVal(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, float]] = []  # (dataloader_idx, batch_idx, first feature)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        self.seen.append((dataloader_idx, batch_idx, float(x[0, 0])))
        self.log("first", x[0, 0], reduce_fx="min")
        # a name of its own per loader (one name from two loaders is refused, as in Lightning)
        self.log(f"batches_{dataloader_idx}", 1.0, add_dataloader_idx=False, reduce_fx="sum")

    test_step = validation_step


def test_several_validation_loaders(make_trainer):
    model = MultiVal()
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=loader(8), val_dataloaders=[loader(16), loader(24, offset=100)])
    assert [(i, b) for i, b, _ in model.seen] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert trainer.num_val_batches == [2, 3]
    cb = trainer.callback_metrics
    assert cb["first/dataloader_idx_0"].item() == 0.0
    assert cb["first/dataloader_idx_1"].item() == 100.0
    assert (cb["batches_0"].item(), cb["batches_1"].item()) == (2.0, 3.0)
    assert "first" not in cb


def test_validate_returns_one_dict_per_loader(make_trainer):
    trainer = make_trainer()
    results = trainer.validate(MultiVal(), dataloaders=[loader(16), loader(8, offset=50)])
    assert results == [
        {"first/dataloader_idx_0": 0.0, "batches_0": 2.0},  # each loader's values in its own dict
        {"first/dataloader_idx_1": 50.0, "batches_1": 1.0},
    ]


def test_several_test_loaders_and_limits(make_trainer):
    model = MultiVal()
    trainer = make_trainer(limit_test_batches=1)
    results = trainer.test(model, dataloaders={"a": loader(16), "b": loader(16, offset=7)})
    assert [(i, b) for i, b, _ in model.seen] == [(0, 0), (1, 0)]
    assert [r[f"first/dataloader_idx_{i}"] for i, r in enumerate(results)] == [0.0, 7.0]


def test_sanity_check_and_limits_apply_to_each_validation_loader(make_trainer):
    model = MultiVal()
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=2, num_sanity_val_steps=1)
    trainer.fit(model, train_dataloaders=loader(8), val_dataloaders=[loader(32), loader(8)])
    assert trainer.num_sanity_val_batches == [1, 1]
    assert [(i, b) for i, b, _ in model.seen] == [(0, 0), (1, 0), (0, 0), (0, 1), (1, 0)]


def test_one_loader_in_a_list_is_not_suffixed(make_trainer):
    trainer = make_trainer()
    (result,) = trainer.validate(MultiVal(), dataloaders=[loader(8)])
    assert set(result) == {"first", "batches_0"}


def test_predict_with_several_loaders(make_trainer):
    trainer = make_trainer()
    predictions = trainer.predict(TinyModule(), dataloaders=[loader(16), loader(8)])
    assert [len(p) for p in predictions] == [2, 1]
    assert predictions[0][0].shape == (8, 1)


def test_predict_without_returning_keeps_no_prediction_and_handlers_get_each(make_trainer):
    """``return_predictions=False`` (Lightning's, for a prediction writer): ``None`` back, every output reaches the
    ``predict_batch_end`` handlers, and none is kept by the Trainer (each is freed once its handlers are done)."""
    import gc
    import weakref

    class Writer:
        surge_name = "writer"

        def __init__(self) -> None:
            self.shapes: list[tuple[int, ...]] = []
            self.outputs: list[weakref.ref[torch.Tensor]] = []

        @surge.hookimpl
        def predict_batch_end(self, event):
            self.shapes.append(tuple(event.outputs.shape))
            self.outputs.append(weakref.ref(event.outputs))

    writer = Writer()
    trainer = make_trainer(plugins=[writer])
    assert trainer.predict(TinyModule(), dataloaders=loader(24), return_predictions=False) is None
    gc.collect()
    assert writer.shapes == [(8, 1)] * 3
    assert [ref() for ref in writer.outputs] == [None, None, None]
    assert [len(p) for p in trainer.predict(TinyModule(), dataloaders=[loader(16), loader(8)])] == [2, 1]  # kept again


# -- several training loaders -------------------------------------------------------------------------------


class MultiTrain(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list = []

    def training_step(self, batch, batch_idx):
        parts = list(batch.values()) if isinstance(batch, dict) else batch
        self.batches.append(
            {k: float(v[0][0, 0]) for k, v in batch.items()}
            if isinstance(batch, dict)
            else [float(b[0][0, 0]) for b in batch]
        )
        return sum(self._loss(part) for part in parts)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("max_size_cycle", [[0.0, 100.0], [8.0, 108.0], [16.0, 100.0], [24.0, 108.0]]),
        ("min_size", [[0.0, 100.0], [8.0, 108.0]]),
    ],
)
def test_train_loaders_in_a_list(make_trainer, mode, expected):
    model = MultiTrain()
    trainer = make_trainer(max_epochs=2, multiple_trainloader_mode=mode)
    trainer.fit(model, train_dataloaders=[loader(32), loader(16, offset=100)])
    assert trainer.num_training_batches == len(expected)
    assert model.batches == expected * 2
    assert trainer.global_step == 2 * len(expected)


@pytest.mark.parametrize("mode, per_epoch", [("max_size_cycle", 3), ("min_size", 1)])
def test_train_loaders_in_a_dict(make_trainer, mode, per_epoch):
    model = MultiTrain()
    trainer = make_trainer(max_epochs=1, multiple_trainloader_mode=mode)
    trainer.fit(model, train_dataloaders={"small": loader(8, offset=50), "big": loader(24)})
    assert trainer.global_step == per_epoch
    assert model.batches[0] == {"small": 50.0, "big": 0.0}
    assert model.batches[-1] == ({"small": 50.0, "big": 16.0} if per_epoch == 3 else {"small": 50.0, "big": 0.0})


def test_train_loader_mode_is_validated(make_trainer):
    with pytest.raises(surge.ConfigError, match="multiple_trainloader_mode"):
        make_trainer(multiple_trainloader_mode="max_size")


def test_limit_train_batches_on_combined_loaders(make_trainer):
    model = MultiTrain()
    trainer = make_trainer(max_epochs=1, limit_train_batches=0.5)
    trainer.fit(model, train_dataloaders=[loader(32), loader(16, offset=100)])
    assert model.batches == [[0.0, 100.0], [8.0, 108.0]]


# -- loaders without a length ---------------------------------------------------------------------------------


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            x = torch.randn(8, generator=generator)
            yield x, x.sum(0, keepdim=True)


def test_iterable_dataset_runs_to_exhaustion_and_validates_at_epoch_end(make_trainer):
    probe: list[int] = []

    class Watch(TinyModule):
        def on_validation_start(self):
            if not self.trainer.sanity_checking:
                probe.append(self.global_step)

    trainer = make_trainer(max_epochs=2, num_sanity_val_steps=0, accumulate_grad_batches=2)
    trainer.fit(
        Watch(),
        train_dataloaders=DataLoader(Stream(40), batch_size=8),
        val_dataloaders=DataLoader(Stream(16), batch_size=8),
    )
    assert trainer.global_step == 6  # 5 batches per epoch: steps after batch 2, 4 and the partial window
    assert probe == [3, 6]


def test_iterable_dataset_with_limits(make_trainer):
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, num_sanity_val_steps=0)
    trainer.fit(TinyModule(), train_dataloaders=DataLoader(Stream(40), batch_size=8))
    assert trainer.global_step == 2
    with pytest.raises(surge.SurgeError, match="has no length"):
        make_trainer(max_epochs=1, limit_train_batches=0.5).fit(
            TinyModule(), train_dataloaders=DataLoader(Stream(40), batch_size=8)
        )


# -- reloading ------------------------------------------------------------------------------------------------


class CountingData(TinyDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.train_loaders = 0
        self.val_loaders = 0

    def val_dataloader(self):
        self.val_loaders += 1
        return super().val_dataloader()

    def train_dataloader(self):
        self.train_loaders += 1
        # each reload gets a different size, so the new loader is visibly the one in use
        return DataLoader(self.train_set, batch_size=8 * self.train_loaders)


@pytest.mark.parametrize("every, calls, steps", [(0, 1, [8, 8, 8, 8]), (1, 4, [8, 4, 3, 2]), (2, 2, [8, 8, 4, 4])])
def test_reload_dataloaders_every_n_epochs(make_trainer, every, calls, steps):
    data = CountingData()
    per_epoch: list[int] = []

    class Count:
        surge_name = "count"

        @surge.hookimpl
        def train_epoch_end(self, event) -> None:
            per_epoch.append(event.trainer.num_training_batches)

    trainer = make_trainer(
        max_epochs=4, reload_dataloaders_every_n_epochs=every, num_sanity_val_steps=0, plugins=[Count()]
    )
    trainer.fit(TinyModule(), datamodule=data)
    assert data.train_loaders == calls
    assert data.val_loaders == calls  # validation loaders are reloaded too, as in Lightning
    assert per_epoch == steps
    assert trainer.global_step == sum(steps)


# -- prepare_data on which process ---------------------------------------------------------------------------


class PlainCPU(surge.Accelerator):
    name: ClassVar[str] = "plaincpu"
    device_type: ClassVar[str] = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True


class FakeRankStrategy(surge.Strategy):
    """One process pretending to be local rank ``local`` and global rank ``rank`` of a larger job."""

    name: ClassVar[str] = "fake_rank"

    def __init__(self, local: int, rank: int) -> None:
        super().__init__(PlainCPU(), [0])
        self._local, self._rank = local, rank

    @property
    def local_rank(self) -> int:
        return self._local

    @property
    def global_rank(self) -> int:
        return self._rank


@pytest.mark.parametrize(
    "local, rank, per_node, called",
    [
        (0, 0, True, True),
        (0, 1, True, True),  # first process of the second node, once per node
        (0, 1, False, False),  # ... but only global zero when the nodes share storage
        (1, 1, True, False),
        (0, 0, False, True),
    ],
)
def test_prepare_data_per_node(make_trainer, local, rank, per_node, called):
    data = TinyDataModule()
    trainer = make_trainer(
        strategy=FakeRankStrategy(local, rank),
        accelerator=PlainCPU(),
        prepare_data_per_node=per_node,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
    )
    assert (trainer.global_rank, trainer.local_rank) == (rank, local)
    trainer.fit(TinyModule(), datamodule=data)
    assert ("prepare_data" in data.calls) is called
    assert "setup:fit" in data.calls  # setup runs on every process


def test_prepare_data_of_the_module_follows_the_same_rule(make_trainer):
    calls: list[str] = []

    class Own(TinyModule):
        def prepare_data(self):
            calls.append("prepare_data")

        def train_dataloader(self):
            return loader(8)

    make_trainer(
        strategy=FakeRankStrategy(0, 1), accelerator=PlainCPU(), prepare_data_per_node=False, max_epochs=1
    ).fit(Own())
    assert calls == []
    make_trainer(strategy=FakeRankStrategy(0, 1), accelerator=PlainCPU(), max_epochs=1).fit(Own())
    assert calls == ["prepare_data"]


def test_fit_without_validation_step_skips_validation(make_trainer, event_recorder):
    class NoValidation(TinyModule):
        validation_step = surge.Module.validation_step  # as if never defined

    trainer = make_trainer(max_epochs=1, plugins=[event_recorder])
    trainer.fit(NoValidation(), datamodule=TinyDataModule())
    assert trainer.global_step == 8
    assert not event_recorder.of("validation_start") and not event_recorder.of("sanity_check_start")


def test_strategy_environment_is_set_up_and_torn_down_once_per_run(make_trainer):
    class Counting(FakeRankStrategy):
        def __init__(self) -> None:
            super().__init__(0, 0)
            self.calls: list[str] = []

        def setup_environment(self) -> None:
            self.calls.append("setup")

        def teardown(self) -> None:
            self.calls.append("teardown")

    strategy = Counting()
    trainer = make_trainer(strategy=strategy, max_epochs=1, limit_train_batches=1)
    model, data = TinyModule(), TinyDataModule()
    trainer.fit(model, datamodule=data)
    trainer.validate(model, datamodule=data)
    assert strategy.calls == ["setup", "teardown", "setup", "teardown"]
