"""Every test of this repository (tests/ and plugins/*/tests/) uses Surge's test kit: its fixtures come from
``surge.testing``, a pytest plugin that suites opt in to. Only a top-level conftest may name
``pytest_plugins``, and this one is loaded for any test path given to pytest here."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["surge.testing"]


_CHECKOUT_RUNS = Path(__file__).parent / "surge_runs"


def _checkout_runs() -> set[str]:
    return set(os.listdir(_CHECKOUT_RUNS)) if _CHECKOUT_RUNS.is_dir() else set()


@pytest.fixture(autouse=True)
def _no_run_directory_in_the_checkout(request: pytest.FixtureRequest) -> Iterator[None]:
    """`make test` leaves the checkout as it found it: a test whose run lands in the repository's own
    ``surge_runs/`` (a Trainer without ``default_root_dir``, or ``surge fit``, with the repository as the working
    directory) fails, named."""
    before = _checkout_runs()
    yield
    if written := sorted(_checkout_runs() - before):
        pytest.fail(
            f"{request.node.nodeid} wrote {written} into {_CHECKOUT_RUNS}: run it in a temporary working directory "
            "(monkeypatch.chdir(tmp_path)) or pass default_root_dir=tmp_path"
        )
