"""Everything that touches TensorBoard: the writer and the records it writes.

Imported at a run's first write, never by ``import surge_tensorboard``: plugin discovery imports the plugin
in every ``Trainer()``, and ``torch.utils.tensorboard`` takes a noticeable part of a second to load.
"""

from __future__ import annotations

import contextlib
import io
import numbers
import time
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "SummaryWriter",
    "add_graph",
    "add_summary",
    "add_histograms",
    "flatten_hparams",
    "scalars",
    "session_end",
    "session_start",
]

# TensorBoard has no "interrupted" status: a run stopped by Ctrl-C neither succeeded nor failed.
_STATUS = {
    "finished": api_pb2.STATUS_SUCCESS,
    "failed": api_pb2.STATUS_FAILURE,
    "interrupted": api_pb2.STATUS_UNKNOWN,
}


def add_summary(writer: SummaryWriter, summary: Summary, step: int) -> None:
    """Add a prepared summary to the writer's event file, as one event at ``step``."""
    file_writer: Any = writer.file_writer  # set while the writer is open (torch types it as None)
    file_writer.add_summary(summary, step)


def scalars(values: Mapping[str, float]) -> Summary:
    """One summary holding every value of a write: one event per ``log_metrics``, not one per metric."""
    return Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])


def flatten_hparams(params: Mapping[str, Any], prefix: str = "") -> dict[str, bool | float | str]:
    """Hyper-parameters as the hparams plugin stores them: nested mappings become ``outer/inner`` names,
    numbers and booleans stay as they are (0-d tensors and numpy scalars included), anything else
    (``None``, lists, objects) is written as its ``str``."""
    flat: dict[str, bool | float | str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_hparams(value, f"{name}/"))
        else:
            flat[name] = _hparam_value(value)
    return flat


def _hparam_value(value: Any) -> bool | float | str:
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a 0-d tensor or a numpy scalar
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    return value if isinstance(value, str) else str(value)


def session_start(params: Mapping[str, bool | float | str]) -> Summary:
    """The hparams plugin's session-start record. No experiment record goes with it: without one, the
    HPARAMS tab gathers the hyper-parameters of every run it finds and offers each scalar as a metric."""
    info = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
    for name, value in params.items():
        if isinstance(value, bool):
            info.hparams[name].bool_value = value
        elif isinstance(value, float):
            info.hparams[name].number_value = value
        else:
            info.hparams[name].string_value = value
    return _hparams_summary(
        hparams_metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=info)
    )


def session_end(status: str) -> Summary:
    """The session-end record, with the run's outcome (``trainer.state.status``)."""
    info = plugin_data_pb2.SessionEndInfo(status=_STATUS.get(status, api_pb2.STATUS_UNKNOWN), end_time_secs=time.time())
    return _hparams_summary(
        hparams_metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=info)
    )


def _hparams_summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    value = Summary.Value(tag=tag, metadata=hparams_metadata.create_summary_metadata(data))
    value.tensor.CopyFrom(hparams_metadata.NULL_TENSOR)
    return Summary(value=[value])


def add_histograms(writer: SummaryWriter, prefix: str, tensors: Mapping[str, torch.Tensor], step: int) -> None:
    for name, tensor in tensors.items():
        values = tensor.detach().float().flatten()  # bfloat16 has no numpy type
        values = values[torch.isfinite(values)]  # numpy cannot bin inf or nan
        if values.numel():
            writer.add_histogram(f"{prefix}/{name}", values.cpu(), step)


def add_graph(writer: SummaryWriter, module: torch.nn.Module, example: Any) -> None:
    """Trace ``module`` on ``example`` (in eval mode, as ``add_graph`` does) and write its graph."""
    args = example if isinstance(example, tuple) else (example,)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        # add_graph traces with torch.jit, which torch marks deprecated; nothing a user of this plugin can
        # act on. It also prints its own error before raising it: the caller reports the exception.
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.trace", category=DeprecationWarning)
        writer.add_graph(module, args)
