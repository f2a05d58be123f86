"""Hyper-parameters as plain values: what ``torch.load(weights_only=True)`` and ``yaml.safe_dump`` accept.

Checkpoints hold ``module.hparams`` converted by :func:`plain_hparams`, and loggers receive them converted,
so a checkpoint Surge writes always loads with the safe loader and every logger can write what it gets.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from surge.errors import ConfigError

__all__ = ["check_hparams", "plain_hparams", "recorded_hparams"]

_PLAIN = (str, int, float, bool, bytes, type(None))
_KEYS = (str, int, float, bool, type(None))


def plain_hparams(params: Mapping[str, Any], where: str = "hparams") -> dict[str, Any]:
    """``params`` converted, recursively, to plain values; raises :class:`ConfigError` naming every value
    (by its dotted path under ``where``, e.g. ``hparams.optimizer_cfg.fn``) that has no plain form.

    * ``str``, ``int``, ``float``, ``bool``, ``bytes``, ``None`` and tensors: unchanged (subclasses of the
      scalar types become the builtin type);
    * ``os.PathLike`` (``pathlib.Path``...): ``str``;
    * ``Enum`` members: their ``.value``, converted. ``load_from_checkpoint`` passes that value, not the
      member, to ``__init__`` (``Color(value)`` turns it back);
    * dataclass instances: a dict of their fields, converted (``__init__`` gets the dict back);
    * numpy scalars: ``.item()``; numpy arrays: nested lists (``.tolist()``); both converted further;
    * dicts and other mappings (omegaconf's ``DictConfig``): ``dict``, keys converted too and required to be
      str/int/float/bool/None (and distinct once converted); lists and other sequences (omegaconf's
      ``ListConfig``, ``UserList``): ``list``; tuples (named tuples included): ``tuple``;
    * ``set``/``frozenset``: a list, sorted (by ``repr`` when the elements do not compare);
    * ``datetime``/``date``/``time``: the ISO string; ``timedelta``: its total seconds (``float``);
    * ``torch.dtype``/``torch.device``: ``str`` (``"torch.float32"``, ``"cuda:0"``).

    Anything else (an arbitrary object, a function, a module, a container holding itself) is refused: a
    checkpoint would hold it as pickled code, which the safe loader refuses.
    """
    walk = _Walk(where)
    converted = walk.mapping(params, where)
    walk.raise_problems()
    return converted


def check_hparams(sources: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise one :class:`ConfigError` listing every value of ``sources`` (``{where: params}``) that
    :func:`plain_hparams` refuses; the conversion itself is discarded."""
    problems: list[tuple[str, str]] = []
    for where, params in sources.items():
        walk = _Walk(where)
        walk.mapping(params, where)
        problems += walk.problems
    if problems:
        raise ConfigError(problems, source=_SOURCE)


_SOURCE = "hyper-parameters (save_hyperparameters)"


def recorded_hparams(module: Any, *, warn: bool = False) -> Mapping[str, Any]:
    """The part of ``module.hparams`` that checkpoints and loggers record (not yet converted): all of it, unless
    the module's class sets ``plain_hparams_only = False`` (surge-lightning's ``LightningModule``, as Lightning
    saves such values), where the values without a plain form (an ``nn.Module``, a class, a ``functools.partial``)
    are left out; they stay in ``module.hparams``. ``warn``: say so once per class and set of keys, naming the keys
    and the fix."""
    params = module.hparams
    if getattr(module, "plain_hparams_only", True):
        return params
    left_out = [key for key, value in params.items() if _has_no_plain_form(key, value)]
    if not left_out:
        return params
    if warn and (type(module), tuple(left_out)) not in _warned:
        _warned.add((type(module), tuple(left_out)))
        name = type(module).__name__
        warnings.warn(
            f"{name}: the hyper-parameters {left_out} have no plain form ("
            + ", ".join(_type_name(params[key]) for key in left_out)
            + "): they stay in self.hparams, but checkpoints and loggers leave them out, so that a checkpoint loads "
            f"with torch.load(weights_only=True); {name}.load_from_checkpoint(path, "
            + ", ".join(f"{key}=..." for key in left_out)
            + ") passes them again. To record nothing about them and silence this, write "
            f"self.save_hyperparameters(ignore={left_out})",
            UserWarning,
            stacklevel=2,
        )
    return {key: value for key, value in params.items() if key not in left_out}


_warned: set[tuple[type, tuple[Any, ...]]] = set()


def _has_no_plain_form(key: Any, value: Any) -> bool:
    walk = _Walk("hparams")
    walk.value(value, str(key))
    return bool(walk.problems)


class _Walk:
    """One conversion: the problems found so far and the containers being converted (to catch cycles)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.problems: list[tuple[str, str]] = []
        self.active: set[int] = set()
        self.top: Any = None  # the top-level name being converted, for the save_hyperparameters(ignore=...) hint

    def raise_problems(self) -> None:
        if self.problems:
            raise ConfigError(self.problems, source=_SOURCE)

    def mapping(self, params: Mapping[Any, Any], path: str) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in params.items():
            inner = f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{key!r}]"
            if path == self.where:
                self.top = key
            plain_key = _Walk(self.where).value(key, inner)
            if type(plain_key) not in _KEYS:
                self.problems.append(
                    (inner, f"a dict key of type {_type_name(key)}; keys must be str, int, float or bool")
                )
            elif plain_key in out:
                self.problems.append((inner, f"the key {key!r} converts to {plain_key!r}, which another key is too"))
            else:
                out[plain_key] = self.value(value, inner)
        return out

    def value(self, value: Any, path: str) -> Any:
        if type(value) in _PLAIN or isinstance(value, torch.Tensor):
            return value
        if isinstance(value, enum.Enum):
            return self.value(value.value, path)
        numpy = sys.modules.get("numpy")  # numpy values exist only once numpy is imported
        if numpy is not None:
            if isinstance(value, numpy.generic):
                return self.value(value.item(), path)
            if isinstance(value, numpy.ndarray):
                return self.value(value.tolist(), path)
        if isinstance(value, int):  # subclasses of the plain types (bool has none)
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, bytes):
            return bytes(value)
        if isinstance(value, os.PathLike):
            return os.fsdecode(value)
        if isinstance(value, (datetime.date, datetime.time)):  # a datetime.datetime is a date
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return value.total_seconds()
        if isinstance(value, (torch.dtype, torch.device)):
            return str(value)
        if not isinstance(value, (Mapping, Sequence, set, frozenset)) and not (
            dataclasses.is_dataclass(value) and not isinstance(value, type)
        ):
            self.problems.append((path, self._refusal(value)))
            return None
        if id(value) in self.active:
            self.problems.append((path, f"this {_type_name(value)} contains itself; a checkpoint cannot hold a cycle"))
            return None
        self.active.add(id(value))
        try:
            return self._container(value, path)
        finally:
            self.active.discard(id(value))

    def _container(self, value: Any, path: str) -> Any:
        if isinstance(value, Mapping):
            return self.mapping(value, path)
        if isinstance(value, Sequence):  # a list, a tuple, or a list-like such as omegaconf's ListConfig: a list
            items = [self.value(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if isinstance(value, tuple) else items
        if isinstance(value, (set, frozenset)):
            elements = [self.value(v, f"{path}[{v!r}]") for v in value]
            try:
                return sorted(elements)
            except TypeError:
                return sorted(elements, key=repr)
        return {f.name: self.value(getattr(value, f.name), f"{path}.{f.name}") for f in dataclasses.fields(value)}

    def _refusal(self, value: Any) -> str:
        try:
            text = repr(value)
        except Exception:
            text = object.__repr__(value)
        text = text if len(text) <= 60 else text[:57] + "..."
        return (
            f"type {_type_name(value)} ({text}) has no plain form: a checkpoint would hold it as pickled code, which "
            "the safe loader (torch.load(weights_only=True)) refuses, and loggers cannot write it. Convert it to a "
            f"str/number/list/dict in __init__, or leave it out with save_hyperparameters(ignore=[{self.top!r}])"
        )


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
