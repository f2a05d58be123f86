"""surge-tpu without torch_xla (the main suite's environment): discovery, availability and the errors."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest
import surge
import surge_tpu
from surge.errors import ProviderError
from surge.testing import assert_discovered

pytestmark = pytest.mark.skipif(surge_tpu.torch_xla_installed(), reason="these tests are about torch_xla missing")


def test_installed_entry_point_points_to_the_provider() -> None:
    plugin = assert_discovered("tpu", distribution="surge-tpu", kind="provider")
    assert plugin is surge_tpu.plugin
    (ep,) = [ep for ep in metadata.entry_points(group="surge.plugins") if ep.name == "tpu"]
    assert ep.value == "surge_tpu:plugin"
    assert {slot: sorted(names) for slot, names in plugin.provides.items()} == {
        "accelerator": ["tpu", "xla"],
        "strategy": ["xla"],
    }


def test_torch_xla_is_not_a_dependency() -> None:
    requires = metadata.requires("surge-tpu") or []
    assert all("extra ==" in r for r in requires if r.lower().replace("_", "-").startswith("torch-xla"))
    assert any(r.lower().replace("_", "-").startswith("torch-xla") for r in requires)  # in the `xla` extra


def test_unavailable_without_torch_xla() -> None:
    assert not surge_tpu.torch_xla_installed()
    assert not surge_tpu.TPUAccelerator.is_available()
    assert not surge_tpu.XLAAccelerator.is_available()


@pytest.mark.slow
def test_importing_the_plugin_does_not_import_torch_xla() -> None:
    code = (
        "import sys, surge, surge_tpu\n"
        "surge.Trainer(accelerator='cpu', logger=False, enable_progress_bar=False)\n"  # discovery loads the plugin
        "assert 'tpu' in surge_tpu.plugin.provides['accelerator']\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch_xla')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["tpu", "xla"])
def test_accelerator_names_what_to_install(make_trainer, name) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as info:
        make_trainer(accelerator=name)
    message = str(info.value)
    assert isinstance(info.value, surge.SurgeError)
    assert f"trainer.accelerator: '{name}'" in message
    assert "torch_xla" in message and "pip install 'surge-tpu[xla]'" in message
    assert "accelerator='auto' or 'cpu'" in message


def test_xla_strategy_names_what_to_install(make_trainer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError, match=r"trainer.strategy: 'xla'.*needs torch_xla.*surge-tpu\[xla\]"):
        make_trainer(accelerator="cpu", strategy="xla")


def test_auto_does_not_pick_tpu_without_torch_xla(make_trainer) -> None:  # type: ignore[no-untyped-def]
    trainer = make_trainer()
    assert trainer.accelerator.name not in ("tpu", "xla")


def test_cpu_fit_is_unaffected(tiny_fit) -> None:  # type: ignore[no-untyped-def]
    fit = tiny_fit(accelerator="cpu", logger=False, enable_progress_bar=False)
    assert fit.trainer.state.global_step == 2
    assert fit.trainer.catalog.records["tpu"].status != "active"


@pytest.mark.slow
def test_a_torch_xla_that_fails_to_import_is_explained(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # torch_xla built for another torch fails at import with undefined symbols; a stand-in package does the same
    (tmp_path / "torch_xla").mkdir()
    (tmp_path / "torch_xla" / "__init__.py").write_text("raise ImportError('undefined symbol: _ZN5torch3foo')\n")
    code = (
        "import surge, surge_tpu\n"
        "from surge.errors import ProviderError\n"
        "assert surge_tpu.TPUAccelerator.is_available()\n"  # found, and PJRT_DEVICE is set
        "try:\n"
        "    surge.Trainer(accelerator='tpu', logger=False)\n"
        "except ProviderError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PJRT_DEVICE": "CPU"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "torch_xla is installed but fails to import with torch" in out.stdout, out.stdout + out.stderr
    assert "undefined symbol" in out.stdout and "surge-tpu[xla]" in out.stdout
