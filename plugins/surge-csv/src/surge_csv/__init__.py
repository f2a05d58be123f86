"""surge-csv: the default logger. Each run directory gets ``metrics.csv`` and ``hparams.yaml``.

``metrics.csv`` has the columns ``step``, ``epoch`` and one per metric name, and one row per write (every
``log_every_n_steps`` optimizer steps, and at the end of each epoch), appended and flushed to the operating
system as it happens. ``Trainer(logger=False)`` or ``plugins={"csv": False}`` switches it off;
``logger=["csv", "tensorboard"]`` picks loggers by name.

Written against Surge's public API only, exactly as a third-party plugin would be.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any

import fsspec
import surge
import surge.events as ev
from pydantic import BaseModel, ConfigDict, Field
from surge import logger

from surge_csv._file import RESERVED, MetricsFile, encode, read, write_atomic

__all__ = ["CSVConfig", "CSVLogger", "plugin", "read_metrics"]


class CSVConfig(BaseModel):
    """Settings of the ``csv`` plugin (``plugins={"csv": {...}}``)."""

    model_config = ConfigDict(extra="forbid")

    filename: str = Field("metrics.csv", min_length=1)
    """The metrics file, in the run directory."""
    hparams_filename: str = Field("hparams.yaml", min_length=1)
    """The hyper-parameters file, in the run directory."""


class CSVLogger:
    """Writes ``log_metrics`` rows and ``log_hyperparams`` to the run directory (global rank zero only).

    Resume: its state in a checkpoint is the metrics file and how many rows it had. ``fit(ckpt_path=...)``
    runs in a new run directory whose ``metrics.csv`` starts as those rows, copied; the resumed run appends
    after them, so the history has no step twice. The old run's file is never changed.
    """

    state_key = "csv"

    def __init__(self, config: CSVConfig | None = None) -> None:
        self.config = config or CSVConfig()
        self.file: MetricsFile | None = None
        self._resume: tuple[str, int] | None = None

    # -- where ------------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        trainer = event.trainer
        if not trainer.is_global_zero or trainer.run_dir is None:
            return
        url = _join(trainer.run_dir, self.config.filename)
        if self.file is None or self.file.url != url:
            if self.file is not None:
                self.file.close()
            self.file = MetricsFile(url)

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        self._continue()

    def _continue(self) -> None:
        """Start this run's file as the resumed run's first rows (those the checkpoint knew of)."""
        if self._resume is None or self.file is None:
            return
        source, count = self._resume
        self._resume = None
        try:
            extra = self.file.keep_first(source, count)
        except FileNotFoundError:
            logger.warning("csv: {} (the resumed run's metrics) is gone; {} starts empty", source, self.file.url)
            return
        if extra and source == self.file.url:  # resumed into the same directory: keep what is cut, aside
            aside = self.file.url.removesuffix(".csv") + ".rewound.csv"
            header = dict(zip(self.file.columns, self.file.columns, strict=True))
            write_atomic(aside, encode(self.file.columns, [header, *extra]).encode())
            logger.info("csv: {} rows logged after the checkpoint moved to {}", len(extra), aside)

    # -- what -------------------------------------------------------------------------------------------
    @surge.hookimpl
    def log_metrics(self, event: ev.LogMetrics) -> None:
        if self.file is None:
            return
        row: dict[str, Any] = {"step": event.step, "epoch": event.epoch}
        for name, value in event.metrics.items():
            row[f"{name}_" if name in RESERVED else name] = value
        self.file.append(row)

    @surge.hookimpl
    def log_hyperparams(self, event: ev.LogHyperparams) -> None:
        trainer = event.trainer
        if trainer.run_dir is None:
            return
        import yaml

        text = yaml.safe_dump(_plain(dict(event.params)), sort_keys=False)
        write_atomic(_join(trainer.run_dir, self.config.hparams_filename), text.encode())

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        if self.file is not None:
            self.file.close()

    # -- checkpoint state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.file is None:
            return {}
        return {"metrics_file": self.file.url, "rows": self.file.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("metrics_file"):
            self._resume = (str(state["metrics_file"]), int(state["rows"]))
            self._continue()  # now, before the resumed run writes what the checkpoint held unwritten


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def _plain(value: Any) -> Any:
    """What YAML can hold without tags: containers, numbers, strings; anything else as its ``repr``.

    Scalars become the builtin types: ``yaml.safe_dump`` refuses subclasses (``numpy.float64`` is a ``float``)
    and numpy's other scalars."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    numpy = sys.modules.get("numpy")  # numpy scalars exist only once numpy is imported
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    return repr(value)


def read_metrics(path: str) -> list[dict[str, float | None]]:
    """The rows of a ``metrics.csv`` (a file, or a run directory holding one) with numbers as floats and
    empty cells as ``None``."""
    url = path if path.endswith(".csv") else _join(path, "metrics.csv")
    fs, p = fsspec.core.url_to_fs(url)
    _, rows = read(fs.cat_file(p).decode())
    return [{k: float(v) if v != "" else None for k, v in row.items()} for row in rows]


def build(**settings: Any) -> CSVLogger:
    """The ``csv`` plugin's factory (``settings`` already validated by :class:`CSVConfig`)."""
    return CSVLogger(CSVConfig(**settings))


plugin = surge.Plugin(
    name="csv",
    kind="observer",
    factory=build,
    config=CSVConfig,
    default=True,
    role="logger",
    description="CSV logger: metrics.csv (one row per write, crash-safe appends) and hparams.yaml per run",
)
