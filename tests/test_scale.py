"""Scale and soak: discovery with 500 installed plugin distributions, and flat memory over a long run.

The figures (how long discovery takes with 500 plugins, memory over 20,000 steps) are measured by
``benchmarks/discovery.py`` and ``benchmarks/soak.py``; these tests use the same generators and children
and check what does not depend on the machine: every plugin found, in order, and no memory growth after
warm-up. No timing is asserted.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
try:
    import discovery  # the benchmark scripts are modules beside each other, not a package
    import soak
finally:
    sys.path.remove(str(BENCH))

COUNT = 500

_DISCOVER = """
import json, surge, surge.plugins
from surge.settings import load_settings

first = surge.plugins.discover(load_settings())
again = surge.plugins.discover(load_settings())
trainer = surge.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
records = {
    name: [r.distribution, r.version, r.value, r.status, r.kind, r.reason]
    for name, r in first.records.items() if name.startswith("scale-")
}
out = {
    "order": list(first.records),
    "again": list(again.records),
    "trainer_order": list(trainer.catalog.records),
    "records": records,
    "trainer_status": {n: r.status for n, r in trainer.catalog.records.items() if n.startswith("scale-")},
    "active": [n for n in trainer.plugin_names if n.startswith("scale-")],
}
print("RESULT: " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def five_hundred(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Two children over the same 500 distributions, with the two sys.path entries in either order."""
    root = tmp_path_factory.mktemp("scale")
    even, odd = discovery.write_distributions(root / "dists", COUNT)
    children = [
        dists.start_python(_DISCOVER, dists.child_env([even, odd]), root, timeout=240),
        dists.start_python(_DISCOVER, dists.child_env([odd, even]), root, timeout=240),
    ]
    return [child.result() for child in children]


def test_discovery_finds_all_500_installed_distributions(five_hundred: list[dict[str, Any]]) -> None:
    result = five_hundred[0]
    expected = {
        f"scale-{i:03d}": [
            f"surge-scale-plugin-{i:03d}",
            f"0.{i // 100}.{i % 100}",
            f"surge_scale_plugin_{i:03d}:plugin",
            "available",
            "participant",
            "",
        ]
        for i in range(COUNT)
    }
    assert result["records"] == expected
    # each is a default-on participant: a Trainer activates all 500
    assert len(result["active"]) == COUNT
    assert set(result["trainer_status"].values()) == {"active"}


def test_discovery_order_is_sorted_and_deterministic(five_hundred: list[dict[str, Any]]) -> None:
    forward, backward = five_hundred
    order = forward["order"]
    assert order == sorted(order)  # the generated ones were written in reverse, over two sys.path entries
    assert [n for n in order if n.startswith("scale-")] == [f"scale-{i:03d}" for i in range(COUNT)]
    assert len(order) > COUNT  # the environment's own first-party plugins are there too, in their place
    assert forward["again"] == forward["trainer_order"] == order  # the same in one process
    assert backward["order"] == order  # and whatever the order of the sys.path entries


def _soak(variant: str) -> dict[str, Any]:
    return soak.run_variant(variant, steps=4000, sample_every=250, val_every=100, top=0, timeout=240)


GROWTH_LIMIT = 128_000
"""Bytes of traced Python memory the last third of the samples may hold over the first third. Measured:
about 50 KB on either variant (Python's bounded regular-expression cache, filled by the checkpoint
plugin's removal of the previous file at each validation, and torch's own per-operator caches, which also
grow in a raw loop and level off). A leak of one small object per step (64 bytes) over the ~2,500
steps between the thirds' middles exceeds it."""


@pytest.mark.slow
def test_memory_is_flat_over_4000_steps_with_validation_every_100() -> None:
    """The default plugins, then the same with ``profiler="simple"``, each in its own child with tracemalloc."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(soak.VARIANTS, pool.map(_soak, soak.VARIANTS), strict=True))
    assert runs["simple"]["profiler"] == "SimpleProfiler"
    assert runs["default"]["profiler"] is None
    for variant, run in runs.items():
        assert run["steps"] == 4000, variant
        assert run["validations"] == 40, variant  # validation every 100 steps really ran
        assert run["metric_writes"] >= 4000, variant  # a CSV row each step (plus the validation rows)
        assert [s["step"] for s in run["samples"]] == list(range(250, 4001, 250)), variant
        traced = run["traced"]
        assert traced["growth_bytes"] < GROWTH_LIMIT, (variant, traced, [s["traced_bytes"] for s in run["samples"]])


def test_the_growth_analysis_detects_a_leak_and_ignores_the_warm_up_sample() -> None:
    flat = [{"step": 250 * i, "traced_bytes": 70e6 + (5e6 if i == 1 else 0) + 1000 * (i % 2)} for i in range(1, 17)]
    assert abs(soak.analyse(flat)["growth_bytes"]) <= 1000  # the warm-up sample (imports) is left out
    leaky = [{"step": 250 * i, "traced_bytes": 70e6 + 64 * 250 * i} for i in range(1, 17)]  # 64 bytes a step
    result = soak.analyse(leaky)
    assert result["growth_bytes"] > GROWTH_LIMIT
    assert result["slope_bytes_per_1000_steps"] == pytest.approx(64_000)
