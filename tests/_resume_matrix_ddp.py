"""One rank of the resume matrix's 2-process DDP runs (run as a 2-process job by ``launch_workers``; not collected by pytest).

``_resume_matrix_ddp.py RUN OUT CASE_ID MODULE``: :func:`ddp_run` of ``test_resume_matrix`` (imported under
``MODULE``, the name the parent gave it, so that the model's and data's classes are the same experiment in
every process): ``reference``, ``part1`` or ``resume`` of ``CASE_ID`` into ``OUT``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    run, out, case_id, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("test_resume_matrix.py"))
    assert spec is not None and spec.loader is not None
    matrix = importlib.util.module_from_spec(spec)
    sys.modules[name] = matrix
    spec.loader.exec_module(matrix)

    matrix.ddp_run(run, out, matrix.Case.parse(case_id))

    # Leave without interpreter finalization (see plugins/surge-ddp/tests/_program.py): gloo's worker threads
    # can abort a process that tears down while they still hold finished work.
    import torch.distributed as dist
    from surge.plugins.distributed import leave_process_group

    leave_process_group() if dist.is_initialized() else None
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
