"""What MLflow accepts as names and values, without importing MLflow.

MLflow refuses a metric or param name with characters outside letters, digits, ``_ - . / space`` (and ``:``
except on Windows), a name that is not its own normalised path (``a//b``, ``./a``, ``a/``, ``..``), and
names over 250 characters; param values are cut at 6000 characters and tag values at 8000. A rejected name
would fail the whole batch, so names are made valid here, the same way on every platform.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping
from typing import Any

MAX_KEY_LENGTH = 250
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100

# ':' is valid on POSIX clients only; a server on Windows would refuse it, so it is replaced too.
_INVALID = re.compile(r"[^\w./\- ]")


def valid_name(name: str) -> str:
    """``name`` as MLflow accepts it: invalid characters become ``_``, empty path segments are dropped,
    ``.``/``..`` segments become ``_``/``__``, and the result is cut to 250 characters."""
    cleaned = _segments(_INVALID.sub("_", name))
    return cleaned if len(cleaned) <= MAX_KEY_LENGTH else _segments(cleaned[:MAX_KEY_LENGTH])


def _segments(name: str) -> str:
    segments = [s for s in name.split("/") if s]
    return "/".join("_" * len(s) if s in (".", "..") else s for s in segments) or "_"


def flatten_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Nested mappings (and ``argparse.Namespace``) become dotted keys; values become strings, cut to
    MLflow's param value limit; keys become valid names."""
    return {valid_name(key): _cut(str(value), MAX_PARAM_VALUE_LENGTH) for key, value in _walk(params, "")}


def _walk(params: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            yield from _walk(value, f"{name}.")
        else:
            yield name, value


def tag_value(value: object) -> str:
    return _cut(str(value), MAX_TAG_VALUE_LENGTH)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
