"""``lightning.pytorch.callbacks.progress``: Lightning's progress bars, served by surge-progress's bar;
passed in ``callbacks=``, one replaces the default bar, as in Lightning."""

from surge_lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from surge_lightning.pytorch.callbacks.progress.rich_progress import RichProgressBar
from surge_lightning.pytorch.callbacks.progress.tqdm_progress import TQDMProgressBar

__all__ = ["ProgressBar", "RichProgressBar", "TQDMProgressBar"]
