"""The distribution declares its six plugins, each on request."""

from __future__ import annotations

import pytest
import surge
from surge.testing import assert_discovered, run_tiny_fit
from surge_callbacks import EarlyStopping

PLUGINS = {
    "early_stopping": "participant",
    "timer": "participant",
    "gradient_accumulation_scheduler": "participant",
    "nan_guard": "participant",
    "grad_norm": "observer",
    "device_stats": "observer",
}


@pytest.mark.parametrize(("name", "kind"), sorted(PLUGINS.items()))
def test_is_discovered_and_on_request_only(name, kind):
    plugin = assert_discovered(name, distribution="surge-callbacks", kind=kind)
    assert plugin.default is False


def test_none_is_active_unless_asked_for(tmp_path):
    trainer = surge.Trainer(default_root_dir=str(tmp_path), logger=False)
    assert not set(PLUGINS) & set(trainer.plugin_names)


def test_two_early_stoppings_keep_separate_states(tmp_path):
    fit = run_tiny_fit(
        [EarlyStopping(monitor="val_loss"), EarlyStopping(monitor="train_loss", check_on_train_epoch_end=True)],
        default_root_dir=str(tmp_path),
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    assert fit.trainer.current_epoch == 2
    keys = {"early_stopping[monitor=val_loss,mode=min]", "early_stopping[monitor=train_loss,mode=min]"}
    assert keys <= set(fit.trainer.dump_checkpoint()["plugins"])
