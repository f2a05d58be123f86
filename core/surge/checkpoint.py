"""Checkpoints: what one holds, how it is written and read back, and how ``ckpt_path`` is resolved.

On-disk format
--------------
A checkpoint at ``URL`` (a local path or any fsspec URL) is two files:

* ``URL``: the checkpoint dict as written by ``torch.save``. It holds only tensors and plain containers
  (dict, list, tuple, str, int, float, bool, None), so ``torch.load(URL, weights_only=True)`` reads it with
  no allow-list.
* ``URL.sha256``: the commit marker, one line in ``sha256sum`` format (``<hex digest>  <file name>``), so
  ``sha256sum -c NAME.ckpt.sha256`` checks it from a shell. It is written last: a checkpoint is complete
  exactly when its marker exists and the data file's SHA-256 matches it. Everything else (no marker, an
  empty, truncated or bit-flipped data file) is refused by :func:`load` with a :class:`CheckpointError`
  naming the file.

Writes (:func:`save`): on a local disk, the data goes to a temp file in the destination directory
(``.NAME.<hex>.surge-tmp``) and is fsynced, renamed over ``NAME``, and then the marker is written the same
way (temp file, fsync, rename, directory fsync). Overwriting a committed checkpoint first commits a marker
that lists the new digest and the old one, so the name is valid whichever data file a crash leaves; the
final marker lists only the new digest. A crash leaves at worst temp files, which :func:`sweep` removes.
On other filesystems (object stores) the data is uploaded first and the marker last; an upload cut short
never replaces the object, and data without a matching marker is not a checkpoint. Overwriting in place on
an object store still has a window between the two uploads in which the name is invalid (``load`` refuses
it and :func:`newest_valid` falls back); save under a new name and :func:`remove` the old one to avoid it.

Reads (:func:`load`) always use ``torch.load(weights_only=True)``. A file that needs code unpickled is
refused with what it needs, unless the caller passes ``trusted=True``.

Contents (``surge_checkpoint_version`` 2): ``state_dict``, ``hparams``, ``epoch``, ``global_step``,
``plugin_set``; unless saved with ``weights_only``: ``loops`` (the loop's position), ``optimizer_states``,
``lr_schedulers``, ``precision``, ``plugins`` (each stateful plugin's state under its state key),
``datamodule``, ``rng`` (python, numpy, torch, cuda and the train loader's generators), ``data`` (the RNG
states the train loader drew this epoch's order from, and the loader's own ``state_dict`` when it has one)
and, inside an open gradient-accumulation window, ``accumulated_grads``. Plugins add their own entries in
``before_checkpoint_save``. ``hparams`` holds ``module.hparams`` converted to plain types (paths and dates as
strings, enums as their values, dataclasses as dicts, numpy values as numbers and lists) by
:func:`surge._plain.plain_hparams`, which refuses, naming it, a value with no plain form.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import io
import json
import os
import pickle
import posixpath
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, cast

import fsspec
import torch
from fsspec.implementations.local import LocalFileSystem
from loguru import logger

from surge import _resume
from surge import events as ev
from surge._bus import Subscriber, Tier
from surge._plain import plain_hparams
from surge.errors import CheckpointError, CheckpointSaveError, SurgeError

if TYPE_CHECKING:
    from surge.trainer import Trainer

__all__ = [
    "ALIASES",
    "FORMAT_VERSION",
    "MARKER_SUFFIX",
    "CheckpointError",
    "CheckpointSaveError",
    "experiment_diff",
    "experiment_identity",
    "is_valid",
    "load",
    "marker_url",
    "newest_valid",
    "remove",
    "save",
    "shard_dirs",
    "snapshot",
    "sweep",
    "verify",
]

FORMAT_VERSION = 2
SHARDS_INFIX = ".shards-"
"""A sharded checkpoint ``PATH`` keeps its shards in directories ``PATH.shards-<id>`` (see surge-fsdp)."""
MARKER_SUFFIX = ".sha256"
ALIASES = ("last", "best")
"""``ckpt_path`` values that active plugins resolve (see :func:`_resolve`)."""

_TEMP = re.compile(r"^\..+\.[0-9a-f]{32}\.surge-tmp$")
_CHUNK = 1 << 20


# -- writing ---------------------------------------------------------------------------------------


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
            torch.save(checkpoint, buffer)  # serialized before any upload: a pickling error touches nothing
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
        with open(data_tmp, "xb") as f:
            writer = _HashingWriter(f)
            try:
                torch.save(checkpoint, cast(IO[bytes], writer))
            except RuntimeError:
                if writer.error is not None:  # torch reports a failed write as "unexpected pos": give the cause
                    raise writer.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
        new = writer.hexdigest()
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


class _HashingWriter:
    """A file-like sink for ``torch.save`` that hashes what it writes."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._hash = hashlib.sha256()
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        try:
            return self._file.write(data)  # type: ignore[no-any-return]
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._file.flush()

    def hexdigest(self) -> str:
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
    for shards in shard_dirs(fs, path):  # a sharded checkpoint's data (fsdp)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(shards, recursive=True)


def shard_dirs(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """The ``PATH.shards-<id>`` directories beside ``path``. Listed and matched by prefix, not globbed: a glob
    compiles a new regular expression per path, which filled ``re``'s cache in long runs (soak benchmark)."""
    prefix = path + SHARDS_INFIX
    try:
        siblings = fs.ls(posixpath.dirname(path) or ".", detail=False)
    except FileNotFoundError:
        return []
    return [entry for entry in siblings if entry.rstrip("/").startswith(prefix)]


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


def load(url: str, *, trusted: bool = False) -> dict[str, Any]:
    """Read the checkpoint at ``url`` after checking its commit marker and content hash.

    Always ``torch.load(weights_only=True)`` (tensors land on the CPU). A checkpoint that needs code
    unpickled is refused unless ``trusted=True``; pass that only for files you trust, since loading them
    runs the code they hold. Raises :class:`CheckpointError` naming the file when it is missing, empty,
    uncommitted, truncated or corrupt.
    """
    fs, path = fsspec.core.url_to_fs(url)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {url} does not exist") from None
    if not data:
        raise CheckpointError(f"checkpoint {url} is empty (0 bytes); its save was cut short")
    expected = _read_marker(fs, path, url)
    _check_hash(hashlib.sha256(data).hexdigest(), expected, url)
    checkpoint = _deserialize(data, url, trusted)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"checkpoint {url} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    return checkpoint


def verify(url: str) -> None:
    """Check that the checkpoint at ``url`` is complete and intact (marker present, content hash matches)
    without loading it; raises :class:`CheckpointError` naming the file otherwise."""
    fs, path = fsspec.core.url_to_fs(url)
    digest = hashlib.sha256()
    size = 0
    try:
        with fs.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {url} does not exist") from None
    if not size:
        raise CheckpointError(f"checkpoint {url} is empty (0 bytes); its save was cut short")
    _check_hash(digest.hexdigest(), _read_marker(fs, path, url), url)


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


def _read_marker(fs: fsspec.AbstractFileSystem, path: str, url: str) -> list[str]:
    try:
        line = fs.cat_file(path + MARKER_SUFFIX).decode("ascii", "replace")
    except FileNotFoundError:
        raise CheckpointError(
            f"checkpoint {url} has no commit marker {marker_url(url)}: its save did not finish (a crash or "
            "kill during the write), or it was not written by surge.checkpoint.save. A file you wrote yourself "
            "with torch.save can be committed with surge.checkpoint.save(torch.load(path), path)"
        ) from None
    digests = _marker_digests(line)
    if not digests:
        raise CheckpointError(f"checkpoint {url}: its commit marker {marker_url(url)} holds no SHA-256 digest")
    return digests


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


def _deserialize(data: bytes, url: str, trusted: bool) -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        try:
            needed = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
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
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {url} cannot be read: {type(exc).__name__}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- what a Trainer writes and restores --------------------------------------------------------------


def _dump(trainer: Trainer, weights_only: bool, fire: bool = True) -> dict[str, Any]:
    """``Trainer.dump_checkpoint``: everything needed to resume, as plain tensors and containers.

    After a stop cut an epoch short, the run's resumable state is the one recorded at the stop
    (:func:`_record_stop`), not what the cut-short epoch's end changed since."""
    state, module = trainer.state, trainer.module
    recorded = trainer._stop_record
    checkpoint: dict[str, Any] = {
        "surge_checkpoint_version": FORMAT_VERSION,
        "epoch": recorded["epoch"] if recorded else state.current_epoch,
        "global_step": state.global_step,
        "state_dict": trainer.strategy.module_state_dict(module),
        "hparams": plain_hparams(module.hparams),
        "experiment": experiment_identity(module, trainer.datamodule),
        "plugin_set": trainer.plugin_set(),
    }
    if not weights_only:
        checkpoint.update(recorded["resume"] if recorded else _resume_state(trainer))
        if not checkpoint["accumulated_grads"]:
            del checkpoint["accumulated_grads"]
        if recorded and _changed_since(recorded["versions"], module):
            note = (
                "the Module's weights changed after the stop that ended the fit (a train_end handler, such as EMA's "
                "apply_at_end, wrote into them), so this checkpoint holds the changed weights beside the states of "
                "the stop: resuming it does not continue the original run exactly. Save from a handler before the "
                "change (train_epoch_end), or switch the handler off for runs you mean to resume"
            )
            checkpoint["loops"] = {**checkpoint["loops"], "inexact": note}
            logger.warning("checkpoint: {}", note)
    if fire and trainer._bus.before_checkpoint_save:
        trainer._bus.before_checkpoint_save(ev.BeforeCheckpointSave(trainer, checkpoint))
    return checkpoint


def _resume_state(trainer: Trainer) -> dict[str, Any]:
    """What a checkpoint holds beyond the weights: optimizer, scheduler, precision, plugin, datamodule and
    metric states, and where the run stands (:func:`surge._resume.resumable_state`)."""
    module = trainer.module
    resume: dict[str, Any] = {
        "optimizer_states": [trainer.strategy.optimizer_state_dict(module, o) for o in trainer.optimizers],
        "lr_schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
        "precision": trainer.precision_plugin.state_dict(),
        "plugins": {
            _state_key(s): s.obj.state_dict()  # type: ignore[attr-defined]
            for s in trainer._plugin_subscribers
            if _stateful(s.obj) and s.obj is not trainer.precision_plugin  # that one has its own entry
        },
        "metrics": trainer._metrics.state_dict(),
    }
    if trainer.datamodule is not None:
        resume["datamodule"] = trainer.datamodule.state_dict()
    resume.update(_resume.resumable_state(trainer))
    return resume


def _record_stop(trainer: Trainer) -> dict[str, Any]:
    """The resumable state at a stop that cuts an epoch short, kept for the checkpoints written after it.

    Copied (:func:`snapshot`), since the cut-short epoch's end still runs and changes scheduler, metric
    and plugin states; the optimizer states are kept by reference (no step follows a stop), so the cost
    is one copy of the small states, not of the model."""
    resume = _resume_state(trainer)
    optimizer_states = resume.pop("optimizer_states")
    resume = snapshot(resume)
    resume["optimizer_states"] = [
        {**opt_state, "param_groups": snapshot(opt_state["param_groups"])} if "param_groups" in opt_state else opt_state
        for opt_state in optimizer_states
    ]
    versions = [t._version for t in trainer.module.state_dict(keep_vars=True).values()]
    return {"epoch": trainer.state.current_epoch, "resume": resume, "versions": versions}


def _changed_since(versions: list[int], module: torch.nn.Module) -> bool:
    """Whether a weight or buffer was written in place since ``versions`` were read (torch counts each
    in-place write of a tensor in its version counter): cheap, and no copy of the weights is kept."""
    now = [t._version for t in module.state_dict(keep_vars=True).values()]
    return now != versions


def _restore(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> None:
    """``Trainer.restore_checkpoint`` after the file is read: weights always; in ``fit`` also optimizers,
    schedulers, precision, plugin and datamodule states and the loop's position (the loops continue
    from it)."""
    with _must_fit(url):
        _warn_plugin_set_diff(url, checkpoint.get("plugin_set", []), trainer.plugin_set())
        _warn_experiment_diff(trainer, url, checkpoint.get("experiment"))
        if "sharded" in checkpoint and "state_dict" not in checkpoint:
            info = checkpoint["sharded"]
            raise CheckpointError(
                f"checkpoint {url} is sharded (its weights are in {info.get('shards')}, written by a sharding strategy "
                f"across {info.get('world_size')} processes); restore it with that strategy (strategy='fsdp'), or "
                f"make one file of it with `python -m surge_fsdp.consolidate {url} OUT.ckpt`"
            )
        if "state_dict" not in checkpoint:
            raise CheckpointError(f"checkpoint {url} is not a Surge checkpoint (it has no 'state_dict' entry)")
        if trainer.state.stage == "fit" and "loops" not in checkpoint:
            raise CheckpointError(
                f"checkpoint {url} holds weights only (saved with weights_only=True or save_weights_only=True): it has "
                "no optimizer, scheduler, loop or RNG state, so fit(ckpt_path=...) cannot continue its run. To start a "
                "new run from these weights, load them first (model = MyModule.load_from_checkpoint(path), or "
                "model.load_state_dict(surge.checkpoint.load(path)['state_dict'])) and call fit without ckpt_path"
            )
    bus = trainer._bus
    if bus.before_checkpoint_load:
        bus.before_checkpoint_load(ev.BeforeCheckpointLoad(trainer, checkpoint))
    with _must_fit(url):
        _restore_states(trainer, checkpoint, url)
    if bus.after_checkpoint_load:
        bus.after_checkpoint_load(ev.AfterCheckpointLoad(trainer, checkpoint))


@contextlib.contextmanager
def _must_fit(url: str) -> Iterator[None]:
    """A well-formed file whose contents do not fit this run (another model, or damage a recomputed marker
    hides) fails as a ``CheckpointError`` naming it, not as whatever restoring tripped over."""
    try:
        yield
    except SurgeError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {url} does not fit this run: {type(exc).__name__}: {_first_line(exc)}. Restore it with the "
            "model, optimizers and plugins that wrote it"
        ) from exc


def _restore_states(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> None:
    trainer.strategy.load_module_state_dict(trainer.module, checkpoint["state_dict"])
    loops = checkpoint.get("loops")
    if loops and trainer.state.stage == "fit":
        optimizer_states = checkpoint.get("optimizer_states", [])
        scheduler_states = checkpoint.get("lr_schedulers", [])
        if len(optimizer_states) != len(trainer.optimizers) or len(scheduler_states) != len(
            trainer.lr_scheduler_configs
        ):
            raise SurgeError(
                f"checkpoint {url} holds {len(optimizer_states)} optimizer and {len(scheduler_states)} scheduler "
                f"states, but configure_optimizers returned {len(trainer.optimizers)} and "
                f"{len(trainer.lr_scheduler_configs)}; resume with the configuration that wrote it"
            )
        for opt, opt_state in zip(trainer.optimizers, optimizer_states, strict=True):
            trainer.strategy.load_optimizer_state_dict(trainer.module, opt, opt_state)
            # It stepped before the save; without this torch warns when a scheduler steps before it does again.
            opt._opt_called = checkpoint.get("global_step", 0) > 0  # type: ignore[attr-defined]
        for config, sched_state in zip(trainer.lr_scheduler_configs, scheduler_states, strict=True):
            config.scheduler.load_state_dict(sched_state)
        trainer.precision_plugin.load_state_dict(checkpoint.get("precision", {}))
        trainer._metrics.load_state_dict(checkpoint.get("metrics", {}), trainer.strategy.root_device)
        plugin_states = checkpoint.get("plugins", {})
        for sub in trainer._plugin_subscribers:
            if _stateful(sub.obj) and sub.obj is not trainer.precision_plugin and _state_key(sub) in plugin_states:
                sub.obj.load_state_dict(plugin_states[_state_key(sub)])  # type: ignore[attr-defined]
        if trainer.datamodule is not None and "datamodule" in checkpoint:
            trainer.datamodule.load_state_dict(checkpoint["datamodule"])
        trainer._resume_point = _resume.restore_position(trainer, checkpoint, url)


def _resolve(trainer: Trainer, ckpt_path: str, stage: str) -> str | None:
    """The checkpoint URL ``ckpt_path`` names. An alias (``"last"``, ``"best"``) is answered by the first
    active plugin, in bus order, whose ``surge_checkpoint_path(alias)`` returns a path. ``None``: ``fit``
    was asked for ``"last"`` and there is none yet, so training starts from scratch."""
    if ckpt_path not in ALIASES:
        return ckpt_path
    subscribers = sorted(trainer._plugin_subscribers, key=lambda s: s.tier)  # stable: bus order within a tier
    resolvers = [s for s in subscribers if callable(getattr(s.obj, "surge_checkpoint_path", None))]
    if not resolvers:
        raise SurgeError(
            f"ckpt_path={ckpt_path!r}: no active plugin resolves {ckpt_path!r} (a plugin does so with a "
            "surge_checkpoint_path(alias) method). Enable the checkpoint plugin (enable_checkpointing=True, "
            "plugins=['checkpoint']) with the run's checkpoint directory, or pass the checkpoint's path"
        )
    for sub in resolvers:
        answer = sub.obj.surge_checkpoint_path(ckpt_path)  # type: ignore[attr-defined]
        if answer is not None:
            logger.info("ckpt_path={!r} resolved to {} by {}", ckpt_path, answer, sub.describe())
            return str(answer)
    asked = ", ".join(s.name for s in resolvers)
    if ckpt_path == "last" and stage == "fit":
        logger.warning("ckpt_path='last': there is no checkpoint yet (asked: {}); training starts from scratch", asked)
        return None
    raise SurgeError(
        f"ckpt_path={ckpt_path!r}: no checkpoint to use (asked: {asked}; none has a {ckpt_path!r} checkpoint). "
        f"Train first, or pass the checkpoint's path"
    )


# -- plugin states -------------------------------------------------------------------------------------


def _stateful(obj: object) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _state_key(sub: Subscriber) -> str:
    key = getattr(sub.obj, "state_key", None)
    return key if isinstance(key, str) and key else sub.name


def _check_state_keys(subscribers: Sequence[Subscriber]) -> None:
    """Two stateful participants with one state key would overwrite each other's checkpointed state."""
    seen: dict[str, Subscriber] = {}
    for sub in subscribers:
        if not _stateful(sub.obj) or sub.tier is Tier.PROVIDER:
            continue
        key = _state_key(sub)
        if key in seen:
            raise SurgeError(
                f"{seen[key].describe()} and {sub.describe()} share the state key '{key}'; give each instance "
                "a distinct `state_key` so their checkpointed states do not overwrite each other"
            )
        seen[key] = sub


def _warn_plugin_set_diff(url: str, saved: list[dict[str, Any]], current: list[dict[str, Any]]) -> None:
    def key(entry: dict[str, Any]) -> tuple[str, str]:
        return entry["name"], f"{entry.get('distribution') or '-'} {entry.get('version') or '-'}"

    before, now = dict(map(key, saved)), dict(map(key, current))
    lines = [f"  - {n} ({before[n]}): in the checkpoint, not active now" for n in sorted(set(before) - set(now))]
    lines += [f"  + {n} ({now[n]}): active now, not in the checkpoint" for n in sorted(set(now) - set(before))]
    lines += [f"  ~ {n}: {before[n]} -> {now[n]}" for n in sorted(set(before) & set(now)) if before[n] != now[n]]
    if lines:
        logger.warning("resuming from {} with a different plugin set:\n{}", url, "\n".join(lines))


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
    from the user's in place (FSDP's ``fully_shard`` makes ``FSDP<Name>``, defined in torch) is not named."""
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


def _warn_experiment_diff(trainer: Trainer, url: str, saved: Any) -> None:
    """The checkpoint's experiment (when it records one) differs from the run's: say how; restore anyway."""
    if not isinstance(saved, Mapping) or trainer.module is None:
        return
    lines = experiment_diff(saved, experiment_identity(trainer.module, trainer.datamodule))
    if lines:
        logger.warning(
            "restoring {}, a checkpoint of another experiment (the checkpoint's -> this run's):\n{}\nIts weights "
            "load as asked; if this is not the checkpoint you meant, pass the path of one of this experiment's",
            url,
            "\n".join(f"  ~ {line}" for line in lines),
        )
