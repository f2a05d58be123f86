"""Every test of this repository (tests/ and plugins/*/tests/) uses Surge's test kit: its fixtures come from
``surge.testing``, a pytest plugin that suites opt in to. Only a top-level conftest may name
``pytest_plugins``, and this one is loaded for any test path given to pytest here."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["surge.testing"]

_CHECKOUT = Path(__file__).parent

# The property tests (Hypothesis) under two profiles. "ci", the default (CI, `make test`, any pytest run here):
# each test replays the same examples on every run (derandomized: drawn from a seed fixed by the test itself, no
# example database), so a submission fails only for what it changed. "fuzz" (`make fuzz`, never a gate): ten times
# the examples from new seeds, the failures it finds kept in .hypothesis/ and replayed first on its next run.
# A failure fuzz finds becomes an explicit @example(...) on its test, so that CI replays it from then on.
# Tests size their budget with _fuzzing.examples(n): n examples under "ci", 10 n under "fuzz".
try:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase
except ImportError:  # `make test-tpu`'s environment runs plugins/surge-tpu/xla_tests only, without Hypothesis
    pass
else:
    settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
    settings.register_profile(
        "fuzz",
        max_examples=1000,
        derandomize=False,
        database=DirectoryBasedExampleDatabase(_CHECKOUT / ".hypothesis" / "examples"),
        deadline=None,
        print_blob=True,
    )
    settings.load_profile("ci")  # `pytest --hypothesis-profile=fuzz` (`make fuzz`) loads the other one after this

# What a run writes into its working directory when nothing says where: Surge's run directories, and the
# ./mlruns folder of MLflow's defaults (a file store, or the artifacts of a database store's experiments).
_RUN_FOLDERS = ("surge_runs", "mlruns")


def _checkout_runs() -> set[str]:
    return {
        f"{folder}/{entry}"
        for folder in _RUN_FOLDERS
        if (_CHECKOUT / folder).is_dir()
        for entry in os.listdir(_CHECKOUT / folder)
    }


@pytest.fixture(autouse=True)
def _no_run_directory_in_the_checkout(request: pytest.FixtureRequest) -> Iterator[None]:
    """`make test` leaves the checkout as it found it: a test whose run lands in the repository's own
    ``surge_runs/`` (a Trainer without ``default_root_dir``, or ``surge fit``, with the repository as the working
    directory) or ``mlruns/`` (MLflow's default place) fails, named."""
    before = _checkout_runs()
    yield
    if written := sorted(_checkout_runs() - before):
        pytest.fail(
            f"{request.node.nodeid} wrote {written} into the checkout {_CHECKOUT}: run it in a temporary working "
            "directory (monkeypatch.chdir(tmp_path)), pass default_root_dir=tmp_path, or give MLflow an "
            "artifact_location"
        )


_SEED_VARIABLES = ("SURGE_GLOBAL_SEED", "SURGE_SEED_WORKERS", "PL_GLOBAL_SEED", "PL_SEED_WORKERS")


@pytest.fixture(autouse=True)
def _seed_variables_do_not_leak() -> Iterator[None]:
    """``seed_everything`` records the seed in the environment, where child processes (a torchrun launch, a
    script) read it: a test's seed must not become the next test's, so each test ends with them as it found them."""
    before = {name: os.environ.get(name) for name in _SEED_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _surge_log_sink_restored() -> Iterator[None]:
    """``surge.configure_logging`` (the ``surge`` command's first act) puts Surge's sink on the ``sys.stderr`` of
    the moment: in a test, pytest's capture of that test. Left in place, a later test's warning goes to a closed
    capture ("Logging error in Loguru Handler"). Each test ends with the sinks as it found them, and with Surge's
    records on, as ``surge.testing`` starts the session (a test that shows a library's default silence ends with
    ``logger.disable("surge")``, which muted every later test of its worker that reads Surge's lines)."""
    import sys

    from loguru import logger as loguru_logger
    from surge import _logging

    before = dict(_logging._state)
    yield
    loguru_logger.enable("surge")
    if _logging._state["handler"] != before["handler"]:
        try:
            loguru_logger.remove(_logging._state["handler"])  # type: ignore[arg-type]
        except ValueError:
            pass
        if before["handler"] is None:
            loguru_logger.add(sys.__stderr__)  # loguru's default sink, which configure_logging replaced
        _logging._state.update(before)


@pytest.fixture(scope="session")
def _mypy_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the xdist workers' common parent
    (shared / "mypy-cache").mkdir(exist_ok=True)
    return shared / "mypy-cache"


@pytest.fixture
def mypy_cache(_mypy_cache_dir: Path) -> Iterator[Path]:
    """One mypy cache for every test that runs mypy (the rendered template projects, the handler contract), shared
    by the xdist workers of this run: a cold run reads torch and surge for about a minute, a warm one for seconds.
    The test holds a lock beside it, so that one mypy uses it at a time (two cold runs side by side would both pay
    the minute). The cache lives in this run's temporary directory, never across runs."""
    from filelock import FileLock

    with FileLock(str(_mypy_cache_dir) + ".lock"):
        yield _mypy_cache_dir
