"""The Makefile's set-up commands, read with ``make -n`` (printed, not run) against a virtual environment
that does not exist yet: `make demo` installs what the demo needs, `make test` adds the rest (and `make test-fast`
runs its suite less the ``slow`` tests), and ``TORCH_INDEX_URL`` reaches the torch install only."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
DEMO_PLUGINS = {"surge-devices", "surge-checkpoint", "surge-csv", "surge-progress"}

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _own_make_env() -> dict[str, str]:
    """This environment for a make of its own. Under `make test` (CI) the parent make's MAKEFLAGS/MAKELEVEL would
    make it a sub-make that prints "Entering/Leaving directory" lines, and the variables set on the parent's command
    line (`make test PYTEST_ARGS=...`) are exported to it: the Makefile's own variables are left out."""
    makefile = (REPO / "Makefile").read_text()
    own = set(re.findall(r"^([A-Z_]+) \?=", makefile, re.M)) | {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"}
    return {k: v for k, v in os.environ.items() if k not in own}


def _plan(tmp_path: Path, target: str, *variables: str) -> list[str]:
    env = _own_make_env()
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={tmp_path / 'venv'}", *variables],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line.rstrip() for line in done.stdout.splitlines()]


def _installs(plan: list[str]) -> list[str]:
    return [line for line in plan if " -m pip install " in line]


def _plugins(line: str) -> set[str]:
    return {word.removeprefix("plugins/") for word in line.split() if word.startswith("plugins/surge-")}


def test_demo_installs_torch_the_core_and_the_default_plugins_only(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "demo")
    torch_line, project_line = _installs(plan)[1:]
    assert '"torch==2.13.0"' in torch_line and "--index-url" not in torch_line
    assert '-e ".[standard,examples]"' in project_line and _plugins(project_line) == DEMO_PLUGINS
    assert not any(word in " ".join(plan) for word in ("test]", "bench", "surge-mlflow", "-m pytest"))
    assert plan[-1].endswith("surge fit")


def test_test_adds_every_plugin_the_test_tools_and_lightning(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "test")
    installs = _installs(plan)
    assert installs[:3] == _installs(_plan(tmp_path, "demo"))  # the demo's set-up first
    (rest,) = installs[3:]
    # bench: Lightning, for tests/test_porting.py; docs: mkdocs, for tests/test_docs_site.py (CI builds the site)
    assert '-e ".[standard,examples,test,bench,docs]"' in rest
    assert _plugins(rest) == {p.name for p in (REPO / "plugins").glob("surge-*")}
    assert plan[-1].endswith("-m pytest -n auto --dist worksteal")  # pytest-xdist: a worker per core
    assert "pytest-xdist" in (REPO / "pyproject.toml").read_text()  # in the `test` extra that installs


def test_test_compiles_the_projects_byte_code_before_the_suite(tmp_path: Path) -> None:
    """Each child interpreter a test starts imports Surge's modules; where PYTHONDONTWRITEBYTECODE is set nothing
    caches them, so the run writes their byte-code first: core and every plugin's sources."""
    for target in ("test", "test-fast", "fuzz"):
        plan = _plan(tmp_path, target)
        compile_line = plan[-2].split()
        assert compile_line[1:6] == ["-m", "compileall", "-q", "-j", "0"], plan[-2]
        assert set(compile_line[6:]) == {"core", *(f"plugins/{p.name}/src" for p in (REPO / "plugins").glob("surge-*"))}


def test_docs_installs_the_docs_extra_and_builds_the_site_strictly(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "docs")
    installs = _installs(plan)
    assert installs[:3] == _installs(_plan(tmp_path, "demo"))  # the demo's set-up first
    (rest,) = installs[3:]
    assert '-e ".[standard,examples,docs]"' in rest
    assert plan[-1] == f"{tmp_path / 'venv'}/bin/mkdocs build --strict"


def test_torch_index_url_is_passed_to_the_torch_install_only(tmp_path: Path) -> None:
    index = (tmp_path / "index").as_uri()
    plan = _plan(tmp_path, "test", f"TORCH_INDEX_URL={index}", "TORCH_SPEC=torch==2.13.0+cpu")
    with_index = [line for line in _installs(plan) if "--index-url" in line]
    assert with_index == [line for line in _installs(plan) if "torch==" in line]
    assert f'--index-url "{index}" "torch==2.13.0+cpu"' in with_index[0]


def test_test_fast_is_the_test_set_up_and_suite_less_the_slow_tests(tmp_path: Path) -> None:
    fast, full = _plan(tmp_path, "test-fast"), _plan(tmp_path, "test")
    assert fast[:-1] == full[:-1]  # the same set-up
    assert fast[-1] == f'{full[-1]} -m "not slow"'
    assert "slow" not in full[-1]  # `make test`, what CI runs, deselects nothing
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "exec make test"
    assert _plan(tmp_path, "test", "PYTEST_XDIST=")[-1].endswith("-m pytest")  # one process, when asked


def test_fuzz_explores_the_property_tests_with_new_seeds_and_is_no_part_of_ci(tmp_path: Path) -> None:
    fuzz, full = _plan(tmp_path, "fuzz"), _plan(tmp_path, "test")
    assert fuzz[:-1] == full[:-1]
    assert fuzz[-1] == f"{full[-1]} -m hypothesis --hypothesis-profile=fuzz"
    assert "fuzz" not in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow
def test_make_test_fails_on_no_test_and_prints_pytests_summary_line(tmp_path: Path) -> None:
    """What CI reads of `make test`: pytest's exit status (5, no test ran, fails it) and its closing line."""
    venv = Path(sys.prefix)
    (tmp_path / "empty").mkdir()
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "test_one.py").write_text("def test_one():\n    assert True\n")
    env = _own_make_env()

    def make_test(folder: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # -o: the environment is this one, set up already (nothing is installed)
            ["make", "--no-print-directory", "test", f"VENV={venv}", "-o", f"{venv}/.surge-installed",
             f"PYTEST_ARGS=-p no:cacheprovider --rootdir={tmp_path} {tmp_path / folder}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
        )  # fmt: skip

    none = make_test("empty")
    assert none.returncode != 0 and "no tests ran" in none.stdout, none.stdout + none.stderr
    one = make_test("one")
    assert one.returncode == 0, one.stdout + one.stderr
    assert re.search(r"^=+ 1 passed in [\d.]+s =+$", one.stdout, re.M), one.stdout


@pytest.mark.slow
def test_the_demo_ends_with_a_plot_command_that_works_in_a_fresh_shell(tmp_path: Path) -> None:
    """`make demo` runs ``.venv/bin/surge fit`` without activating the environment; the command it prints to
    plot the run must work as printed in the same shell (where ``surge`` alone is not found)."""
    from test_docs_samples import fresh_shell

    env = fresh_shell(tmp_path)  # tmp_path is the checkout: its .venv is this environment
    demo = _plan(tmp_path / "plan", "demo", "VENV=.venv")[-1]
    assert demo == ".venv/bin/surge fit"
    trained = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"{demo} --max-epochs 1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert trained.returncode == 0, f"{trained.stdout}\n{trained.stderr}"
    (plot,) = [line.split(": ", 1)[1] for line in trained.stdout.splitlines() if line.startswith("plot its metrics: ")]
    plotted = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", plot], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert plotted.returncode == 0, f"`{plot}` failed ({plotted.returncode}):\n{plotted.stdout}\n{plotted.stderr}"
    assert plotted.stdout.startswith("wrote "), plotted.stdout
