"""Loader plumbing: several train loaders combined, batch limits, and rebuilding a loader's sampler."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from torch.utils.data import DataLoader, Sampler, SequentialSampler

from surge.errors import SurgeError

Mode = Literal["max_size_cycle", "min_size"]


def loader_len(loader: Any) -> int | None:
    """``len(loader)`` or ``None`` when it has no length (an iterable dataset)."""
    try:
        return len(loader)
    except TypeError:
        return None


class CombinedLoader:
    """Iterates several loaders together, yielding a list or dict of batches per step.

    ``max_size_cycle`` runs until the longest loader is exhausted, restarting shorter ones;
    ``min_size`` stops with the shortest.
    """

    def __init__(self, loaders: Sequence[Any] | Mapping[str, Any], mode: Mode) -> None:
        self.loaders = loaders
        self.mode = mode
        self._keys = list(loaders) if isinstance(loaders, Mapping) else None
        self.items = list(loaders.values()) if isinstance(loaders, Mapping) else list(loaders)

    def __len__(self) -> int:
        lengths = [loader_len(item) for item in self.items]
        known = [length for length in lengths if length is not None]
        if len(known) < len(lengths):
            raise TypeError("a combined loader has no length when one of its loaders has none")
        return max(known) if self.mode == "max_size_cycle" else min(known)

    def __iter__(self) -> Iterator[Any]:
        iterators = [iter(item) for item in self.items]
        exhausted = [False] * len(iterators)
        while True:
            batches = []
            for i, it in enumerate(iterators):
                try:
                    batches.append(next(it))
                except StopIteration:
                    exhausted[i] = True
                    if self.mode == "min_size" or all(exhausted):
                        return
                    iterators[i] = iter(self.items[i])
                    batches.append(next(iterators[i]))
            if self.mode == "max_size_cycle" and all(exhausted):
                return
            yield dict(zip(self._keys, batches, strict=True)) if self._keys is not None else batches


def combine(loaders: Any, mode: Mode) -> Any:
    if isinstance(loaders, (list, tuple, Mapping)):
        if len(loaders) == 1 and not isinstance(loaders, Mapping):
            return loaders[0]
        return CombinedLoader(loaders, mode)
    return loaders


def as_list(loaders: Any) -> list[Any]:
    """Evaluation loaders: one loader or a sequence of them."""
    if loaders is None:
        return []
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return list(loaders)
    return [loaders]


def num_batches(length: int | None, limit: int | float | None, what: str) -> float:
    """How many batches to run: ``limit`` as a count (int) or a fraction (float) of ``length``."""
    if limit is None:
        limit = 1.0
    if length is None:
        if isinstance(limit, float) and limit not in (0.0, 1.0):
            raise SurgeError(
                f"{what}={limit} is a fraction, but the loader has no length (an iterable dataset); "
                "pass an int number of batches instead"
            )
        return 0 if limit == 0 else (math.inf if isinstance(limit, float) else limit)
    if isinstance(limit, int) and not isinstance(limit, bool):
        return min(limit, length)
    batches = int(length * limit)
    if limit > 0 and batches == 0:
        raise SurgeError(
            f"{what}={limit} of a loader with {length} batches is less than one batch; "
            f"raise it to at least {1 / length:.4f} or pass an int"
        )
    return batches


LOADER_ARGS = tuple(
    name for name in inspect.signature(DataLoader.__init__).parameters if name not in ("self", "dataset")
)


def with_sampler(loader: DataLoader, sampler: Sampler[Any]) -> DataLoader:
    """A copy of ``loader`` drawing from ``sampler`` (shuffle off, same batch size, workers, collate...)."""
    if not isinstance(loader, DataLoader):
        raise SurgeError(f"cannot replace the sampler of a {type(loader).__name__}; use a torch DataLoader")
    kwargs = {name: getattr(loader, name) for name in LOADER_ARGS if hasattr(loader, name)}
    kwargs.pop("shuffle", None)
    kwargs.pop("batch_sampler", None)
    kwargs["sampler"] = sampler
    if getattr(loader, "batch_size", None) is None:
        raise SurgeError("cannot replace the sampler of a loader built with a batch_sampler")
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return (
        type(loader)(loader.dataset, **kwargs) if type(loader) is DataLoader else DataLoader(loader.dataset, **kwargs)
    )


def sequential(loader: Any) -> Any:
    """``loader`` without shuffling (for ``overfit_batches``)."""
    if isinstance(loader, DataLoader) and not isinstance(loader.sampler, SequentialSampler):
        return with_sampler(loader, SequentialSampler(loader.dataset))  # type: ignore[arg-type]
    return loader
