"""The ``hookimpl`` marker plugins use, with Surge's ordering options."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import pluggy

__all__ = ["hookimpl", "Ordering", "PROJECT"]

PROJECT = "surge"
_marker = pluggy.HookimplMarker(PROJECT)
_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Ordering:
    """Named ordering constraints of one hook implementation (attached as ``fn.surge_ordering``)."""

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@overload
def hookimpl(function: _F) -> _F: ...


@overload
def hookimpl(
    function: None = None,
    *,
    tryfirst: bool = False,
    trylast: bool = False,
    before: str | Iterable[str] = (),
    after: str | Iterable[str] = (),
    specname: str | None = None,
) -> Callable[[_F], _F]: ...


def hookimpl(
    function: _F | None = None,
    *,
    tryfirst: bool = False,
    trylast: bool = False,
    before: str | Iterable[str] = (),
    after: str | Iterable[str] = (),
    specname: str | None = None,
) -> _F | Callable[[_F], _F]:
    """Mark a function or method as the handler of the event it is named after.

    ``tryfirst``/``trylast`` move the handler to the front or back of its tier (providers, participants,
    the user's Module, observers). ``before``/``after`` name other plugins this handler must run before or
    after, across tiers; they are checked when the Trainer starts, and a cycle or a name that no installed
    plugin has is an error. ``specname`` lets the function have another name than the event.
    """
    if tryfirst and trylast:
        raise ValueError("hookimpl: tryfirst and trylast exclude each other; choose one")
    ordering = Ordering(before=_names(before), after=_names(after))

    def mark(fn: _F) -> _F:
        marked = _marker(tryfirst=tryfirst, trylast=trylast, specname=specname)(fn)
        if ordering.before or ordering.after:
            marked.surge_ordering = ordering  # type: ignore[attr-defined]
        return marked

    return mark(function) if function is not None else mark


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)
