"""``lightning.pytorch.profilers``: the profilers of surge-profilers under Lightning's names, read from it when first
used (an ``ImportError`` naming it when it is missing)."""

from surge_lightning._lazy import served

_MODULES = {
    "AdvancedProfiler": "advanced",
    "PassThroughProfiler": "base",
    "PyTorchProfiler": "pytorch",
    "SimpleProfiler": "simple",
}
"""Each profiler -> the module of this package (Lightning's) that serves it."""

__all__ = sorted(_MODULES)

__getattr__, __dir__ = served(
    __name__,
    {
        **{name: f"{__name__}.{module}" for name, module in _MODULES.items()},
        **{module: f"{__name__}.{module}" for module in _MODULES.values()},
    },
)
