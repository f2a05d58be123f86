"""The budget of a property test: ``@settings(max_examples=examples(100))`` runs 100 examples under the "ci"
profile (the default: CI, `make test`), derandomized so that every run replays the same ones, and ten times as many
from new seeds under "fuzz" (`make fuzz`). The profiles are registered in the repository's root conftest.py."""

from __future__ import annotations

from hypothesis import settings

_CI_EXAMPLES = 100
"""Hypothesis's own default, the "ci" profile's: ``examples(n)`` scales ``n`` by the loaded profile's over it."""


def examples(n: int) -> int:
    return max(1, n * settings.default.max_examples // _CI_EXAMPLES)
