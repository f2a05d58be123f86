"""What the template's ``rootutils.setup_root(__file__, indicator=".project-root", pythonpath=True)`` does, in a
few lines: the project's root (the folder with ``.project-root``) on ``sys.path`` and in ``PROJECT_ROOT``, which
``configs/paths/default.yaml`` reads."""

import os
import sys
from pathlib import Path


def setup_root(start: str) -> Path:
    root = next(p for p in Path(start).resolve().parents if (p / ".project-root").exists())
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    os.environ.setdefault("PROJECT_ROOT", str(root))
    return root
