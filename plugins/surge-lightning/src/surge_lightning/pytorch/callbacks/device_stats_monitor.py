"""``lightning.pytorch.callbacks.device_stats_monitor``: ``DeviceStatsMonitor``, surge-callbacks'."""

from typing import TYPE_CHECKING

from surge_lightning._lazy import served

if TYPE_CHECKING:
    from surge_callbacks import DeviceStatsMonitor

__all__ = ["DeviceStatsMonitor"]

__getattr__, __dir__ = served(__name__, {"DeviceStatsMonitor": "surge_callbacks"})
