"""``summarize(module)`` and the ``model_summary`` plugin that prints it when a fit starts."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import surge
import torch
from loguru import logger
from pydantic import Field
from torch import nn
from torch.nn.parameter import UninitializedParameter

if TYPE_CHECKING:
    from surge import events as ev

__all__ = ["LayerSummary", "ModelSummary", "Summary", "SummaryConfig", "summarize"]

_MODE_DEPTH = {"top": 1, "full": -1}
Shape = Any  # a list of ints for a tensor, nested lists for containers, "?" for anything else


@dataclass(frozen=True)
class LayerSummary:
    """One row of the table: a submodule and the parameters under it (its children's included)."""

    name: str
    """Dotted name in the module (``"encoder.0"``)."""
    type: str
    """Class name."""
    params: int
    """Parameters under it, each counted once; lazy (uninitialized) parameters count 0."""
    trainable_params: int
    in_shapes: Shape | None = None
    """Shapes of the inputs of its forward in the example pass (``example_input_array``); ``None`` when it
    did not run."""
    out_shapes: Shape | None = None


@dataclass(frozen=True)
class Summary:
    """What :func:`summarize` returns; ``str(summary)`` is the table the plugin prints."""

    layers: tuple[LayerSummary, ...]
    trainable_params: int
    non_trainable_params: int
    """Parameters with ``requires_grad=False`` (frozen)."""
    param_bytes: int
    buffer_bytes: int
    """Bytes of the module's buffers (batch-norm statistics and the like)."""
    lazy: bool = False
    """Some parameters are not initialized yet (lazy modules); they count 0."""

    @property
    def total_params(self) -> int:
        return self.trainable_params + self.non_trainable_params

    @property
    def size_mb(self) -> float:
        """Parameters and buffers, in megabytes (10**6 bytes)."""
        return (self.param_bytes + self.buffer_bytes) / 1e6

    def __str__(self) -> str:
        return _table(self)


def summarize(module: nn.Module, max_depth: int = 1) -> Summary:
    """Count the parameters of ``module`` and of its submodules down to ``max_depth``.

    ``max_depth``: 1 for the direct children, 2 for their children too, -1 for every submodule, 0 for the
    totals only. When ``module`` has an ``example_input_array`` (a tensor, a tuple of positional arguments
    or a dict of keyword arguments) and rows to show, one forward pass in eval mode, without gradients,
    records each row's input and output shapes; the module's training flags and the random number
    generators are left as they were. A forward that raises is reported as a warning and the shapes are
    left out.
    """
    if max_depth < -1:
        raise ValueError(f"max_depth={max_depth}: use -1 (every submodule), 0 (totals only) or a depth >= 1")
    selected = [
        (name, sub) for name, sub in module.named_modules() if name and (max_depth == -1 or name.count(".") < max_depth)
    ]
    shapes: dict[str, tuple[Shape, Shape]] = {}
    example = getattr(module, "example_input_array", None)
    if example is not None and selected:
        shapes = _example_shapes(module, selected, example)
    layers = []
    for name, sub in selected:
        trainable, frozen, _, _ = _count(sub.parameters())
        in_shapes, out_shapes = shapes.get(name, (None, None))
        layers.append(LayerSummary(name, type(sub).__name__, trainable + frozen, trainable, in_shapes, out_shapes))
    trainable, frozen, param_bytes, lazy = _count(module.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in module.buffers() if not _is_lazy(b))
    return Summary(tuple(layers), trainable, frozen, param_bytes, buffer_bytes, lazy)


def _is_lazy(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, UninitializedParameter) or type(tensor).__name__ == "UninitializedBuffer"


def _count(params: Iterator[nn.Parameter]) -> tuple[int, int, int, bool]:
    """Trainable and frozen parameter counts, their bytes, and whether some are lazy (not counted)."""
    trainable = frozen = size = 0
    lazy = False
    for p in params:  # module.parameters() yields a shared parameter once
        if _is_lazy(p):
            lazy = True
            continue
        n = p.numel()
        size += n * p.element_size()
        if p.requires_grad:
            trainable += n
        else:
            frozen += n
    return trainable, frozen, size, lazy


def _example_shapes(
    module: nn.Module, selected: Sequence[tuple[str, nn.Module]], example: Any
) -> dict[str, tuple[Shape, Shape]]:
    shapes: dict[str, tuple[Shape, Shape]] = {}

    def hook_for(name: str) -> Any:
        def hook(sub: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            inputs = list(args) + list(kwargs.values())
            shapes.setdefault(name, (_shape(inputs[0] if len(inputs) == 1 else inputs), _shape(output)))

        return hook

    device = next((t.device for t in [*module.parameters(), *module.buffers()] if not _is_lazy(t)), None)
    example = _to_device(example, device) if device is not None else example
    modes = {sub: sub.training for sub in module.modules()}
    handles = [sub.register_forward_hook(hook_for(name), with_kwargs=True) for name, sub in selected]
    devices = [device] if device is not None and device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            module.eval()
            if isinstance(example, Mapping):
                module(**example)
            elif isinstance(example, tuple):
                module(*example)
            else:
                module(example)
    except Exception as exc:
        logger.warning(
            "model summary: the forward pass with {}.example_input_array failed ({}: {}); shapes left out",
            type(module).__name__,
            type(exc).__name__,
            exc,
        )
        return {}
    finally:
        for handle in handles:
            handle.remove()
        for sub, training in modes.items():
            sub.training = training
    return shapes


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _shape(value: Any) -> Shape:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _shape(v) for k, v in value.items()}
    return "?"


def _human(n: int) -> str:
    """1234 -> "1.2 K"; below 1000 the number itself."""
    if n < 1000:
        return str(n)
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)  # unreachable


def _table(summary: Summary) -> str:
    lines: list[str] = []
    if summary.layers:
        shapes = any(layer.in_shapes is not None for layer in summary.layers)
        header = ["", "Name", "Type", "Params"] + (["In sizes", "Out sizes"] if shapes else [])
        rows = [header]
        for i, layer in enumerate(summary.layers):
            row = [str(i), layer.name, layer.type, _human(layer.params)]
            if shapes:
                row += [_text(layer.in_shapes), _text(layer.out_shapes)]
            rows.append(row)
        widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
        rendered = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        rule = "-" * max(len(line) for line in rendered)
        lines += [rendered[0], rule, *rendered[1:], rule]
    totals = [
        (_human(summary.trainable_params), "Trainable params"),
        (_human(summary.non_trainable_params), "Non-trainable params"),
        (_human(summary.total_params), "Total params"),
        (f"{summary.size_mb:,.3f}", "Total estimated model params size (MB)"),
    ]
    width = max(len(value) for value, _ in totals)
    lines += [f"{value.ljust(width)}  {label}" for value, label in totals]
    if summary.lazy:
        lines.append("Some parameters are not initialized yet (lazy modules) and are not counted.")
    return "\n".join(lines)


def _text(shape: Shape | None) -> str:
    return "?" if shape is None else str(shape)


def _one_depth(settings: Any) -> None:
    """``mode`` (Lightning's ``weights_summary``) sets ``max_depth``; both given must agree."""
    if settings.mode is not None:
        depth = _MODE_DEPTH[settings.mode]
        if "max_depth" in settings.model_fields_set and settings.max_depth != depth:
            raise ValueError(
                f"mode={settings.mode!r} means max_depth={depth}, but max_depth={settings.max_depth} is also "
                "given; pass one of them"
            )
        settings.max_depth = depth


class ModelSummary:
    """Prints :func:`summarize` of the module when ``fit`` starts, on global rank zero only.

    The ``model_summary`` plugin builds one with its settings in every run;
    ``Trainer(enable_model_summary=False)`` switches it off. ``summary`` holds the last one printed.

    Args:
        max_depth: 1: the direct children; -1: every submodule; 0: no table, the totals only.
        mode: Lightning's ``weights_summary``: ``"top"`` is ``max_depth=1``, ``"full"`` is ``max_depth=-1``.
        stream: Where the summary is printed.
    """

    surge_name = "model_summary"
    surge_callback_role = "model_summary"  # passed in callbacks=, it replaces the default plugin
    surge_kind = "observer"

    @surge.validated(check=_one_depth)
    def __init__(
        self,
        max_depth: Annotated[int, Field(ge=-1)] = 1,
        mode: Literal["top", "full"] | None = None,
        stream: Literal["stderr", "stdout"] = "stderr",
    ) -> None:
        self.max_depth = max_depth
        self.stream = stream
        self.summary: Summary | None = None

    @surge.hookimpl
    def fit_start(self, event: ev.FitStart) -> None:
        if not event.trainer.is_global_zero:
            return
        self.summary = summarize(event.trainer.module, self.max_depth)
        out = sys.stdout if self.stream == "stdout" else sys.stderr
        out.write(f"{self.summary}\n")
        out.flush()


SummaryConfig = surge.settings_model(ModelSummary)
"""The ``model_summary`` plugin's settings, derived from :class:`ModelSummary`'s signature."""
