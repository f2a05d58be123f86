"""``lightning.pytorch.callbacks.progress.progress_bar``: :class:`ProgressBar`, the base of Lightning's bars: here
surge-progress's bar itself (a bar of one's own subclasses it, or is a Surge plugin with ``role="progress"``)."""

from surge_progress import ProgressBar

__all__ = ["ProgressBar"]
