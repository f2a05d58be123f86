"""Failures that stay local, and saying what applies: name clashes, ``-p``, the start-up line, which lab profile
applies and which one higher up was passed over, ``lock``'s warnings and ``check``'s imports, ``new-plugin``.

In-process, with ``surge.testing``'s ``plugin_env`` for plugins that need no installing and the repository's
own installed plugins otherwise; the attacks on a hashed lab with real distributions are in
``test_lab_attacks.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import surge
from loguru import logger
from surge.cli import main
from surge.plugins import lab
from surge.settings import SurgeSettings


class _Quiet:
    @surge.hookimpl
    def fit_start(self, event: object) -> None:
        pass


def _plugin(name: str, default: bool = True) -> surge.Plugin:
    return surge.Plugin(name=name, kind="participant", default=default, factory=_Quiet)


def _rows(capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}


@pytest.fixture(autouse=True)
def _clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No inherited ``SURGE_*`` setting, and a working directory with no ``pyproject.toml`` above it."""
    for key in [k for k in os.environ if k.startswith("SURGE_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


# -- a clash stays local -----------------------------------------------------------------------------------


def test_a_name_clash_leaves_trainers_and_diagnostics_working(plugin_env, capsys) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed()
    plugin_env.add(_plugin("twin"), distribution="surge-twin-a", version="1.0")
    plugin_env.add(_plugin("twin"), distribution="surge-twin-b", version="2.0")
    plugin_env.add(_plugin("solo"), distribution="surge-solo")
    trainer = surge.Trainer()
    assert "solo" in trainer.plugin_names and "twin" not in trainer.plugin_names
    assert main(["plugins", "--json"]) == 0
    twin = _rows(capsys)["twin"]
    assert twin["status"] == "failed" and twin["kind"] is None
    assert "two distributions claim the plugin name 'twin': surge-twin-a 1.0" in twin["reason"]
    assert "SURGE_DISABLE_PLUGINS=surge-twin-a:twin or SURGE_DISABLE_PLUGINS=surge-twin-b:twin" in twin["reason"]
    assert main(["plugins", "-v"]) == 0 and "failed (two distributions claim" in capsys.readouterr().out
    assert main(["plugins", "order"]) == 0 and "fit_start" in capsys.readouterr().out
    # the block-list resolves it, by distribution (the other one loads) or by name (neither)
    assert main(["plugins", "--json", "-p", "no:surge-twin-b:twin"]) == 0
    assert (lambda r: (r["distribution"], r["status"]))(_rows(capsys)["twin"]) == ("surge-twin-a", "active")
    assert main(["plugins", "--json", "-p", "no:twin"]) == 0
    assert _rows(capsys)["twin"]["status"] == "blocked"


def test_new_plugin_refuses_a_name_that_is_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-plugin", "devices", "--dest", str(tmp_path / "mine")]) == 1
    err = capsys.readouterr().err
    assert "a plugin named 'devices' is already installed (distribution surge-devices 0.1.0)" in err
    assert "Choose another name" in err
    assert not (tmp_path / "mine").exists()


# -- -p and the start-up line -------------------------------------------------------------------------------


def test_p_loads_or_blocks_one_plugin_for_the_command_only(plugin_env, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed()
    plugin_env.add(_plugin("keep"))
    plugin_env.add(_plugin("other"))
    monkeypatch.setenv("SURGE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "other")
    assert main(["plugins", "--json", "-p", "keep", "-p", "devices", "-p", "other"]) == 0
    rows = _rows(capsys)
    assert (rows["keep"]["status"], rows["other"]["status"]) == ("active", "active")  # over both variables
    assert main(["plugins", "--json", "-p", "devices", "-p", "keep", "-p", "no:keep"]) == 0  # the later flag wins
    rows = _rows(capsys)
    assert (rows["keep"]["status"], rows["keep"]["reason"]) == ("blocked", "blocked by SURGE_DISABLE_PLUGINS")
    assert os.environ["SURGE_DISABLE_PLUGINS"] == "other" and "SURGE_LOAD_PLUGINS" not in os.environ
    assert main(["plugins", "-p", "kep"]) == 2
    assert "-p kep: no installed plugin is named 'kep'; did you mean 'keep'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plugins", "-p", "no:Keep"])
    assert "is not NAME, no:NAME or no:DISTRIBUTION:NAME" in capsys.readouterr().err


def test_the_start_up_lines_say_what_is_active_and_at_debug_what_was_loaded_from_where(  # type: ignore[no-untyped-def]
    plugin_env, make_trainer, monkeypatch
) -> None:
    plugin_env.hide_installed()
    plugin_env.add(_plugin("solo"), distribution="surge-solo", version="1.2")
    monkeypatch.setenv("SURGE_LOG_LEVEL", "DEBUG")
    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])), level=0, filter="surge")
    logger.enable("surge")
    try:
        make_trainer()
    finally:
        logger.remove(sink)
    (short,) = [text for level, text in lines if level == "INFO" and " active (" in text]
    assert short.startswith("2 plugins active (devices, solo) of 2 installed; no lab profile; `surge plugins` lists")
    line = next(text for level, text in lines if level == "DEBUG" and text.startswith("plugins loaded under no lab"))
    devices = surge.plugins.discover(SurgeSettings()).records["devices"]
    assert f"devices (surge-devices {devices.version}, {devices.origin})" in line
    assert devices.origin.endswith("surge_devices/__init__.py")
    assert "solo (surge-solo 1.2, in memory)" in line


@pytest.mark.slow
def test_surge_fit_with_p_no_records_origin_and_lab_in_plugins_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = lab.lock().replace("[distributions]", "[tool.surge.lab.distributions]")
    (tmp_path / "pyproject.toml").write_text("[tool.surge.lab]\n" + table)
    root = tmp_path / "root"
    assert main(["fit", "--max-epochs", "1", "--root", str(root), "-p", "no:csv"]) == 0, capsys.readouterr().err
    (run_dir,) = (root / "surge_runs").iterdir()
    assert not (run_dir / "metrics.csv").exists()
    entries = {entry["name"]: entry for entry in json.loads((run_dir / "plugins.json").read_text())}
    assert "csv" not in entries
    assert {entry["lab"] for entry in entries.values()} == {f"{tmp_path / 'pyproject.toml'} [tool.surge.lab]"}
    assert entries["checkpoint"]["origin"].endswith("surge_checkpoint/__init__.py")
    assert entries["cli_report"]["origin"] is None  # an object the command passed in


# -- which lab profile applies --------------------------------------------------------------------------------


def test_a_profile_higher_up_that_is_passed_over_is_said_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parent, project = tmp_path / "lab", tmp_path / "lab" / "project"
    project.mkdir(parents=True)
    (parent / "pyproject.toml").write_text("[tool.surge.lab]\nautoload = true\n[tool.surge.lab.plugins]\nswa = false\n")
    (project / "pyproject.toml").write_text('[project]\nname = "experiment"\n')
    monkeypatch.chdir(project)
    found, passed_over = lab.find(SurgeSettings())
    assert found is None
    assert passed_over == [
        f"the lab profile {parent / 'pyproject.toml'} [tool.surge.lab] does not apply here: the nearest "
        f"pyproject.toml, {project / 'pyproject.toml'}, decides, and it has no [tool.surge.lab] table. To run under "
        f"it, copy the table into {project / 'pyproject.toml'}, or pass --lab {parent / 'pyproject.toml'} (or set "
        f"SURGE_LAB={parent / 'pyproject.toml'})"
    ]
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", filter="surge", format="{message}")
    logger.enable("surge")
    try:
        lab.resolve(SurgeSettings())
        lab.resolve(SurgeSettings())
    finally:
        logger.remove(sink)
        logger.disable("surge")
    assert [w.strip() for w in warnings] == passed_over  # once per process, not once per Trainer

    assert main(["plugins", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["lab"], document["lab_passed_over"]) == (None, passed_over)
    assert main(["plugins"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["lab profile: none", f"  note: {passed_over[0]}"]
    # the fix it names works: --lab takes a pyproject.toml's table
    assert main(["plugins", "--json", "--lab", str(parent / "pyproject.toml")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["lab"] == f"{parent / 'pyproject.toml'} [tool.surge.lab]"
    assert document["plugins"][[r["name"] for r in document["plugins"]].index("swa")]["status"] == "blocked"
    # a table of the project's own applies, and the one higher up is still named
    (project / "pyproject.toml").write_text("[tool.surge.lab]\nautoload = true\n")
    found, passed_over = lab.find(SurgeSettings())
    assert found is not None and found.source == f"{project / 'pyproject.toml'} [tool.surge.lab]"
    assert "and it has a [tool.surge.lab] table of its own" in passed_over[0]


# -- lock and check find what a run finds -----------------------------------------------------------------------


def test_lock_warns_and_check_fails_for_a_pinned_plugin_that_cannot_import(  # type: ignore[no-untyped-def]
    plugin_env, capsys, tmp_path, monkeypatch
) -> None:
    plugin_env.add_failing("wobbly", error="needs libwobble.so")
    assert main(["plugins", "lock", "-o", "lab.toml"]) == 0
    err = capsys.readouterr().err
    warning = (
        "warning: plugin 'wobbly' (distribution surge-testing-broken 0.0.1) fails to load: RuntimeError: needs "
        "libwobble.so. Every run under this profile refuses until it is fixed (or until [plugins] wobbly = false "
        "switches it off)"
    )
    assert f"surge plugins lock: {warning}" in err
    assert f"# {warning}" in (tmp_path / "lab.toml").read_text()
    assert main(["plugins", "check", "--lab", "lab.toml"]) == 1
    out = capsys.readouterr().out
    assert "(1 problem(s))" in out
    assert (
        "import     surge-testing-broken 0.0.1: its plugin 'wobbly' fails to load: RuntimeError: needs libwobble.so"
        in out
    )
    assert "fix: fix or reinstall it" in out and "or switch it off in the profile ([plugins] wobbly = false)" in out
    monkeypatch.setenv("SURGE_LAB", "lab.toml")
    with pytest.raises(surge.PluginError, match="fatal because the lab profile lab.toml pins surge-testing-broken"):
        surge.Trainer(default_root_dir=str(tmp_path / "root"))  # ...as a run finds it
    assert not (tmp_path / "root").exists()


# -- issue 26: what replaces what is said; a provider name claimed twice stays local; auto; origins --------------


def _log(level: str = "INFO") -> tuple[list[str], int]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).strip()), level=level, filter="surge", format="{message}")
    logger.enable("surge")
    return lines, sink


def _unlog(sink: int) -> None:
    logger.remove(sink)
    logger.disable("surge")


def test_surge_lab_over_the_project_table_is_said_with_both_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    own = project / "pyproject.toml"
    own.write_text("[tool.surge.lab]\nautoload = true\n[tool.surge.lab.plugins]\nswa = false\n")
    (tmp_path / "shared.toml").write_text("autoload = true\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("SURGE_LAB", str(tmp_path / "shared.toml"))
    found, notes = lab.find(SurgeSettings())
    assert found is not None and found.source == str(tmp_path / "shared.toml")
    assert notes == [
        f"the lab profile {own} [tool.surge.lab] (the project's own) does not apply here: SURGE_LAB (or --lab) "
        f"names {tmp_path / 'shared.toml'}, which replaces it. To run under the project's table, unset SURGE_LAB "
        "and leave out --lab"
    ]
    lines, sink = _log()
    try:
        surge.Trainer(default_root_dir=str(tmp_path / "root"))
    finally:
        _unlog(sink)
    assert notes[0] in lines  # a warning, once per process
    (startup,) = [line for line in lines if " plugins active (" in line]  # the start-up line says it too
    assert (
        f"; lab profile {tmp_path / 'shared.toml'} (named by SURGE_LAB or --lab, over the project's own {own} "
        "[tool.surge.lab]); `surge plugins` lists them" in startup
    )
    monkeypatch.delenv("SURGE_LAB")
    assert main(["plugins", "--lab", str(tmp_path / "shared.toml")]) == 0  # --lab is SURGE_LAB for the command
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"lab profile: {tmp_path / 'shared.toml'}",
        f"  note: {notes[0]}",
    ]
    assert main(["plugins", "--json", "--lab", str(own)]) == 0  # naming the project's own file replaces nothing
    assert json.loads(capsys.readouterr().out)["lab_passed_over"] == []


class _Device(surge.Accelerator):
    """An accelerator that is available everywhere and says nothing about ``auto``."""

    name = "quiet-device"
    device_type = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True


class _Eager(_Device):
    name = "eager-device"
    auto_priority = 0  # what surge-devices' cpu says: a tie with it


def test_auto_never_moves_to_an_accelerator_that_does_not_ask(plugin_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import lightning.pytorch as pl

    plugin_env.add(surge.Plugin(name="quiet", kind="provider", provides={"accelerator": {"quiet-device": _Device}}))
    lines, sink = _log()
    try:
        trainer = surge.Trainer(accelerator="auto", logger=False, default_root_dir=str(tmp_path))
    finally:
        _unlog(sink)
    # 'quiet-device' sorts after 'cpu' and has the default priority: it is not a candidate at all
    assert trainer.accelerator.name == "cpu"
    assert type(pl.Trainer(accelerator="auto", logger=False).accelerator).__name__ == "CPUAccelerator"  # as Lightning
    chose = next(line for line in lines if line.startswith("accelerator='auto' chose"))
    assert chose.startswith("accelerator='auto' chose 'cpu' from plugin 'devices' (distribution surge-devices ")
    assert chose.endswith("(auto_priority 0; available: cpu (0))")
    assert surge.Trainer(accelerator="quiet-device", logger=False).accelerator.name == "quiet-device"  # by name: yes


def test_auto_refuses_a_tie_naming_both(plugin_env) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(surge.Plugin(name="eager", kind="provider", provides={"accelerator": {"eager-device": _Eager}}))
    with pytest.raises(surge.errors.ProviderError) as refused:
        surge.Trainer(accelerator="auto", logger=False)
    message = str(refused.value)
    assert "'auto' cannot choose between 'cpu' (plugin 'devices' (distribution surge-devices" in message
    assert "and 'eager-device' (plugin 'eager' (distribution surge-testing-fake 0.0.1)): both are available" in message
    assert "with auto_priority=0. Choose one by name (accelerator='cpu')" in message
    assert surge.Trainer(accelerator="cpu", logger=False).accelerator.name == "cpu"  # naming one still works


class _Half(surge.Precision):
    name = "16-mixed"
    aliases = ("16-mixed", "16", "half-ish")


class _OtherHalf(surge.Precision):
    name = "other-16"
    aliases = ("other-16", "half-ish")


def test_a_provider_alias_claimed_twice_fails_that_alias_only(plugin_env, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    plugin_env.add(surge.Plugin(name="half-a", kind="provider", provides={"precision": {"a-16": _Half}}), version="1.0")
    plugin_env.add(surge.Plugin(name="half-b", kind="provider", provides={"precision": {"b-16": _OtherHalf}}))
    lines, sink = _log("WARNING")
    try:
        trainer = surge.Trainer(logger=False, default_root_dir=str(tmp_path))  # never asks for 'half-ish'
        assert surge.Trainer(precision="b-16", logger=False).precision_plugin.__class__ is _OtherHalf
    finally:
        _unlog(sink)
    assert type(trainer.precision_plugin) is surge.Precision
    warning = (
        "precision 'half-ish' is claimed by plugin 'half-a' (distribution surge-testing-fake 1.0) and plugin 'half-b' "
        "(distribution surge-testing-fake 0.0.1), so a run cannot choose it. Uninstall one, or block one with "
        "SURGE_DISABLE_PLUGINS=half-a or SURGE_DISABLE_PLUGINS=half-b; a run that does not ask for it is not affected"
    )
    assert warning in lines
    with pytest.raises(surge.errors.PluginConflictError, match="trainer.precision: precision 'half-ish' is claimed by"):
        surge.Trainer(precision="half-ish", logger=False)
    monkeypatch.setenv("SURGE_STRICT_PLUGINS", "1")  # strict: as with a plugin-name clash, every run refuses
    with pytest.raises(surge.errors.PluginConflictError, match="fatal because SURGE_STRICT_PLUGINS=1"):
        surge.Trainer(logger=False)


def test_an_object_named_like_an_inactive_plugin_has_no_origin(tmp_path: Path) -> None:
    class StandIn:
        surge_name = "swa"  # surge-swa is installed, and off unless requested

        @surge.hookimpl
        def fit_start(self, event: object) -> None:
            pass

    trainer = surge.Trainer(plugins=[StandIn()], logger=False, default_root_dir=str(tmp_path), max_steps=1)
    assert trainer.catalog.records["swa"].origin.endswith("surge_swa/__init__.py")  # imported, not active
    entries = {entry["name"]: entry for entry in trainer.plugin_set()}
    assert entries["swa"] == {
        "name": "swa",
        "distribution": None,
        "version": None,
        "tier": "participant",
        "origin": None,  # not surge-swa's file: the object is the user's
        "lab": None,
    }
    assert entries["devices.accelerator"]["origin"].endswith("surge_devices/__init__.py")
