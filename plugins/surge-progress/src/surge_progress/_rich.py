"""The terminal display of the ``progress`` plugin. Importing this module imports rich, so the plugin imports
it only when a bar is first drawn in a terminal, never when Surge discovers the plugin."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from surge_progress._bar import _is_terminal

__all__ = ["RichDisplay"]

_BAR = "━"


class RichDisplay:
    """Bars drawn as one line of text each, in a rich ``Live`` region that is redrawn only when asked (no
    refresh thread: the plugin decides when a redraw is worth its time). One line of styled text draws in
    about a fifth of the time of rich's table-based ``Progress``."""

    def __init__(self, stream: TextIO, force_terminal: bool = False, bar_width: int = 40) -> None:
        self._console = Console(file=stream, force_terminal=True if force_terminal else None)
        self._bar_width = bar_width
        self._lines: dict[str, Text] = {}
        self._metrics: dict[str, str] = {}
        # Text written to a standard stream that is the same terminal goes above the bars instead of
        # through them; a stream redirected elsewhere (a file, a pipe) is left alone.
        self._live = Live(
            console=self._console,
            auto_refresh=False,
            redirect_stdout=_is_terminal(sys.stdout),
            redirect_stderr=_is_terminal(sys.stderr),
            get_renderable=lambda: Group(*self._lines.values()),
        )
        self._started = False

    def show(
        self,
        key: str,
        description: str,
        *,
        completed: int,
        total: float | None,
        count: str,
        timing: str,
        metrics: str | None,
        redraw: bool,
    ) -> None:
        """Set bar ``key`` (a new key adds a line below the others). ``total=None``: unknown length;
        ``metrics=None``: keep the metrics text shown. ``redraw``: draw the display now."""
        if metrics is not None:
            self._metrics[key] = metrics
        width = max(10, min(self._bar_width, self._console.width // 3))
        if total is None:
            bar: list[tuple[str, str]] = [(_BAR * width, "bar.back")]
        elif completed >= total:
            bar = [(_BAR * width, "bar.finished")]
        else:
            done = int(width * completed / total) if total > 0 else 0
            bar = [(_BAR * done, "bar.complete"), (_BAR * (width - done), "bar.back")]
        parts = [count, timing, self._metrics.get(key, "")]
        self._lines[key] = Text.assemble((description, "bold"), " ", *bar, " ", "  ".join(p for p in parts if p))
        if redraw:
            self.redraw()

    def remove(self, key: str) -> None:
        """Take bar ``key`` off the display (at the next redraw)."""
        self._lines.pop(key, None)
        self._metrics.pop(key, None)

    def keep(self, key: str) -> None:
        """Print bar ``key`` as it is above the live region, where it stays, and take it off the region."""
        line = self._lines.pop(key, None)
        self._metrics.pop(key, None)
        if line is not None:
            self._start()
            self._console.print(line)

    def redraw(self) -> None:
        self._start()
        self._live.refresh()

    def stop(self) -> None:
        """Leave the last drawing on screen and give the terminal (and redirected streams) back."""
        if self._started:
            self._live.stop()
            self._started = False

    def _start(self) -> None:
        if not self._started:
            self._live.start()
            self._started = True
