"""Commands of distributions (entry-point group ``surge.commands``): listing, refusals, lab pins.

The distributions here are real ones on ``sys.path`` (a ``.dist-info`` folder and a module in the test's
directory), found by ``importlib.metadata`` as an installed distribution is.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import surge
from surge.cli import main
from surge.errors import PluginError
from surge.plugins import commands

HELLO = """
import surge

def _arguments(parser):
    parser.add_argument("--who", default="world")

def _run(args):
    print(f"hello {args.who}")
    return 0

command = surge.Command(name="hello", help="say hello", register=_arguments, run=_run)
fit = surge.Command(name="fit", help="a second fit", register=_arguments, run=_run)
not_a_command = object()
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """``install(distribution, version, {command: "module:attr"}, {module: source})``: a distribution on sys.path."""
    modules: list[str] = []

    def add(distribution: str, version: str, entries: dict[str, str], files: dict[str, str]) -> Path:
        root = tmp_path / distribution
        info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
        (info / "entry_points.txt").write_text(f"[surge.commands]\n{lines}")
        for module, source in files.items():
            (root / f"{module}.py").write_text(textwrap.dedent(source))
            modules.append(module)
        monkeypatch.syspath_prepend(str(root))
        return root

    yield add
    for module in modules:
        sys.modules.pop(module, None)


def test_a_distribution_adds_a_command(install, capsys: pytest.CaptureFixture[str]) -> None:
    install("surge-hello", "1.0", {"hello": "hello_cmd:command"}, {"hello_cmd": HELLO})
    assert main(["hello", "--who", "lab"]) == 0
    assert capsys.readouterr().out == "hello lab\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())  # argparse wraps the help column
    assert "hello say hello [surge-hello 1.0]" in listing
    assert "[surge-csv 0.1.0]" in listing  # surge plot, from surge-csv


def test_broken_providers_are_refused_naming_their_distribution(install, capsys: pytest.CaptureFixture[str]) -> None:
    install(
        "surge-broken-cmds",
        "2.0",
        {"broken": "broken_cmd:command", "fit": "hello_cmd2:fit", "odd": "hello_cmd2:not_a_command"},
        {"broken_cmd": "raise ImportError('no module named torchvision')\n", "hello_cmd2": HELLO},
    )
    assert main(["broken", "--anything"]) == 1
    err = capsys.readouterr().err
    assert "surge broken: error: surge broken is not available: command 'broken' (distribution surge-broken-cmds" in err
    assert "ImportError: no module named torchvision" in err
    assert main(["odd"]) == 1
    assert "must point to a surge.Command, got object" in capsys.readouterr().err
    # the clash with a core command: the core's runs, the other is listed as refused
    assert main(["fit", "--print-config", "--trainer.max_epochs=1"]) == 0
    assert "max_epochs: 1" in capsys.readouterr().out
    assert main(["plugins", "--json"]) == 0
    listed = {c["name"]: c for c in json.loads(capsys.readouterr().out)["commands"]}
    assert listed["fit"]["status"] == "failed" and "'fit' is a core command" in listed["fit"]["reason"]
    assert listed["fit"]["distribution"] == "surge-broken-cmds"
    assert listed["plot"]["status"] == "available" and listed["plot"]["distribution"] == "surge-csv"


def test_two_distributions_claiming_a_command_run_neither(install, capsys: pytest.CaptureFixture[str]) -> None:
    install("surge-hello", "1.0", {"hello": "hello_cmd:command"}, {"hello_cmd": HELLO})
    install("surge-hello-too", "1.0", {"hello": "hello_cmd3:command"}, {"hello_cmd3": HELLO})
    assert main(["hello"]) == 1
    err = capsys.readouterr().err
    assert "two distributions claim the command 'hello'" in err
    assert "surge-hello 1.0 (hello_cmd:command)" in err and "surge-hello-too 1.0 (hello_cmd3:command)" in err


def test_surge_plot_without_surge_csv_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = commands.source.entry_points
    monkeypatch.setattr(commands.source, "entry_points", lambda: [ep for ep in installed() if ep.name != "plot"])
    assert main(["plot", "surge_runs/version_0", "-o", "x.png"]) == 1
    assert (
        "surge plot: error: surge plot is not installed: it is provided by surge-csv, which is not installed: "
        "`pip install surge-csv`" in capsys.readouterr().err
    )


def test_new_plugin_without_copier_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "copier", None)  # what importlib sees when copier is not installed
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())  # argparse wraps the help column
    assert "new-plugin (unavailable: needs copier: pip install 'surge[template]') [surge 0.1.0]" in listing
    assert main(["new-plugin", "grad-norm", "--dest", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert (
        "command 'new-plugin' (distribution surge 0.1.0) unavailable: needs copier: pip install 'surge[template]'"
        in err
    )
    assert not (tmp_path / "out").exists()


def test_a_lab_refuses_a_command_of_a_distribution_it_does_not_list(
    install, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install("surge-hello", "1.0", {"hello": "hello_cmd:command"}, {"hello_cmd": HELLO})
    lab = tmp_path / "lab.toml"
    lab.write_text('autoload = false\n[distributions]\nsurge = "*"\n')
    assert main(["--lab", str(lab), "hello"]) == 1
    err = capsys.readouterr().err
    assert "distribution surge-hello is not in the lab profile" in err and "autoload = false" in err
    assert "hello_cmd" not in sys.modules  # refused before import


def test_a_lab_checks_the_pinned_version_before_the_command_runs(
    install, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install("surge-hello", "1.0", {"hello": "hello_cmd:command"}, {"hello_cmd": HELLO})
    lab = tmp_path / "lab.toml"
    lab.write_text('[distributions]\nsurge-hello = "==1.0"\n')
    assert main(["--lab", str(lab), "hello"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    lab.write_text('[distributions]\nsurge-hello = "==2.0"\n')
    assert main(["hello", "--lab", str(lab)]) == 1  # --lab after the command is the same profile
    captured = capsys.readouterr()
    assert "surge-hello: 1.0 is installed; the lab pins ==2.0" in captured.err and captured.out == ""


def test_command_declarations_are_checked() -> None:
    with pytest.raises(PluginError) as info:
        surge.Command(name="Plot", help="", register=print, run="go", requires={"mpl": 3})  # type: ignore[arg-type]
    message = str(info.value)
    for part in ("name 'Plot' must be lower-case", "`help` must be one line", "`run` must be a function", "`requires`"):
        assert part in message
