"""The killed run of the resume matrix's ``sigkill`` cases (run as a script; not collected by pytest).

``_resume_matrix_child.py CASE_ID TMP THREADS MODULE``: runs part 1 of ``CASE_ID`` (see
``test_resume_matrix``) into ``TMP`` with ``THREADS`` torch threads (the parent's, so that both compute
alike); its ``Sigkill`` plugin kills this process with SIGKILL, so a normal exit is a failure the parent
reports. The test module is imported under ``MODULE``, the name the parent gave it (pytest's importlib mode
says ``tests.test_resume_matrix``), so that the model's and data's classes are the same experiment in both
processes (the checkpoint plugin compares them before resuming ``"last"``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    case_id, tmp, threads, name = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import importlib.util

    import torch

    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("test_resume_matrix.py"))
    assert spec is not None and spec.loader is not None
    matrix = importlib.util.module_from_spec(spec)
    sys.modules[name] = matrix
    spec.loader.exec_module(matrix)

    matrix.run_part1(matrix.Case.parse(case_id), tmp)
    print("part 1 ended without being killed", file=sys.stderr)
    sys.exit(3)
