"""``lightning.pytorch.callbacks.progress.progress_bar``: :class:`ProgressBar`, the base of Lightning's bars: here
surge-progress's bar itself (a bar of one's own subclasses it, or is a Surge plugin with ``role="progress"``)."""

from surge_progress import ProgressBar

from surge_lightning._lazy import refusing

__all__ = ["ProgressBar"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why
