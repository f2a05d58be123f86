"""What the Lightning-shaped file loggers of the first-party logger distributions share (surge-csv's ``CSVLogger``,
surge-tensorboard's ``TensorBoardLogger``): the ``save_dir/name/version_N`` directory Lightning's loggers write to."""

from __future__ import annotations

import os
import posixpath

from surge_lightning.pytorch.loggers.logger import Logger

__all__ = ["VersionedLogger", "next_version"]


class VersionedLogger(Logger):
    """A :class:`Logger` writing to ``save_dir/name/version_N`` as Lightning's file loggers do: the subclass
    sets ``_save_dir``, ``_name`` and ``_version`` (``None``: the next free version, chosen on first use)."""

    _save_dir: str
    _name: str
    _version: int | str | None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        """The version given, else the next after those in ``root_dir`` (chosen on first use)."""
        if self._version is None:
            self._version = next_version(self.root_dir)
        return self._version

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def root_dir(self) -> str:
        return os.path.join(self._save_dir, self._name)

    @property
    def versioned_dir(self) -> str:
        """``root_dir/version_N`` (or ``root_dir/<version>`` for a version given as a string)."""
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        return os.path.join(self.root_dir, version)


def next_version(root_dir: str | os.PathLike[str]) -> int:
    """The version a Lightning logger takes in ``root_dir`` (a path or an fsspec URL): one more than the highest
    ``version_N`` directory there, 0 when there is none or no ``root_dir``."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(os.fspath(root_dir))
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    taken = [
        int(base[len("version_") :])
        for entry in entries
        if entry["type"] == "directory"
        and (base := posixpath.basename(str(entry["name"]).rstrip("/"))).startswith("version_")
        and base[len("version_") :].isdigit()
    ]
    return max(taken, default=-1) + 1
