"""Files through fsspec: the versioned run directory and crash-safe checkpoint writes and reads."""

from __future__ import annotations

import io
import os
import re
import uuid
from typing import Any

import fsspec
import torch
from fsspec.implementations.local import LocalFileSystem

from surge.errors import SurgeError

_VERSION = re.compile(r"version_(\d+)$")


class RunDirectory:
    """``<root>/surge_runs/version_N``: the next free N, claimed atomically where the filesystem allows."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, url: str) -> None:
        self.fs, self.path, self.url = fs, path, url

    @classmethod
    def create(cls, root: str) -> RunDirectory:
        fs, base = fsspec.core.url_to_fs(root)
        parent = f"{base.rstrip('/')}/surge_runs"
        fs.makedirs(parent, exist_ok=True)
        taken = [int(m.group(1)) for p in fs.ls(parent, detail=False) if (m := _VERSION.search(p.rstrip("/")))]
        version = max(taken, default=-1) + 1
        while True:
            path = f"{parent}/version_{version}"
            try:
                fs.makedirs(path, exist_ok=False)
                break
            except FileExistsError:
                version += 1
        url = path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)
        return cls(fs, path, url)

    def write_text(self, name: str, text: str) -> None:
        with self.fs.open(f"{self.path}/{name}", "w") as f:
            f.write(text)


def atomic_save(obj: Any, url: str) -> None:
    """``torch.save`` to ``url`` so that a crash leaves the old file or the new one, never half of one.

    Local disks: temp file in the destination directory, fsync, atomic rename, fsync the directory.
    Other filesystems: the data is fully written to the final name in one upload.
    """
    fs, path = fsspec.core.url_to_fs(url)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    if isinstance(fs, LocalFileSystem):
        directory = os.path.dirname(os.path.abspath(path)) or "."
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    else:
        fs.pipe_file(path, data)


def load_checkpoint(url: str) -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(weights_only=True)``; errors name the file."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        raise SurgeError(f"checkpoint {url} does not exist") from None
    if not data:
        raise SurgeError(f"checkpoint {url} is empty (0 bytes); it was probably cut short by a crash")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SurgeError(
            f"checkpoint {url} cannot be loaded safely ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
            "It is truncated or corrupt, or it holds pickled code that weights-only loading refuses."
        ) from exc
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise SurgeError(f"checkpoint {url} is not a Surge checkpoint (no 'state_dict' entry)")
    return checkpoint
