"""The versioned run directory, through fsspec (checkpoint files are :mod:`surge.checkpoint`'s)."""

from __future__ import annotations

import re

import fsspec
from fsspec.implementations.local import LocalFileSystem

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

    @classmethod
    def at(cls, url: str) -> RunDirectory:
        """``url`` itself (made if missing): the version directory a Lightning-shaped logger chose."""
        fs, path = fsspec.core.url_to_fs(url)
        fs.makedirs(path, exist_ok=True)
        return cls(fs, path, path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path))

    def write_text(self, name: str, text: str) -> None:
        with self.fs.open(f"{self.path}/{name}", "w") as f:
            f.write(text)
