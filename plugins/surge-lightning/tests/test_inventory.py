"""The inventory of Lightning's public surface, enforced: the surface regenerated from the installed Lightning
must match the classification file (``surge_lightning/inventory/lightning.toml``) name for name, every
implemented name must name tests that exist, and the file must say what it means to (docs/porting.md,
"The inventory")."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import surge
from surge.errors import SurgeError
from surge_lightning import inventory
from surge_lightning.inventory import check, markdown, surface

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


# -- what the classification says, at the mirrored paths ---------------------------------------------------------------
def _modules() -> list[str]:
    """Every Lightning module the file speaks of: the refused ones and those with a section."""
    return sorted({*inventory.load().modules, *(s for s in inventory.load().sections if s not in CLASSES)})


CLASSES = inventory.CLASS_SECTIONS


@pytest.mark.parametrize("module", _modules())
def test_each_module_imports_at_its_mirrored_path_or_says_why_not(module: str) -> None:
    refused = inventory.load().refused_module(module)
    if refused is None:
        importlib.import_module(inventory.mirrored(module))
        return
    with pytest.raises(inventory.Refused) as raised:
        importlib.import_module(inventory.mirrored(module))
    assert raised.value.entry == refused and refused.reason in str(raised.value) and refused.use in str(raised.value)


def _module_names(status: str) -> list[tuple[str, str]]:
    return [
        (section, name)
        for section, names in inventory.load().sections.items()
        if section not in CLASSES
        for name, entry in names.items()
        if (entry.status == "implemented") == (status == "implemented")
    ]


@pytest.mark.parametrize(("module", "name"), _module_names("implemented"))
def test_each_implemented_name_resolves_at_its_mirrored_path(module: str, name: str) -> None:
    assert getattr(importlib.import_module(inventory.mirrored(module)), name) is not None


@pytest.mark.parametrize(("module", "name"), _module_names("not served"))
def test_each_refused_or_mapped_name_raises_saying_why(module: str, name: str) -> None:
    entry = inventory.load().entry(module, name)
    assert entry is not None
    mirrored = importlib.import_module(inventory.mirrored(module))
    with pytest.raises(inventory.Refused, match=re.escape(entry.message())):
        getattr(mirrored, name)
    with pytest.raises(inventory.Refused, match=re.escape(entry.message())):
        exec(f"from {mirrored.__name__} import {name}", {})


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """An object of each of surge_lightning's classes, built with its defaults."""
    import surge_lightning.pytorch as pl

    class Mine(pl.loggers.Logger):
        name, version = "mine", 0

        def log_metrics(self, metrics: Any, step: Any = None) -> None: ...

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None: ...

    here = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("trainer"))
    try:
        trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    finally:
        os.chdir(here)
    return {
        "lightning.pytorch.Trainer": trainer,
        "lightning.pytorch.LightningModule": pl.LightningModule(),
        "lightning.pytorch.LightningDataModule": pl.LightningDataModule(),
        "lightning.pytorch.Callback": pl.Callback(),
        "lightning.pytorch.loggers.Logger": Mine(),
    }


def _members(status: str) -> list[tuple[str, str]]:
    return [
        (section, name)
        for section in CLASSES
        for name, entry in inventory.load().sections[section].items()
        if (entry.status == "implemented") == (status == "implemented")
    ]


@pytest.mark.parametrize(("section", "name"), _members("implemented"))
def test_each_implemented_member_is_there(
    section: str, name: str, instances: dict[str, object], lightning: surface.Surface
) -> None:
    """A member Surge serves is on surge_lightning's class or object; a hook is what a user defines, so Surge need
    not have it (the side-by-side test named for it shows that Surge calls it)."""
    if name in lightning.hooks.get(section, set()):
        return
    obj = instances[section]
    assert hasattr(type(obj), name) or name in vars(obj)


@pytest.mark.parametrize(("section", "name"), _members("not served"))
def test_each_refused_or_mapped_member_raises_saying_why(section: str, name: str, instances: dict[str, object]) -> None:
    entry = inventory.load().sections[section][name]
    obj = instances[section]
    if entry.status == "mapped" and (hasattr(type(obj), name) or name in vars(obj)):
        # Surge has the name for something else (trainer.state): the line says what Surge's means
        assert entry.spelling and entry.reason
        return
    with pytest.raises(inventory.RefusedMember, match=re.escape(entry.message())):
        getattr(obj, name)
    assert not hasattr(obj, name)  # an AttributeError, so probes (hasattr, getattr with a default) see no such name
    with pytest.raises(inventory.RefusedMember, match=re.escape(entry.message())):
        setattr(obj, name, None)  # Surge would ignore the value: `self.prepare_data_per_node = False` says so


def _refused_hooks() -> list[tuple[str, str]]:
    return [(s, n) for s in CLASSES for n, e in inventory.load().not_served(s).items() if e.hook]


@pytest.mark.parametrize(("section", "name"), _refused_hooks())
def test_overriding_a_refused_hook_is_refused_before_the_run(section: str, name: str, tmp_path: Path) -> None:
    import surge_lightning.pytorch as pl
    from surge.testing import TinyDataModule, TinyModule

    entry = inventory.load().sections[section][name]
    module: type = TinyModule
    data: type = TinyDataModule
    if section == "lightning.pytorch.LightningModule":
        module = type("Mine", (pl.LightningModule, TinyModule), {name: lambda self, *args, **kwargs: None})
    elif section == "lightning.pytorch.LightningDataModule":
        data = type("Mine", (pl.LightningDataModule, TinyDataModule), {name: lambda self, *args, **kwargs: None})
    else:
        pytest.fail(f"a refused hook of {section}: extend this test to it")
    os.chdir(tmp_path)
    trainer = pl.Trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_progress_bar=False)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(surge.ConfigError, match=re.escape(f"Mine.{name}: {entry.message()}")):
        trainer.fit(module(), datamodule=data())
    assert sorted(tmp_path.rglob("*")) == before  # refused before anything was written


def test_a_callback_overriding_a_refused_hook_is_refused_when_it_is_adapted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Callback hook is refused today; a classification that refuses one makes the Trainer refuse its override."""
    import surge_lightning.pytorch as pl

    text = inventory.FILE.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("on_exception = ") and "test_callback" in line)
    edited = tmp_path / "lightning.toml"
    edited.write_text(text.replace(line, 'on_exception = {refused = "not here", use = "elsewhere", hook = true}', 1))
    monkeypatch.setattr(inventory, "FILE", edited)

    class Mine(pl.Callback):
        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None: ...

    class Fine(pl.Callback):
        def on_train_end(self, trainer: Any, pl_module: Any) -> None: ...

    pl.Trainer(callbacks=[Fine()], logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(surge.ConfigError, match=r"Mine\.on_exception: .*not here\. Instead: elsewhere"):
        pl.Trainer(callbacks=[Mine()], logger=False, enable_checkpointing=False, enable_progress_bar=False)


def test_docs_porting_md_holds_the_generated_tables() -> None:
    text = (ROOT / "docs" / "porting.md").read_text(encoding="utf-8")
    assert markdown.update(text) == text, (
        f"docs/porting.md's inventory tables are out of date; run `{markdown.COMMAND}`"
    )


def test_the_markdown_command_rewrites_stale_tables_and_names_missing_markers(tmp_path: Path) -> None:
    from surge_lightning.inventory.__main__ import main

    start, end = markdown.markers()
    path = tmp_path / "porting.md"
    path.write_text(f"# Porting\n\n{start}\nstale tables\n{end}\n\nafter\n", encoding="utf-8")
    assert main(["--markdown", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert "stale tables" not in text and markdown.tables() in text and text.endswith(f"{end}\n\nafter\n")
    assert markdown.update(text) == text
    with pytest.raises(ValueError, match="markers of the generated inventory tables are missing"):
        markdown.update("# Porting\n")
