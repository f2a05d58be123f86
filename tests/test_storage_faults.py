"""Storage faults during checkpoint saves: a full disk, a denied permission, an object store that drops the
connection between the data and the commit marker. Through ``surge.checkpoint.save`` and through the
``checkpoint`` plugin (``ModelCheckpoint``, synchronous and asynchronous): the checkpoints committed before
survive and load, the error names the file, and the run stops with a ``CheckpointError`` or, with
``on_save_error="warn"``, goes on.

Faults are injected two ways. Object stores: ``faulty://``, an in-memory fsspec filesystem whose uploads fail
as ``FAULTS`` says (an upload that fails never replaces the object, as on S3). Local disks, which
``surge.checkpoint`` writes without fsspec: its ``open`` is replaced by one whose files stop accepting bytes
when the simulated disk is full. Permission denied is a real read-only directory where ``chmod`` binds; the
tests run as root in CI containers, where it does not, so there the same ``open`` raises ``EACCES`` (as the
kernel would) and the object-store variant raises it from ``faulty://``.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest
import surge
import torch
from _fuzzing import examples  # tests/ is on sys.path (pytest `pythonpath`)
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger
from surge import checkpoint as store
from surge.checkpoint import CheckpointError, CheckpointSaveError
from surge.testing import TinyDataModule, TinyModule
from surge_checkpoint import ModelCheckpoint, WriteError

# -- the faults ---------------------------------------------------------------------------------------------


@dataclass
class Faults:
    """What the next writes meet. ``free``: bytes left on the (simulated) disk, ``None`` for plenty;
    ``deny``: every write is refused with EACCES; ``drop``: uploads whose path ends with it fail with a
    ConnectionError (``".sha256"``: after the data, before the commit marker). ``only``: the faults hit
    only paths containing it (one checkpoint, whichever thread writes it when)."""

    free: int | None = None
    deny: bool = False
    drop: str | None = None
    only: str | None = None

    def take(self, path: str, size: int) -> int:
        """Account for writing ``size`` bytes to ``path``; returns how many fit, raising where the fault says."""
        if self.only is not None and self.only not in path:
            return size
        if self.deny:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        if self.drop is not None and path.endswith(self.drop):
            raise ConnectionError(f"connection reset by peer while uploading {path}")
        if self.free is None:
            return size
        fits = min(size, self.free)
        self.free -= fits
        return fits


FAULTS = Faults()


class FaultyFileSystem(MemoryFileSystem):
    """``faulty://``: an in-memory object store whose uploads fail as ``FAULTS`` says. A failed upload stores
    nothing (object stores never expose a partial object)."""

    protocol = "faulty"
    store: ClassVar[dict[str, Any]] = {}  # type: ignore[misc]
    pseudo_dirs: ClassVar[list[str]] = [""]  # type: ignore[misc]

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if FAULTS.take(path, len(value)) < len(value):
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (bucket quota exceeded)", path)
        super().pipe_file(path, value, mode=mode, **kwargs)


fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)


class _DiskFile:
    """A real file whose writes stop at the simulated disk's end: what fits is written, then ENOSPC."""

    def __init__(self, file: Any, path: str) -> None:
        self._file, self._path = file, path

    def write(self, data: bytes) -> int:
        fits = FAULTS.take(self._path, len(data))
        self._file.write(data[:fits])
        if fits < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the kernel says it: without the path
        return fits

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _DiskFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._file.close()


def _disk_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    if not any(c in mode for c in "wxa"):
        return open(path, mode, *args, **kwargs)
    if FAULTS.deny:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
    return _DiskFile(open(path, mode, *args, **kwargs), os.fspath(path))


@pytest.fixture(autouse=True)
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    """No faults, an empty ``faulty://`` store, and the local-disk hook installed."""
    FAULTS.__init__()  # type: ignore[misc]
    FaultyFileSystem.store.clear()
    FaultyFileSystem.pseudo_dirs[:] = [""]
    monkeypatch.setattr(store, "open", _disk_open, raising=False)  # the module's `open`, used for every write
    yield FAULTS
    FAULTS.__init__()  # type: ignore[misc]
    FaultyFileSystem.store.clear()


def _deny_writes(directory: Path) -> str:
    """Make ``directory`` refuse new files: ``chmod a-w`` where it binds, else (root) the EACCES hook.
    Returns which one was used."""
    directory.chmod(stat.S_IRUSR | stat.S_IXUSR)
    probe = directory / ".probe"
    try:
        probe.touch()
    except PermissionError:
        return "chmod"
    probe.unlink()
    FAULTS.deny = True  # root ignores the mode bits: refuse as the kernel would for anyone else
    return "eacces"


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    yield messages
    logger.remove(sink)


def _weights(value: float) -> dict[str, Any]:
    return {"state_dict": {"w": torch.full((64,), value)}, "global_step": int(value)}


def _value(url: str) -> float:
    return float(store.load(url)["state_dict"]["w"][0])


def _temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".surge-tmp")]


# -- surge.checkpoint.save ----------------------------------------------------------------------------------


def _sizes_of_one_save(tmp_path: Path) -> tuple[int, int]:
    """(data file, data file and marker) of one save of ``_weights``."""
    probe = tmp_path / "probe"
    store.save(_weights(0.0), str(probe / "x.ckpt"))
    return (probe / "x.ckpt").stat().st_size, sum(p.stat().st_size for p in probe.iterdir())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0.0, 0.999), overwrite=st.booleans())
def test_a_full_local_disk_keeps_the_previous_checkpoint(tmp_path: Path, fraction: float, overwrite: bool) -> None:
    """Whatever byte the disk fills up at, the committed checkpoint still loads and the error names the file."""
    directory = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: hypothesis shares tmp_path
    old = str(directory / "a.ckpt")
    store.save(_weights(1.0), old)
    target = old if overwrite else str(directory / "b.ckpt")
    data_size, total = _sizes_of_one_save(tmp_path)
    FAULTS.free = free = int(fraction * total)
    with pytest.raises(CheckpointSaveError) as info:
        store.save(_weights(2.0), target)
    FAULTS.free = None
    assert target in str(info.value) and "No space left on device" in str(info.value)
    assert isinstance(info.value, OSError) and info.value.__cause__.errno == errno.ENOSPC  # type: ignore[union-attr]
    if overwrite:
        # the old data until the new data was complete and in place (then only a marker write failed)
        assert _value(old) == 1.0 if free < data_size else _value(old) in (1.0, 2.0)
    else:
        assert _value(old) == 1.0
        with pytest.raises(CheckpointError, match="b.ckpt"):
            store.load(target)
    assert _temp_files(directory) == []
    store.save(_weights(3.0), target)  # with space again, the next save works as usual
    assert _value(target) == 3.0


@settings(max_examples=examples(40), deadline=None)
@given(fraction=st.floats(0.0, 0.999), overwrite=st.booleans())
def test_a_full_object_store_keeps_the_previous_checkpoint(fraction: float, overwrite: bool) -> None:
    """The quota runs out during the data upload (a drop before the marker: the next test)."""
    FAULTS.__init__()  # type: ignore[misc]
    FaultyFileSystem.store.clear()
    old = "faulty://bucket/run/a.ckpt"
    store.save(_weights(1.0), old)
    target = old if overwrite else "faulty://bucket/run/b.ckpt"
    FAULTS.free = int(fraction * len(fsspec.filesystem("faulty").cat_file(old)))
    with pytest.raises(CheckpointSaveError, match=target.replace(".", r"\.")):
        store.save(_weights(2.0), target)
    FAULTS.free = None
    assert _value(old) == 1.0
    if not overwrite:
        with pytest.raises(CheckpointError, match="b.ckpt"):
            store.load(target)


def test_a_connection_dropped_before_the_commit_marker_leaves_no_checkpoint() -> None:
    old, new = "faulty://bucket/run/a.ckpt", "faulty://bucket/run/b.ckpt"
    store.save(_weights(1.0), old)
    FAULTS.drop = store.MARKER_SUFFIX
    with pytest.raises(CheckpointSaveError, match=r"b\.ckpt: ConnectionError: connection reset") as info:
        store.save(_weights(2.0), new)
    assert isinstance(info.value.__cause__, ConnectionError)
    FAULTS.drop = None
    assert fsspec.filesystem("faulty").exists(new)  # the data went up, its marker did not
    with pytest.raises(CheckpointError, match=r"b\.ckpt.*no commit marker"):
        store.load(new)
    assert store.newest_valid([old, new]) == old and _value(old) == 1.0


@pytest.mark.parametrize("where", ["local", "object store"])
def test_permission_denied_names_the_file_and_keeps_the_previous_checkpoint(tmp_path: Path, where: str) -> None:
    if where == "local":
        old, new = str(tmp_path / "run" / "a.ckpt"), str(tmp_path / "run" / "b.ckpt")
    else:
        old, new = "faulty://bucket/run/a.ckpt", "faulty://bucket/run/b.ckpt"
    store.save(_weights(1.0), old)
    if where == "local":
        _deny_writes(tmp_path / "run")
    else:
        FAULTS.deny = True
    try:
        with pytest.raises(CheckpointSaveError, match=r"b\.ckpt: PermissionError: .*Permission denied"):
            store.save(_weights(2.0), new)
        with pytest.raises(CheckpointSaveError, match=r"a\.ckpt: PermissionError"):
            store.save(_weights(2.0), old)  # an overwrite is refused as well, and changes nothing
    finally:
        if where == "local":
            (tmp_path / "run").chmod(0o755)
    assert _value(old) == 1.0
    with pytest.raises(CheckpointError, match="b.ckpt"):
        store.load(new)


# -- through the checkpoint plugin --------------------------------------------------------------------------


class FillsUp(TinyModule):
    """Sets ``FAULTS`` from ``plan`` (global step -> Faults field values) at the start of those steps."""

    def __init__(self, plan: dict[int, dict[str, Any]]) -> None:
        super().__init__()
        self.plan = plan

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        for name, value in self.plan.get(self.trainer.global_step, {}).items():
            setattr(FAULTS, name, value)


def _fit(
    tmp_path: Path, callback: ModelCheckpoint, model: surge.Module, ckpt_path: str | None = None, **kwargs: Any
) -> surge.Trainer:
    kwargs = {
        "default_root_dir": str(tmp_path / "root"),
        "max_epochs": 2,
        "limit_train_batches": 4,
        "limit_val_batches": 2,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **kwargs,
    }
    trainer = surge.Trainer(plugins=[callback], **kwargs)
    torch.manual_seed(0)
    trainer.fit(model, datamodule=TinyDataModule(), ckpt_path=ckpt_path)
    return trainer


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".ckpt") and not p.name.startswith("."))


def test_a_full_disk_stops_the_run_with_a_checkpoint_error_and_last_resumes(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpts"
    callback = ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2, save_top_k=1)
    with pytest.raises(CheckpointSaveError, match=r"epoch=0-step=4\.ckpt: OSError: .*No space left") as info:
        _fit(tmp_path, callback, FillsUp({3: {"free": 0}}))
    assert any("checkpoint" in note for note in getattr(info.value, "__notes__", []))  # the plugin is named
    assert _names(ckpts) == ["epoch=0-step=2.ckpt"] and _temp_files(ckpts) == []
    assert store.load(str(ckpts / "epoch=0-step=2.ckpt"))["global_step"] == 2
    FAULTS.free = None  # space again: the run continues from the last committed checkpoint
    resumed = _fit(tmp_path, ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2), TinyModule(), ckpt_path="last")
    assert resumed.global_step == 8 and _names(ckpts) == ["epoch=1-step=8.ckpt"]


def test_on_save_error_warn_goes_on_and_forgets_the_failed_checkpoint(tmp_path: Path, warnings: list[str]) -> None:
    ckpts = tmp_path / "ckpts"
    callback = ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2, save_top_k=1, on_save_error="warn")
    model = FillsUp({3: {"free": 0}, 5: {"free": None}})  # the disk is full while step 4 is saved
    trainer = _fit(tmp_path, callback, model)
    assert trainer.global_step == 8 and trainer.state.status == "finished"
    assert [m for m in warnings if "epoch=0-step=4.ckpt" in m and "No space left" in m and "goes on" in m]
    assert _names(ckpts) == ["epoch=1-step=8.ckpt"]  # step 2 was kept until step 6 was committed, as usual
    assert callback.best_model_path == str(ckpts / "epoch=1-step=8.ckpt")
    assert store.load(callback.best_model_path)["global_step"] == 8


def test_on_save_error_warn_keeps_the_bookkeeping_of_the_committed_checkpoints(
    tmp_path: Path, warnings: list[str]
) -> None:
    ckpts = tmp_path / "ckpts"
    callback = ModelCheckpoint(
        dirpath=ckpts, every_n_train_steps=2, save_top_k=-1, save_last=True, on_save_error="warn"
    )
    _fit(tmp_path, callback, FillsUp({5: {"free": 0}}), max_epochs=2)  # full from step 6 on
    assert _names(ckpts) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
    assert callback.best_model_path == str(ckpts / "epoch=0-step=4.ckpt")
    assert store.load(callback.last_model_path)["global_step"] == 4
    # steps 6 and 8, then last.ckpt at the end of the epoch: step 8 was not saved, so that save is due again
    assert len([m for m in warnings if "on_save_error='warn'" in m]) == 3


def test_a_read_only_directory_stops_the_run_or_is_warned_about(tmp_path: Path, warnings: list[str]) -> None:
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    store.save(_weights(1.0), str(ckpts / "previous.ckpt"))
    _deny_writes(ckpts)
    try:
        with pytest.raises(CheckpointSaveError, match=r"epoch=0-step=2\.ckpt: PermissionError"):
            _fit(tmp_path, ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2), TinyModule())
        trainer = _fit(
            tmp_path, ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2, on_save_error="warn"), TinyModule()
        )
    finally:
        ckpts.chmod(0o755)
    assert trainer.global_step == 8 and len([m for m in warnings if "PermissionError" in m]) == 4
    assert _names(ckpts) == ["previous.ckpt"] and _value(str(ckpts / "previous.ckpt")) == 1.0


def test_an_upload_cut_before_the_marker_stops_the_run_and_last_falls_back(tmp_path: Path) -> None:
    url = "faulty://bucket/run-7"
    callback = ModelCheckpoint(dirpath=url, every_n_train_steps=2, save_top_k=-1, save_last=True)
    with pytest.raises(CheckpointSaveError, match=r"faulty://bucket/run-7/epoch=0-step=4\.ckpt: ConnectionError"):
        _fit(tmp_path, callback, FillsUp({3: {"drop": store.MARKER_SUFFIX}}))
    FAULTS.drop = None
    assert store.load(f"{url}/epoch=0-step=2.ckpt")["global_step"] == 2
    assert store.load(f"{url}/last.ckpt")["global_step"] == 2  # the overwrite of last.ckpt was never reached
    with pytest.raises(CheckpointError, match="no commit marker"):
        store.load(f"{url}/epoch=0-step=4.ckpt")  # uploaded data without a marker is not a checkpoint
    resumed = _fit(tmp_path, ModelCheckpoint(dirpath=url, every_n_train_steps=2), TinyModule(), ckpt_path="last")
    assert resumed.global_step == 8


@pytest.mark.parametrize("where", ["local", "object store"])
def test_an_asynchronous_save_that_fails_surfaces_at_the_next_step(tmp_path: Path, where: str) -> None:
    dirpath = str(tmp_path / "ckpts") if where == "local" else "faulty://bucket/async"
    FAULTS.only = "step=4"  # the save of step 4, written in the background while step 5 runs
    FAULTS.free, FAULTS.drop = (0, None) if where == "local" else (None, store.MARKER_SUFFIX)
    callback = ModelCheckpoint(dirpath=dirpath, every_n_train_steps=2, save_top_k=-1, async_save=True)
    with pytest.raises(WriteError, match=r"epoch=0-step=4\.ckpt failed") as info:
        _fit(tmp_path, callback, TinyModule())
    assert isinstance(info.value, CheckpointError) and isinstance(info.value.__cause__, CheckpointSaveError)
    assert any("train_batch_end" in note or "_end'" in note for note in getattr(info.value, "__notes__", []))
    FAULTS.free = FAULTS.drop = None
    assert store.load(f"{dirpath}/epoch=0-step=2.ckpt")["global_step"] == 2


def test_an_asynchronous_final_save_that_fails_is_raised_at_the_end_of_fit(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpts"
    callback = ModelCheckpoint(dirpath=ckpts, async_save=True)  # one save, after the last epoch's validation
    with pytest.raises(WriteError, match=r"epoch=1-step=8\.ckpt failed: .*No space left"):
        _fit(tmp_path, callback, FillsUp({7: {"free": 0, "only": "step=8"}}))
    FAULTS.free = None
    assert _names(ckpts) == ["epoch=0-step=4.ckpt"] and _value_step(ckpts / "epoch=0-step=4.ckpt") == 4


def test_an_asynchronous_save_that_fails_with_warn_goes_on(tmp_path: Path, warnings: list[str]) -> None:
    ckpts = tmp_path / "ckpts"
    callback = ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2, async_save=True, on_save_error="warn")
    FAULTS.free, FAULTS.only = 0, "step=4"
    trainer = _fit(tmp_path, callback, TinyModule())
    assert trainer.global_step == 8
    assert [m for m in warnings if "epoch=0-step=4.ckpt" in m and "on_save_error='warn'" in m]
    assert _names(ckpts) == ["epoch=1-step=8.ckpt"] and _value_step(ckpts / "epoch=1-step=8.ckpt") == 8


def test_on_save_error_is_validated_with_its_path() -> None:
    with pytest.raises(surge.ConfigError, match=r"ModelCheckpoint\.on_save_error: got 'ignore'"):
        ModelCheckpoint(on_save_error="ignore")  # type: ignore[arg-type]


def _value_step(path: Path) -> int:
    return int(store.load(str(path))["global_step"])
