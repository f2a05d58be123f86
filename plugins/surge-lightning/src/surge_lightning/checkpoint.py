"""Checkpoints written by Lightning 2.x, read as Surge checkpoints: :func:`from_lightning` is the one conversion.

:data:`FORMAT` is this distribution's ``surge.checkpoint_formats`` entry (``lightning``):
:func:`surge.checkpoint.load` takes a Lightning ``.ckpt`` (it has no commit marker, so its integrity cannot be
checked) when :func:`is_lightning` recognises it, reads it with ``torch.load(weights_only=True)`` like any
checkpoint and converts it here. Lightning saves no RNG state and no data-loader position; what else does not
carry over is listed in the converted dict's ``converted_from["not_carried"]``, which a resumed ``fit`` names in one
warning.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any

from surge.errors import CheckpointError

__all__ = ["FORMAT", "LightningFormat", "is_lightning", "from_lightning"]

_VERSION_KEY = "pytorch-lightning_version"
_LIGHTNING_ONLY = {"loops", "callbacks", "hyper_parameters", "hparams_name", "hparams_type"}
_KNOWN = {"epoch", "global_step", _VERSION_KEY, "state_dict", "optimizer_states", "lr_schedulers"} | _LIGHTNING_ONLY


def is_lightning(data: bytes) -> bool:
    """Whether ``data`` (a file ``torch.save`` wrote) is a Lightning checkpoint: its pickle names Lightning's
    version key. Looked up in the archive's pickle without unpickling anything."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("/data.pkl") or name == "data.pkl"]
            return any(_VERSION_KEY.encode() in archive.read(name) for name in pickles)
    except (zipfile.BadZipFile, OSError, KeyError):
        return False


def from_lightning(saved: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The Surge checkpoint dict of a Lightning 2.x checkpoint dict, and what could not carry over (one line
    each). The dict also records them as ``converted_from = {"format": "Lightning", "version": ..., "not_carried":
    [...]}``.

    Carried: the weights, optimizer and LR scheduler states, epoch and global step and the loop's position
    (an epoch-end checkpoint resumes at the next epoch's start, as in Lightning; a mid-epoch one after the
    batches it had done), the hyper-parameters (``hyper_parameters`` -> ``hparams``, ``hparams_name``), the
    precision plugin's gradient scaler, and the callback states under their Lightning keys in ``plugins``
    (a Surge plugin with the equivalent state takes its own: ModelCheckpoint, EarlyStopping)."""
    notes: list[str] = []
    epoch, step = int(saved.get("epoch", 0)), int(saved.get("global_step", 0))
    checkpoint: dict[str, Any] = {
        "surge_checkpoint_version": 2,
        "epoch": epoch,
        "global_step": step,
        "state_dict": saved["state_dict"],
        "hparams": dict(saved.get("hyper_parameters") or {}),
    }
    if isinstance(saved.get("hparams_name"), str):
        checkpoint["hparams_name"] = saved["hparams_name"]
    if "hparams_type" in saved:
        notes.append(f"hparams_type ({saved['hparams_type']}): the hyper-parameters are read as a plain dict")
    if "optimizer_states" in saved and "loops" in saved:
        checkpoint["optimizer_states"] = list(saved["optimizer_states"])
        checkpoint["lr_schedulers"] = list(saved.get("lr_schedulers", []))
        checkpoint["loops"] = _position(saved["loops"].get("fit_loop") or {}, epoch, step, notes)
        checkpoint["plugins"] = dict(saved.get("callbacks") or {})
    else:
        notes.append("the optimizer, scheduler and loop states: Lightning saved this checkpoint with weights_only")
    for key, value in saved.items():
        if key in _KNOWN:
            continue
        if key.endswith("Precision") and isinstance(value, Mapping):
            checkpoint["precision"] = dict(value)  # the GradScaler's state_dict, as Surge's precision saves it
        else:
            notes.append(f"the entry {key!r} (the DataModule's state or the module's on_save_checkpoint additions)")
    notes.append("the RNG states: Lightning does not save them, so random draws continue from this process's")
    checkpoint["converted_from"] = {
        "format": "Lightning",
        "version": str(saved.get(_VERSION_KEY)),
        "not_carried": notes,
    }
    return checkpoint, notes


def _position(fit_loop: Mapping[str, Any], epoch: int, step: int, notes: list[str]) -> dict[str, Any]:
    """Surge's ``loops`` entry from Lightning's ``fit_loop`` progress counters.

    Lightning's ``epoch_progress`` counts epochs ready/started/processed/completed. An epoch whose batches all
    ran (processed == started: saved in ``on_train_epoch_end``; or its last batch done: saved when the validation
    after it ended) resumes at the next epoch's start, its epoch-interval schedulers already stepped. Otherwise
    the run continues after the batches of the epoch it had done, without the validation due after the last
    one (Lightning skips it too on restart)."""
    epochs = fit_loop.get("epoch_progress", {}).get("total", {})
    batches = fit_loop.get("epoch_loop.batch_progress", {})
    # "processed", not "completed": a save in on_train_batch_end comes before that batch counts as completed
    total = int(batches.get("total", {}).get("processed", 0))
    done = int(batches.get("current", {}).get("processed", 0))
    started = int(epochs.get("started", epoch))
    end_of_epoch = int(epochs.get("processed", 0)) == started or bool(batches.get("is_last_batch"))
    position = {"global_step": step, "total_batches": total, "epoch_loop_done": False}
    if end_of_epoch:
        return {**position, "current_epoch": started, "epoch_batches": 0, "validated": False}
    notes.append(
        f"the data position inside epoch {epoch}: the checkpoint was saved after {done} of its batches, and "
        "Lightning saved no sampler state, so the rest of the epoch skips that many batches of a new draw"
    )
    return {**position, "current_epoch": max(started - 1, 0), "epoch_batches": done, "validated": True}


class LightningFormat:
    """Lightning 2.x checkpoints as a :class:`surge.checkpoint.CheckpointFormat`."""

    def recognizes(self, data: bytes) -> bool:
        return is_lightning(data)

    def convert(self, saved: Any, url: str) -> dict[str, Any]:
        if not isinstance(saved, dict) or "state_dict" not in saved:
            raise CheckpointError(
                f"Lightning checkpoint {url} holds no 'state_dict'; it cannot be read as a checkpoint"
            )
        return from_lightning(saved)[0]


FORMAT = LightningFormat()
"""The converter ``surge.checkpoint.load`` asks (entry point ``lightning`` of ``surge.checkpoint_formats``)."""
