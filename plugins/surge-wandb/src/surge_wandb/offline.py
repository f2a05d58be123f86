"""Read back what wandb wrote for an offline run, as ``wandb sync`` would upload it: the config, every history
row with its step, the summary, the x-axis of each metric, the artifacts and the exit code
(``from surge_wandb.offline import read_runs``).

An offline run is a directory ``<dir>/wandb/offline-run-<time>-<id>/`` holding ``run-<id>.wandb``, the
transaction log: protobuf ``Record`` messages (``wandb.proto.wandb_internal_pb2``) in LevelDB's log format, after
a 7-byte header (``:W&B``, magic 0xBEE1, version 0). The log is cut into 32 KiB blocks; each chunk of a record
has a 7-byte header (CRC-32 of its type byte and data, length, type: 1 whole, 2 first, 3 middle, 4 last) and a
block's tail shorter than a header is zero padding. Every CRC is checked, so a torn or foreign file is an error
instead of reading as empty.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OfflineRun", "read_run", "read_runs"]

_HEADER = struct.Struct("<4sHB")
_CHUNK = struct.Struct("<IHB")
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """One ``run-<id>.wandb`` file, replayed: what ``wandb sync`` would upload from it."""

    path: Path
    id: str = ""
    project: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    notes: str = ""
    tags: list[str] = field(default_factory=list)
    start: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    step_metrics: dict[str, str] = field(default_factory=dict)  # metric name or glob -> its x-axis
    artifacts: list[Any] = field(default_factory=list)  # ArtifactRecord messages
    preempting: bool = False
    exit_code: int | None = None  # None: the run was never finished

    def rows(self) -> list[dict[str, Any]]:
        """The history without wandb's own columns (``_step``, ``_runtime``, ``_timestamp``)."""
        return [{k: v for k, v in row.items() if not k.startswith("_")} for row in self.history]

    def files(self, artifact: Any) -> dict[str, Any]:
        """An artifact's manifest entries by path."""
        return {entry.path: entry for entry in artifact.manifest.contents}


def _chunks(data: bytes, path: Path) -> Iterator[tuple[int, bytes]]:
    if len(data) < _HEADER.size or _HEADER.unpack_from(data) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path} is not a wandb transaction log (no ':W&B' header); pass a run-<id>.wandb file")
    pos = _HEADER.size
    while pos + _CHUNK.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK.size:
            pos += left
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        if kind == 0 and length == 0:  # the zero-filled rest of a block
            pos += left
            continue
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(
                f"{path}: bad checksum at byte {pos}; the file is torn or was changed after wandb wrote it"
            )
        pos += _CHUNK.size + length
        yield kind, chunk


def _records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    pending = b""
    for kind, chunk in _chunks(path.read_bytes(), path):
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # generated, no stubs
            record.ParseFromString(pending)
            yield record


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def _apply(target: dict[str, Any], updates: Iterable[Any], removes: Iterable[Any] = ()) -> None:
    for item in updates:
        target[_key(item)] = json.loads(item.value_json)
    for item in removes:
        target.pop(_key(item), None)


def read_run(path: str | Path) -> OfflineRun:
    """The run recorded in the transaction log ``path`` (``.../offline-run-<time>-<id>/run-<id>.wandb``)."""
    run = OfflineRun(Path(path))
    for record in _records(run.path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.id, run.project, run.name, run.group = r.run_id, r.project, r.display_name, r.run_group
            run.job_type, run.notes, run.tags = r.job_type, r.notes, list(r.tags)
            run.start = r.start_time.seconds + r.start_time.nanos / 1e9
            _apply(run.config, r.config.update)
        elif kind == "config":
            _apply(run.config, record.config.update, record.config.remove)
        elif kind == "history":
            row: dict[str, Any] = {}
            _apply(row, record.history.item)
            run.history.append(row)
        elif kind == "summary":
            _apply(run.summary, record.summary.update, record.summary.remove)
        elif kind == "metric":
            run.step_metrics[record.metric.name or record.metric.glob_name] = record.metric.step_metric
        elif kind == "artifact":
            run.artifacts.append(record.artifact)
        elif kind == "preempting":
            run.preempting = True
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    run.config.pop("_wandb", None)
    return run


def read_runs(directory: str | Path) -> list[OfflineRun]:
    """Every offline run under ``directory`` (at any depth), oldest first.

    wandb's service process writes the files on its own time, after ``run.finish()`` has returned; when this
    process has imported wandb, the process's run (``wandb.run``) is finished and the service shut down first
    (``wandb.teardown()``, which finishes the other runs still open; a new service starts with the next run), so
    that the files are complete."""
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        if wandb.run is not None:
            wandb.finish()  # wandb.teardown() would finish it too, but leave wandb.run pointing at it
        wandb.teardown()
    paths = {p.resolve() for p in Path(directory).rglob("offline-run-*/run-*.wandb")}
    return sorted((read_run(p) for p in paths), key=lambda run: run.start)
