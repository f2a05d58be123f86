"""``metrics.csv``: one header line, then one complete line per write, never a partial row.

On a local disk each row is one ``os.write`` on a file opened with ``O_APPEND``: a process killed at any
instant leaves either the whole line or none of it. Anything that changes lines already written (a new
column, a resume that keeps only the rows a checkpoint knew) writes a complete new file beside the old one
and renames it over it, so a crash during the rewrite leaves the previous file intact. Other filesystems
(fsspec URLs) have no append: there every write replaces the whole object.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

RESERVED = ("step", "epoch")


def format_value(value: Any) -> str:
    """Floats as ``repr`` (the shortest text that reads back to the same float), ``nan``/``inf`` as such."""
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else str(value)


def encode(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow([format_value(row.get(name)) for name in columns])
    return buffer.getvalue()


def read(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """Header and complete rows of a metrics file; a trailing line without its newline (a write cut short by
    a crash on a filesystem without atomic appends) is left out."""
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    return header, [dict(zip(header, line, strict=False)) for line in reader]


class MetricsFile:
    """The metrics file of one run directory. ``columns`` grows as new metric names arrive: after ``step`` and
    ``epoch`` in the order they come, or, with ``sort_columns``, all of them sorted (Lightning's order)."""

    def __init__(self, url: str, sort_columns: bool = False) -> None:
        self.url = url
        self.sort_columns = sort_columns
        self.fs, self.path = fsspec.core.url_to_fs(url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.columns: list[str] = []
        self.rows = 0
        self._fd: int | None = None
        if self.fs.exists(self.path):  # a later stage of the same Trainer (test after fit) appends
            self.columns, rows = read(self._text())
            self.rows = len(rows)
            if self._text() != self._content(self.columns, rows):  # a partial last line: drop it now
                self._replace(self.columns, rows)

    # -- writing -----------------------------------------------------------------------------------------
    def append(self, row: Mapping[str, Any]) -> None:
        new = [name for name in row if name not in self.columns]
        if new or not self.columns:
            self._add_columns(new)
        line = encode(self.columns, [row])
        if self.local:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, line.encode())
        else:
            self.fs.pipe_file(self.path, (self._text() + line).encode())
        self.rows += 1

    def _add_columns(self, new: list[str]) -> None:
        """A new metric name: the whole file is rewritten with the wider header, earlier rows keeping an
        empty cell for it (Lightning's CSV logger does the same, but in place)."""
        if self.sort_columns:
            columns = sorted({*self.columns, *new})
        else:
            columns = list(dict.fromkeys([*RESERVED, *(c for c in self.columns if c not in RESERVED), *new]))
        rows = read(self._text())[1] if self.fs.exists(self.path) else []
        self._replace(columns, rows)
        self.columns = columns

    def keep_first(self, source: str, count: int) -> list[dict[str, str]]:
        """Make this file the header and first ``count`` rows of ``source`` (the file a checkpoint's run was
        writing); returns the rows of ``source`` past ``count`` (not copied)."""
        fs, path = fsspec.core.url_to_fs(source)
        columns, rows = read(fs.cat_file(path).decode())
        self._replace(columns, rows[:count])
        self.columns, self.rows = columns, min(count, len(rows))
        return rows[count:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- whole-file operations ---------------------------------------------------------------------------
    def _text(self) -> str:
        return str(self.fs.cat_file(self.path).decode()) if self.fs.exists(self.path) else ""

    @staticmethod
    def _content(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
        return encode(columns, [dict(zip(columns, columns, strict=True)), *rows])

    def _replace(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
        self.close()
        write_atomic(self.url, self._content(columns, rows).encode())


def write_atomic(url: str, data: bytes) -> None:
    """Replace ``url`` with ``data`` all at once: on a local disk a complete temporary file renamed over it
    (so a crash leaves the old or the new content, never a mix); elsewhere one upload."""
    fs, path = fsspec.core.url_to_fs(url)
    if not isinstance(fs, LocalFileSystem):
        fs.pipe_file(path, data)
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
