"""The child processes of ``test_checkpoint_memory.py`` (run as a script; not collected by pytest).

``_checkpoint_memory_child.py make PATH MB``: write a checkpoint of a :class:`Wide` module holding about MB
megabytes of float32 weights (``surge.checkpoint.save``, so with its commit marker), and beside it
``PATH.lightning`` as Lightning writes one (``torch.save``, Lightning's version key, no marker).

``_checkpoint_memory_child.py OPERATION PATH``: with everything imported, reset this process's peak resident set
(``/proc/self/clear_refs``), run OPERATION on the checkpoint, read every tensor it produced (a mapped tensor
counts only once its pages are read), and print one JSON line: ``added`` (peak resident bytes minus those before
the operation), ``tensors`` (the bytes of the checkpoint's tensors) and ``model`` (the bytes of a module the
operation built, 0 when it built none). OPERATION: ``load`` (``surge.checkpoint.load``), ``object_store``
(the same from ``memory://``, the object put there before the measure starts), ``load_from_checkpoint``
(``Wide.load_from_checkpoint``), ``lightning`` (``surge.checkpoint.load`` of ``PATH.lightning``, converted from
Lightning's format).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import surge
import torch
from torch import nn


class Wide(surge.Module):
    def __init__(self, width: int = 1024, layers: int = 1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layers = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layers(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in _tensors(value)]
    if isinstance(obj, (list, tuple)):
        return [t for value in obj for t in _tensors(value)]
    return []


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def make(path: str, megabytes: int) -> None:
    width = 1024
    layers = max(1, megabytes * 2**20 // (width * width * 4))
    surge.seed_everything(0)
    model = Wide(width, layers)
    surge.checkpoint.save({"state_dict": model.state_dict(), "hparams": dict(model.hparams)}, path)
    lightning = {"state_dict": model.state_dict(), "epoch": 0, "global_step": 0, "pytorch-lightning_version": "2.6.6"}
    torch.save(lightning, path + ".lightning")


def measure(operation: str, path: str) -> dict[str, int]:
    import fsspec
    from surge import checkpoint

    source = path
    if operation == "object_store":
        fs = fsspec.filesystem("memory")
        with open(path, "rb") as f:
            fs.pipe_file("/bucket/model.ckpt", f.read())
        fs.pipe_file("/bucket/model.ckpt.sha256", open(path + ".sha256", "rb").read())
        source = "memory://bucket/model.ckpt"
    elif operation == "lightning":
        source = path = path + ".lightning"
    tensors = _bytes(_tensors(torch.load(path, mmap=True, weights_only=True)))  # counts nothing: mapped, unread
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from the current one
    before = _status("VmRSS")
    model = 0
    if operation == "load_from_checkpoint":
        loaded = Wide.load_from_checkpoint(source)
        produced = _tensors(dict(loaded.state_dict()))
        model = _bytes(produced)
    else:
        produced = _tensors(checkpoint.load(source))
    total = sum(float(t.sum()) for t in produced)  # every page read
    assert total == total  # not NaN: the weights were read
    return {"added": _status("VmHWM") - before, "tensors": tensors, "model": model}


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps(measure(sys.argv[1], sys.argv[2])))
