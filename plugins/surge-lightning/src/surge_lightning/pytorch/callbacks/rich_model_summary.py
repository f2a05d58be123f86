"""``lightning.pytorch.callbacks.rich_model_summary``: :class:`RichModelSummary`, the model summary (Surge prints one
table for both; rich's colours are Lightning's only difference)."""

from __future__ import annotations

from typing import Any

from surge_lightning.pytorch.callbacks.model_summary import ModelSummary

__all__ = ["RichModelSummary"]


class RichModelSummary(ModelSummary):
    """Lightning's ``RichModelSummary(max_depth=1, **summarize_kwargs)``: :class:`ModelSummary`'s table."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        super().__init__(max_depth=max_depth, **summarize_kwargs)
