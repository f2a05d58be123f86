"""Checkpoints: what one holds, how it is written and read back, and how ``ckpt_path`` is resolved.

On-disk format
--------------
A checkpoint at ``URL`` (a local path or any fsspec URL) is two files:

* ``URL``: the checkpoint dict as written by ``torch.save``. It holds only tensors and plain containers
  (dict, list, tuple, str, int, float, bool, None), so ``torch.load(URL, weights_only=True)`` reads it with
  no allow-list. Its zip records carry no CRC-32 (the SHA-256 below covers the whole file; ``torch.load``
  does not check CRC-32s, ``unzip -t`` reports them as wrong).
* ``URL.sha256``: the commit marker, one line in ``sha256sum`` format (``<hex digest>  <file name>``), so
  ``sha256sum -c NAME.ckpt.sha256`` checks it from a shell. It is written last: a checkpoint is complete
  exactly when its marker exists and the data file's SHA-256 matches it. Everything else (no marker, an
  empty, truncated or bit-flipped data file) is refused by :func:`load` with a :class:`CheckpointError`
  naming the file.

Writes (:func:`save`): on a local disk, the data goes to a temp file in the destination directory
(``.NAME.<hex>.surge-tmp``), hashed as it is written (past its first MiB, on the main thread, by a helper thread that
follows the write through the page cache, so the hash overlaps serialising and the fsync), and is fsynced, renamed over ``NAME``, and then the marker is written the same
way (temp file, fsync, rename, directory fsync). Overwriting a committed checkpoint first commits a marker
that lists the new digest and the old one, so the name is valid whichever data file a crash leaves; the
final marker lists only the new digest. A crash leaves at worst temp files, which :func:`sweep` removes.
On other filesystems (object stores) the data is uploaded first and the marker last; an upload cut short
never replaces the object, and data without a matching marker is not a checkpoint. Overwriting in place on
an object store still has a window between the two uploads in which the name is invalid (``load`` refuses
it and :func:`newest_valid` falls back); save under a new name and :func:`remove` the old one to avoid it.

Reads (:func:`load`) always use ``torch.load(weights_only=True)`` and add at most the checkpoint's size to
memory: a local file is hashed through a small buffer, then mapped (``mmap=True``); an object is read once,
in order, straight into its tensors, the hash following the reads. A file that needs code unpickled is
refused with what it needs, unless the caller passes ``trusted=True``.

Contents (``surge_checkpoint_version`` 2): ``state_dict``, ``hparams``, ``epoch``, ``global_step``,
``plugin_set`` (and ``hparams_name``, the ``__init__`` argument a ``save_hyperparameters(config)`` dict came in,
which ``load_from_checkpoint`` fills); unless saved with ``weights_only``: ``loops`` (the loop's position), ``optimizer_states``,
``lr_schedulers``, ``precision``, ``plugins`` (each stateful plugin's state under its state key),
``datamodule``, ``rng`` (python, numpy, torch, cuda and the train loader's generators), ``data`` (the RNG
states the train loader drew this epoch's order from, and the loader's own ``state_dict`` when it has one)
and, inside an open gradient-accumulation window, ``accumulated_grads``. Plugins add their own entries in
``before_checkpoint_save``. ``hparams`` holds ``module.hparams`` converted to plain types (paths and dates as
strings, enums as their values, dataclasses as dicts, numpy values as numbers and lists) by
:func:`surge._plain.plain_hparams`, which refuses, naming it, a value with no plain form.

Other formats
-------------
A file without a commit marker that another framework wrote is read by the converter an installed distribution
declares in the ``surge.checkpoint_formats`` entry-point group (:data:`FORMATS_GROUP`; each a
:class:`CheckpointFormat`, loaded only then): the first whose ``recognizes(data)`` is true reads it, with
``torch.load(weights_only=True)`` as any checkpoint, and converts it. A converted checkpoint records
``converted_from = {"format": <entry point name>, "version": ..., "not_carried": [...]}``: it has no plugin set to
compare, and a restore warns once with what did not carry over.

Sharded checkpoints
-------------------
A strategy whose processes each hold part of the state (``Strategy.save_checkpoint`` runs on every process)
may write its parts into directories ``URL.shards-<id>`` beside ``URL`` (:data:`SHARDS_INFIX`,
:func:`shard_dirs`; :func:`remove` deletes them with the checkpoint) and commit ``URL`` last, without the
entries it sharded and with a :data:`SHARDED` entry describing them: ``shards`` (the directory's name),
``world_size`` (how many processes wrote it), ``strategy`` (the name of the strategy that reads it back),
``restore_hint`` (optional: how to use it without that strategy, ``{path}`` standing for the checkpoint's
path), and whatever else the strategy needs. Restoring it with another strategy, or
``Module.load_from_checkpoint``, fails with :func:`sharded_message`, which repeats the hint.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import importlib.metadata
import io
import json
import os
import pickle
import posixpath
import re
import threading
import types
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any, Protocol, cast

import fsspec
import torch
from fsspec.implementations.local import LocalFileSystem

from surge._logging import logger
from surge.errors import CheckpointError, CheckpointSaveError

__all__ = [
    "ALIASES",
    "FORMAT_VERSION",
    "MARKER_SUFFIX",
    "CheckpointError",
    "CheckpointFormat",
    "CheckpointSaveError",
    "FORMATS_GROUP",
    "FileCheckpointIO",
    "experiment_diff",
    "experiment_identity",
    "is_valid",
    "load",
    "marker_url",
    "newest_valid",
    "remove",
    "save",
    "SHARDED",
    "shard_dirs",
    "sharded_message",
    "snapshot",
    "sweep",
    "verify",
]

FORMAT_VERSION = 2
SHARDS_INFIX = ".shards-"
"""A sharded checkpoint ``PATH`` keeps its shards in directories ``PATH.shards-<id>``."""
SHARDED = "sharded"
"""The commit-file entry of a sharded checkpoint (module docstring, "Sharded checkpoints")."""
MARKER_SUFFIX = ".sha256"
ALIASES = ("last", "best")
"""``ckpt_path`` values that active plugins resolve (see :func:`_resolve`)."""

FORMATS_GROUP = "surge.checkpoint_formats"
"""The entry-point group of checkpoint converters (module docstring, "Other formats"): an entry point named after the
format whose value is a :class:`CheckpointFormat` object."""


class CheckpointFormat(Protocol):
    """A converter of another framework's checkpoint files, declared in :data:`FORMATS_GROUP`."""

    def recognizes(self, file: IO[bytes]) -> bool:
        """Whether ``file`` (open, seekable, at its start: a file without a commit marker) is this format's, told
        without unpickling anything and without reading its tensors (a torch archive's pickle is enough)."""
        ...

    def convert(self, saved: Any, url: str) -> dict[str, Any]:
        """The Surge checkpoint dict of ``saved`` (the file read with ``torch.load``), with ``converted_from``;
        raises :class:`CheckpointError` naming ``url`` when it holds no checkpoint."""
        ...


_TEMP = re.compile(r"^\..+\.[0-9a-f]{32}\.surge-tmp$")
_CHUNK = 1 << 20
_STREAM_CHUNK = 8 << 20
_FOLLOW = hasattr(os, "preadv")  # reads from object stores: fewer, larger requests
_FOLLOW_FROM = _CHUNK
"""A save's helper hashing thread starts only once this much is written: a smaller checkpoint is hashed on the
saving thread, which costs less than starting and waking a thread (for a small model, most of the save)."""
_GATHER = 64 << 10
"""``torch.save`` writes each record as several small pieces (headers, names, padding): pieces under this size
are gathered and written together, larger ones (tensor data) go straight to the file."""


# -- writing ---------------------------------------------------------------------------------------


_NEVER_PERSISTENT = frozenset(
    {str, int, float, bool, type(None), bytes, tuple, list, dict, OrderedDict, types.FunctionType}
)
"""Types whose objects ``torch.save``'s ``persistent_id`` always answers None for (only storages get an id)."""


class _Pickler(pickle.Pickler):
    """The base of the pickler ``torch.save`` defines (through ``pickle_module``): the same pickle, byte for byte,
    cheaper. The C pickler calls ``persistent_id`` for every object it writes; torch's is a method calling a
    closure that runs two storage checks in Python (one through a metaclass's ``__instancecheck__``), about 500
    times for a small model's checkpoint, most of them for its keys, numbers and containers. Here those plain
    objects are answered None at once, in one Python call, and everything else goes to torch's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        given = getattr(self, "persistent_id", None)
        if given is not None:
            never = _NEVER_PERSISTENT

            def persistent_id(obj: Any) -> Any:
                return None if type(obj) in never else given(obj)

            self.persistent_id = persistent_id  # read by the C pickler's __init__ below
        super().__init__(*args, **kwargs)


_PICKLE = types.ModuleType(pickle.__name__, pickle.__doc__)
"""``pickle`` with :class:`_Pickler` as its ``Pickler``: the ``pickle_module`` of every ``torch.save`` here."""
_PICKLE.__dict__.update({k: v for k, v in vars(pickle).items() if not k.startswith("__")})
_PICKLE.Pickler = _Pickler  # type: ignore[attr-defined]


def marker_url(url: str) -> str:
    """The commit marker of the checkpoint at ``url``."""
    return url + MARKER_SUFFIX


def save(checkpoint: Mapping[str, Any], url: str) -> str:
    """Write ``checkpoint`` to ``url`` crash-safely with its commit marker (see the module docstring).

    Returns ``url``. The marker is written only after the data is complete, so an interrupted save never
    leaves something :func:`load` accepts. A failed write (a full disk, a denied permission, a connection
    dropped mid-upload) raises :class:`CheckpointSaveError` naming ``url`` and the cause.
    """
    fs, path = fsspec.core.url_to_fs(url)
    name = posixpath.basename(path)
    try:
        if isinstance(fs, LocalFileSystem):
            _save_local(checkpoint, path, name)
        else:
            buffer = io.BytesIO()
            # serialized before any upload: a pickling error touches nothing
            torch.save(checkpoint, buffer, pickle_module=_PICKLE)
            data = buffer.getvalue()
            parent = posixpath.dirname(path)
            if parent:
                fs.makedirs(parent, exist_ok=True)
            fs.pipe_file(path, data)
            fs.pipe_file(path + MARKER_SUFFIX, _marker_line(hashlib.sha256(data).hexdigest(), name))
    except OSError as exc:  # ConnectionError and PermissionError included
        raise CheckpointSaveError(
            f"could not save checkpoint {url}: {type(exc).__name__}: {exc}. Checkpoints committed before are "
            "intact; free space, fix the permissions or the connection, then save again"
        ) from exc
    return url


def _save_local(checkpoint: Mapping[str, Any], path: str, name: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    temps: list[str] = []
    try:
        data_tmp = _temp_path(directory, name)
        temps.append(data_tmp)
        with open(data_tmp, "x+b", buffering=0) as f:  # "+": the hash reads it back
            # On the main thread a helper thread hashes the file (past its first MiB) as it is written, while this
            # one serialises and then waits for the disk; a background save (the checkpoint plugin's asynchronous
            # writer) hashes on its own thread, taking no more than one core from training.
            crc32_back = _crc32_off()
            follow = _FOLLOW and threading.current_thread() is threading.main_thread()
            writer = _HashingWriter(f, follow, on_first_write=crc32_back)
            try:
                try:
                    torch.save(checkpoint, cast(IO[bytes], writer), pickle_module=_PICKLE)
                except RuntimeError:
                    if writer.error is not None:  # torch reports a failed write as "unexpected pos": the cause
                        raise writer.error from None
                    raise
                writer.flush()
                os.fsync(f.fileno())
                new = writer.hexdigest()
            finally:
                crc32_back()
                writer.close()
        old = [digest for digest in _committed_digests(path) if digest != new]
        if old:
            # Overwriting a committed checkpoint: first commit a marker that accepts the old data and the
            # new, so that the name stays valid whichever data file a crash leaves behind.
            lines = b"".join(_marker_line(digest, name) for digest in [new, *old])
            _replace_durably(directory, name + MARKER_SUFFIX, lines)
        os.replace(data_tmp, path)
        temps.remove(data_tmp)
        _replace_durably(directory, name + MARKER_SUFFIX, _marker_line(new, name))
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _committed_digests(path: str) -> list[str]:
    """The digests the current marker of ``path`` accepts (none when there is no marker)."""
    try:
        with open(path + MARKER_SUFFIX, "rb") as f:
            return _marker_digests(f.read().decode("ascii", "replace"))
    except FileNotFoundError:
        return []


def _replace_durably(directory: str, name: str, content: bytes) -> None:
    """Write ``content`` to ``directory/name`` through a fsynced temp file, an atomic rename and a
    directory fsync (so the renames of one save reach the disk in order)."""
    tmp = _temp_path(directory, name)
    try:
        with open(tmp, "xb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_directory(directory)


_crc32_lock = threading.Lock()
_crc32_holders = 0
_crc32_before = True


def _crc32_off() -> Callable[[], None]:
    """Make the ``torch.save`` about to start write no CRC-32 per record; returns the (idempotent) function that
    puts torch's setting back, which the save's writer calls at its first byte (torch reads the setting when it
    opens the archive, before that), so that a ``torch.save`` elsewhere in the process is hardly ever affected.

    The file's SHA-256, which every load checks, covers what the CRC-32s would; computing both cost the save
    a third more CPU time. ``torch.load`` does not check CRC-32s; ``unzip -t`` reports them as wrong."""
    global _crc32_holders, _crc32_before
    with _crc32_lock:
        if not _crc32_holders:
            _crc32_before = torch.serialization.get_crc32_options()
            torch.serialization.set_crc32_options(False)
        _crc32_holders += 1
    released = False

    def back() -> None:
        global _crc32_holders
        nonlocal released
        with _crc32_lock:
            if released:
                return
            released = True
            _crc32_holders -= 1
            if not _crc32_holders:
                torch.serialization.set_crc32_options(_crc32_before)

    return back


class _HashingWriter:
    """A file-like sink for ``torch.save`` that writes every byte it is given to ``file`` (pieces under
    :data:`_GATHER` gathered first, the rest at once; a short write is continued, an error raised and kept in
    :attr:`error`) and hashes it as it is written. :meth:`flush` writes what is gathered.

    Up to :data:`_FOLLOW_FROM` bytes, and always with ``follow=False``, each write is hashed before it is
    written, on the calling thread. Past it, with ``follow=True``, a helper thread hashes the file as it grows,
    reading back (from the page cache) what was just written, while the caller serialises the next tensors and
    then waits for the data to reach the disk (fsync): with a core to spare, the hash of a large checkpoint
    costs the save little time. :meth:`hexdigest` waits for it to catch up."""

    def __init__(self, file: Any, follow: bool, on_first_write: Callable[[], None] | None = None) -> None:
        self._file = file
        self.error: OSError | None = None
        self._hash = hashlib.sha256()
        self._follow = follow
        self._follower: _Follower | None = None
        self._written = 0
        self._gathered = bytearray()
        self._on_first_write = on_first_write

    def write(self, data: Any) -> int:
        first = self._on_first_write
        if first is not None:
            self._on_first_write = None
            first()
        view = memoryview(data).cast("B")
        total = view.nbytes
        if total < _GATHER:
            self._gathered += view
            if len(self._gathered) >= _GATHER:
                self.flush()
        else:
            self.flush()
            self._put(view)
        return total

    def flush(self) -> None:
        """Write the gathered pieces."""
        if self._gathered:
            gathered, self._gathered = self._gathered, bytearray()
            self._put(memoryview(gathered))

    def _put(self, view: memoryview) -> None:
        total = view.nbytes
        if self._follower is None and self._follow and self._written + total > _FOLLOW_FROM:
            self._follower = _Follower(self._file.fileno(), self._hash, self._written)
        if self._follower is None:
            self._hash.update(view)
        try:
            while view.nbytes:
                view = view[self._file.write(view) :]
        except OSError as exc:
            self.error = exc
            raise
        self._written += total
        if self._follower is not None:
            self._follower.advance(total)

    def hexdigest(self) -> str:
        """The SHA-256 of everything written (what is still gathered is written first)."""
        self.flush()
        return self._hash.hexdigest() if self._follower is None else self._follower.hexdigest()

    def close(self) -> None:
        """Stop the helper thread (the digest is no longer needed after a failed save)."""
        if self._follower is not None:
            self._follower.stop()


class _Follower:
    """Hashes a file being written on a thread of its own, from ``start`` (hashed into ``hash`` already) up to the
    size :meth:`advance` reports."""

    def __init__(self, fd: int, hash: Any, start: int) -> None:
        self._fd = fd
        self._hash = hash
        self._written = self._hashed = start
        self._closing = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="surge-checkpoint-hash", daemon=True)
        self._thread.start()

    def advance(self, count: int) -> None:
        with self._changed:
            self._written += count
            self._changed.notify()

    def _run(self) -> None:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            while True:
                with self._changed:
                    while self._hashed >= self._written and not self._closing:
                        self._changed.wait()
                    end = self._written
                    if self._hashed >= end:
                        return
                while self._hashed < end:
                    count = os.preadv(self._fd, [view[: min(_CHUNK, end - self._hashed)]], self._hashed)
                    if count <= 0:
                        raise OSError(f"the file ended at {self._hashed} bytes while {end} were written")
                    self._hash.update(view[:count])
                    self._hashed += count
        except BaseException as exc:  # raised on the saving thread by hexdigest()
            self._error = exc

    def stop(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join()

    def hexdigest(self) -> str:
        self.stop()
        if self._error is not None:
            raise self._error
        return self._hash.hexdigest()


def _temp_path(directory: str, name: str) -> str:
    return os.path.join(directory, f".{name}.{uuid.uuid4().hex}.surge-tmp")


def _marker_line(digest: str, name: str) -> bytes:
    return f"{digest}  {name}\n".encode()


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(url: str) -> None:
    """Delete the checkpoint at ``url``: its marker first (from then on it is invalid), then its data.
    Missing files are ignored."""
    fs, path = fsspec.core.url_to_fs(url)
    for target in (path + MARKER_SUFFIX, path):
        try:
            fs.rm_file(target)
        except FileNotFoundError:
            pass
    for shards in shard_dirs(fs, path):  # a sharded checkpoint's data
        with contextlib.suppress(FileNotFoundError):
            fs.rm(shards, recursive=True)


class FileCheckpointIO:
    """The default ``checkpoint_io`` (:class:`surge.events.protocols.CheckpointIO`): this module's format, written
    crash-safely by :func:`save`, read by :func:`load`, deleted by :func:`remove`, at any local path or fsspec URL."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"FileCheckpointIO.save_checkpoint(storage_options={storage_options!r}): it takes none; fsspec "
                "reads a filesystem's options from its configuration, or give a checkpoint_io of your own"
            )
        save(checkpoint, path)

    def load_checkpoint(self, path: str, *, trusted: bool = False) -> dict[str, Any]:
        return load(path, trusted=trusted)

    def remove_checkpoint(self, path: str) -> None:
        remove(path)

    def __repr__(self) -> str:
        return "FileCheckpointIO()"


def shard_dirs(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """The ``PATH.shards-<id>`` directories beside ``path``. Listed and matched by prefix, not globbed: a glob
    compiles a new regular expression per path, which filled ``re``'s cache in long runs (soak benchmark)."""
    prefix = path + SHARDS_INFIX
    try:
        siblings = fs.ls(posixpath.dirname(path) or ".", detail=False)
    except FileNotFoundError:
        return []
    return [entry for entry in siblings if entry.rstrip("/").startswith(prefix)]


def sharded_message(url: str, checkpoint: Mapping[str, Any]) -> str | None:
    """Why the checkpoint ``checkpoint`` read from ``url`` holds no weights of its own, when it is the commit file
    of a sharded checkpoint: where its shards are, which strategy wrote them, and the ``restore_hint`` that
    strategy recorded. ``None`` for any other checkpoint."""
    info = checkpoint.get(SHARDED)
    if not isinstance(info, Mapping) or "state_dict" in checkpoint:
        return None
    strategy, processes = info.get("strategy"), info.get("world_size", "several")
    writer = f"the strategy '{strategy}'" if strategy else "a sharding strategy"
    how = f"strategy='{strategy}'" if strategy else "the strategy that wrote it"
    hint = info.get("restore_hint")
    return (
        f"checkpoint {url} is sharded: its weights are in {info.get('shards')}, written by {writer} across "
        f"{processes} processes. Restore it with {how} on several processes"
        + (f", or {str(hint).replace('{path}', url)}" if hint else "")
    )


def sweep(directory_url: str) -> list[str]:
    """Remove the temp files that crashed saves left in ``directory_url``; returns what was removed.

    Call it when no save into that directory is in flight (at the start of a run): a save in progress
    writes exactly such a temp file.
    """
    fs, path = fsspec.core.url_to_fs(directory_url)
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        if _TEMP.match(posixpath.basename(entry.rstrip("/"))):
            try:
                fs.rm_file(entry)
            except FileNotFoundError:
                continue
            removed.append(entry if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(entry))
    if removed:
        logger.info("removed {} temp file(s) of interrupted checkpoint saves in {}", len(removed), directory_url)
    return removed


def snapshot(obj: Any) -> Any:
    """A copy of a checkpoint dict that the training loop can no longer change: every tensor is copied to
    CPU memory (storage by storage, so tensors that share memory still share it, as ``torch.save`` keeps
    them), every container is rebuilt. Numbers and strings are immutable and kept."""
    storages: dict[tuple[int, str], torch.UntypedStorage] = {}

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _copy_tensor(value, storages)
        if isinstance(value, dict):
            items = [(k, copy(v)) for k, v in value.items()]
            try:
                out = dict(items) if type(value) is dict else type(value)(items)
            except TypeError:  # a dict subclass with another constructor (defaultdict)
                out = dict(items)
            if hasattr(value, "_metadata"):  # Module.state_dict's version records, which torch.save keeps
                out._metadata = copy(value._metadata)  # type: ignore[attr-defined]
            return out
        if isinstance(value, list):
            return [copy(v) for v in value]
        if isinstance(value, tuple):
            items = [copy(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return value

    return copy(obj)


def _copy_tensor(tensor: torch.Tensor, storages: dict[tuple[int, str], torch.UntypedStorage]) -> torch.Tensor:
    tensor = tensor.detach()
    if tensor.layout is not torch.strided or tensor.is_quantized or type(tensor) is not torch.Tensor:
        return tensor.to("cpu", copy=True)  # rare kinds: a plain copy, without storage sharing
    storage = tensor.untyped_storage()
    key = (storage.data_ptr(), str(tensor.device))
    copied = storages.get(key)
    if copied is None:
        # One copy per storage; from an accelerator this is the device-to-host copy of the snapshot.
        copied = storage.clone() if tensor.device.type == "cpu" else storage.cpu()
        storages[key] = copied
    out = torch.empty(0, dtype=tensor.dtype, device="cpu")
    out.set_(copied, tensor.storage_offset(), tensor.size(), tensor.stride())
    return out


# -- reading ---------------------------------------------------------------------------------------

_MMAP = os.name == "posix"
"""Map checkpoint files rather than read them (elsewhere a mapped file could not be replaced by the next save)."""
_ZIP_MAGIC = b"PK\x03\x04"


def load(url: str, *, trusted: bool = False) -> dict[str, Any]:
    """Read the checkpoint at ``url`` after checking its commit marker and content hash.

    A file of another format (no marker) is read too, converted by the installed :class:`CheckpointFormat` that
    recognizes it (module docstring, "Other formats").

    Memory is bounded by the file, not a multiple of it. A local file's SHA-256 is computed as it streams
    through a small buffer, then ``torch.load(weights_only=True, mmap=True)`` maps that same open file: every
    tensor is backed by the file's pages (copy-on-write: changing one never changes the file) and read when first
    used, and the pages are shared with the page cache (several processes loading one file share them). A mapped
    file stays allocated while a tensor of it lives (a resumed fit's optimizer states keep it, and the weights'
    pages the restore read stay resident, reclaimable, until the run ends); Surge's saves replace a checkpoint by
    renaming a new file over it, which leaves a mapped one intact, but a file truncated in place while a tensor of
    it lives (``torch.save`` to the same path) would fault when that tensor is read.
    An object in an object store (any fsspec URL that is not a local path) is read once, in order, by
    ``torch.load`` straight into its tensors, the hash following the bytes as they arrive; nothing is returned
    before the whole object is hashed and matches.

    Always ``weights_only`` (tensors land on the CPU). A checkpoint that needs code unpickled is refused unless
    ``trusted=True``; pass that only for files you trust, since loading them runs the code they hold. Code is
    never unpickled before the hash is verified. Raises :class:`CheckpointError` naming the file when it is
    missing, empty, uncommitted, truncated or corrupt.
    """
    fs, path = fsspec.core.url_to_fs(url)
    if isinstance(fs, LocalFileSystem):
        try:
            file = open(path, "rb", buffering=0)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {url} does not exist") from None
        with file:
            # torch opens the file through a path naming this open file, not whatever the name points to later
            # (a save renaming a new file over it while this one is read changes nothing here)
            source = _path_of(file, path)
            return _read(fs, path, url, trusted, cast(IO[bytes], file), source, lambda: _sha256(file)[0], False)
    try:
        size = fs.size(path)
        remote = fs.open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {url} does not exist") from None
    with remote:
        reader = _HashingReader(remote, size)
        return _read(fs, path, url, trusted, cast(IO[bytes], reader), reader, reader.hexdigest, True)


def _read(
    fs: fsspec.AbstractFileSystem,
    path: str,
    url: str,
    trusted: bool,
    file: IO[bytes],
    source: Any,
    digest: Callable[[], str],
    streaming: bool,
) -> dict[str, Any]:
    """:func:`load` of the open ``file`` (``source``: what ``torch.load`` reads it through). ``digest``: its
    SHA-256; ``streaming``: that digest follows ``torch.load``'s reads, so it is checked after them (and before
    any error is reported, or code unpickled), else before."""
    file.seek(0, os.SEEK_END)
    if not file.tell():
        raise CheckpointError(f"checkpoint {url} is empty (0 bytes); its save was cut short")
    expected = _marker(fs, path, url)
    if expected is None:
        for name, converter in _formats():
            file.seek(0)
            if converter.recognizes(file):
                logger.info(
                    "{} is a {} checkpoint: it has no commit marker, so its integrity cannot be checked", url, name
                )
                return converter.convert(_deserialize(source, file, url, trusted, None, streaming), url)
        raise CheckpointError(_no_marker(url))

    def check() -> None:
        _check_hash(digest(), expected, url)

    if not streaming:
        check()
    checkpoint = _deserialize(source, file, url, trusted, check if streaming else None, streaming)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"checkpoint {url} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    return checkpoint


def _formats() -> list[tuple[str, CheckpointFormat]]:
    """The installed :class:`CheckpointFormat` converters, by name (a broken one is skipped with a warning)."""
    found = []
    for ep in sorted(importlib.metadata.entry_points(group=FORMATS_GROUP), key=lambda ep: ep.name):
        try:
            found.append((ep.name, ep.load()))
        except Exception as exc:
            logger.warning("the checkpoint format '{}' ({}) failed to load and is skipped: {}", ep.name, ep.value, exc)
    return found


class _HashingReader(io.RawIOBase):
    """A seekable reader over an object store's ``file`` for ``torch.load`` that hashes the object in order as
    it is read. ``torch.load`` reads the archive's directory at the end first, then its records from the start
    in order; a read that starts a little past the hashed part (a record's header) has the gap read and hashed
    first, a read far ahead (the directory) is served without moving the hash, and :meth:`hexdigest` hashes what
    was never read in order. Large reads go to the caller's buffer (the tensor's memory) in chunks, so no copy
    of a tensor is ever held."""

    _GAP = 1 << 20

    def __init__(self, file: Any, size: int) -> None:
        super().__init__()
        self._file, self._size = file, size
        self._pos = self._hashed = 0
        self._hash = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        start = self._pos
        if self._hashed < start <= self._hashed + self._GAP:
            self._hash_until(start)  # a record's header between the last read and this one
        count = self._fill(start, view)
        if start <= self._hashed < start + count:
            self._hash.update(view[self._hashed - start : count])
            self._hashed = start + count
        self._pos = start + count
        return count

    def _fill(self, start: int, view: memoryview) -> int:
        self._file.seek(start)
        count = 0
        while count < view.nbytes:
            data = self._file.read(min(_STREAM_CHUNK, view.nbytes - count))
            if not data:
                break
            view[count : count + len(data)] = data
            count += len(data)
        return count

    def _hash_until(self, end: int) -> None:
        buffer = bytearray(min(_STREAM_CHUNK, max(end - self._hashed, 1)))
        view = memoryview(buffer)
        while self._hashed < end:
            count = self._fill(self._hashed, view[: min(len(buffer), end - self._hashed)])
            if not count:
                break
            self._hash.update(view[:count])
            self._hashed += count

    def hexdigest(self) -> str:
        """The SHA-256 of the whole object (what was not read in order is read now)."""
        self._hash_until(self._size)
        return self._hash.hexdigest()


def _path_of(file: Any, fallback: Any) -> str:
    """A path that opens ``file`` itself: ``/proc/self/fd/N`` where there is one (Linux), else ``fallback``."""
    pinned = f"/proc/self/fd/{file.fileno()}"
    return pinned if os.path.exists(pinned) else str(fallback)


def _sha256(file: IO[bytes]) -> tuple[str, int]:
    """The SHA-256 of ``file`` and its size, read from its start through one small buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    file.seek(0)
    size = 0
    while count := file.readinto(buffer):  # type: ignore[attr-defined]
        digest.update(view[:count])
        size += count
    return digest.hexdigest(), size


def verify(url: str) -> None:
    """Check that the checkpoint at ``url`` is complete and intact (marker present, content hash matches)
    without loading it; raises :class:`CheckpointError` naming the file otherwise."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        if isinstance(fs, LocalFileSystem):
            with open(path, "rb", buffering=0) as f:
                actual, size = _sha256(cast(IO[bytes], f))
        else:
            digest, size = hashlib.sha256(), 0
            with fs.open(path, "rb") as f:
                while chunk := f.read(_STREAM_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            actual = digest.hexdigest()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {url} does not exist") from None
    if not size:
        raise CheckpointError(f"checkpoint {url} is empty (0 bytes); its save was cut short")
    expected = _marker(fs, path, url)
    if expected is None:
        raise CheckpointError(_no_marker(url))
    _check_hash(actual, expected, url)


def is_valid(url: str) -> bool:
    """Whether :func:`verify` accepts ``url``."""
    try:
        verify(url)
    except CheckpointError:
        return False
    return True


def newest_valid(urls: Iterable[str]) -> str | None:
    """The most recently committed of ``urls`` that is complete and intact, or ``None``.

    "Most recent" is by the commit marker's modification time; equal times (coarse clocks of object
    stores) go to the later position in ``urls``. Each newer candidate that is skipped is logged with the
    reason, so a caller falling back from ``last`` says why.
    """
    candidates: list[tuple[float, int, str]] = []
    for position, url in enumerate(urls):
        fs, path = fsspec.core.url_to_fs(url)
        try:
            committed = fs.modified(path + MARKER_SUFFIX).timestamp()
        except FileNotFoundError:
            committed = float("-inf")  # not committed: verify() says why when it is reached
        except (NotImplementedError, OSError):
            committed = 0.0
        candidates.append((committed, position, url))
    for _, _, url in sorted(candidates, reverse=True):
        try:
            verify(url)
        except CheckpointError as exc:
            logger.warning("skipping checkpoint {}: {}", url, exc)
            continue
        return url
    return None


def _marker(fs: fsspec.AbstractFileSystem, path: str, url: str) -> list[str] | None:
    """The digests the commit marker of ``path`` accepts; ``None`` when there is no marker."""
    try:
        line = fs.cat_file(path + MARKER_SUFFIX).decode("ascii", "replace")
    except FileNotFoundError:
        return None
    digests = _marker_digests(line)
    if not digests:
        raise CheckpointError(f"checkpoint {url}: its commit marker {marker_url(url)} holds no SHA-256 digest")
    return digests


def _no_marker(url: str) -> str:
    return (
        f"checkpoint {url} has no commit marker {marker_url(url)}: its save did not finish (a crash or "
        "kill during the write), or it was not written by surge.checkpoint.save. A file you wrote yourself "
        "with torch.save can be committed with surge.checkpoint.save(torch.load(path), path)"
    )


def _marker_digests(text: str) -> list[str]:
    """The digests a marker accepts: normally one; two while an overwrite is in progress (new, then old)."""
    return [line[:64] for line in text.splitlines() if re.fullmatch(r"[0-9a-f]{64}", line[:64])]


def _check_hash(actual: str, expected: list[str], url: str) -> None:
    if actual not in expected:
        raise CheckpointError(
            f"checkpoint {url} is truncated or corrupt: its SHA-256 is {actual[:16]}..., but {marker_url(url)} "
            f"recorded {expected[0][:16]}... when it was saved (a partial copy, bit rot, or a modified file). "
            "Use another checkpoint"
        )


def _deserialize(
    source: Any, file: IO[bytes], url: str, trusted: bool, verify: Callable[[], None] | None, streaming: bool
) -> Any:
    """``torch.load`` of ``source`` (``file``, open): a local file is mapped unless it is in torch's legacy format.
    ``verify``: checks the hash once the file was read; called before any error is reported and before code is
    unpickled (so damage is named as such, and no code from a damaged file ever runs)."""
    file.seek(0)
    mmap = _MMAP and not streaming and file.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC  # the legacy format cannot be mapped
    try:
        loaded = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if verify is not None:
            verify()
        try:
            needed = torch.serialization.get_unsafe_globals_in_checkpoint(_rewound(source))
        except Exception:
            needed = []
        if not needed:
            raise CheckpointError(f"checkpoint {url} cannot be read: {_first_line(exc)}") from exc
        if not trusted:
            raise CheckpointError(
                f"checkpoint {url} holds pickled code ({', '.join(needed)}); unpickling it would run that code, "
                "so Surge refuses it (checkpoints are read with torch.load(weights_only=True)). If you trust the "
                "file, pass trusted=True (trainer.fit/validate/test/predict(..., trusted=True) or "
                "surge.checkpoint.load(url, trusted=True)); never do that for a file from an untrusted source"
            ) from None
        logger.warning("loading {} with code unpickling ({}), as trusted=True allows", url, ", ".join(needed))
        return torch.load(_rewound(source), map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as exc:
        if verify is not None:
            verify()
        raise CheckpointError(f"checkpoint {url} cannot be read: {type(exc).__name__}: {_first_line(exc)}") from exc
    if verify is not None:
        verify()
    return loaded


def _rewound(source: Any) -> Any:
    if hasattr(source, "seek"):
        source.seek(0)
    return source


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- experiment identity -------------------------------------------------------------------------------

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SHORT = 80  # longer hyper-parameter texts are kept as a prefix and a digest
_MISSING = "(not set)"


def experiment_identity(module: Any, datamodule: Any = None) -> dict[str, Any]:
    """What makes checkpoints one experiment's: the Module's class and hyper-parameters (``module.hparams``),
    and the DataModule's when there is one. Checkpoints hold it as ``checkpoint["experiment"]``; the
    checkpoint plugin also writes it to ``experiment.json`` beside a run's checkpoints, to scope
    ``ckpt_path="last"``/``"best"`` to the experiment.

    Plain strings only: ``{"module": "pkg:Net", "module_bases": ["pkg:Net", "pkg:Base", ...], "hparams":
    {"lr": "0.1", ...}, "hparams_digest": <sha256>, "datamodule": "pkg:Data" or None, "datamodule_bases": [...],
    "datamodule_hparams": {...}, "datamodule_hparams_digest": <sha256> or None}`` (the bases: the class and
    its bases, torch's left out; classes compare by qualified name, so a script run as ``__main__`` and as a
    module is one experiment). A hyper-parameter is kept as its canonical JSON text (sorted keys; a value JSON has no type for
    is its ``repr`` less memory addresses; sets sorted), cut to a prefix and its SHA-256 beyond 80
    characters; a digest is the SHA-256 of the canonical text of all of them. Any value is taken.
    """
    bases = _class_names(module)
    identity: dict[str, Any] = {"module": bases[0], "module_bases": bases}
    identity.update(_hparams_identity("hparams", getattr(module, "hparams", None)))
    if datamodule is None:
        identity.update(datamodule=None, datamodule_bases=[], datamodule_hparams={}, datamodule_hparams_digest=None)
    else:
        bases = _class_names(datamodule)
        identity.update(datamodule=bases[0], datamodule_bases=bases)
        identity.update(_hparams_identity("datamodule_hparams", getattr(datamodule, "hparams", None)))
    return identity


def experiment_diff(saved: Mapping[str, Any], current: Mapping[str, Any], *, conflicts: bool = False) -> list[str]:
    """How two :func:`experiment_identity` values differ, one line each (``"module class: A -> B"``,
    ``"lr: 0.01 -> 0.1"``, ``"datamodule.batch_size: 8 -> 16"``; ``saved -> current``); empty for the same
    experiment. The DataModule counts only when both have one (a run may feed the same data as loaders).

    ``conflicts=True``: only what makes them clearly different experiments: classes that are not one a
    subclass of the other, and hyper-parameters both set, to different values (a variant that subclasses
    the Module, or adds or drops a hyper-parameter, is no conflict)."""
    lines = _class_diff("module", saved, current, conflicts)
    lines += _hparams_diff("", "hparams", saved, current, conflicts)
    if saved.get("datamodule") and current.get("datamodule"):
        lines += _class_diff("datamodule", saved, current, conflicts)
        lines += _hparams_diff("datamodule.", "datamodule_hparams", saved, current, conflicts)
    return lines


def _class_names(obj: Any) -> list[str]:
    """``module:qualname`` of the object's class and its bases, torch's left out: a class a strategy derived
    from the user's in place (torch's ``fully_shard`` makes one named after the user's, defined in torch) is not named."""
    names = [f"{cls.__module__}:{cls.__qualname__}" for cls in type(obj).__mro__]
    names = [name for name in names if not name.startswith(("torch.", "torch:", "builtins:"))]
    return names or [f"{type(obj).__module__}:{type(obj).__qualname__}"]


def _qualname(name: Any) -> Any:
    """A class is known by its qualified name: ``python train.py`` defines ``__main__:Net`` and
    ``python -m pkg.train`` ``pkg.train:Net``, and both are one experiment's class."""
    return name.rpartition(":")[2] if isinstance(name, str) else name


def _class_diff(name: str, saved: Mapping[str, Any], current: Mapping[str, Any], conflicts: bool) -> list[str]:
    before, now = saved.get(name), current.get(name)
    if _qualname(before) == _qualname(now):
        return []
    current_bases = {_qualname(b) for b in current.get(f"{name}_bases") or ()}
    saved_bases = {_qualname(b) for b in saved.get(f"{name}_bases") or ()}
    if conflicts and (_qualname(before) in current_bases or _qualname(now) in saved_bases):
        return []  # one subclasses the other
    return [f"{name} class: {before} -> {now}"]


def _hparams_identity(name: str, hparams: Any) -> dict[str, Any]:
    values = dict(hparams) if isinstance(hparams, Mapping) else {}
    keyed = {_key_text(k): _plain(v) for k, v in values.items()}
    texts = {k: _short(_json(v)) for k, v in sorted(keyed.items())}
    return {name: texts, f"{name}_digest": hashlib.sha256(_json(keyed).encode()).hexdigest()}


def _hparams_diff(
    prefix: str, name: str, saved: Mapping[str, Any], current: Mapping[str, Any], conflicts: bool
) -> list[str]:
    if saved.get(f"{name}_digest") == current.get(f"{name}_digest"):
        return []
    before = b if isinstance(b := saved.get(name), Mapping) else {}
    now = n if isinstance(n := current.get(name), Mapping) else {}
    keys = set(before) & set(now) if conflicts else set(before) | set(now)
    lines = [
        f"{prefix}{key}: {before.get(key, _MISSING)} -> {now.get(key, _MISSING)}"
        for key in sorted(keys)
        if before.get(key, _MISSING) != now.get(key, _MISSING)
    ]
    return lines if lines or conflicts else [f"{prefix or 'module '}hyper-parameters differ"]


def _plain(value: Any, depth: int = 0, seen: frozenset[int] = frozenset()) -> Any:
    """``value`` as JSON-native data with string keys, deterministic across processes."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return int(value)  # numpy's integers included
    if isinstance(value, float) and not isinstance(value, enum.Enum):
        return float(value)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and depth < 32 and id(value) not in seen:
        inner = seen | {id(value)}
        if isinstance(value, Mapping):
            return {_key_text(k, depth + 1, inner): _plain(v, depth + 1, inner) for k, v in value.items()}
        items = [_plain(v, depth + 1, inner) for v in value]
        return sorted(items, key=_json) if isinstance(value, (set, frozenset)) else items
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__qualname__}>"
    return _ADDRESS.sub("", text)


def _key_text(key: Any, depth: int = 0, seen: frozenset[int] = frozenset()) -> str:
    return key if type(key) is str else _json(_plain(key, depth, seen))


def _json(plain: Any) -> str:
    return json.dumps(plain, sort_keys=True, ensure_ascii=False, default=repr)


def _short(text: str) -> str:
    if len(text) <= _SHORT:
        return text
    return f"{text[:48]}... (sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]})"
