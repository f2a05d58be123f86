"""numpy's global legacy RNG state as Surge records it (at every epoch start and every checkpoint): read from
memory instead of through ``np.random.get_state()`` (a million instructions a call), and still exactly what
``get_state`` returns, the cached second normal of a pair (``has_gauss``, ``gauss``) included."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from surge.engine import _resume


def _reference() -> dict[str, object]:
    state = np.random.get_state(legacy=False)
    return {
        "key": torch.from_numpy(state["state"]["key"].astype(np.int64)),
        "pos": int(state["state"]["pos"]),
        "has_gauss": int(state["has_gauss"]),
        "gauss": float(state["gauss"]),
    }


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else type(a[k]) is type(b[k]) and a[k] == b[k]
        for k in a
    )


STEPS = [
    lambda: None,
    lambda: np.random.seed(7),
    np.random.standard_normal,  # a pair drawn, the second cached: has_gauss 1
    lambda: np.random.rand(3),  # the key moves, the cached normal stays
    np.random.standard_normal,  # the cached normal used: has_gauss 0, the key unchanged
    lambda: np.random.set_state(("MT19937", np.arange(624, dtype=np.uint32), 11, 1, 0.125)),
    lambda: np.random.randint(0, 10, size=1000),
]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the memory read is for CPython only")
def test_the_fast_read_is_used_and_equals_get_state() -> None:
    saved = np.random.get_state()
    try:
        for step in STEPS:
            step()
            fast = _resume._legacy_numpy_state(np)
            assert fast is not None, "the memory read fell back to get_state"
            assert _same(_resume._numpy_state(), _reference())
    finally:
        np.random.set_state(saved)


def test_without_the_layout_get_state_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_resume, "_legacy_layout", None)
    saved = np.random.get_state()
    try:
        for step in STEPS:
            step()
            assert _resume._legacy_numpy_state(np) is None
            assert _same(_resume._numpy_state(), _reference())
    finally:
        np.random.set_state(saved)


def test_a_pointer_that_does_not_lead_where_it_must_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    _resume._legacy_numpy_state(np)
    view = _resume._legacy_view
    if view is None:
        pytest.skip("no memory read on this interpreter")
    monkeypatch.setattr(view, "state_address", view.state_address + 8)
    assert view.read() is None
    monkeypatch.setattr(view, "state_address", view.state_address - 8)
    monkeypatch.setattr(view, "bitgen_address", view.bitgen_address + 8)
    assert view.read() is None


def test_a_restored_state_reads_back_the_same() -> None:
    saved = np.random.get_state()
    try:
        np.random.seed(3)
        np.random.standard_normal()
        recorded = _resume._numpy_state()
        expected = [np.random.standard_normal() for _ in range(5)]
        np.random.seed(99)
        _resume.set_rng_states({"numpy": recorded}, None)
        assert _same(_resume._numpy_state(), recorded)
        assert [np.random.standard_normal() for _ in range(5)] == expected
    finally:
        np.random.set_state(saved)
