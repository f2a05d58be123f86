"""The inventory of Lightning's public surface, enforced: the surface regenerated from the installed Lightning
must match the classification file (``surge_lightning/inventory/lightning.toml``) name for name, every
implemented name must name tests that exist, and the file must say what it means to (docs/porting.md,
"The inventory")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from surge.errors import SurgeError
from surge_lightning import inventory
from surge_lightning.inventory import check, surface

ROOT = Path(__file__).resolve().parents[3]
"""The repository: test node ids are relative to it."""


@pytest.fixture(scope="module")
def lightning() -> surface.Surface:
    return surface.read()


def test_every_name_lightning_exposes_is_classified(lightning: surface.Surface) -> None:
    missing = check.unclassified(lightning, inventory.load())
    assert not missing, (
        f"{len(missing)} name(s) of Lightning {lightning.version} are not classified in {inventory.FILE}; "
        f"`python -m surge_lightning.inventory --missing` prints their lines:\n{check.lines_for(missing)}"
    )


def test_no_line_names_what_lightning_does_not_have(lightning: surface.Surface) -> None:
    assert check.stale(lightning, inventory.load()) == []


def test_the_hooks_refused_are_flagged_as_hooks(lightning: surface.Surface) -> None:
    """``hook = true`` makes Surge refuse a user's override: it sits on every refused hook and on nothing else."""
    assert check.hook_flags(lightning, inventory.load()) == []


def test_every_implemented_name_names_tests_that_exist() -> None:
    assert check.missing_tests(inventory.load(), ROOT) == []


def test_a_line_deleted_from_the_file_is_caught(lightning: surface.Surface, tmp_path: Path) -> None:
    """One name's line, one member's line and one refused module's line taken out: each is reported by name."""
    lines = inventory.FILE.read_text(encoding="utf-8").splitlines(keepends=True)
    targets = {
        '"lightning.pytorch.loops" = ': ("lightning.pytorch.loops", ""),
        "ModelCheckpoint = ": ("lightning.pytorch.callbacks", "ModelCheckpoint"),
        "optimizer_step = ": ("lightning.pytorch.LightningModule", "optimizer_step"),
    }
    for start, expected in targets.items():
        index = next(i for i, line in enumerate(lines) if line.startswith(start))
        edited = tmp_path / f"without-{index}.toml"
        edited.write_text("".join(lines[:index] + lines[index + 1 :]), encoding="utf-8")
        missing = check.unclassified(lightning, inventory.load(edited))
        assert expected in missing


def test_a_line_lightning_does_not_have_is_stale(lightning: surface.Surface, tmp_path: Path) -> None:
    text = inventory.FILE.read_text(encoding="utf-8")
    edited = tmp_path / "stale.toml"
    edited.write_text(
        text.replace(
            '["lightning.pytorch.callbacks"]\n', '["lightning.pytorch.callbacks"]\nGone = {refused = "r", use = "u"}\n'
        )
    )
    assert check.stale(lightning, inventory.load(edited)) == [
        f"[lightning.pytorch.callbacks] Gone: Lightning {lightning.version} has no such name"
    ]


@pytest.mark.parametrize(
    "line",
    [
        "Timer = {implemented = []}",
        'Timer = {refused = "why"}',
        'Timer = {mapped = "x", why = "y", use = "z"}',
        'Timer = "implemented"',
        'Timer = {implemented = ["a::b"], differs = ""}',
        'Timer = {refused = "why", use = "instead", hook = true}',
    ],
)
def test_a_malformed_line_is_named(line: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'["lightning.pytorch.callbacks"]\n{line}\n', encoding="utf-8")
    with pytest.raises(SurgeError, match=r"\[lightning\.pytorch\.callbacks\] Timer"):
        inventory.load(path)


def test_the_hooks_are_read_from_lightnings_loops(lightning: surface.Surface) -> None:
    """A sample of what the ast walk must find: calls with a literal name, a name chosen by a conditional, a name
    passed through a helper's parameter, a dataclass field, and the callback state helpers."""
    module, callback = (
        lightning.hooks["lightning.pytorch.LightningModule"],
        lightning.hooks["lightning.pytorch.Callback"],
    )
    assert {"optimizer_step", "lr_scheduler_step", "configure_gradient_clipping"} <= module
    assert {"on_test_batch_start", "on_validation_batch_start", "test_step", "validation_step"} <= module
    assert {"on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"} <= module
    assert {"train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader"} <= module
    assert {"state_dict", "load_state_dict", "on_save_checkpoint", "on_load_checkpoint"} <= callback
    assert "training_step" in module and "validation_step" not in callback  # a strategy hook reaches the Module only
    assert {"on_exception", "prepare_data"} <= lightning.hooks["lightning.pytorch.LightningDataModule"]


def test_the_inventory_imports_no_lightning_at_run_time() -> None:
    code = (
        "import sys, surge_lightning.inventory as inv; inv.load(); "
        "assert not [m for m in sys.modules if m == 'lightning' or m.startswith('lightning.')], 'lightning imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_the_command_reports_the_counts_and_no_problem() -> None:
    from surge_lightning.inventory.__main__ import main

    assert main(["--root", str(ROOT)]) == 0
