"""``surge plot RUN_DIR``: the curves of a run's ``metrics.csv`` as a PNG.

Metrics that differ only by their stage prefix (``train_``, ``val_``, ``test_``) or their ``_step``/``_epoch``
suffix share one panel, so training and validation loss sit on the same axes.

The command comes with surge-csv, which writes the file, through the ``surge.commands`` entry-point group
(``plot = "surge_csv.plot:command"``); matplotlib is its optional dependency: ``pip install 'surge-csv[plot]'``.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections.abc import Sequence

import fsspec
import surge
from surge import SurgeError

PREFIXES = ("train_", "training_", "val_", "validation_", "test_")
SUFFIXES = ("_step", "_epoch")
AXES = ("step", "epoch")


__all__ = ["command", "load", "points", "render", "select", "stem"]


def _arguments(plot: argparse.ArgumentParser) -> None:
    plot.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (surge_runs/version_N) or its metrics.csv")
    plot.add_argument("--metrics", nargs="+", metavar="NAME", help="only these metrics (full names or shared stems)")
    plot.add_argument("-o", "--output", metavar="PNG", help="where to write (default: RUN_DIR/metrics.png)")
    plot.add_argument("--x", choices=AXES, default="step", help="x axis: optimizer step (default) or epoch")


def stem(name: str) -> str:
    """``val_loss_epoch`` -> ``loss``: the panel a metric belongs to."""
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    for prefix in PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def load(run_dir: str) -> tuple[str, dict[str, list[tuple[float, float, float]]]]:
    """The metrics file's URL and, per metric, its ``(step, epoch, value)`` points in file order."""
    url = run_dir if run_dir.endswith(".csv") else f"{run_dir.rstrip('/')}/metrics.csv"
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        where = "no such directory" if not fs.exists(path.rsplit("/", 1)[0]) else "no metrics.csv in it"
        raise SurgeError(
            f"{url}: {where}. Pass a run directory (surge_runs/version_N) of a run that had the csv "
            "logger on (it is on by default; `surge fit` prints its run directory)"
        )
    text = fs.cat_file(path).decode()
    reader = csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1]))
    series: dict[str, list[tuple[float, float, float]]] = {}
    for line, row in enumerate(reader, start=2):
        try:
            step, epoch = float(row.get("step") or "nan"), float(row.get("epoch") or "nan")
            for name, cell in row.items():
                if name not in AXES and name is not None and cell not in ("", None):
                    series.setdefault(name, []).append((step, epoch, float(cell)))
        except ValueError as exc:
            raise SurgeError(f"{url}, line {line}: {exc}; the file is not a Surge metrics file") from None
    if not series:
        raise SurgeError(f"{url} holds no metric values yet")
    return url, series


def select(series: dict[str, list[tuple[float, float, float]]], wanted: Sequence[str] | None) -> dict[str, list[str]]:
    """Panels (stem -> metric names) of the metrics asked for (all when ``wanted`` is empty)."""
    names = list(series)
    if wanted:
        unknown = [w for w in wanted if w not in names and w not in {stem(n) for n in names}]
        if unknown:
            raise SurgeError(f"--metrics: no metric {', '.join(map(repr, unknown))}; logged: {', '.join(names)}")
        names = [n for n in names if n in wanted or stem(n) in wanted]
    panels: dict[str, list[str]] = {}
    for name in names:
        panels.setdefault(stem(name), []).append(name)
    return panels


def points(values: list[tuple[float, float, float]], x: str) -> tuple[list[float], list[float]]:
    """By step: every point. By epoch: the mean of each epoch's values, so step-level metrics give one
    point per epoch too."""
    if x == "step":
        return [p[0] for p in values], [p[2] for p in values]
    by_epoch: dict[float, list[float]] = {}
    for _, epoch, value in values:
        if not math.isnan(epoch):
            by_epoch.setdefault(epoch, []).append(value)
    epochs = sorted(by_epoch)
    return epochs, [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs]


def render(
    series: dict[str, list[tuple[float, float, float]]], panels: dict[str, list[str]], x: str, title: str, out: str
) -> None:
    try:
        import matplotlib
    except ImportError:
        raise SurgeError("surge plot needs matplotlib: `pip install 'surge-csv[plot]'`") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.0 * columns, 3.6 * rows), squeeze=False)
    for ax, (panel, names) in zip(axes.flat, panels.items(), strict=False):
        for name in names:
            xs, ys = points(series[name], x)
            many = len(xs) > 1
            ax.plot(xs, ys, label=name, marker=None if many else "o", linewidth=1.4)
        ax.set_title(panel)
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fs, path = fsspec.core.url_to_fs(out)
    with fs.open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def _plot(args: argparse.Namespace) -> int:
    url, series = load(args.run_dir)
    panels = select(series, args.metrics)
    base = url.rsplit("/", 1)[0]
    out = args.output or f"{base}/metrics.png"
    render(series, panels, args.x, "/".join(base.rstrip("/").split("/")[-2:]), out)
    print(f"wrote {out} ({len(panels)} panel{'s' if len(panels) != 1 else ''}: {', '.join(panels)})")
    return 0


command = surge.Command(
    name="plot",
    help="plot a run's metrics.csv (train and validation on shared axes) to a PNG",
    description="The curves of a run's metrics.csv as a PNG: metrics that differ only by stage or by "
    "_step/_epoch share a panel.",
    register=_arguments,
    run=_plot,
    requires={"matplotlib": "surge-csv[plot]"},
)
"""``surge plot``, surge-csv's entry point in the ``surge.commands`` group."""
