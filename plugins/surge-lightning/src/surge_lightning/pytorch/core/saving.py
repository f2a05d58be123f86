"""``lightning.pytorch.core.saving``: :func:`save_hparams_to_yaml`."""

from __future__ import annotations

import enum
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

__all__ = ["save_hparams_to_yaml"]


def save_hparams_to_yaml(config_yaml: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace) -> None:
    """Write ``hparams`` to the YAML file ``config_yaml`` (a path or an fsspec URL), as Lightning's loggers write
    ``hparams.yaml``: containers and scalars as they are, an ``Enum`` member as its name, a numpy scalar or 0-d
    tensor as its number, a bigger tensor or array as nested lists, anything else as its ``repr``."""
    import fsspec
    import yaml

    params = vars(hparams) if isinstance(hparams, Namespace) else dict(hparams)
    with fsspec.open(os.fspath(config_yaml), "w", encoding="utf-8") as f:
        f.write(yaml.safe_dump(_yaml_safe(params), sort_keys=False))


def _yaml_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _yaml_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_safe(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # a tensor, a numpy array or scalar
        return _yaml_safe(value.tolist())
    for kind in (bool, int, float, str):  # the builtin type: safe_dump refuses subclasses (numpy.float64)
        if isinstance(value, kind):
            return kind(value)
    return None if value is None else repr(value)
