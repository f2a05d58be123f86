import surge
from surge.testing import TinyDataModule, TinyModule


def test_fit_validate_test_predict(make_trainer):
    trainer = make_trainer(max_epochs=2)
    model, data = TinyModule(), TinyDataModule()
    trainer.fit(model, datamodule=data)
    assert trainer.current_epoch == 2
    assert trainer.global_step == 16
    assert "val_loss" in trainer.callback_metrics
    (results,) = trainer.validate(model, datamodule=data)
    assert set(results) == {"val_loss"}
    (results,) = trainer.test(model, datamodule=data)
    assert set(results) == {"test_loss"}
    predictions = trainer.predict(model, datamodule=data)
    assert len(predictions) == 4 and predictions[0].shape == (8, 1)
    assert isinstance(trainer.strategy, surge.Strategy)
