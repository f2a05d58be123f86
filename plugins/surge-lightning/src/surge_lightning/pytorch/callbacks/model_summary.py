"""``lightning.pytorch.callbacks.model_summary``: :class:`ModelSummary`, surge-progress's model summary with
Lightning's arguments; passed in ``callbacks=``, it replaces the default one, as in Lightning."""

from __future__ import annotations

from typing import Any

from surge_progress import ModelSummary as _SurgeModelSummary

__all__ = ["ModelSummary"]


class ModelSummary(_SurgeModelSummary):
    """Lightning's ``ModelSummary(max_depth=1, **summarize_kwargs)``: the table of the Module's layers when ``fit``
    starts (``max_depth=-1``: every submodule; ``0``: the totals only)."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        super().__init__(max_depth=max_depth)
        self._summarize_kwargs = summarize_kwargs
