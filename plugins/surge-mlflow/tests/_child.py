"""Child processes of the crash tests (run as a script; not collected by pytest).

``_child.py train URI EXPERIMENT STOP_AT``
    Fits with the ``mlflow`` plugin writing to URI/EXPERIMENT, metrics every step, and prints
    ``logged STEP NAME=VALUE ...`` (values as ``repr`` floats) once MLflow has written each step. At step
    STOP_AT it prints ``waiting`` and blocks on stdin, for the parent to kill it.

``_child.py imports``
    Builds Trainers with and without the plugin and prints the ``mlflow`` modules imported meanwhile.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import surge
from surge.testing import PluginEnv, TinyDataModule, TinyModule


class Reporter:
    surge_name = "reporter"
    surge_kind = "observer"

    def __init__(self, stop_at: int) -> None:
        self.stop_at = stop_at

    @surge.hookimpl(after="mlflow")
    def log_metrics(self, event) -> None:
        values = " ".join(f"{name}={value!r}" for name, value in sorted(event.metrics.items()))
        print(f"logged {event.step} {values}", flush=True)
        if event.step == self.stop_at:
            print("waiting", flush=True)
            sys.stdin.readline()  # the parent kills this process with SIGKILL


def train(uri: str, experiment: str, stop_at: int) -> None:
    reporter = Reporter(stop_at)
    with PluginEnv() as env:
        env.add(surge.Plugin(name="reporter", kind="observer", factory=lambda: reporter))
        trainer = surge.Trainer(
            default_root_dir=tempfile.mkdtemp(prefix="surge-mlflow-child-"),
            plugins={"mlflow": {"tracking_uri": uri, "experiment_name": experiment}, "reporter": True},
            logger="mlflow",
            max_epochs=100,
            log_every_n_steps=1,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
    trainer.fit(TinyModule(), datamodule=TinyDataModule())


def imports() -> None:
    root = tempfile.mkdtemp(prefix="surge-mlflow-child-")
    import surge_mlflow  # noqa: F401

    print("after import:", sorted(m for m in sys.modules if m.split(".")[0] == "mlflow"), flush=True)
    surge.Trainer(default_root_dir=root)
    print("after Trainer():", sorted(m for m in sys.modules if m.split(".")[0] == "mlflow"), flush=True)
    trainer = surge.Trainer(default_root_dir=root, logger="mlflow")
    assert "mlflow" in trainer.plugin_names
    print("after Trainer(logger='mlflow'):", sorted(m for m in sys.modules if m.split(".")[0] == "mlflow"), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        imports()
