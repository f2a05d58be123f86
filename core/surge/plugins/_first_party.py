"""The plugins this repository publishes, and the names people use for its providers: the only place where the
core names first-party plugins, and only to say what to install (the behaviour is the plugins' own: their
switches, their provider names, their roles).

An error about a name nobody installed may point to ``pip install`` only for these: a hint built from the
name itself (``pip install surge-<typo>``) would send users to a distribution that does not exist, or to
someone else's. ``tests/test_lightning_api.py`` checks the table against ``plugins/*/pyproject.toml``.
"""

from __future__ import annotations

FIRST_PARTY: dict[str, str] = {
    "devices": "surge-devices",
    "precision": "surge-precision",
    "checkpoint": "surge-checkpoint",
    "csv": "surge-csv",
    "tensorboard": "surge-tensorboard",
    "mlflow": "surge-mlflow",
    "wandb": "surge-wandb",
    "progress": "surge-progress",
    "model_summary": "surge-progress",
    "lr_monitor": "surge-progress",
    "tpu": "surge-tpu",
    "ddp": "surge-ddp",
    "fsdp": "surge-fsdp",
    "swa": "surge-swa",
    "ema": "surge-swa",
    "early_stopping": "surge-callbacks",
    "timer": "surge-callbacks",
    "gradient_accumulation_scheduler": "surge-callbacks",
    "nan_guard": "surge-callbacks",
    "grad_norm": "surge-callbacks",
    "device_stats": "surge-callbacks",
    "tuner": "surge-tuner",
    "profilers": "surge-profilers",
    "compile": "surge-compile",
}
"""Plugin name -> the first-party distribution that ships it."""

SYNONYMS: dict[str, dict[str, str]] = {
    "precision": {
        "fp16": "16-mixed",
        "half": "16-mixed",
        "float16": "16-mixed",
        "bfloat16": "bf16-mixed",
        "float32": "32-true",
        "float": "32-true",
        "full": "32-true",
        "float64": "64-true",
        "double": "64-true",
    },
    "accelerator": {"gpu": "cuda"},
    "strategy": {"ddp_spawn": "ddp", "ddp_fork": "ddp", "ddp_notebook": "ddp", "dp": "ddp"},
}
"""Per provider slot, what people write (Lightning's names, dtype names) -> the provider name it means here:
"did you mean" proposes that, not the nearest spelling (``fp16`` is not ``fp64``, ``gpu`` is not ``tpu``)."""


PRECISION_NAMES = frozenset({"64", "64-true", "fp64", "16", "16-mixed", "bf16", "bf16-mixed", "16-true", "bf16-true"})
"""The precision names surge-precision serves: the hint for an unknown precision points there only for these."""

SERVED_BY: dict[str, str] = {
    "max_time": "surge-callbacks",
    "accumulate_grad_batches": "surge-callbacks",
    "stochastic_weight_avg": "surge-swa",
    "track_grad_norm": "surge-callbacks",
    "terminate_on_nan": "surge-callbacks",
    "log_gpu_memory": "surge-callbacks",
}
"""The seed Trainer's arguments for training techniques, which only a plugin serves (what a value means is the
serving plugin's ``switches``), with the first-party distribution to name in the error when none is installed."""


def install_hint(name: str) -> str:
    """`` `pip install <distribution>` adds it.`` for a first-party plugin name, else nothing."""
    distribution = FIRST_PARTY.get(name)
    return f" `pip install {distribution}` adds it." if distribution else ""
