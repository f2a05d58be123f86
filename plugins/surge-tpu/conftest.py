"""xla_tests/ need torch_xla and run in their own venv (`make test-tpu`); the main suite, which has no
torch_xla, does not collect them at all (rather than reporting them skipped)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch_xla") is not None else ["xla_tests/*"]
