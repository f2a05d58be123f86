"""Checkpoint names and files: filename templates, URLs, listing, age and removal, through fsspec."""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import fsspec
import surge
import torch
from fsspec.implementations.local import LocalFileSystem
from surge import checkpoint as store

EXTENSION = ".ckpt"
LAST = "last"
DEFAULT_FILENAME = "{epoch}-{step}"
EXPERIMENT = "experiment.json"
"""Beside a run's checkpoints (default directory): the experiment they belong to (surge.checkpoint.experiment_identity)."""

_GROUP = re.compile(r"(\{.*?)[:\}]")  # "{name" of every "{name}" / "{name:fmt}" field, as in Lightning


def template_fields(template: str) -> list[str]:
    """The metric names a filename template refers to, e.g. ``["epoch", "val_loss"]``."""
    return [group[1:] for group in _GROUP.findall(template)]


def format_name(template: str, metrics: Mapping[str, Any], auto_insert_metric_name: bool = True) -> str:
    """``"{epoch}-{val_loss:.3f}"`` with ``epoch=2, val_loss=0.1234`` gives ``"epoch=2-val_loss=0.123"``.

    Tensor values are read here (the only place a metric leaves the device). A field that names no metric
    is an error naming it and the metrics that were logged.
    """
    names = template_fields(template)
    missing = [name for name in names if name not in metrics]
    if missing:
        logged = sorted(k for k in metrics if k not in ("epoch", "step"))
        raise surge.SurgeError(
            f"ModelCheckpoint(filename={template!r}) refers to {missing}, which {'was' if len(missing) == 1 else 'were'} "
            f"not logged; logged metrics: {logged or 'none'} (plus 'epoch' and 'step'). Log it with self.log(...) "
            "before the checkpoint is saved, or remove it from the filename"
        )
    # Longest first, so "{val" does not eat into "{val_loss"; "{0[name]" supports dots and dashes in names.
    for group in sorted(set(_GROUP.findall(template)), key=len, reverse=True):
        name = group[1:]
        if auto_insert_metric_name:
            template = template.replace(group, f"{name}={{{name}")
        template = template.replace(group, f"{{0[{name}]")
    return template.format({name: as_number(metrics[name]) for name in names})


def as_number(value: Any) -> Any:
    """A logged value as a Python number (one host read for a tensor)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise surge.SurgeError(
                f"a checkpoint filename or monitor needs a scalar metric, got shape {tuple(value.shape)}"
            )
        return value.item()
    return value


def join(directory: str, name: str) -> str:
    if "://" in directory:
        return f"{directory.rstrip('/')}/{name}"
    return os.path.join(directory, name)


def parent(url: str) -> str:
    if "://" in url:
        return url.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(url)


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(url)  # type: ignore[no-any-return]


def _url(fs: fsspec.AbstractFileSystem, path: str, like: str) -> str:
    """A path from a listing, spelled the way ``like`` (the directory asked for) is."""
    if isinstance(fs, LocalFileSystem) and "://" not in like:
        return path
    return fs.unstrip_protocol(path)  # type: ignore[no-any-return]


def modified(info: Mapping[str, Any]) -> float:
    """Last-modified time (seconds since the epoch) from an fsspec ``info``/``ls`` entry of any backend."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
        return float(value)
    return 0.0


def is_checkpoint_name(name: str) -> bool:
    """Checkpoint data files only: temp files (dot-files) and commit markers are left out."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return base.endswith(EXTENSION) and not base.startswith(".")


def list_checkpoints(directory: str) -> dict[str, tuple[float, bool]]:
    """Every checkpoint directly in ``directory`` as URL -> (when it was written, whether it has a commit
    marker): the later of the data file's and the marker's times, so a data file replaced after its marker
    (an overwrite cut short) counts as new and is checked, and refused, before older ones. One listing, no
    reads; nothing when the directory does not exist."""
    fs, path = _fs(directory)
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    times = {entry["name"].rstrip("/"): modified(entry) for entry in entries if entry.get("type") == "file"}
    found = {}
    for name, mtime in times.items():
        if is_checkpoint_name(name):
            marker = times.get(name + store.MARKER_SUFFIX)
            found[_url(fs, name, directory)] = (mtime, False) if marker is None else (max(mtime, marker), True)
    return found


def run_checkpoint_dirs(runs: str) -> list[str]:
    """``<runs>/version_*/checkpoints`` for ``runs`` = ``<default_root_dir>/surge_runs``."""
    fs, path = _fs(runs)
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        if entry.get("type") == "directory" and re.search(r"version_\d+$", entry["name"].rstrip("/")):
            found.append(join(_url(fs, entry["name"].rstrip("/"), runs), "checkpoints"))
    return found


def is_local(url: str) -> bool:
    """Whether ``url`` is on a local disk, where surge.checkpoint.save overwrites in place crash-safely."""
    return isinstance(_fs(url)[0], LocalFileSystem)


def exists(url: str) -> bool:
    """Whether a checkpoint (its data or its marker) is at ``url``."""
    fs, path = _fs(url)
    return bool(fs.exists(path) or fs.exists(path + store.MARKER_SUFFIX))


def age(url: str) -> tuple[float, bool] | None:
    """(when, committed) for the checkpoint at ``url`` as in :func:`list_checkpoints`; ``None``: no file."""
    fs, path = _fs(url)
    for target, committed in ((path + store.MARKER_SUFFIX, True), (path, False)):
        try:
            return modified(fs.info(target)), committed
        except FileNotFoundError:
            continue
    return None


def write_json(url: str, value: Any) -> None:
    """Write ``value`` as JSON to ``url``, creating its directory."""
    fs, path = _fs(url)
    fs.makedirs(parent(path) or ".", exist_ok=True)
    with fs.open(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True))


def exists_file(url: str) -> bool:
    """Whether there is a file (any file) at ``url``."""
    fs, path = _fs(url)
    return bool(fs.exists(path))


def read_json(url: str) -> Any:
    """The JSON value at ``url``; ``None`` when there is no such file or it cannot be read as JSON."""
    fs, path = _fs(url)
    try:
        with fs.open(path, "r") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def peek(url: str, key: str) -> Any:
    """One entry of the (verified) checkpoint at ``url``, read cheaply: a local file is memory-mapped, so its
    tensors are not read; elsewhere the whole file is loaded. ``None`` when it has no such entry or cannot be
    read with ``weights_only``."""
    try:
        if is_local(url):
            checkpoint = torch.load(_fs(url)[1], map_location="cpu", weights_only=True, mmap=True)
        else:
            checkpoint = store.load(url)
    except Exception:
        return None
    return checkpoint.get(key) if isinstance(checkpoint, dict) else None
