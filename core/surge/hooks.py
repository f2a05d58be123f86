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
    """Named ordering constraints of one hook implementation (attached as ``fn.surge_ordering``).

    A name is a preference, applied when a plugin of that name is installed; the names in ``required`` were
    written with a trailing ``!`` (``after="csv!"``) and a Trainer refuses to start without them.
    """

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    required: frozenset[str] = frozenset()


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
    after, across tiers, when they are installed (a name no installed plugin has is ignored); a name ending
    in ``!`` (``after="csv!"``) is required: without that plugin installed the Trainer refuses to start.
    Constraints are resolved when the Trainer starts, and a cycle is an error. ``specname`` lets the function
    have another name than the event.
    """
    if tryfirst and trylast:
        raise ValueError("hookimpl: tryfirst and trylast exclude each other; choose one")
    befores, afters = _names(before), _names(after)
    required = frozenset(n[:-1] for n in (*befores, *afters) if n.endswith("!"))
    ordering = Ordering(before=_strip(befores), after=_strip(afters), required=required)

    def mark(fn: _F) -> _F:
        marked = _marker(tryfirst=tryfirst, trylast=trylast, specname=specname)(fn)
        if ordering.before or ordering.after:
            marked.surge_ordering = ordering  # type: ignore[attr-defined]
        return marked

    return mark(function) if function is not None else mark


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    bad = [n for n in names if not isinstance(n, str) or not n.rstrip("!")]
    if bad:
        raise ValueError(f"hookimpl: before=/after= take plugin names (a name, or a list of them); got {bad!r}")
    return names


def _strip(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n.removesuffix("!") for n in names)
