"""A plugin's settings, declared once: in its constructor's typed signature.

::

    class ProgressBar:
        \"\"\"...

        Args:
            refresh_rate: At least this many batches between two refreshes.
        \"\"\"

        @surge.validated
        def __init__(self, refresh_rate: Annotated[int, Field(ge=0)] = 1) -> None:
            self.refresh_rate = refresh_rate

:func:`settings_model` derives the pydantic model of those settings (types, defaults and ``Field`` constraints
from the annotations, descriptions from the docstring's ``Args:`` section, unknown names refused), which
``surge.Plugin(factory=ProgressBar)`` uses for run configs, the command line, the environment and help texts.
:func:`validated` checks a direct construction (``ProgressBar(refresh_rate=-1)``) with the same model, so a
Python caller and a run config get the same problem.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo

from surge.config import format_validation_error
from surge.errors import ConfigError, PluginError

__all__ = ["settings_model", "validated"]

P = ParamSpec("P")
R = TypeVar("R")

_MODEL = "__surge_settings_model__"
_CHECK = "__surge_settings_check__"
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def settings_model(factory: Callable[..., object]) -> type[BaseModel]:
    """The pydantic model of ``factory``'s settings: one field per parameter of its signature (a class's
    ``__init__``), with the parameter's annotation (``Annotated[int, Field(ge=0)]`` keeps the constraint), its
    default (none: required), and its description from the docstring's ``Args:`` section (``__init__``'s, else
    the class's). Unknown names are refused; ``**kwargs`` lets them through. A constructor decorated with
    :func:`validated` gives the model it validates with (its ``check`` included)."""
    if not isinstance(factory, type):
        return _model_of(factory, factory)
    for klass in factory.__mro__:  # the class whose __init__ it is: its docstring documents the parameters
        if "__init__" in vars(klass):
            return _model_of(klass, vars(klass)["__init__"])
    return _model_of(factory, object.__init__)


def _model_of(owner: Callable[..., object], function: Callable[..., object]) -> type[BaseModel]:
    """``function``'s model, derived once for a :func:`validated` one (kept on it)."""
    cached = getattr(function, _MODEL, None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    model = _derive(owner, function, getattr(function, _CHECK, None))
    if hasattr(function, _CHECK):
        setattr(function, _MODEL, model)
    return model


def _derive(owner: Callable[..., object], function: Callable[..., object], check: Any) -> type[BaseModel]:
    name = getattr(owner, "__qualname__", None) or repr(owner)
    target = inspect.unwrap(function)
    try:
        parameters = list(inspect.signature(target).parameters.values())
        hints = typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise PluginError(
            f"cannot derive the settings of {name} from its signature: {exc}; make every annotation of its "
            "parameters importable at run time (not only under TYPE_CHECKING), or pass surge.Plugin(config=...)"
        ) from exc
    if isinstance(owner, type):
        parameters = parameters[1:]  # the instance
    docs = {**_param_docs(owner.__doc__ if isinstance(owner, type) else None), **_param_docs(target.__doc__)}
    fields: dict[str, Any] = {}
    extra = False  # unknown settings are refused, unless the factory takes **kwargs
    for parameter in parameters:
        if parameter.kind is parameter.VAR_KEYWORD:
            extra = True
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL) or parameter.name.startswith("_"):
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        if parameter.name in docs and not _described(hints.get(parameter.name)):
            default = Field(default, description=docs[parameter.name])
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    validators: dict[str, Any] = {"check": model_validator(mode="after")(_after(check))} if check else {}
    config = ConfigDict(extra="allow" if extra else "forbid", arbitrary_types_allowed=True, validate_default=True)
    try:
        return create_model(
            f"{name.replace('.', '_')}Settings",
            __config__=config,
            __doc__=f"The settings of {name}, derived from its signature.",
            __validators__=validators,
            __module__=getattr(owner, "__module__", None) or __name__,
            **fields,
        )
    except Exception as exc:  # pydantic cannot build a schema for an annotation
        raise PluginError(
            f"cannot derive the settings of {name} from its signature: {exc}; give each parameter a type "
            "pydantic validates, or pass surge.Plugin(config=...)"
        ) from exc


def _described(annotation: Any) -> bool:
    """Whether ``Annotated[..., Field(description=...)]`` describes the parameter itself."""
    return typing.get_origin(annotation) is typing.Annotated and any(
        isinstance(meta, FieldInfo) and meta.description for meta in annotation.__metadata__
    )


def _after(check: Callable[[Any], object]) -> Callable[[Any], Any]:
    def run(settings: Any) -> Any:
        check(settings)
        return settings

    return run


def _param_docs(doc: str | None) -> dict[str, str]:
    """Each parameter's description from a docstring's ``Args:`` (or ``Arguments:``, ``Parameters:``) section,
    Google style: ``name: text`` at one indentation, continuation lines below it indented further."""
    docs: dict[str, str] = {}
    if not doc:
        return docs
    lines = inspect.cleandoc(doc).splitlines()
    section_indent: int | None = None
    entry_indent: int | None = None
    name = ""
    for line in lines:
        if section_indent is None:
            match = _SECTION.match(line)
            if match:
                section_indent = len(match.group(1))
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= section_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        entry = _ENTRY.match(line.strip()) if indent == entry_indent else None
        if entry:
            name = entry.group(1).lstrip("*")
            docs[name] = entry.group(3).strip()
        elif name and indent > entry_indent:
            docs[name] = f"{docs[name]} {line.strip()}".strip()
    return docs


@overload
def validated(function: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def validated(*, check: Callable[[Any], object] | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def validated(
    function: Callable[P, R] | None = None, /, *, check: Callable[[Any], object] | None = None
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a plugin's ``__init__`` so that its arguments are validated by its :func:`settings_model`
    (the model the run config's section is validated by) before the body runs, which receives the validated
    values (``"PT1H"`` given for a ``timedelta`` arrives as one). A problem raises :class:`surge.ConfigError`
    naming ``<Class>.<parameter>``, with the message the run config's ``trainer.plugins.<name>.<parameter>``
    gets. Python's own ``TypeError`` still refuses an argument the signature does not take.

    ``check(settings)`` runs after the fields are valid and raises ``ValueError`` for a rule across them
    (``"save_top_k=3 needs a monitor"``); it is part of the model, so the run config's section gets it too.
    """

    def decorate(init: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(init)

        @functools.wraps(init)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            cls = type(args[0])
            owner = next((k for k in cls.__mro__ if vars(k).get("__init__") is wrapper), cls)
            model = _model_of(owner, wrapper)
            bound = signature.bind(*args, **kwargs)
            try:
                settings = model.model_validate({k: v for k, v in bound.arguments.items() if k in model.model_fields})
            except ValidationError as exc:
                prefix = cls.__name__
                raise ConfigError(format_validation_error(exc, prefix, model=model), source=f"{prefix}(...)") from None
            for name in model.model_fields:
                bound.arguments[name] = getattr(settings, name)
            return init(*bound.args, **bound.kwargs)

        setattr(wrapper, _CHECK, check)
        return wrapper

    return decorate(function) if function is not None else decorate
