"""``lightning.pytorch.callbacks.device_stats_monitor``: ``DeviceStatsMonitor``, surge-callbacks'."""

from surge_lightning._lazy import served

__all__ = ["DeviceStatsMonitor"]

__getattr__, __dir__ = served(__name__, {"DeviceStatsMonitor": "surge_callbacks"})
