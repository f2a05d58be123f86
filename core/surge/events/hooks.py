"""The ``hookimpl`` marker plugins use, with Surge's ordering options."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import pluggy

__all__ = ["hookimpl", "Filter", "Ordering", "PROJECT"]

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


@dataclass(frozen=True)
class Filter:
    """When a handler runs (attached as ``fn.surge_filter``): every condition given must hold.

    ``every_n_steps``: when ``trainer.global_step`` has reached a new multiple of n (n, 2n, ...), once per
    multiple, also when several batches share a step under gradient accumulation. ``every_n_epochs``: in the
    epochs n-1, 2n-1, ... (0-based, so every n-th epoch; the event's ``epoch`` field, else
    ``trainer.current_epoch``). ``once``: the first time the other conditions hold in a run. ``when``: a
    predicate of the event. The bus builds the check into the dispatcher when a run starts; a handler without
    a filter costs nothing more.

    ``every_n_steps``/``every_n_epochs`` may name an attribute of the plugin instead (``"every_n_train_steps"``):
    its value, read when the run's bus is built, is n, and ``None`` or ``0`` switches the handler off for that
    run (so a setting can say how often, or never).
    """

    every_n_steps: int | str | None = None
    every_n_epochs: int | str | None = None
    once: bool = False
    when: Callable[[Any], bool] | None = None

    def describe(self) -> str:
        parts = [f"every_n_steps={self.every_n_steps}"] if self.every_n_steps else []
        parts += [f"every_n_epochs={self.every_n_epochs}"] if self.every_n_epochs else []
        parts += ["once"] if self.once else []
        parts += [f"when={getattr(self.when, '__qualname__', repr(self.when))}"] if self.when else []
        return ", ".join(parts)


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
    every_n_steps: int | str | None = None,
    every_n_epochs: int | str | None = None,
    once: bool = False,
    when: Callable[[Any], bool] | None = None,
    optional: bool = False,
) -> Callable[[_F], _F]: ...


def hookimpl(
    function: _F | None = None,
    *,
    tryfirst: bool = False,
    trylast: bool = False,
    before: str | Iterable[str] = (),
    after: str | Iterable[str] = (),
    specname: str | None = None,
    every_n_steps: int | str | None = None,
    every_n_epochs: int | str | None = None,
    once: bool = False,
    when: Callable[[Any], bool] | None = None,
    optional: bool = False,
) -> _F | Callable[[_F], _F]:
    """Mark a function or method as the handler of the event it is named after.

    ``tryfirst``/``trylast`` move the handler to the front or back of its tier (providers, participants,
    the user's Module, observers). ``before``/``after`` name other plugins this handler must run before or
    after, across tiers, when they are installed (a name no installed plugin has is ignored); a name ending
    in ``!`` (``after="csv!"``) is required: without that plugin installed the Trainer refuses to start.
    Constraints are resolved when the Trainer starts, and a cycle is an error. ``specname`` lets the function
    have another name than the event.

    ``every_n_steps``, ``every_n_epochs``, ``once`` and ``when`` filter when the handler runs (see
    :class:`Filter`), so it need not test ``global_step % n`` itself::

        @surge.hookimpl(every_n_steps=100)
        def train_batch_end(self, event): ...

    ``optional=True`` marks a handler of an event another plugin declares (``checkpoint_saved``): when no
    installed plugin declares it, the handler is simply never called, where an unknown name is otherwise refused.
    """
    if tryfirst and trylast:
        raise ValueError("hookimpl: tryfirst and trylast exclude each other; choose one")
    befores, afters = _names(before), _names(after)
    required = frozenset(n[:-1] for n in (*befores, *afters) if n.endswith("!"))
    ordering = Ordering(before=_strip(befores), after=_strip(afters), required=required)
    for name, n in (("every_n_steps", every_n_steps), ("every_n_epochs", every_n_epochs)):
        if n is not None and not (isinstance(n, str) and n.isidentifier()) and not _positive(n):
            raise ValueError(
                f"hookimpl: {name} takes an int >= 1, the name of the plugin's attribute holding it, or None for no "
                f"such condition; got {n!r}"
            )
    if when is not None and not callable(when):
        raise ValueError(f"hookimpl: when= takes a predicate of the event (a callable); got {when!r}")
    filter_ = Filter(every_n_steps, every_n_epochs, bool(once), when)

    def mark(fn: _F) -> _F:
        marked = _marker(tryfirst=tryfirst, trylast=trylast, specname=specname, optionalhook=optional)(fn)
        if ordering.before or ordering.after:
            marked.surge_ordering = ordering  # type: ignore[attr-defined]
        if filter_ != Filter():
            marked.surge_filter = filter_  # type: ignore[attr-defined]
        return marked

    return mark(function) if function is not None else mark


def _positive(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    bad = [n for n in names if not isinstance(n, str) or not n.rstrip("!")]
    if bad:
        raise ValueError(f"hookimpl: before=/after= take plugin names (a name, or a list of them); got {bad!r}")
    return names


def _strip(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n.removesuffix("!") for n in names)
