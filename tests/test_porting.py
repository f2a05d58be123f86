"""The porting check: LightningModules written as Lightning's documentation writes them run under Surge after
their import lines, and nothing else, are rewritten (the mapping of docs/porting.md).

``tests/porting/*.py`` are those programs, with Lightning's imports (Lightning need not be installed: they are
read as text). :func:`port` rewrites each import of ``lightning``/``pytorch_lightning`` by the tables below and
refuses any it has no entry for; the tests check that nothing but import statements changed, execute the result,
and train, validate, test and predict with it.
"""

from __future__ import annotations

import ast
import difflib
import math
import os
import types
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from surge_csv import read_metrics

PORTING = Path(__file__).parent / "porting"

COMPAT = "surge.compat"
"""Lightning's top-level names re-exported (``LightningModule``, ``LightningDataModule``, ``Trainer``, ...)."""

MODULES = {"lightning.pytorch": COMPAT}
"""``import X as Y`` -> ``import MODULES[X] as Y``. Here and in ``NAMES``, ``lightning``, ``lightning.pytorch`` and
``pytorch_lightning`` (and their submodules) read alike, as ``lightning.pytorch``."""

NAMES = {
    "lightning.pytorch": {
        "LightningModule": COMPAT,
        "LightningDataModule": COMPAT,
        "Trainer": COMPAT,
        "seed_everything": COMPAT,
    },
    "lightning.pytorch.callbacks": {
        "EarlyStopping": "surge_callbacks",
        "Timer": "surge_callbacks",
        "GradientAccumulationScheduler": "surge_callbacks",
        "DeviceStatsMonitor": "surge_callbacks",
        "ModelCheckpoint": "surge_checkpoint",
        "LearningRateMonitor": "surge_progress",
        "StochasticWeightAveraging": "surge_swa",
    },
}
"""``from X import name`` -> ``from NAMES[X][name] import name``."""


class UnmappedImport(Exception):
    pass


def _canonical(module: str) -> str:
    for prefix in ("pytorch_lightning", "lightning.pytorch", "lightning"):
        if module == prefix or module.startswith(prefix + "."):
            return "lightning.pytorch" + module[len(prefix) :]
    return module


def _is_lightning(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in ("lightning", "pytorch_lightning")


def _rewrite(node: ast.Import | ast.ImportFrom) -> list[str]:
    statements: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if not _is_lightning(alias.name):
                statements.append(ast.unparse(ast.Import(names=[alias])))
                continue
            # `import lightning.pytorch` (no `as`) binds `lightning`, which no module here stands in for
            target = MODULES.get(_canonical(alias.name)) if alias.asname or "." not in alias.name else None
            if target is None:
                raise UnmappedImport(f"no Surge mapping for `import {alias.name}` (line {node.lineno})")
            statements.append(f"import {target} as {alias.asname or alias.name}")
        return statements
    module = _canonical(node.module or "")
    table = NAMES.get(module, {})
    for alias in node.names:
        if alias.name not in table:
            raise UnmappedImport(f"no Surge mapping for `from {node.module} import {alias.name}` (line {node.lineno})")
        renamed = f" as {alias.asname}" if alias.asname else ""
        statements.append(f"from {table[alias.name]} import {alias.name}{renamed}")
    return statements


def port(source: str) -> str:
    """``source`` with every Lightning import statement replaced by its Surge equivalent; other lines untouched."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if not any(_is_lightning(a.name) for a in node.names):
                continue
        elif not (isinstance(node, ast.ImportFrom) and _is_lightning(node.module)):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = lines[first][: node.col_offset]
        rest = lines[last][node.end_col_offset :].strip()
        assert not indent.strip() and (not rest or rest.startswith("#")), f"line {node.lineno}: not on lines of its own"
        edits.append((first, last, "".join(f"{indent}{s}\n" for s in _rewrite(node))))
    for first, last, text in sorted(edits, reverse=True):
        lines[first : last + 1] = [text]
    return "".join(lines)


def load_ported(name: str) -> tuple[str, str, types.ModuleType]:
    """The original source of ``tests/porting/<name>.py``, its ported text, and the ported text executed."""
    source = (PORTING / f"{name}.py").read_text()
    ported = port(source)
    module = types.ModuleType(f"ported_{name}")
    module.__file__ = str(PORTING / f"{name}.py")
    exec(compile(ported, f"<{name}.py ported to surge>", "exec"), module.__dict__)
    return source, ported, module


class _DropImports(ast.NodeTransformer):
    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None


def _without_imports(source: str) -> str:
    return ast.dump(_DropImports().visit(ast.parse(source)))


def _imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def _run_dir(trainer: Any) -> str:
    assert trainer.run_dir is not None
    return str(trainer.run_dir)


def _checkpoints(directory: str) -> list[str]:
    return sorted(str(p) for p in Path(directory).glob("*.ckpt"))


@pytest.mark.parametrize("name", ["autoencoder", "classifier", "callbacks"])
def test_porting_rewrites_import_statements_only(name: str) -> None:
    source = (PORTING / f"{name}.py").read_text()
    ported = port(source)
    assert any(_is_lightning(m) for m in _imported_modules(source))
    assert not any(_is_lightning(m) for m in _imported_modules(ported))
    assert _without_imports(ported) == _without_imports(source)  # the program itself is the documentation's
    changed = [
        line[1:]
        for line in difflib.unified_diff(source.splitlines(), ported.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed
    for line in changed:
        statement = ast.parse(line.strip()).body
        assert len(statement) == 1 and isinstance(statement[0], (ast.Import, ast.ImportFrom)), line


@pytest.mark.parametrize(
    "line",
    [
        "from lightning.pytorch.strategies import DDPStrategy",
        "from pytorch_lightning.loggers import TensorBoardLogger",
        "import lightning.pytorch",
        "from lightning.pytorch.callbacks import Callback",
    ],
)
def test_an_import_without_a_mapping_is_refused_by_name(line: str) -> None:
    with pytest.raises(UnmappedImport, match="no Surge mapping for"):
        port(line + "\n")


def test_readme_autoencoder_trains_validates_tests_and_predicts(tmp_path: Path) -> None:
    _, _, ported = load_ported("autoencoder")
    result = ported.main(str(tmp_path), max_epochs=3)
    trainer, model = result["trainer"], result["model"]
    assert isinstance(model, surge.Module) and type(model).__name__ == "LitAutoEncoder"
    assert trainer.current_epoch == 3 and trainer.global_step == 3 * 8

    rows = read_metrics(_run_dir(trainer))
    train_loss = [(r["epoch"], r["train_loss"]) for r in rows if r.get("train_loss") is not None]
    assert len(train_loss) == 3 * 8  # self.log("train_loss", loss) in training: every step (log_every_n_steps=1)
    first = sum(v for e, v in train_loss if e == 0) / 8
    last = sum(v for e, v in train_loss if e == 2) / 8
    assert last < 0.8 * first, (first, last)
    val_loss = [r["val_loss"] for r in rows if r.get("val_loss") is not None]
    assert len(val_loss) == 3 + 1 and val_loss[2] < val_loss[0]  # one per fit epoch, then trainer.validate's
    assert math.isclose(val_loss[3], val_loss[2], rel_tol=1e-5)  # the same weights, the same loss

    (validated,) = result["validated"]
    (tested,) = result["tested"]
    assert set(validated) == {"val_loss"} and math.isclose(validated["val_loss"], val_loss[-1], rel_tol=1e-5)
    assert set(tested) == {"test_loss"} and tested["test_loss"] < first
    assert result["embeddings"].shape == (4, 3)
    predictions = result["predictions"]
    assert [p.shape for p in predictions] == [(2, 3), (2, 3)]
    assert torch.allclose(torch.cat(predictions), result["embeddings"], atol=1e-6)

    (last_ckpt,) = _checkpoints(os.path.join(_run_dir(trainer), "checkpoints"))
    saved = surge.checkpoint.load(last_ckpt)
    assert saved["epoch"] == 2 and saved["global_step"] == 24
    assert all(torch.equal(saved["state_dict"][k], v) for k, v in model.state_dict().items())


def test_docs_classifier_with_datamodule_hparams_and_plateau_scheduler(tmp_path: Path) -> None:
    _, _, ported = load_ported("classifier")
    result = ported.main(str(tmp_path), max_epochs=4)
    trainer, model, dm = result["trainer"], result["model"], result["datamodule"]
    assert isinstance(dm, surge.DataModule) and (tmp_path / "blobs.pt").exists()  # prepare_data ran
    assert dict(model.hparams) == {"hidden_dim": 32, "num_classes": 4, "learning_rate": 0.05}
    assert model.hparams.learning_rate == 0.05 and dict(dm.hparams) == {"data_dir": str(tmp_path), "batch_size": 32}

    # on_train_epoch_end saw current_epoch, global_step and callback_metrics as Lightning's would
    epochs = model.epoch_train_losses
    assert [(e, s) for e, s, _ in epochs] == [(0, 8), (1, 16), (2, 24), (3, 32)]
    assert epochs[-1][2] < 0.5 * epochs[0][2], epochs

    scheduler = trainer.lr_scheduler_configs[0]
    assert isinstance(scheduler.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert scheduler.monitor == "val_loss" and scheduler.scheduler.last_epoch == 4  # stepped once per epoch

    rows = read_metrics(_run_dir(trainer))
    columns = {k for r in rows for k, v in r.items() if v is not None}
    assert {"train_loss_step", "train_loss_epoch", "val_loss", "val_acc", "test_acc"} <= columns
    assert "hidden_dim: 32" in (Path(_run_dir(trainer)) / "hparams.yaml").read_text()

    (validated,) = result["validated"]
    (tested,) = result["tested"]
    assert set(validated) == {"val_loss", "val_acc"} and validated["val_acc"] > 0.9
    assert set(tested) == {"test_acc"} and tested["test_acc"] > 0.9
    predicted = torch.cat(result["predictions"])
    assert predicted.shape == (80,) and set(predicted.tolist()) <= {0, 1, 2, 3}
    labels = torch.cat([y for _, y in dm.predict_dataloader()])
    assert (predicted == labels).float().mean() > 0.9

    (saved,) = _checkpoints(os.path.join(_run_dir(trainer), "checkpoints"))
    checkpoint = surge.checkpoint.load(saved)
    assert checkpoint["hparams"] == dict(model.hparams) and checkpoint["epoch"] == 3


def test_callbacks_run_as_plugins(tmp_path: Path) -> None:
    _, _, ported = load_ported("callbacks")  # Trainer(callbacks=[...]) as Lightning writes it
    result = ported.main(str(tmp_path), max_epochs=30)
    trainer = result["trainer"]

    early_stopping, epochs = result["early_stopping"], result["epochs_trained"]
    assert 0 < early_stopping.stopped_epoch < 29 and epochs == early_stopping.stopped_epoch + 1  # stopped early,
    assert early_stopping.wait_count == 2 and early_stopping.best_epoch < early_stopping.stopped_epoch  # by patience
    assert result["final_val_acc"] > 0.9
    kept = _checkpoints(str(tmp_path / "checkpoints"))
    assert len(kept) == 2 and result["best_model_path"] in kept  # save_top_k=2, monitor="val_loss"
    assert all(surge.checkpoint.is_valid(path) for path in kept)
    assert not (Path(_run_dir(trainer)) / "checkpoints").exists()  # the default checkpoint stood aside
    (tested,) = result["tested"]
    assert tested["test_acc"] > 0.9
    best = surge.checkpoint.load(result["best_model_path"])["state_dict"]  # ckpt_path="best" loaded these weights
    assert all(torch.equal(best[k], v) for k, v in result["model"].state_dict().items())

    optimizer = trainer.optimizers[0]  # StepLR(step_size=1, gamma=0.5), stepped once per finished epoch
    assert math.isclose(optimizer.param_groups[0]["lr"], 0.1 * 0.5**epochs, rel_tol=1e-6)


def _guide_block(after: str) -> str:
    """The first ```python block of docs/porting.md that starts with the line ``after``."""
    guide = (Path(__file__).parents[1] / "docs" / "porting.md").read_text()
    blocks = [b.split("```", 1)[0] for b in guide.split("```python\n")[1:]]
    (block,) = [b for b in blocks if b.startswith(after + "\n")]
    return block


def test_the_guides_callback_as_plugin_and_weight_loading_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from surge.testing import TinyDataModule, TinyModule

    monkeypatch.chdir(tmp_path)
    printed: list[tuple[Any, ...]] = []
    namespace: dict[str, Any] = {"surge": surge, "print": lambda *args: printed.append(args)}
    exec(_guide_block("# Surge"), namespace)
    assert "PrintLoss" in namespace["trainer"].plugin_names  # the guide's Trainer(plugins=[PrintLoss()])
    trainer = surge.Trainer(max_epochs=1, plugins=[namespace["PrintLoss"]()], enable_progress_bar=False)
    model = TinyModule()
    trainer.fit(model, datamodule=TinyDataModule(n_train=8 * 104))  # batches 0 and 100 print
    assert [step for step, _ in printed] == [1, 101]
    assert all(isinstance(loss, torch.Tensor) and loss.dim() == 0 for _, loss in printed)

    (path,) = _checkpoints(os.path.join(_run_dir(trainer), "checkpoints"))
    loaded: dict[str, Any] = {"surge": surge, "LitAutoEncoder": TinyModule, "path": path}
    exec(_guide_block("model = LitAutoEncoder()"), loaded)
    assert all(torch.equal(loaded["model"].state_dict()[k], v) for k, v in model.state_dict().items())
