"""``lightning.pytorch.callbacks.progress.rich_progress``: :class:`RichProgressBar`, surge-progress's bar in its rich
display (in a terminal; plain lines elsewhere, as the bar always does)."""

from __future__ import annotations

from typing import Any

from surge_progress import ProgressBar

__all__ = ["RichProgressBar"]


class RichProgressBar(ProgressBar):
    """Lightning's ``RichProgressBar(refresh_rate=1, leave=False, theme=..., console_kwargs=None)``. ``theme`` and
    ``console_kwargs`` style Lightning's rich console; Surge's display has one style, so they are kept, unused."""

    def __init__(
        self, refresh_rate: int = 1, leave: bool = False, theme: Any = None, console_kwargs: Any = None
    ) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self.theme, self.console_kwargs = theme, console_kwargs
