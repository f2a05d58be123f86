"""The ``surge`` command: ``surge plugins`` (table and ``--json``), ``surge fit``, and no command.

The console script runs in child processes, with the test distributions of ``tests/_distributions.py``
installed for real on their ``PYTHONPATH``; the children of this module start together. In-process tests
call :func:`surge.cli.main` with ``plugin_env`` plugins.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import jsonschema
import pytest
import surge
from surge.cli import main
from surge.events import Event


def _surge() -> list[str]:
    script = Path(sys.executable).with_name("surge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "surge"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    site = dists.installed_once(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("cli")
    listing = dists.child_env([site["main"]], SURGE_DISABLE_PLUGINS="tp-beta")
    plain = dists.child_env()
    started = {
        "table": dists.start([*_surge(), "plugins", "-v"], listing, tmp),
        "narrow": dists.start([*_surge(), "plugins"], {**listing, "COLUMNS": "120"}, tmp),
        "json": dists.start([*_surge(), "plugins", "--json"], listing, tmp),
        "fit": dists.start([*_surge(), "fit", "--max-epochs", "1", "--root", str(tmp / "root")], plain, tmp),
        "none": dists.start(_surge(), plain, tmp),
    }
    yield {"tmp": tmp, **started}
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


def _json_rows(runs: dict) -> dict[str, dict]:
    rc, out, err = runs["json"].wait()
    assert rc == 0, err
    document = json.loads(out)  # the whole of stdout is one JSON document: warnings go to stderr
    return {row["name"]: row for row in document["plugins"]}


@pytest.mark.slow
def test_plugins_json_follows_the_documented_schema(runs: dict) -> None:
    rc, out, err = runs["json"].wait()
    assert rc == 0, err
    document = json.loads(out)
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "plugins.schema.json").read_text())
    jsonschema.validate(document, schema)  # raises with the failing path when the output drifts
    rows = _json_rows(runs)
    assert list(rows) == sorted(rows)
    devices = rows["devices"]
    assert (devices["distribution"], devices["kind"], devices["status"], devices["hooks"]) == (
        "surge-devices",
        "provider",
        "active",  # a bare run chooses it (accelerator="auto")
        [],
    )
    assert devices["provides"] == {"accelerator": ["cpu", "cuda", "gpu", "mps"], "strategy": ["single_device"]}


@pytest.mark.slow
def test_plugins_json_shows_status_and_reason(runs: dict) -> None:
    rows = _json_rows(runs)
    alpha, beta, broken = rows["tp-alpha"], rows["tp-beta"], rows["tp-broken"]
    assert (alpha["distribution"], alpha["version"], alpha["kind"]) == ("surge-test-alpha", "1.0.0", "participant")
    assert alpha["status"] == "active" and alpha["hooks"] == ["fit_start", "teardown"]
    assert beta["status"] == "blocked" and "SURGE_DISABLE_PLUGINS" in beta["reason"]
    assert beta["kind"] is None  # never imported, so its kind is unknown
    assert broken["status"] == "failed" and broken["reason"] == f"RuntimeError: {dists.BROKEN_MESSAGE}"
    assert rows["tp-notplugin"]["status"] == "failed" and "surge.Plugin" in rows["tp-notplugin"]["reason"]
    assert rows["tp-zeta"]["distribution"] == rows["tp-eta"]["distribution"] == "surge-test-pair"


@pytest.mark.slow
def test_plugins_table(runs: dict) -> None:
    rc, out, err = runs["table"].wait()
    assert rc == 0, err
    header, *lines = out.split("\n\nloaded from:\n")[0].splitlines()
    assert header == "lab profile: none"
    assert lines[0].split() == ["name", "distribution", "version", "kind", "status", "provides", "/", "hooks"]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert list(by_name) == sorted(by_name)
    assert by_name["tp-alpha"].split()[1:5] == ["surge-test-alpha", "1.0.0", "participant", "active"]
    assert "fit_start, teardown" in by_name["tp-alpha"]
    assert "blocked (blocked by SURGE_DISABLE_PLUGINS)" in by_name["tp-beta"]
    assert f"failed (RuntimeError: {dists.BROKEN_MESSAGE})" in by_name["tp-broken"]
    assert "accelerator: cpu, cuda, gpu, mps; strategy: single_device" in by_name["devices"]
    loaded = out.split("\n\nloaded from:\n")[1].split("\n\n")[0]  # then the commands of distributions
    loaded_from = dict(line.split() for line in loaded.splitlines())
    assert "\n\ncommands of distributions (entry-point group 'surge.commands'):\n" in out
    assert any(line.split()[:4] == ["surge", "plot", "surge-csv", "0.1.0"] for line in out.splitlines())
    assert loaded_from["tp-alpha"].endswith("/site/main/tp_alpha.py")  # where each plugin was imported from
    assert "tp-beta" not in loaded_from and "tp-broken" not in loaded_from  # blocked, failed: not imported


@pytest.mark.slow
def test_plugins_table_rows_fit_the_terminal_and_say_where_the_rest_is(runs: dict) -> None:
    rc, out, err = runs["narrow"].wait()
    assert rc == 0, err
    table = out.split("\n\nloaded from:\n")[0].splitlines()
    assert max(map(len, table)) <= 120, [line for line in table if len(line) > 120]
    rows = {line.split()[0]: line for line in table[2:]}
    assert rows["tp-broken"].split()[4:6] == ["failed", "(RuntimeError:..."]  # the reason, cut
    assert " ... +" in rows["progress"]  # its hooks, cut: the count of those not shown
    assert "`surge plugins -v` or `--json` shows them whole" in table[-1]
    _, whole, _ = runs["table"].wait()  # -v: every hook
    assert max(map(len, whole.split("\n\nloaded from:\n")[0].splitlines())) > 120


@pytest.mark.slow
def test_fit_trains_the_digits_example_and_reports_its_run_directory(runs: dict) -> None:
    rc, out, err = runs["fit"].wait()
    assert rc == 0, f"{out}\n{err}"
    assert any(line.startswith("epoch 0/0") and "val_acc=" in line for line in out.splitlines()), out
    accuracy = next(line for line in out.splitlines() if line.startswith("final validation accuracy:"))
    assert 0.0 <= float(accuracy.split(":")[1]) <= 1.0
    run_line = next(line for line in out.splitlines() if line.startswith("run directory:"))
    run_dir = Path(run_line.split(":", 1)[1].strip())
    assert run_dir.is_dir()
    assert run_dir.parent.parent == runs["tmp"] / "root"  # <root>/surge_runs/version_N
    plugin_set = json.loads((run_dir / "plugins.json").read_text())
    assert {"name", "distribution", "version", "tier"} <= set(plugin_set[0])
    assert {entry["distribution"] for entry in plugin_set} >= {"surge-devices"}


@pytest.mark.slow
def test_python_dash_m_surge_is_the_command(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "surge", "plugins", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema_version"] == 1
    bare = subprocess.run([sys.executable, "-m", "surge"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and bare.stdout.startswith("usage: surge ")


@pytest.mark.slow
def test_no_command_prints_help_and_exits_2(runs: dict) -> None:
    rc, out, err = runs["none"].wait()
    assert rc == 2
    assert "usage: surge" in out + err and "plugins" in out + err and "fit" in out + err


# -- in-process -------------------------------------------------------------------------------------------


class _Counter:
    @surge.hookimpl
    def train_batch_end(self, event: object) -> None:
        pass

    @surge.hookimpl
    def fit_end(self, event: object) -> None:
        pass


def test_in_process_json_lists_hooks_kind_and_default_status(plugin_env, capsys) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="counter", kind="participant", factory=_Counter), distribution="surge-counter")
    plugin_env.add(surge.Plugin(name="watcher", kind="observer", default=True, factory=_Counter), version="3.1")
    plugin_env.add_failing("shaky", error="needs a GPU driver")
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}
    assert list(rows) == ["counter", "devices", "shaky", "watcher"]
    assert rows["counter"] == {
        "name": "counter",
        "distribution": "surge-counter",
        "version": "0.0.1",
        "kind": "participant",
        "status": "available",
        "reason": "",
        "provides": {},
        "hooks": ["train_batch_end", "fit_end"],
        "publishes": [],
        "default": False,
        "role": None,
        "description": "",
        "origin": None,  # made in memory: no file
    }
    # an active plugin's hooks come from the resolved order of the bare run's bus
    assert rows["watcher"]["hooks"] == ["train_batch_end", "fit_end"]
    assert (rows["watcher"]["kind"], rows["watcher"]["status"], rows["watcher"]["version"]) == (
        "observer",
        "active",
        "3.1",
    )
    assert (rows["shaky"]["status"], rows["shaky"]["reason"]) == ("failed", "RuntimeError: needs a GPU driver")


def test_event_and_order_show_the_resolved_handlers(plugin_env, capsys) -> None:  # type: ignore[no-untyped-def]
    class First(_Counter):
        @surge.hookimpl(tryfirst=True)
        def train_batch_end(self, event: object) -> None:
            pass

    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="late", kind="observer", default=True, factory=_Counter))
    plugin_env.add(surge.Plugin(name="plain", kind="participant", default=True, factory=_Counter))
    plugin_env.add(surge.Plugin(name="early", kind="participant", default=True, factory=First))
    assert main(["plugins", "--event", "train_batch_end", "--json"]) == 0
    said = surge.events.contract(surge.events.TrainBatchEnd)  # the event's contract, as docs/events.md shows it
    assert json.loads(capsys.readouterr().out) == {
        "event": "train_batch_end",
        "handlers": ["early", "plain", "module", "late"],  # the Module's place is in the order from the start
        "payload": "TrainBatchEnd",
        "fields": ["outputs", "batch", "batch_idx"],
        "when": said.when,
        "may_change": said.may_change,
    }
    assert said.when.startswith("After the training step") and "request_stop" in said.may_change
    assert main(["plugins", "--event", "train_batch_end"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "  payload: TrainBatchEnd(outputs, batch, batch_idx)",
        f"  when: {said.when}",
        f"  may change: {said.may_change}",
    ]
    assert main(["plugins", "order", "--json"]) == 0
    order = json.loads(capsys.readouterr().out)["events"]
    assert set(order) == set(surge.events.EVENTS)
    assert order["fit_end"] == ["early", "plain", "module", "late"] and order["setup"] == ["module"]
    assert main(["plugins", "order"]) == 0
    assert "train_batch_end" in capsys.readouterr().out
    assert main(["plugins", "--event", "train_batch_ennd"]) == 1
    assert "no event named 'train_batch_ennd'" in capsys.readouterr().err


def test_in_process_table_with_no_plugins(plugin_env, capsys) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed(keep=())
    assert main(["plugins"]) == 0
    assert "no surge plugins installed" in capsys.readouterr().out


def test_in_process_no_command_returns_2(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == 2
    assert "usage: surge" in capsys.readouterr().out


def test_each_epoch_line_gives_the_epochs_own_time_and_the_time_so_far(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import re

    args = ["--model.class_path=surge.testing.TinyModule", "--data.class_path=surge.testing.TinyDataModule"]
    assert (
        main(["fit", *args, "--max-epochs", "3", "--root", str(tmp_path), "--trainer.enable_progress_bar=false"]) == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    times = [re.fullmatch(r"epoch (\d)/2  .*  \[(\d+\.\d\d)s, (\d+\.\d\d)s in all\]", line) for line in lines]
    assert len(times) == 3 and all(times), lines
    own = [float(m.group(2)) for m in times if m]
    so_far = [float(m.group(3)) for m in times if m]
    assert so_far == sorted(so_far)
    for epoch in (1, 2):  # each epoch's own time is its share of the total (the figures are rounded to 0.01 s)
        assert own[epoch] <= so_far[epoch] - so_far[epoch - 1] + 0.02, lines


# -- issue 26: hooks of other plugins' events, and the events a plugin publishes -------------------------------


@dataclass(frozen=True, slots=True)
class _Noted(Event):
    """After the noter noted a training batch: fires from its ``train_batch_end`` handler.

    May change: nothing."""

    name: ClassVar[str] = "batch_noted"


class _Noter:
    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        event.trainer.emit(_Noted(event.trainer))


class _OnlyTheirs:
    """Handles the noter's event only (optional: it runs without the noter)."""

    @surge.hookimpl(optional=True)
    def batch_noted(self, event: _Noted) -> None:
        pass


def test_listing_shows_other_plugins_events_and_what_a_plugin_publishes(plugin_env, capsys) -> None:  # type: ignore[no-untyped-def]
    plugin_env.hide_installed()
    plugin_env.add(surge.Plugin(name="noter", kind="participant", factory=_Noter, events=[_Noted]))
    plugin_env.add(surge.Plugin(name="theirs", kind="participant", factory=_OnlyTheirs))  # on request: not built
    plugin_env.add(surge.Plugin(name="theirs-on", kind="participant", default=True, factory=_OnlyTheirs))
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["plugins"]}
    assert (rows["noter"]["hooks"], rows["noter"]["publishes"]) == (["train_batch_end"], ["batch_noted"])
    assert (rows["theirs"]["hooks"], rows["theirs"]["publishes"]) == (["batch_noted"], [])
    assert rows["theirs-on"]["status"] == "active" and rows["theirs-on"]["hooks"] == ["batch_noted"]
    assert main(["plugins", "-v"]) == 0
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert table["noter"].endswith("train_batch_end; publishes: batch_noted")
    assert table["theirs"].endswith("batch_noted")
