"""The plugin template (``plugin_template/``) and ``surge new-plugin``, which renders it with copier.

The end-to-end test renders a plugin, builds its wheel, installs it into a fresh virtual environment and
checks there that it is discovered, that it fires during a fit, and that its own generated tests pass. The
fresh environment reuses this one's packages (torch, surge, pytest) through a ``.pth`` file instead of
installing them again. The contract check of issue 18 renders a plugin the same way and makes it publish an
event, handle surge-checkpoint's ``checkpoint_saved`` with a filter and provide an accelerator configured by
a run config, with tests of its own that must pass. Other tests: the skeleton lists exactly
``surge.events.EVENTS``, the core wheel ships the template, ``copier update`` brings a template change to a
rendered plugin, and the errors.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pydantic
import pytest
import surge
from surge.cli import main
from surge.cli import new as _cli_new
from surge.events import EVENTS
from surge.testing import PluginEnv, TinyFit, assert_discovered, run_tiny_fit

TinyFitter = Callable[..., TinyFit]

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "plugin_template"
SKELETON = TEMPLATE / "template" / "src" / "{{package}}" / "{% if not provider %}__init__.py{% endif %}.jinja"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="copier needs git")


def _listed_events(source: str) -> list[tuple[str, str]]:
    """The ``# def <event>(self, event: events.<Class>)`` lines of the skeleton, in order."""
    return re.findall(r"^ {4}# def (\w+)\(self, event: events\.(\w+)\) -> None:", source, flags=re.M)


def _render(tmp_path: Path, *args: str, name: str = "grad-norm") -> Path:
    dest = tmp_path / f"surge-{name}"
    assert main(["new-plugin", name, "--dest", str(dest), *args]) == 0
    return dest


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=dists.child_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} failed\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


# -- the template's contents ---------------------------------------------------------------------------


def test_skeleton_lists_exactly_the_events() -> None:
    listed = _listed_events(SKELETON.read_text())
    assert listed == [(name, cls.__name__) for name, cls in EVENTS.items()]


def _files(project: Path) -> set[str]:
    return {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}


def test_rendered_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _render(tmp_path, "--kind", "observer", "--description", 'Counts "steps"')
    out = capsys.readouterr().out
    assert "created" in out and "pip install -e" in out and "copier update" in out
    assert _files(project) == {
        ".copier-answers.yml",
        ".github/workflows/ci.yml",
        ".gitignore",
        "README.md",
        "pyproject.toml",
        "src/surge_grad_norm/__init__.py",
        "tests/conftest.py",
        "tests/test_surge_grad_norm.py",
    }
    source = (project / "src/surge_grad_norm/__init__.py").read_text()
    compile(source, "__init__.py", "exec")
    compile((project / "tests/test_surge_grad_norm.py").read_text(), "test.py", "exec")
    assert _listed_events(source) == [(name, cls.__name__) for name, cls in EVENTS.items()]
    assert 'kind="observer"' in source and "default=False" in source
    # settings declared once: the constructor's signature, no model beside it and no config= to keep in step
    assert "@surge.validated\n    def __init__(self, every_n_steps: Annotated[int, Field(ge=0)] = 1)" in source
    assert "BaseModel" not in source and "config=" not in source
    assert 'description="Counts \\"steps\\""' in source
    # it teaches handling another plugin's event with a filter, and publishing one's own
    assert "@surge.hookimpl(optional=True, every_n_epochs=2) def checkpoint_saved" in source
    assert "surge.Plugin(events=[...])" in source and "event.trainer.emit(" in source

    pyproject = (project / "pyproject.toml").read_text()
    requirement = _cli_new.surge_requirement(surge.__version__)
    assert f'"{requirement}"' in pyproject and ",<" in requirement
    assert '"Framework :: Surge"' in pyproject
    assert '[project.entry-points."surge.plugins"]\n"grad-norm" = "surge_grad_norm:plugin"' in pyproject
    tests = (project / "tests/test_surge_grad_norm.py").read_text()
    assert "from surge.testing import PluginEnv, TinyFit, assert_discovered" in tests and 'kind="observer"' in tests
    assert "def test_fires_during_a_fit(tiny_fit: FitRunner) -> None:" in tests  # typed: mypy --strict clean
    assert 'pytest_plugins = ["surge.testing"]' in (project / "tests/conftest.py").read_text()  # opts in
    assert "pytest" in (project / ".github/workflows/ci.yml").read_text()
    answers = (project / ".copier-answers.yml").read_text()
    assert "name: grad-norm" in answers and "_commit" not in answers  # the shipped copy has no version


def test_rendered_provider_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _render(tmp_path, "--kind", "provider", name="fast-cpu")
    out = capsys.readouterr().out
    assert "plugin 'fast-cpu' (provider, the accelerator 'fast-cpu': Trainer(accelerator='fast-cpu'))" in out
    assert _files(project) == {
        ".copier-answers.yml",
        ".github/workflows/ci.yml",
        ".gitignore",
        "README.md",
        "pyproject.toml",
        "src/surge_fast_cpu/__init__.py",
        "tests/conftest.py",
        "tests/test_surge_fast_cpu.py",
    }
    source = (project / "src/surge_fast_cpu/__init__.py").read_text()
    compile(source, "__init__.py", "exec")
    assert "class FastCpuAccelerator(surge.Accelerator):" in source
    assert "auto_priority: ClassVar[int | None] = None" in source  # never taken by accelerator="auto"
    assert 'provides={"accelerator": {"fast-cpu": FastCpuAccelerator}}' in source
    assert "event.trainer.run_dir" in source  # how it reaches the run directory
    pyproject = (project / "pyproject.toml").read_text()
    assert '[project.entry-points."surge.providers"]\n"accelerator.fast-cpu" = "surge_fast_cpu:plugin"' in pyproject
    assert 'accelerator="fast-cpu"' in (project / "README.md").read_text()


def test_byte_code_in_the_template_never_reaches_a_project(tmp_path: Path) -> None:
    template = tmp_path / "template-copy"
    shutil.copytree(TEMPLATE, template)
    for folder in ("template/tests/__pycache__", "template/src/{{package}}/__pycache__"):
        (template / folder).mkdir()
        (template / folder / "conftest.cpython-311.pyc").write_bytes(b"\x00not code")
    (template / "template/tests/stray.pyc").write_bytes(b"\x00not code")
    project = _render(tmp_path, "--template", str(template))
    assert not [name for name in _files(project) if "__pycache__" in name or name.endswith((".pyc", ".pyo"))]


@pytest.mark.parametrize(
    "version, expected",
    [
        ("0.1.0", "surge>=0.1,<0.2"),
        ("0.3.2", "surge>=0.3,<0.4"),
        ("1.4.2", "surge>=1.4,<2"),
        ("0.3.0rc1", "surge>=0.3.0rc1,<0.4"),
    ],
)
def test_surge_requirement_is_bounded(version: str, expected: str) -> None:
    assert _cli_new.surge_requirement(version) == expected


def test_template_default_requirement_follows_the_surge_version() -> None:
    # `copier copy` without surge new-plugin falls back to copier.yml's default: it must not drift.
    expected = _cli_new.surge_requirement(surge.__version__)
    assert f'default: "{expected}"' in (TEMPLATE / "copier.yml").read_text()


# -- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Grad", "9lives", "grad norm", "_x", "grad.norm"])
def test_invalid_name(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-plugin", name, "--dest", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"surge new-plugin: error: invalid plugin name {name!r}" in err and "lower-case" in err
    assert not (tmp_path / "out").exists()


def test_existing_destination_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("x")
    for dest in ("taken", "file"):
        assert main(["new-plugin", "grad-norm", "--dest", str(tmp_path / dest)]) == 1
        assert f"{tmp_path / dest} already exists and is not an empty directory" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert main(["new-plugin", "grad-norm", "--dest", str(tmp_path / "empty")]) == 0  # empty is fine


def test_missing_copier_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "copier", None)  # `import copier` raises ImportError
    assert main(["new-plugin", "grad-norm", "--dest", str(tmp_path / "out")]) == 1
    assert "needs copier: pip install 'surge[template]'" in capsys.readouterr().err


# -- the core wheel ships the template -------------------------------------------------------------------


@pytest.mark.slow
def test_core_wheel_ships_the_template(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(TEMPLATE, source / "plugin_template")
    expected = {p.relative_to(TEMPLATE).as_posix() for p in TEMPLATE.rglob("*") if p.is_file()}
    expected = {n for n in expected if "__pycache__" not in n and not n.endswith(".pyc")}
    (source / "plugin_template/template/tests/__pycache__").mkdir()  # left by running the template's own tests
    (source / "plugin_template/template/tests/__pycache__/conftest.cpython-311.pyc").write_bytes(b"\x00")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "core", source / "core", symlinks=True, ignore=ignore)
    assert (source / "core/surge/_plugin_template").is_symlink()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", str(source), "-w", str(tmp_path / "out")], tmp_path)
    (wheel,) = (tmp_path / "out").glob("surge-*.whl")
    shipped = {n.removeprefix("surge/_plugin_template/") for n in zipfile.ZipFile(wheel).namelist()}
    assert expected <= shipped, f"missing from the wheel: {sorted(expected - shipped)}"
    assert not [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")]  # no byte-code in the template data

    # An installed surge (the wheel first on sys.path) renders from its own copy.
    site = tmp_path / "site"
    _run(
        [*pip, "install", "-q", "--no-deps", "--no-index", "--no-compile", "--target", str(site), str(wheel)], tmp_path
    )
    code = "import sys; from surge.cli import main; sys.exit(main(['new-plugin', 'shipped', '--dest', 'rendered']))"
    env = dists.child_env([site])
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"_src_path: {(site / 'surge' / '_plugin_template').resolve()}"
        in (tmp_path / "rendered/.copier-answers.yml").read_text()
    )
    assert (tmp_path / "rendered/src/surge_shipped/__init__.py").is_file()


# -- end to end: render, build, install into a fresh venv, discover, fit, run its tests -------------------

FIT = """
import json, sys
import surge_grad_norm
from surge.testing import run_tiny_fit

fit = run_tiny_fit(plugins=["grad-norm"], default_root_dir=sys.argv[1])
print("RESULT: " + json.dumps({
    "module": surge_grad_norm.__file__,
    "steps_seen": fit.plugin("grad-norm").steps_seen,
    "global_step": fit.trainer.global_step,
    "order": fit.trainer.event_order("train_batch_end"),
    "run_plugins": [entry["name"] for entry in json.load(open(fit.trainer.run_dir + "/plugins.json"))],
}))
"""


def _install_in_fresh_venv(tmp_path: Path, project: Path, package: str) -> tuple[str, Path]:
    """Build ``project``'s wheel and install it into a fresh virtual environment: its Python and site-packages.

    The fresh environment reuses this one's packages (torch, surge, pytest, pip) without reinstalling them;
    ``addsitedir`` also reads their .pth files (the editable installs)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", str(project), "-w", str(tmp_path / "wheels")],
        tmp_path,
    )
    (wheel,) = (tmp_path / "wheels").glob(f"{package}-0.1.0-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    new_site = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    )
    (new_site / "_surge_base.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    _run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)],
        tmp_path,
    )
    assert (new_site / package / "__init__.py").is_file()
    return python, new_site


@pytest.mark.slow
def test_end_to_end_in_a_fresh_venv(tmp_path: Path) -> None:
    project = _render(tmp_path)
    python, new_site = _install_in_fresh_venv(tmp_path, project, "surge_grad_norm")
    env = dists.child_env()
    children = {
        "listing": dists.start([python, "-m", "surge", "plugins", "--json"], env, tmp_path),
        "fit": dists.start([python, "-c", FIT, str(tmp_path / "runs")], env, tmp_path),
        "tests": dists.start([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], env, project),
    }
    rc, out, err = children["listing"].wait()
    assert rc == 0, err
    row = next(r for r in json.loads(out)["plugins"] if r["name"] == "grad-norm")
    assert (row["distribution"], row["version"], row["kind"], row["status"]) == (
        "surge-grad-norm",
        "0.1.0",
        "participant",
        "available",  # installed is not active: it runs when asked for
    )
    assert row["hooks"] == ["train_batch_end"]

    fit = children["fit"].result()
    assert Path(fit["module"]).is_relative_to(new_site)  # the installed wheel, not the project's src/
    assert fit["steps_seen"] == fit["global_step"] == 2
    assert "grad-norm" in fit["order"] and "grad-norm" in fit["run_plugins"]

    rc, out, err = children["tests"].wait()
    assert rc == 0 and re.search(r"\b8 passed\b", out), f"generated tests failed\n{out}\n{err}"


@pytest.mark.slow
def test_provider_end_to_end_in_a_fresh_venv(tmp_path: Path) -> None:
    project = _render(tmp_path, "--kind", "provider", name="fast-cpu")
    python, _ = _install_in_fresh_venv(tmp_path, project, "surge_fast_cpu")
    env = dists.child_env()
    children = {
        "listing": dists.start([python, "-m", "surge", "plugins", "--json"], env, tmp_path),
        "help": dists.start([python, "-m", "surge", "fit", "--help"], env, tmp_path),
        "tests": dists.start([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], env, project),
    }
    rc, out, err = children["listing"].wait()
    assert rc == 0, err
    row = next(r for r in json.loads(out)["plugins"] if r["name"] == "fast-cpu")
    assert (row["kind"], row["status"], row["provides"], row["hooks"]) == (
        "provider",
        "available",
        {"accelerator": ["fast-cpu"]},
        ["setup"],  # the accelerator's handler, through which it reaches the run directory
    )
    rc, out, err = children["help"].wait()
    assert rc == 0, err
    assert "--plugins.fast-cpu.threads  int (default: 0)" in out  # a provider's settings are listed too
    rc, out, err = children["tests"].wait()
    assert rc == 0 and re.search(r"\b7 passed\b", out), f"generated tests failed\n{out}\n{err}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["participant", "provider"])
def test_rendered_project_passes_ruff_and_mypy_strict(tmp_path: Path, kind: str, mypy_cache: Path) -> None:
    project = _render(tmp_path, "--kind", kind, name="lint-me")
    _run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], project)
    _run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], project)
    typed = _run([sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache)], project, timeout=600)
    assert "Success: no issues found in 3 source files" in typed.stdout  # [tool.mypy] strict = true, src and tests


# -- the contract a third party relies on (issue 18): a template plugin that publishes an event, handles
# surge-checkpoint's with a filter and provides an accelerator configured by a run config -----------------

# Added to the rendered surge_ckpt_watch/__init__.py, public API only (surge, surge.events, surge_devices).
CONTRACT_HANDLER = """
    # surge-checkpoint's event, in every second epoch only (0-based 1, 3, ...): optional, so the plugin runs
    # without surge-checkpoint; it publishes an event of its own for each checkpoint it notes.
    @surge.hookimpl(optional=True, every_n_epochs=2)
    def checkpoint_saved(self, event: Any) -> None:
        self.noted_epochs.append(event.epoch)
        event.trainer.emit(CheckpointNoted(event.trainer, path=event.path, epoch=event.epoch))
"""

CONTRACT_DECLARATIONS = '''
@dataclass(frozen=True, slots=True)
class CheckpointNoted(surge.events.Event):
    """After ckpt-watch noted a checkpoint surge-checkpoint committed in an odd epoch (0-based 1, 3, ...):
    fires from its ``checkpoint_saved`` handler, on global rank zero, once per such file. ``path``: the file;
    ``epoch``: the epoch it holds.

    May change: nothing."""

    name: ClassVar[str] = "checkpoint_noted"
    path: str
    epoch: int


class WatchCPUConfig(BaseModel):
    """The settings of the ckpt-watch-cpu provider (``plugins: {ckpt-watch-cpu: {threads: 2}}``)."""

    model_config = ConfigDict(extra="forbid")
    threads: int = Field(1, ge=1)


class WatchCPU(CPUAccelerator):
    """The CPU with ``threads`` intra-op threads during a run."""

    name: ClassVar[str] = "watch-cpu"
    auto_priority: ClassVar[int] = -1  # never chosen by accelerator="auto"
    threads: int | None = None

    def configure(self, settings: WatchCPUConfig) -> None:  # type: ignore[override]
        self.threads = settings.threads
        super().configure(DevicesConfig(cpu_threads=settings.threads))


provider = surge.Plugin(
    name="ckpt-watch-cpu",
    kind="provider",
    provides={"accelerator": {"watch-cpu": WatchCPU}},
    config=WatchCPUConfig,
)

'''

CONTRACT_ENTRY_POINTS = """
"ckpt-watch-cpu" = "surge_ckpt_watch:provider"

[project.entry-points."surge.providers"]
"accelerator.watch-cpu" = "surge_ckpt_watch:provider"
"""

# The rendered project's new tests: a subscriber passed in by the run config records what it saw.
CONTRACT_PROBE = '''
from typing import Any, ClassVar

import surge
import torch


class Probe:
    """Subscribes to ckpt-watch's event and to surge-checkpoint's, and notes the threads of each batch."""

    surge_kind = "observer"
    runs: ClassVar[list["Probe"]] = []

    def __init__(self) -> None:
        self.noted: list[Any] = []
        self.saved: list[Any] = []
        self.threads: list[int] = []
        self.watch: Any = None
        self.accelerator: Any = None
        Probe.runs.append(self)

    @surge.hookimpl
    def checkpoint_noted(self, event: Any) -> None:
        self.noted.append(event)

    @surge.hookimpl(optional=True)
    def checkpoint_saved(self, event: Any) -> None:
        self.saved.append(event)

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None:
        self.threads.append(torch.get_num_threads())

    @surge.hookimpl
    def teardown(self, event: Any) -> None:
        self.watch = event.trainer.plugin("ckpt-watch")
        self.accelerator = event.trainer.accelerator
'''

CONTRACT_TESTS = '''
"""ckpt-watch from a run config: it publishes checkpoint_noted, handles surge-checkpoint's checkpoint_saved
in odd epochs only, and its accelerator takes its thread count from the config's plugins section."""

from pathlib import Path

import pytest
import torch
from surge.cli import main
from surge.testing import assert_discovered
from surge_ckpt_watch import CheckpointNoted, WatchCPU

THREADS = 1 if torch.get_num_threads() != 1 else 2
RUN = """
model: surge.testing.TinyModule
data: surge.testing.TinyDataModule
trainer:
  accelerator: watch-cpu
  max_epochs: 4
  limit_train_batches: 2
  limit_val_batches: 1
  logger: false
  enable_progress_bar: false
  default_root_dir: {root}
plugins:
  ckpt-watch: true
  ckpt-watch-cpu: {{threads: {threads}}}
  checkpoint: {{save_top_k: -1}}
  probe: {{class_path: probe.Probe}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    config = root / "run.yaml"
    config.write_text(RUN.format(root=root, threads=THREADS))
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(Path(__file__).parent))  # probe.py, named by the config's class_path
        import probe

        assert main(["fit", "--config", str(config)]) == 0
    assert torch.get_num_threads() == before  # put back after the run
    (done,) = probe.Probe.runs
    return done


def test_provider_is_discovered() -> None:
    assert_discovered("ckpt-watch-cpu", distribution="surge-ckpt-watch", kind="provider")


def test_checkpoint_saved_handler_runs_in_odd_epochs_only(run) -> None:
    assert [e.epoch for e in run.saved] == [0, 1, 2, 3]  # one checkpoint per epoch
    assert run.watch.noted_epochs == [1, 3]  # every_n_epochs=2


def test_published_event_reaches_a_subscriber(run) -> None:
    assert all(type(e) is CheckpointNoted for e in run.noted)
    assert [(e.epoch, e.path) for e in run.noted] == [(e.epoch, e.path) for e in run.saved if e.epoch in (1, 3)]


def test_provider_takes_the_run_config_setting(run) -> None:
    assert isinstance(run.accelerator, WatchCPU) and run.accelerator.threads == THREADS
    assert run.threads == [THREADS] * 8  # 2 batches in each of 4 epochs
'''


def _add_contract(project: Path) -> None:
    """Turn the rendered surge-ckpt-watch into the plugin of the contract check, as its author would."""
    module = project / "src/surge_ckpt_watch/__init__.py"
    source = module.read_text()
    for old, new in [
        (
            "from typing import Annotated, Any\n",
            "from dataclasses import dataclass\nfrom typing import Annotated, Any, ClassVar\n",
        ),
        ("from pydantic import Field\n", "from pydantic import BaseModel, ConfigDict, Field\n"),
        (
            "from surge import events\n",
            "from surge import events\nfrom surge_devices import CPUAccelerator, DevicesConfig\n",
        ),
        ("        self.steps_seen = 0\n", "        self.steps_seen = 0\n        self.noted_epochs: list[int] = []\n"),
        ("        self.steps_seen += 1\n", "        self.steps_seen += 1\n" + CONTRACT_HANDLER),
        ("\nplugin = surge.Plugin(", CONTRACT_DECLARATIONS + "\nplugin = surge.Plugin("),
        ("    default=False,\n", "    default=False,\n    events=[CheckpointNoted],\n"),
    ]:
        assert source.count(old) == 1, f"the template no longer has {old!r}: update _add_contract"
        source = source.replace(old, new)
    module.write_text(source)
    pyproject = project / "pyproject.toml"
    entry = '"ckpt-watch" = "surge_ckpt_watch:plugin"\n'
    text = pyproject.read_text()
    assert entry in text and '"pydantic>=2.7"]' in text
    text = text.replace('"pydantic>=2.7"]', '"pydantic>=2.7", "surge-devices"]')  # it subclasses surge-devices' CPU
    pyproject.write_text(text.replace(entry, entry + CONTRACT_ENTRY_POINTS))
    (project / "tests/probe.py").write_text(CONTRACT_PROBE.lstrip())
    (project / "tests/test_contract.py").write_text(CONTRACT_TESTS.lstrip())


@pytest.mark.slow
def test_out_of_tree_plugin_keeps_the_contract(tmp_path: Path) -> None:
    project = _render(tmp_path, name="ckpt-watch")
    _add_contract(project)
    python, _ = _install_in_fresh_venv(tmp_path, project, "surge_ckpt_watch")
    rc, out, err = dists.start(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], dists.child_env(), project
    ).wait()
    assert rc == 0 and re.search(r"\b12 passed\b", out), f"generated tests failed\n{out}\n{err}"


# -- copier update -----------------------------------------------------------------------------------

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}

# What this repository has at its root so that copier can use it as a versioned template source (copier
# reads copier.yml only at a repository's root): the real file, so the test guards it.
ROOT_COPIER_YML = (TEMPLATE.parent / "copier.yml").read_text()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=dists.child_env(**GIT_ENV),
        check=True,
        capture_output=True,
    )


def _commit_all(cwd: Path, message: str) -> None:
    _git(cwd, "add", "-A")
    _git(cwd, "commit", "-q", "-m", message)


@needs_git
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["template-repository", "surge-repository"])
def test_copier_update_brings_a_template_change(
    tmp_path: Path, layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A git copy of the template, at the root of its own repository or in plugin_template/ of a larger one.
    repo = tmp_path / "repo"
    if layout == "template-repository":
        shutil.copytree(TEMPLATE, repo)
        template_root = repo
    else:
        shutil.copytree(TEMPLATE, repo / "plugin_template")
        (repo / "copier.yml").write_text(ROOT_COPIER_YML)
        template_root = repo / "plugin_template"
    _git(repo, "init", "-q")
    _commit_all(repo, "template 0.1.0")
    _git(repo, "tag", "v0.1.0")

    project = _render(tmp_path, "--template", str(repo))
    assert "at v0.1.0: take its later changes with `copier update`" in capsys.readouterr().out
    assert "_commit: v0.1.0" in (project / ".copier-answers.yml").read_text()
    _git(project, "init", "-q")
    _commit_all(project, "rendered")
    plugin = project / "src/surge_grad_norm/__init__.py"
    plugin.write_text(plugin.read_text().replace("self.steps_seen = 0", "self.steps_seen = 0  # the author's line"))
    _commit_all(project, "the author's change")

    # The template changes, in a new tagged version.
    ignore = template_root / "template/.gitignore.jinja"
    ignore.write_text(ignore.read_text() + ".mypy_cache/\n")
    (template_root / "template/CHANGELOG.md.jinja").write_text("# Changes of {{ distribution }}\n")
    _commit_all(repo, "template 0.2.0")
    _git(repo, "tag", "v0.2.0")

    _run([sys.executable, "-m", "copier", "update", "--defaults"], project)
    assert (project / ".gitignore").read_text().endswith(".mypy_cache/\n")
    assert (project / "CHANGELOG.md").read_text() == "# Changes of surge-grad-norm\n"
    assert "self.steps_seen = 0  # the author's line" in plugin.read_text()  # the author's work is kept
    assert "_commit: v0.2.0" in (project / ".copier-answers.yml").read_text()


@needs_git
def test_template_folder_inside_a_repository_warns_that_updates_will_not_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(TEMPLATE, repo / "plugin_template")
    _git(repo, "init", "-q")
    _commit_all(repo, "template")
    project = _render(tmp_path, "--template", str(repo / "plugin_template"))
    assert "is a folder inside a git repository, not its root" in capsys.readouterr().out
    assert "_commit" not in (project / ".copier-answers.yml").read_text()


# -- the test kit the template's tests use (surge.testing) ------------------------------------------------


class _Counter:
    def __init__(self, every: int = 1) -> None:
        self.every, self.batches = every, 0

    @surge.hookimpl
    def train_batch_end(self, event: object) -> None:
        self.batches += 1


class _CounterConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    every: int = 1


def test_tiny_fit_returns_the_trainer_the_events_and_the_plugin(plugin_env: PluginEnv, tiny_fit: TinyFitter) -> None:
    plugin_env.add(surge.Plugin(name="counter", kind="participant", factory=_Counter, config=_CounterConfig))
    fit = tiny_fit(plugins={"counter": {"every": 3}}, limit_train_batches=3)  # settings by name
    counter = fit.plugin("counter")
    assert (counter.every, counter.batches, fit.trainer.global_step) == (3, 3, 3)
    assert fit.names()[:2] == ["init_start", "init_end"] and fit.names()[-1] == "teardown"
    assert [e.batch_idx for e in fit.of("train_batch_end")] == [0, 1, 2]  # type: ignore[attr-defined]
    assert fit.trainer.event_order("train_batch_end")[-1] == "tiny_fit_recorder"  # an observer: it runs last
    assert tiny_fit(plugins=["counter"]).plugin("counter").every == 1  # by name: the default settings
    with pytest.raises(LookupError, match="plugin 'absent' was not active in this fit; active: .*counter"):
        fit.plugin("absent")


def test_run_tiny_fit_writes_to_a_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fit = run_tiny_fit(plugins=[_Counter()])
    assert fit.plugin("_Counter").batches == 2
    assert list(tmp_path.iterdir()) == [] and fit.trainer.run_dir is not None
    assert not Path(fit.trainer.run_dir).is_relative_to(tmp_path)


def test_assert_discovered_reads_the_installed_entry_points(
    plugin_env: PluginEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = assert_discovered("devices", distribution="surge_devices", kind="provider")  # names compare normalised
    assert plugin.name == "devices"
    with pytest.raises(AssertionError, match="comes from surge-devices, not from surge-other"):
        assert_discovered("devices", distribution="surge-other")
    with pytest.raises(AssertionError, match="is a provider, not a participant"):
        assert_discovered("devices", kind="participant")
    plugin_env.add(surge.Plugin(name="in-memory", kind="participant", factory=_Counter))
    with pytest.raises(AssertionError, match="no installed distribution declares the plugin 'in-memory'"):
        assert_discovered("in-memory")  # a PluginEnv plugin is not installed
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "devices")
    with pytest.raises(AssertionError, match="installed but blocked: blocked by SURGE_DISABLE_PLUGINS"):
        assert_discovered("devices")


def test_plugin_env_is_a_context_manager() -> None:
    with PluginEnv() as env:
        env.add(surge.Plugin(name="temporary", kind="participant", factory=_Counter))
        assert "temporary" in surge.Trainer(logger=False).catalog.records
    assert "temporary" not in surge.Trainer(logger=False).catalog.records
