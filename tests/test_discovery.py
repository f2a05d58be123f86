"""Plugin discovery, each rule checked with real installed distributions.

The distributions (``tests/_distributions.py``) are installed once per session with pip into temporary
directories. Each scenario runs in a child Python whose ``PYTHONPATH`` holds some of those directories, so
``importlib.metadata`` finds them as it would in a user's environment; their modules record being imported
and their handlers record running in files the child reads back. The children of this module start together
(they spend most of their time importing torch) and the tests read their results.

In-process tests at the end use ``surge.testing``'s ``plugin_env`` where nothing needs installing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
import surge
import surge.plugins
from loguru import logger
from pydantic import ValidationError
from surge.errors import PluginConflictError, PluginError
from surge.settings import SurgeSettings

# What every child runs first: helpers to read the logs, and a short fit of surge.testing's tiny model.
_PRELUDE = """
import json, os, sys
IMPORT_LOG, HOOK_LOG = os.environ["SURGE_TEST_IMPORT_LOG"], os.environ["SURGE_TEST_HOOK_LOG"]

def read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split()

def take_hooks():
    lines = read(HOOK_LOG)
    open(HOOK_LOG, "w").close()
    return [line for line in lines if line.startswith("tp-")]

def error(fn):
    try:
        fn()
    except Exception as exc:
        return {"types": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}
    return None

out = {}
import surge
out["imported_by_import_surge"] = read(IMPORT_LOG)
surge.configure_logging()  # the warnings some tests read: a Trainer leaves logging to the application
from surge.testing import TinyDataModule, TinyModule

def catalog(trainer):
    return {
        name: {"distribution": r.distribution, "version": r.version, "status": r.status, "reason": r.reason}
        for name, r in trainer.catalog.records.items()
    }

def make(**kwargs):
    return surge.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False, **kwargs)

def fit(**kwargs):
    trainer = make(**kwargs)
    take_hooks()
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return trainer, take_hooks()

def ours(names):
    return [n for n in names if n.startswith("tp-")]
"""

_DEFAULT = """
trainer, hooks = fit()
out["default"] = {
    "catalog": catalog(trainer), "order": list(trainer.catalog.records), "imported": read(IMPORT_LOG),
    "hooks": hooks, "fit_start_order": ours(trainer.event_order("fit_start")), "active": ours(trainer.plugin_names),
}
trainer, hooks = fit(plugins=["tp-beta"])
out["requested"] = {"hooks": hooks, "active": ours(trainer.plugin_names)}
trainer, hooks = fit(plugins={"tp-alpha": False})
out["switched_off"] = {"hooks": hooks, "active": ours(trainer.plugin_names)}
out["unknown"] = error(lambda: make(plugins=["tp-alpah"]))
out["failed_requested"] = error(lambda: make(plugins=["tp-broken"]))
os.environ["SURGE_STRICT_PLUGINS"] = "1"  # settings are read again by each Trainer
out["strict"] = error(make)
"""

_ALLOW = """
trainer, hooks = fit()
out.update(catalog=catalog(trainer), imported=read(IMPORT_LOG), hooks=hooks)
"""

_BLOCK = """
trainer, hooks = fit()
out.update(catalog=catalog(trainer), hooks=hooks)
out["requested_blocked"] = error(lambda: make(plugins=["tp-beta"]))
out["imported"] = read(IMPORT_LOG)
"""

_NO_AUTOLOAD = """
# a provider named in plugins=[...] loads too: that is how autoload-disabled runs pick their backend
trainer, hooks = fit(plugins=["devices", "tp-beta"])
out.update(catalog=catalog(trainer), imported=read(IMPORT_LOG), hooks=hooks, active=ours(trainer.plugin_names))
bare = make()  # accelerator="auto" asks for every accelerator a distribution declares: the device provider
out["bare"] = {"catalog": catalog(bare), "imported": read(IMPORT_LOG)}
os.environ["SURGE_PLUGINS"] = "devices"
out["allow_list_binds_requests"] = error(lambda: make(plugins=["tp-beta"]))
"""

# sys.path is changed between Trainers: importlib.metadata scans it on every discovery.
_PATHS = """
from surge.events import EVENTS
QUIET, CLASH, FAKECPU = sys.argv[1:4]

def orders(trainer):
    return {event: trainer.event_order(event) for event in EVENTS}

def with_path(path, fn):
    sys.path.insert(0, path)
    try:
        return fn()
    finally:
        sys.path.remove(path)

base, base_hooks = fit()
def quiet():
    trainer, hooks = fit()
    return {"orders": orders(trainer), "hooks": hooks, "active": ours(trainer.plugin_names)}
out["quiet"] = with_path(QUIET, quiet)
out["base"] = {"orders": orders(base), "hooks": base_hooks, "active": ours(base.plugin_names)}
def clash():
    found = {"default": catalog(make())["tp-clash"], "imported": read(IMPORT_LOG)}
    for key, blocked in (("by_distribution", "surge-test-clash-two:tp-clash"), ("by_name", "tp-clash")):
        os.environ["SURGE_DISABLE_PLUGINS"] = blocked
        trainer = make()
        found[key] = {**catalog(trainer)["tp-clash"], "active": ours(trainer.plugin_names)}
    del os.environ["SURGE_DISABLE_PLUGINS"]
    os.environ["SURGE_STRICT_PLUGINS"] = "1"
    found["strict"] = error(make)
    del os.environ["SURGE_STRICT_PLUGINS"]
    return found
out["clash"] = with_path(CLASH, clash)
out["fakecpu"] = with_path(FAKECPU, lambda: error(lambda: make(accelerator="cpu")))
"""


def _start(name: str, body: str, paths: list[Path], tmp: Path, args: tuple[str, ...] = (), **env: str) -> dists.Child:
    workdir = tmp / name
    workdir.mkdir()
    variables = {dists.IMPORT_LOG: str(workdir / "imports.log"), dists.HOOK_LOG: str(workdir / "hooks.log"), **env}
    code = _PRELUDE + body + "\nprint('RESULT: ' + json.dumps(out), flush=True)\n"
    return dists.start([sys.executable, "-c", code, *args], dists.child_env(paths, **variables), workdir)


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dists.Child]]:
    site = dists.installed_once(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("discovery")
    main = [site["main"]]
    started = {
        "default": _start("default", _DEFAULT, [site["main"], site["dup"]], tmp),
        "allow": _start("allow", _ALLOW, main, tmp, SURGE_PLUGINS="devices,tp-alpha"),
        "block": _start("block", _BLOCK, main, tmp, SURGE_DISABLE_PLUGINS="tp-beta, tp-broken"),
        "no_autoload": _start("no_autoload", _NO_AUTOLOAD, main, tmp, SURGE_DISABLE_PLUGIN_AUTOLOAD="1"),
        "paths": _start("paths", _PATHS, main, tmp, (str(site["quiet"]), str(site["clash"]), str(site["fakecpu"]))),
    }
    yield started
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


@pytest.fixture(scope="module")
def default(children: dict[str, dists.Child]) -> dict:
    return children["default"].result()


def ours(catalog: dict) -> list[str]:
    return [name for name in catalog if name.startswith("tp-")]


# -- lazy, sorted, de-duplicated -----------------------------------------------------------------


@pytest.mark.slow
def test_import_surge_imports_no_plugin(default: dict) -> None:
    assert default["imported_by_import_surge"] == []
    # ...the Trainer did, every plugin that was not blocked, in name order (tp-broken raised mid-import)
    assert default["default"]["imported"] == dists.MAIN_NAMES


@pytest.mark.slow
def test_discovery_is_sorted_by_name(default: dict) -> None:
    # surge-test-pair declares tp-zeta before tp-eta; discovery and dispatch order by name regardless.
    order = default["default"]["order"]
    assert order == sorted(order)
    assert ours(order) == dists.MAIN_NAMES
    assert default["default"]["fit_start_order"] == ["tp-alpha", "tp-eta", "tp-zeta"]
    assert default["default"]["hooks"] == [
        "tp-alpha:fit_start",
        "tp-eta:fit_start",
        "tp-zeta:fit_start",
        "tp-alpha:teardown",
        "tp-eta:teardown",
        "tp-zeta:teardown",
    ]


@pytest.mark.slow
def test_a_distribution_seen_twice_on_sys_path_counts_once(default: dict) -> None:
    # The child had surge-test-alpha in two sys.path entries; it is one plugin and its handler runs once.
    record = default["default"]["catalog"]["tp-alpha"]
    assert (record["distribution"], record["version"], record["status"]) == ("surge-test-alpha", "1.0.0", "active")
    assert default["default"]["hooks"].count("tp-alpha:fit_start") == 1


@pytest.mark.slow
def test_records_name_distribution_and_version(default: dict) -> None:
    catalog = default["default"]["catalog"]
    assert {n: (catalog[n]["distribution"], catalog[n]["version"]) for n in ours(catalog)} == {
        "tp-alpha": ("surge-test-alpha", "1.0.0"),
        "tp-beta": ("surge-test-beta", "2.0.0"),
        "tp-broken": ("surge-test-broken", "0.3.0"),
        "tp-eta": ("surge-test-pair", "0.5.0"),
        "tp-notplugin": ("surge-test-notplugin", "0.4.0"),
        "tp-zeta": ("surge-test-pair", "0.5.0"),
    }


@pytest.mark.slow
def test_two_distributions_claiming_one_name_load_neither_and_the_rest_runs(children: dict) -> None:
    clash = children["paths"].result()["clash"]
    record = clash["default"]  # the Trainer was built: one clash no longer breaks every run
    assert record["status"] == "failed"
    for text in (
        "two distributions claim the plugin name 'tp-clash'",
        "surge-test-clash-one 0.1.0",
        "surge-test-clash-two 0.2.0",
    ):
        assert text in record["reason"]
    assert "SURGE_DISABLE_PLUGINS=surge-test-clash-two:tp-clash" in record["reason"]  # the fix, ready to paste
    assert "tp-clash" not in clash["imported"]  # neither claimant ran
    error = clash["strict"]  # ...unless failures are fatal
    assert "PluginConflictError" in error["types"] and "surge-test-clash-one 0.1.0" in error["message"]


@pytest.mark.slow
def test_a_clash_is_resolved_by_blocking_one_distribution_or_the_name(children: dict) -> None:
    clash = children["paths"].result()["clash"]
    chosen = clash["by_distribution"]
    assert (chosen["distribution"], chosen["status"]) == ("surge-test-clash-one", "active")
    assert "tp-clash" in chosen["active"]
    blocked = clash["by_name"]
    assert (blocked["status"], blocked["reason"]) == ("blocked", "blocked by SURGE_DISABLE_PLUGINS")
    assert "tp-clash" not in blocked["active"]


# -- failure isolation ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plugin_whose_import_raises_is_reported_and_skipped(default: dict, children: dict) -> None:
    record = default["default"]["catalog"]["tp-broken"]
    assert record["status"] == "failed"
    assert record["reason"] == f"RuntimeError: {dists.BROKEN_MESSAGE}"
    _, _, stderr = children["default"].wait()
    warning = next(line for line in stderr.splitlines() if "tp-broken" in line)
    assert "WARNING" in warning and "surge-test-broken 0.3.0" in warning and dists.BROKEN_MESSAGE in warning
    # ...and the run went on with the others
    assert "tp-alpha:fit_start" in default["default"]["hooks"]


@pytest.mark.slow
def test_requesting_a_failed_plugin_says_why_it_failed(default: dict) -> None:
    error = default["failed_requested"]
    assert "ConfigError" in error["types"]
    assert "trainer.plugins.tp-broken" in error["message"] and dists.BROKEN_MESSAGE in error["message"]


@pytest.mark.slow
def test_a_failing_import_is_fatal_under_strict_plugins(default: dict) -> None:
    error = default["strict"]
    assert "PluginError" in error["types"]
    message = error["message"]
    assert "tp-broken" in message and "surge-test-broken 0.3.0" in message and dists.BROKEN_MESSAGE in message
    assert "SURGE_STRICT_PLUGINS" in message


@pytest.mark.slow
def test_an_entry_point_to_a_non_plugin_object_fails_with_a_clear_reason(default: dict) -> None:
    record = default["default"]["catalog"]["tp-notplugin"]
    assert record["status"] == "failed"
    assert "must point to a surge.Plugin, got dict" in record["reason"]


# -- blocking happens before import ------------------------------------------------------------------


@pytest.mark.slow
def test_allow_list_imports_only_the_listed_plugins(children: dict) -> None:
    result = children["allow"].result()
    assert result["imported"] == ["tp-alpha"]
    catalog = result["catalog"]
    assert catalog["tp-alpha"]["status"] == "active"
    for name in ("tp-beta", "tp-broken", "tp-eta", "tp-notplugin", "tp-zeta"):
        assert catalog[name]["status"] == "blocked"
        assert "SURGE_PLUGINS" in catalog[name]["reason"]
    assert result["hooks"] == ["tp-alpha:fit_start", "tp-alpha:teardown"]


@pytest.mark.slow
def test_block_list_is_applied_before_import(children: dict) -> None:
    result = children["block"].result()
    assert "tp-beta" not in result["imported"] and "tp-broken" not in result["imported"]
    assert "tp-alpha" in result["imported"]
    for name in ("tp-beta", "tp-broken"):
        assert result["catalog"][name]["status"] == "blocked"
        assert "SURGE_DISABLE_PLUGINS" in result["catalog"][name]["reason"]
    # blocked, so its import error is never met: no warning
    assert "tp-broken" not in children["block"].wait()[2]
    # a blocked plugin stays blocked when requested by name, and the error says so
    error = result["requested_blocked"]
    assert "ConfigError" in error["types"] and "blocked by SURGE_DISABLE_PLUGINS" in error["message"]


@pytest.mark.slow
def test_autoload_disabled_imports_only_what_is_requested(children: dict) -> None:
    result = children["no_autoload"].result()
    assert result["imported"] == ["tp-beta"]
    assert result["active"] == ["tp-beta"]
    assert result["hooks"] == ["tp-beta:fit_start", "tp-beta:teardown"]
    assert result["catalog"]["tp-alpha"]["status"] == "blocked"
    assert result["catalog"]["devices"]["status"] == "active"  # requested by name


@pytest.mark.slow
def test_an_allow_list_binds_requests_by_name_too(children: dict) -> None:
    error = children["no_autoload"].result()["allow_list_binds_requests"]
    assert "ConfigError" in error["types"]
    assert "tp-beta" in error["message"] and "SURGE_PLUGINS allow-list" in error["message"]


@pytest.mark.slow
def test_autoload_disabled_loads_the_provider_a_bare_trainer_chooses(children: dict) -> None:
    bare = children["no_autoload"].result()["bare"]
    assert bare["catalog"]["devices"]["status"] == "active"  # declared in surge-devices' metadata
    assert bare["catalog"]["tp-alpha"]["status"] == "blocked" and bare["catalog"]["csv"]["status"] == "blocked"
    assert bare["imported"] == ["tp-beta"]  # from the run before; nothing else of ours was imported


# -- installed is not active ----------------------------------------------------------------------


@pytest.mark.slow
def test_default_off_participant_is_imported_but_silent_until_requested(default: dict) -> None:
    assert "tp-beta" in default["default"]["imported"]
    assert default["default"]["catalog"]["tp-beta"]["status"] == "available"
    assert not any(line.startswith("tp-beta:") for line in default["default"]["hooks"])
    assert "tp-beta" not in default["default"]["active"]
    assert "tp-beta:fit_start" in default["requested"]["hooks"]
    assert "tp-beta" in default["requested"]["active"]


@pytest.mark.slow
def test_default_on_participant_fires_and_can_be_switched_off(default: dict) -> None:
    assert "tp-alpha" in default["default"]["active"]
    assert not any(line.startswith("tp-alpha:") for line in default["switched_off"]["hooks"])
    assert "tp-alpha" not in default["switched_off"]["active"]
    assert "tp-zeta:fit_start" in default["switched_off"]["hooks"]  # the other defaults stay on


@pytest.mark.slow
def test_an_unknown_requested_plugin_suggests_the_close_name(default: dict) -> None:
    error = default["unknown"]
    assert "ConfigError" in error["types"] and "did you mean 'tp-alpha'" in error["message"]


@pytest.mark.slow
def test_two_providers_claiming_one_accelerator_name_is_an_error_naming_both(children: dict) -> None:
    error = children["paths"].result()["fakecpu"]
    assert "PluginConflictError" in error["types"]
    assert "accelerator 'cpu'" in error["message"]
    assert "surge-devices" in error["message"] and "surge-test-fakecpu 0.1.0" in error["message"]


@pytest.mark.slow
def test_twenty_plugins_subscribing_to_nothing_change_no_handler(children: dict) -> None:
    result = children["paths"].result()
    base, quiet = result["base"], result["quiet"]
    assert len([n for n in quiet["active"] if n.startswith("tp-quiet-")]) == 20
    assert quiet["orders"] == base["orders"]
    assert quiet["hooks"] == base["hooks"]


# -- in-process, through surge.testing's plugin_env ------------------------------------------------------


class _Marker:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @surge.hookimpl
    def fit_start(self, event: object) -> None:
        self.seen.append("fit_start")


def _participant(name: str, default: bool) -> surge.Plugin:
    return surge.Plugin(name=name, kind="participant", default=default, factory=_Marker)


def test_the_same_entry_point_listed_twice_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    class Twice(surge.plugins._Source):
        def entry_points(self):  # type: ignore[no-untyped-def]
            found = list(metadata.entry_points(group=surge.plugins.ENTRY_POINT_GROUP))
            return found + found

    monkeypatch.setattr(surge.plugins, "source", Twice())
    catalog = surge.plugins.discover(SurgeSettings())
    assert list(catalog.records).count("devices") == 1
    assert catalog.records["devices"].plugin is not None


def test_in_memory_conflict_names_both_distributions(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(_participant("twin", True), distribution="surge-twin-a", version="1.0")
    plugin_env.add(_participant("twin", True), distribution="surge-twin-b", version="2.0")
    record = surge.plugins.discover(SurgeSettings()).records["twin"]
    assert record.status == "failed" and record.plugin is None
    assert "surge-twin-a 1.0" in record.reason and "surge-twin-b 2.0" in record.reason
    with pytest.raises(PluginConflictError, match="twin") as info:
        surge.plugins.discover(SurgeSettings(strict_plugins=True))
    assert "surge-twin-a 1.0" in str(info.value) and "surge-twin-b 2.0" in str(info.value)
    chosen = surge.plugins.discover(SurgeSettings(disable_plugins=["Surge_Twin.A:twin"])).records["twin"]
    assert (chosen.distribution, chosen.status) == ("surge-twin-b", "available")  # names compare as pip's do


def test_in_memory_failing_import_is_reported_then_fatal_when_strict(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add_failing("wobbly", error="no wheels for this platform")
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", filter="surge")
    logger.enable("surge")
    try:
        catalog = surge.plugins.discover(SurgeSettings())
    finally:
        logger.remove(sink)
    record = catalog.records["wobbly"]
    assert (record.status, record.reason) == ("failed", "RuntimeError: no wheels for this platform")
    assert any("wobbly" in m and "surge-testing-broken" in m for m in messages)
    with pytest.raises(PluginError, match="wobbly.*no wheels for this platform"):
        surge.plugins.discover(SurgeSettings(strict_plugins=True))


def test_in_memory_entry_point_name_must_match_the_plugin(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(_participant("inner", True), name="outer")
    record = surge.plugins.discover(SurgeSettings()).records["outer"]
    assert record.status == "failed" and "'outer'" in record.reason and "'inner'" in record.reason


def test_in_memory_activation_follows_defaults_and_requests(plugin_env, make_trainer) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(_participant("on-by-default", True))
    plugin_env.add(_participant("on-request", False))
    assert "on-by-default" in make_trainer().plugin_names
    assert "on-request" not in make_trainer().plugin_names
    assert "on-request" in make_trainer(plugins=["on-request"]).plugin_names
    assert "on-by-default" not in make_trainer(plugins={"on-by-default": False}).plugin_names


def test_in_memory_blocking_settings(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(_participant("keep", True))
    plugin_env.add(_participant("drop", True))
    status = lambda s, req=(): {
        n: r.status for n, r in surge.plugins.discover(s, requested=req).records.items() if n in ("keep", "drop")
    }
    assert status(SurgeSettings(disable_plugins=["drop"])) == {"keep": "available", "drop": "blocked"}
    assert status(SurgeSettings(plugins=["keep"])) == {"keep": "available", "drop": "blocked"}
    assert status(SurgeSettings(disable_plugin_autoload=True)) == {"keep": "blocked", "drop": "blocked"}
    assert status(SurgeSettings(disable_plugin_autoload=True), ["drop"]) == {"keep": "blocked", "drop": "available"}
    # the block-list wins over a request by name
    assert status(SurgeSettings(disable_plugins=["drop"]), ["drop"])["drop"] == "blocked"


def test_environment_lists_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "a, b,,c")
    monkeypatch.setenv("SURGE_PLUGINS", "devices")
    monkeypatch.setenv("SURGE_DISABLE_PLUGIN_AUTOLOAD", "1")
    settings = SurgeSettings()
    assert settings.disable_plugins == ["a", "b", "c"]
    assert settings.plugins == ["devices"]
    assert settings.disable_plugin_autoload is True


def test_environment_settings_any_case_arguments_win_and_other_variables_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [k for k in os.environ if k.upper().startswith("SURGE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("surge_strict_plugins", "yes")  # the name in any case, a boolean as pydantic reads one
    monkeypatch.setenv("SURGE_LOG_LEVEL", "debug")
    monkeypatch.setenv("SURGE_TRAINER_MAX_EPOCHS", "3")  # the CLI's, not a setting
    assert SurgeSettings().model_dump() == {
        "plugins": None,
        "disable_plugins": [],
        "load_plugins": [],
        "disable_plugin_autoload": False,
        "strict_plugins": True,
        "trace_plugins": False,
        "log_level": "DEBUG",
        "lab": None,
    }
    given = SurgeSettings(strict_plugins=False, disable_plugins=["x"])
    assert (given.strict_plugins, given.disable_plugins, given.log_level) == (False, ["x"], "DEBUG")
    monkeypatch.setenv("SURGE_LOG_LEVEL", "loud")
    with pytest.raises(ValidationError, match="SURGE_LOG_LEVEL='loud' is not a log level"):
        SurgeSettings()


def test_declaration_errors_are_reported_at_once() -> None:
    with pytest.raises(PluginError) as info:
        surge.Plugin(name="Bad Name", kind="participant")
    assert "Bad Name" in str(info.value) and "factory" in str(info.value)
    with pytest.raises(PluginError, match="provides"):
        surge.Plugin(name="empty", kind="provider")
