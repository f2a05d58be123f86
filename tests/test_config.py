"""Trainer arguments: validation (all problems at once), SURGE_TRAINER_* defaults, providers, plugin selection."""

from __future__ import annotations

from typing import ClassVar

import pydantic
import pytest
import surge
from surge.config import TrainerConfig, build_config
from surge.errors import ProviderError
from surge.testing import EventRecorder, TinyDataModule, TinyModule


def problems_of(error: surge.ConfigError) -> dict[str, str]:
    return dict(error.problems)


# -- validation -----------------------------------------------------------------------------------------------


def test_several_mistakes_are_reported_at_once(tmp_path):
    root = tmp_path / "root"
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(
            default_root_dir=str(root),
            max_epcohs=3,
            gradient_clip_algorithm="l2",
            limit_val_batches=1.5,
            accumulate_grad_batches=0,
            log_every_n_steps="10",
        )
    problems = problems_of(info.value)
    assert set(problems) == {
        "trainer.max_epcohs",
        "trainer.gradient_clip_algorithm",
        "trainer.limit_val_batches",
        "trainer.accumulate_grad_batches",
        "trainer.log_every_n_steps",
    }
    assert "did you mean 'max_epochs'" in problems["trainer.max_epcohs"]
    assert "'l2'" in problems["trainer.gradient_clip_algorithm"]
    assert "'norm' or 'value'" in problems["trainer.gradient_clip_algorithm"]
    assert "1.5" in problems["trainer.limit_val_batches"] and "pass an int (1)" in problems["trainer.limit_val_batches"]
    assert "got 0" in problems["trainer.accumulate_grad_batches"] and "1" in problems["trainer.accumulate_grad_batches"]
    assert "'10'" in problems["trainer.log_every_n_steps"]  # strict: no silent str -> int
    message = str(info.value)
    assert message.startswith("5 problem(s) in Trainer arguments")
    for path in problems:
        assert path in message
    assert isinstance(info.value, ValueError)  # ConfigError is also a ValueError
    assert not root.exists()  # nothing is created on disk for an invalid configuration
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_argument_far_from_any_name_lists_the_valid_ones():
    with pytest.raises(surge.ConfigError) as info:
        build_config({"zzzzzz": 1}, environ={})
    assert "valid names:" in problems_of(info.value)["trainer.zzzzzz"]
    assert "max_epochs" in problems_of(info.value)["trainer.zzzzzz"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("max_epochs", "3"),
        ("max_epochs", 3.0),
        ("max_epochs", -2),
        ("max_steps", -5),
        ("enable_checkpointing", "yes"),
        ("num_sanity_val_steps", -2),
        ("fast_dev_run", -1),
        ("devices", 0),
        ("check_val_every_n_epoch", 0),
        ("val_check_interval", 0),
        ("overfit_batches", 1.5),
        ("deterministic", "sometimes"),
        ("gradient_clip_val", -1.0),
        ("num_nodes", 0),
        ("reload_dataloaders_every_n_epochs", -1),
    ],
)
def test_bad_values_name_the_flag_and_the_value(flag, value):
    with pytest.raises(surge.ConfigError) as info:
        build_config({flag: value}, environ={})
    problems = problems_of(info.value)
    assert list(problems) == [f"trainer.{flag}"]
    assert repr(value) in problems[f"trainer.{flag}"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("max_epochs", -1),
        ("fast_dev_run", 5),
        ("fast_dev_run", True),
        ("limit_train_batches", 1.0),
        ("limit_train_batches", 0),
        ("limit_train_batches", 100),
        ("val_check_interval", 0.25),
        ("check_val_every_n_epoch", None),
        ("num_sanity_val_steps", -1),
        ("deterministic", "warn"),
        ("gradient_clip_val", 1),
        ("devices", "auto"),
        ("default_root_dir", "memory://x"),
    ],
)
def test_good_values_are_accepted(flag, value):
    assert getattr(build_config({flag: value}, environ={}), flag) == value


def test_default_root_dir_accepts_a_path(tmp_path):
    assert build_config({"default_root_dir": tmp_path}, environ={}).default_root_dir == str(tmp_path)


def test_float_limits_above_one_suggest_an_int():
    with pytest.raises(surge.ConfigError) as info:
        build_config({"limit_train_batches": 5.0, "limit_test_batches": 1.01, "val_check_interval": 3.0}, environ={})
    problems = problems_of(info.value)
    assert "for a count pass an int (5)" in problems["trainer.limit_train_batches"]
    assert "must be <= 1.0" in problems["trainer.limit_test_batches"]
    assert "pass an int (3)" in problems["trainer.val_check_interval"]


def test_consistency_between_flags_is_checked():
    with pytest.raises(surge.ConfigError, match=r"min_epochs \(5\) is larger than max_epochs \(2\)"):
        build_config({"min_epochs": 5, "max_epochs": 2}, environ={})
    assert build_config({"min_epochs": 5, "max_epochs": -1}, environ={}).min_epochs == 5


def test_the_config_is_frozen_and_strict():
    config = TrainerConfig()
    with pytest.raises(pydantic.ValidationError):
        config.max_epochs = 3  # type: ignore[misc]
    assert TrainerConfig.model_config["extra"] == "forbid"
    assert TrainerConfig.model_config["strict"] is True


def test_trainer_exposes_its_validated_config(make_trainer):
    trainer = make_trainer(max_epochs=2, limit_val_batches=0.5)
    assert isinstance(trainer.config, TrainerConfig)
    assert trainer.config.max_epochs == 2 and trainer.config.limit_val_batches == 0.5


# -- environment defaults -------------------------------------------------------------------------------------


def test_environment_sets_defaults(make_trainer, monkeypatch):
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("SURGE_TRAINER_ACCELERATOR", "cpu")
    monkeypatch.setenv("SURGE_TRAINER_LIMIT_TRAIN_BATCHES", "0.25")
    monkeypatch.setenv("SURGE_TRAINER_CHECK_VAL_EVERY_N_EPOCH", "null")
    monkeypatch.setenv("SURGE_TRAINER_DETERMINISTIC", "warn")
    monkeypatch.setenv("SURGE_TRAINER_ENABLE_PROGRESS_BAR", "false")
    trainer = make_trainer()
    config = trainer.config
    assert config.max_epochs == 3 and config.accelerator == "cpu" and config.limit_train_batches == 0.25
    assert config.check_val_every_n_epoch is None and config.deterministic == "warn"
    assert config.enable_progress_bar is False
    monkeypatch.delenv("SURGE_TRAINER_DETERMINISTIC")  # keep torch's global switch out of the run below
    trainer = make_trainer(num_sanity_val_steps=0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert trainer.current_epoch == 3 and trainer.global_step == 3 * 2


def test_explicit_arguments_win_over_the_environment(make_trainer, monkeypatch):
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("SURGE_TRAINER_LOG_EVERY_N_STEPS", "7")
    trainer = make_trainer(max_epochs=1)
    assert trainer.config.max_epochs == 1
    assert trainer.config.log_every_n_steps == 7


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "three")
    monkeypatch.setenv("SURGE_TRAINER_GRADIENT_CLIP_ALGORITHM", "l2")
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer()
    problems = problems_of(info.value)
    assert "'three'" in problems["trainer.max_epochs"]
    assert "SURGE_TRAINER_MAX_EPOCHS" in problems["trainer.max_epochs"]
    assert "SURGE_TRAINER_GRADIENT_CLIP_ALGORITHM" in problems["trainer.gradient_clip_algorithm"]


def test_an_explicit_bad_value_does_not_blame_the_environment(monkeypatch):
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "3")
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(max_epochs="four")
    assert "SURGE_TRAINER" not in str(info.value)


def test_a_bad_environment_value_is_harmless_when_overridden(monkeypatch, make_trainer):
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "three")
    assert make_trainer(max_epochs=2).config.max_epochs == 2


def test_build_config_reads_a_given_environment_only():
    config = build_config({}, environ={"SURGE_TRAINER_DEVICES": "[0]", "SURGE_TRAINER_PRECISION": "32"})
    assert config.devices == [0]
    assert config.precision == 32  # JSON-decoded; the precision lookup accepts it as "32"


# -- providers by name ----------------------------------------------------------------------------------------


def test_unknown_accelerator_lists_the_valid_names(tmp_path):
    with pytest.raises(ProviderError) as info:
        surge.Trainer(accelerator="tpu9", default_root_dir=str(tmp_path / "r"))
    message = str(info.value)
    assert "trainer.accelerator" in message and "'tpu9'" in message
    assert "Valid names: cpu, cuda, gpu, mps" in message
    assert "pip install" not in message  # surge-devices is installed: installing it again would not help
    assert isinstance(info.value, surge.PluginError) and isinstance(info.value, ValueError)
    assert not (tmp_path / "r").exists()


def test_unknown_precision_lists_the_valid_names():
    with pytest.raises(ProviderError) as info:
        surge.Trainer(precision="fp33")
    message = str(info.value)
    assert "trainer.precision" in message and "'fp33'" in message
    assert "Did you mean 'fp32'?" in message and "32-true" in message
    # not a name surge-precision adds, so no `pip install surge-precision` (its own tests check that hint)
    assert "a plugin that provides it" in message and "pip install" not in message


def test_unknown_strategy_lists_the_valid_names():
    with pytest.raises(ProviderError, match=r"no strategy named 'nope'.*single_device") as info:
        surge.Trainer(strategy="nope")
    assert "pip install" not in str(info.value)  # surge-devices and surge-ddp are installed


def test_unknown_strategy_suggests_the_distribution_that_is_not_installed(plugin_env):
    plugin_env.hide_installed()  # only surge-devices
    with pytest.raises(ProviderError, match=r"`pip install surge-ddp`"):
        surge.Trainer(strategy="nope")


def test_known_providers_by_name(make_trainer):
    trainer = make_trainer(accelerator="cpu", precision="32-true", strategy="single_device", devices=1)
    assert trainer.strategy.root_device.type == "cpu"
    assert type(trainer.precision_plugin) is surge.Precision
    assert make_trainer(precision=32).precision_plugin.name == "32-true"


def test_provider_arguments_of_the_wrong_type(make_trainer):
    with pytest.raises(surge.ConfigError, match="trainer.accelerator"):
        make_trainer(accelerator=3)
    with pytest.raises(surge.ConfigError, match="trainer.strategy"):
        make_trainer(strategy=3.5)


# -- plugins, logger and the enable_* switches ----------------------------------------------------------------


class Noted:
    """A subscriber that notes that it was built (with which settings) and that it ran."""

    built: ClassVar[list[tuple[str, dict]]] = []

    def __init__(self, name: str, **settings) -> None:
        self.name, self.settings = name, settings
        Noted.built.append((name, settings))
        self.fit_starts = 0

    @surge.hookimpl
    def fit_start(self, event) -> None:
        self.fit_starts += 1


class StampConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    every: int = pydantic.Field(1, ge=1)
    tag: str = "x"


@pytest.fixture
def fakes(plugin_env):
    """Installed (fake) plugins: default loggers, role plugins, an on-request plugin with settings."""
    Noted.built = []

    def factory(name):
        return lambda **settings: Noted(name, **settings)

    plugin_env.add(
        surge.Plugin(name="fakelog", kind="observer", role="logger", default=True, factory=factory("fakelog"))
    )
    plugin_env.add(surge.Plugin(name="otherlog", kind="observer", role="logger", factory=factory("otherlog")))
    plugin_env.add(
        surge.Plugin(name="fakeckpt", kind="participant", role="checkpoint", default=True, factory=factory("fakeckpt"))
    )
    plugin_env.add(
        surge.Plugin(name="fakebar", kind="observer", role="progress", default=True, factory=factory("fakebar"))
    )
    plugin_env.add(
        surge.Plugin(
            name="fakesummary", kind="participant", role="model_summary", default=True, factory=factory("fakesummary")
        )
    )
    plugin_env.add(surge.Plugin(name="stamp", kind="participant", factory=factory("stamp"), config=StampConfig))
    return plugin_env


FAKES = {"fakelog", "fakeckpt", "fakebar", "fakesummary"}


def active(trainer) -> set[str]:
    return set(trainer.plugin_names) & (FAKES | {"otherlog", "stamp"})


def test_default_plugins_are_on(fakes, make_trainer):
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    assert active(trainer) == FAKES
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    ran = {s.name for s in trainer._plugin_subscribers if isinstance(s.obj, Noted) and s.obj.fit_starts == 1}
    assert ran == FAKES


@pytest.mark.parametrize(
    "switch, role_plugin",
    [("enable_checkpointing", "fakeckpt"), ("enable_progress_bar", "fakebar"), ("enable_model_summary", "fakesummary")],
)
def test_enable_switches_turn_their_role_off(fakes, make_trainer, switch, role_plugin):
    trainer = make_trainer(**{switch: False})
    assert active(trainer) == FAKES - {role_plugin}
    assert role_plugin not in {name for name, _ in Noted.built}  # not even built


def test_logger_false_true_name_instance_list(fakes, make_trainer):
    assert active(make_trainer(logger=False)) == FAKES - {"fakelog"}
    assert active(make_trainer(logger=True)) == FAKES
    assert active(make_trainer(logger="otherlog")) == FAKES - {"fakelog"} | {"otherlog"}
    assert active(make_trainer(logger=["otherlog", "fakelog"])) == FAKES | {"otherlog"}
    mine = EventRecorder(name="mylogger", kind="observer")
    trainer = make_trainer(logger=mine)
    assert active(trainer) == FAKES - {"fakelog"}
    assert "mylogger" in trainer.plugin_names
    mine2 = EventRecorder(name="mylogger2", kind="observer")
    trainer = make_trainer(logger=["otherlog", mine2], max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    assert active(trainer) == FAKES - {"fakelog"} | {"otherlog"}
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert mine2.of("fit_start") and trainer.event_order("fit_end")[-1] in {"mylogger2", "otherlog", "fakebar"}


def test_unknown_logger_name(fakes, make_trainer):
    with pytest.raises(surge.ConfigError, match=r"trainer\.logger: no installed logger .*did you mean 'fakelog'"):
        make_trainer(logger="fakelogg")  # reported under the argument the user passed, not trainer.plugins
    with pytest.raises(surge.ConfigError, match=r"trainer.logger\[0\]"):
        make_trainer(logger=[3])


def test_plugins_by_name_and_instance(fakes, make_trainer):
    recorder = EventRecorder()
    trainer = make_trainer(plugins=["stamp", recorder], max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    assert active(trainer) == FAKES | {"stamp"}
    assert "event_recorder" in trainer.plugin_names
    assert ("stamp", {"every": 1, "tag": "x"}) in Noted.built  # built with its config's defaults
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    assert recorder.of("fit_start")


def test_on_request_plugins_are_off_by_default(fakes, make_trainer):
    assert "stamp" not in make_trainer().plugin_names


def test_plugins_dict_switches_off_and_configures(fakes, make_trainer):
    trainer = make_trainer(plugins={"fakebar": False, "fakelog": False, "stamp": {"every": 3, "tag": "hi"}})
    assert active(trainer) == {"fakeckpt", "fakesummary", "stamp"}
    assert ("stamp", {"every": 3, "tag": "hi"}) in Noted.built
    stamp = next(s.obj for s in trainer._plugin_subscribers if s.name == "stamp")
    assert stamp.settings == {"every": 3, "tag": "hi"}
    assert "stamp" in make_trainer(plugins={"stamp": True}).plugin_names


def test_bad_plugin_settings_are_config_errors_with_the_dotted_path(fakes, tmp_path):
    root = tmp_path / "r"
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(default_root_dir=str(root), plugins={"stamp": {"every": 0, "tga": "x"}})
    problems = problems_of(info.value)
    assert set(problems) == {"trainer.plugins.stamp.every", "trainer.plugins.stamp.tga"}
    assert "got 0" in problems["trainer.plugins.stamp.every"]
    assert "did you mean 'tag'" in problems["trainer.plugins.stamp.tga"]
    assert not root.exists()


def test_plugin_request_mistakes_are_reported_together(fakes):
    with pytest.raises(surge.ConfigError) as info:
        surge.Trainer(plugins={"stmap": True, "fakebar": 3})
    problems = problems_of(info.value)
    assert "did you mean 'stamp'" in problems["trainer.plugins.stmap"]
    assert "use True, False or a dict" in problems["trainer.plugins.fakebar"]
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins\[1\]"):
        surge.Trainer(plugins=["stamp", 3])


def test_a_plugin_both_on_and_off_is_refused(fakes):
    with pytest.raises(surge.ConfigError, match="both switched on and off"):
        surge.Trainer(plugins={"fakebar": False}, logger="fakebar")


def test_fast_dev_run_switches_off_logger_and_checkpoint_roles_but_not_others(fakes, make_trainer):
    assert active(make_trainer(fast_dev_run=True)) == {"fakebar", "fakesummary"}


def test_a_union_flag_is_reported_once_with_every_accepted_form():
    with pytest.raises(surge.ConfigError) as info:
        build_config({"deterministic": "sometimes", "limit_val_batches": "half"}, environ={})
    problems = problems_of(info.value)
    assert set(problems) == {"trainer.deterministic", "trainer.limit_val_batches"}  # not ".bool", ".int" ...
    assert "valid boolean" in problems["trainer.deterministic"] and "'warn'" in problems["trainer.deterministic"]
    assert "valid integer" in problems["trainer.limit_val_batches"]
    assert "valid number" in problems["trainer.limit_val_batches"]
