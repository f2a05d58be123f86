"""One rank of ``test_module_steps.py``'s DDP comparison (launched as a 2-process job; not collected).

``_module_steps_ddp_child.py FRAMEWORK OUT``: fits the test's model (``lightning`` or ``surge``) with a warm-up in
``optimizer_step``, a recording ``backward`` and ``on_after_batch_transfer``, on ``strategy="ddp", devices=2,
accelerator="cpu"`` with ``accumulate_grad_batches=2`` on a shuffled loader; writes ``OUT/rank<R>.pt``: the calls and the final weights.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from test_module_steps import AfterTransfer, Backward, WarmUp, build, dataset, make_trainer
from torch.utils.data import DataLoader


def main(framework: str, out: str) -> None:
    torch.set_num_threads(1)
    model = build(framework, WarmUp, Backward, AfterTransfer)
    trainer = make_trainer(
        framework, strategy="ddp", devices=2, max_epochs=1, accumulate_grad_batches=2, default_root_dir=out
    )
    # shuffled: Lightning shuffles every training loader's DistributedSampler (seed 0), Surge a shuffled one's
    trainer.fit(model, DataLoader(dataset(32), batch_size=2, shuffle=True))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"calls": model.calls, "weights": weights}, os.path.join(out, f"rank{trainer.global_rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
