"""``lightning.pytorch.plugins``: nothing here is served by Surge; each name raises, saying why and what to use."""

from surge_lightning._lazy import served

__all__: list[str] = []

__getattr__, __dir__ = served(__name__, {})
