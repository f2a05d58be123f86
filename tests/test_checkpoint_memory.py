"""The memory a checkpoint load adds is bounded by the checkpoint, not twice it (issue 27).

Each operation runs in a fresh child process (``_checkpoint_memory_child.py``) on a checkpoint of about 320 MB
of weights, large enough that one extra copy of it (a read of the whole file into memory before unpickling a
second copy from it, as loads did before) would add 100% where the bound allows 10%: from a local file, from an
object store, and Lightning's checkpoint import. ``Module.load_from_checkpoint`` is held to the same bound
beyond the module it builds (its peak was the module plus one copy before, too). The child reads every
tensor the operation produced, so pages a mapped load never touched are not left out of the measure; what is
measured is the child's peak resident set (``VmHWM``, reset just before the operation) minus its resident set
then. Nothing is timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = str(Path(__file__).with_name("_checkpoint_memory_child.py"))
MEGABYTES = 320
BOUND = 1.1
"""Peak memory added by a load, as a multiple of the checkpoint's tensors (issue 27)."""


def _child(*args: str) -> str:
    done = subprocess.run([sys.executable, CHILD, *args], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("memory") / "wide.ckpt")
    _child("make", path, str(MEGABYTES))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("operation", ["load", "object_store", "lightning", "load_from_checkpoint"])
def test_a_load_adds_at_most_the_checkpoints_tensors(big_checkpoint: str, operation: str) -> None:
    measured = json.loads(_child(operation, big_checkpoint).strip().splitlines()[-1])
    tensors, added, model = measured["tensors"], measured["added"], measured["model"]
    assert tensors > 0.9 * MEGABYTES * 2**20  # the checkpoint is as large as planned
    # load_from_checkpoint also builds the module the weights go into: that is not the load's
    ratio = (added - model) / tensors
    assert ratio <= BOUND, (
        f"{operation} of a {tensors / 1e6:.0f} MB checkpoint added {added / 1e6:.0f} MB at its peak "
        f"({model / 1e6:.0f} MB of it the module built): {ratio:.2f}x the checkpoint's tensors, the bound is {BOUND}x"
    )
