"""``lightning.pytorch.plugins.io.wrapper``: Lightning keeps only private names here; the module exists so that its path imports."""

from surge_lightning._lazy import served

__all__: list[str] = []

__getattr__, __dir__ = served(__name__, {})
