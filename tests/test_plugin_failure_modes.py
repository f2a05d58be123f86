"""Failures that must stay local: a provider chosen by name under ``SURGE_DISABLE_PLUGIN_AUTOLOAD=1``, and
provider and logger names checked where the user wrote them (issue 16, items 8 and 9; the ordering and hook
items are in test_bus.py, ``SURGE_TRAINER_PLUGINS`` on the command line in test_cli_config.py).

Providers by name are checked with real distributions (``tests/_distributions.py``) in a child Python, where
``importlib.metadata`` reads their ``surge.providers`` declarations as it would in a user's environment.
"""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
import surge
from surge.cli import runconfig
from surge.errors import ConfigError, ProviderError

DECLARED = dists.Dist(
    "surge-test-declared",
    "0.1.0",
    {"tp_declared": dists.accelerator_provider("tp-declared", "tp-fast")},
    [("tp-declared", "tp_declared:plugin")],
    providers=[("accelerator.tp-fast", "tp_declared:plugin")],
)
UNDECLARED = dists.Dist(
    "surge-test-undeclared",
    "0.1.0",
    {"tp_undeclared": dists.accelerator_provider("tp-undeclared", "tp-slow")},
    [("tp-undeclared", "tp_undeclared:plugin")],
)
BYSTANDER = dists.Dist(
    "surge-test-bystander",
    "0.1.0",
    {"tp_bystander": dists.participant("tp-bystander", default=True)},
    [("tp-bystander", "tp_bystander:plugin")],
)

_CHILD = """
import json, os
import surge
from surge.cli import runconfig

def imported():
    with open(os.environ["SURGE_TEST_IMPORT_LOG"]) as f:
        return f.read().split()

def error(fn):
    try:
        fn()
    except Exception as exc:
        return {"types": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}
    return None

def statuses(trainer):
    return {name: r.status for name, r in trainer.catalog.records.items()}

out = {}
named = surge.Trainer(accelerator="tp-fast", precision="bf16-mixed")
out["named"] = {
    "accelerator": type(named.accelerator).__module__, "precision": named.precision_plugin.name,
    "status": statuses(named), "imported": imported(),
}
out["undeclared"] = error(lambda: surge.Trainer(accelerator="tp-slow"))
out["imported_after_undeclared"] = imported()
requested = surge.Trainer(accelerator="tp-slow", plugins=["tp-undeclared"])  # the way for an undeclared one
out["requested"] = type(requested.accelerator).__module__
run = runconfig.resolve([runconfig.parse_yaml(
    "model: surge.testing.TinyModule\\ntrainer: {accelerator: tp-fast, precision: bf16, profiler: simple}\\n",
    "run.yaml",
)])
out["run_config"] = {"precision": run.trainer.precision, "active": sorted(run.active_plugins)}
os.environ["SURGE_DISABLE_PLUGINS"] = "tp-declared"
out["blocked"] = error(lambda: surge.Trainer(accelerator="tp-fast"))
del os.environ["SURGE_DISABLE_PLUGINS"]
os.environ["SURGE_PLUGINS"] = "devices"
out["not_allowed"] = error(lambda: surge.Trainer(precision="bf16-mixed"))
out["not_allowed_in_a_run_config"] = error(lambda: runconfig.resolve([runconfig.parse_yaml(
    "model: surge.testing.TinyModule\\ntrainer:\\n  precision: bf16-mixed\\n", "run.yaml"
)]))
print("RESULT: " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def no_autoload(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("failure-modes")
    site = dists.install({"site": [DECLARED, UNDECLARED, BYSTANDER]}, root)["site"]
    log = root / "imports.log"
    log.touch()
    env = dists.child_env([site], SURGE_DISABLE_PLUGIN_AUTOLOAD="1", **{dists.IMPORT_LOG: str(log)})
    return dists.start([sys.executable, "-c", textwrap.dedent(_CHILD)], env, root).result()


# -- a provider chosen by name requests its plugin ---------------------------------------------------------


def test_a_provider_chosen_by_name_imports_the_plugin_declaring_it_and_no_other(no_autoload: dict) -> None:
    named = no_autoload["named"]
    assert named["accelerator"] == "tp_declared" and named["precision"] == "bf16-mixed"
    assert named["imported"] == ["tp-declared"]  # not the undeclared provider, not the default-on participant
    status = named["status"]
    assert status["tp-declared"] == status["precision"] == "active"
    assert status["devices"] == "active"  # strategy="auto" chooses single_device, which surge-devices declares
    assert status["tp-undeclared"] == status["tp-bystander"] == status["csv"] == status["tpu"] == "blocked"


def test_an_undeclared_provider_gets_a_short_accurate_error(no_autoload: dict) -> None:
    error = no_autoload["undeclared"]
    message = error["message"]
    assert "ProviderError" in error["types"]
    assert message.startswith("trainer.accelerator: no accelerator named 'tp-slow'.")
    assert "Valid names: cpu, cuda, gpu, mps, tp-fast, tpu, xla." in message  # declared names, without importing
    assert "SURGE_DISABLE_PLUGIN_AUTOLOAD=1" in message and "plugins=['<name>']" in message
    assert "pip install" not in message and len(message) < 600
    assert no_autoload["imported_after_undeclared"] == ["tp-declared"]  # finding out imported nothing
    assert no_autoload["requested"] == "tp_undeclared"  # requested by its plugin name, it works


def test_a_run_config_requests_the_providers_it_names(no_autoload: dict) -> None:
    assert no_autoload["run_config"]["precision"] == "bf16"
    assert "tp-bystander" not in no_autoload["run_config"]["active"]


def test_a_declared_provider_that_is_blocked_says_so_and_how_to_allow_it(no_autoload: dict) -> None:
    message = no_autoload["blocked"]["message"]
    assert message == (
        "trainer.accelerator: no accelerator named 'tp-fast' is loaded: plugin 'tp-declared' (distribution "
        "surge-test-declared 0.1.0) provides it but is blocked: blocked by SURGE_DISABLE_PLUGINS; take it out of "
        "SURGE_DISABLE_PLUGINS"
    )
    for error in (no_autoload["not_allowed"], no_autoload["not_allowed_in_a_run_config"]):
        message = error["message"]
        assert "plugin 'precision' (distribution surge-precision" in message
        assert "provides it but is blocked: not in the SURGE_PLUGINS allow-list; add it to SURGE_PLUGINS" in message
        assert "pip install" not in message  # installed, only blocked
    assert "(run.yaml, line 3)" in no_autoload["not_allowed_in_a_run_config"]["message"]


def test_first_party_providers_declare_exactly_what_they_provide() -> None:
    catalog = surge.plugins.discover(surge.settings.load_settings())
    for record in catalog.loaded():
        plugin = record.plugin
        assert plugin is not None
        if plugin.kind != "provider" or not (record.distribution or "").startswith("surge-"):
            continue
        provided = {
            (slot, alias)
            for slot, names in plugin.provides.items()
            for name, cls in names.items()
            for alias in (name, *(getattr(cls, "aliases", ()) if slot == "precision" else ()))
        }
        entries = metadata.distribution(record.distribution).entry_points.select(group="surge.providers")
        declared = {tuple(e.name.split(".", 1)) for e in entries if e.value == record.value}
        assert declared == provided, record.distribution


# -- names checked where they were written ----------------------------------------------------------------


def test_run_config_checks_profiler_and_logger_names_with_their_lines(tmp_path: Path) -> None:
    text = "model: surge.testing.TinyModule\ntrainer:\n  profiler: simpel\n  logger: jsonl2\n"
    with pytest.raises(ConfigError) as info:
        runconfig.resolve([runconfig.parse_yaml(text, "run.yaml")])
    problems = dict(info.value.problems)
    assert set(problems) == {"trainer.profiler", "trainer.logger"}  # not trainer.plugins.jsonl2
    assert "no profiler named 'simpel'. Did you mean 'simple'?" in problems["trainer.profiler"]
    assert "(run.yaml, line 3)" in problems["trainer.profiler"] and "pip install" not in problems["trainer.profiler"]
    assert "no installed logger is named 'jsonl2'" in problems["trainer.logger"]
    assert "loggers: csv, mlflow, tensorboard" in problems["trainer.logger"]
    assert "(run.yaml, line 4)" in problems["trainer.logger"]


def test_a_blocked_profiler_is_named_in_a_run_config_and_by_the_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "profilers")
    text = "model: surge.testing.TinyModule\ntrainer: {profiler: simple}\n"
    with pytest.raises(ConfigError) as info:
        runconfig.resolve([runconfig.parse_yaml(text, "run.yaml")])
    problem = dict(info.value.problems)["trainer.profiler"]
    with pytest.raises(ProviderError) as raised:
        surge.Trainer(profiler="simple")
    for message in (problem, str(raised.value)):
        assert "plugin 'profilers' (distribution surge-profilers" in message
        assert "provides it but is blocked: blocked by SURGE_DISABLE_PLUGINS" in message
        assert "pip install" not in message
    assert "(run.yaml, line 2)" in problem


def test_trainer_reports_logger_names_under_trainer_logger(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        make_trainer(logger="jsonl2")
    assert [path for path, _ in info.value.problems] == ["trainer.logger"]
    with pytest.raises(ConfigError) as info:
        make_trainer(logger=["csv", "swa"])  # a plugin that is not a logger was silently ignored before
    assert info.value.problems == [
        (
            "trainer.logger",
            "'swa' is a participant, not a logger (role='logger'); loggers: csv, mlflow, tensorboard, wandb",
        )
    ]
    with pytest.raises(ProviderError) as raised:
        make_trainer(profiler="simpel")
    assert "Did you mean 'simple'?" in str(raised.value) and "pip install" not in str(raised.value)
