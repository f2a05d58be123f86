"""Lightning's callbacks on Surge's bus: the adapter that subscribes an object written with Lightning's callback
hooks, a :class:`~surge_lightning.pytorch.callbacks.Callback` (through its ``__surge_subscriber__``) or any object
with those hook methods (through this distribution's ``surge.Plugin(adapter=...)``).

A Lightning callback is never registered on the bus itself: it is wrapped in a :class:`LightningCallback` holding
one handler per hook the callback defines (a hook it leaves alone costs nothing), each calling the hook with
Lightning's arguments ``(trainer, pl_module, ...)``. Callbacks are participants, so their hooks run before the
Module's, as Lightning calls callbacks before the LightningModule.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import surge
import torch
from surge.events.run import trainer_of

if TYPE_CHECKING:
    from surge_lightning.pytorch.callbacks.callback import Callback

__all__ = ["HOOKS", "REMOVED", "LightningCallback", "adapt", "callback_subscriber", "step_outputs"]

HOOKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "setup": ("setup", ("stage",)),
    "teardown": ("teardown", ("stage",)),
    "fit_start": ("on_fit_start", ()),
    "fit_end": ("on_fit_end", ()),
    "sanity_check_start": ("on_sanity_check_start", ()),
    "sanity_check_end": ("on_sanity_check_end", ()),
    "train_start": ("on_train_start", ()),
    "train_end": ("on_train_end", ()),
    "train_epoch_start": ("on_train_epoch_start", ()),
    "train_epoch_end": ("on_train_epoch_end", ()),
    "train_batch_start": ("on_train_batch_start", ("batch", "batch_idx")),
    "train_batch_end": ("on_train_batch_end", ("outputs", "batch", "batch_idx")),
    "before_backward": ("on_before_backward", ("loss",)),
    "after_backward": ("on_after_backward", ()),
    "before_optimizer_step": ("on_before_optimizer_step", ("optimizer",)),
    "before_zero_grad": ("on_before_zero_grad", ("optimizer",)),
    "before_checkpoint_save": ("on_save_checkpoint", ("checkpoint",)),
    "before_checkpoint_load": ("on_load_checkpoint", ("checkpoint",)),  # before load_state_dict, as in Lightning
    "exception": ("on_exception", ("error",)),
    "keyboard_interrupt": ("on_exception", ("error",)),  # Lightning reports Ctrl-C as a KeyboardInterrupt
    **{
        f"{stage}{scope}_{edge}": (f"on_{stage}{scope}_{edge}", ())
        for stage in ("validation", "test", "predict")
        for scope in ("", "_epoch")
        for edge in ("start", "end")
    },
    **{
        f"{stage}_batch_start": (f"on_{stage}_batch_start", ("batch", "batch_idx", "dataloader_idx"))
        for stage in ("validation", "test", "predict")
    },
    **{
        f"{stage}_batch_end": (f"on_{stage}_batch_end", ("outputs", "batch", "batch_idx", "dataloader_idx"))
        for stage in ("validation", "test", "predict")
    },
}
"""Surge event -> (Lightning callback hook, the event's fields passed after ``trainer, pl_module``).
``setup``/``teardown`` get ``stage`` by keyword; ``dataloader_idx`` is passed as Lightning passes it: only when
the stage has several loaders (or always, to a hook whose signature requires it, as Lightning 1.x's did)."""

REMOVED = {
    "on_init_start": "__init__",
    "on_init_end": "setup",
    "on_epoch_start": "on_train_epoch_start (or on_validation_epoch_start, ...)",
    "on_epoch_end": "on_train_epoch_end (or on_validation_epoch_end, ...)",
    "on_batch_start": "on_train_batch_start",
    "on_batch_end": "on_train_batch_end",
    "on_keyboard_interrupt": "on_exception",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_configure_sharded_model": "setup",
    "on_before_accelerator_backend_setup": "setup",
}
"""Lightning 1.x callback hooks that Lightning 2 dropped, with their replacements."""

HOOK_NAMES = frozenset(hook for hook, _ in HOOKS.values())
"""Lightning's callback hooks that run here."""


class LightningCallback:
    """The bus subscriber standing for one Lightning-style callback: a handler for each hook it defines
    (``hooks``: hook name -> how ``dataloader_idx`` is passed), and its state when it keeps one."""

    def __init__(self, callback: object, hooks: dict[str, str], stateful: bool) -> None:
        self.callback = callback
        self.__wrapped__ = callback  # what the bus names in its messages: the user's object, not this adapter
        name = getattr(callback, "surge_name", None)
        self.surge_name = name if isinstance(name, str) and name else type(callback).__name__
        self.surge_kind = getattr(callback, "surge_kind", "participant")
        for event_name, (hook, fields) in HOOKS.items():
            if hook in hooks:
                handler = _handler(getattr(callback, hook), event_name, fields, hooks[hook])
                setattr(self, f"_{event_name}", surge.hookimpl(specname=event_name)(handler))
        if stateful:
            self.state_dict = callback.state_dict  # type: ignore[attr-defined]
            self.load_state_dict = callback.load_state_dict  # type: ignore[attr-defined]

    @property
    def state_key(self) -> str:
        key = getattr(self.callback, "state_key", None)
        return key if isinstance(key, str) and key else type(self.callback).__qualname__

    def __repr__(self) -> str:
        return f"LightningCallback({self.callback!r})"


def step_outputs(trainer: Any, outputs: Any) -> Any:
    """What Lightning hands ``on_train_batch_end`` (and Lightning 1.x ``training_epoch_end``) for a training step's
    return value: a dict with the detached ``"loss"`` (in automatic optimization divided by
    ``accumulate_grad_batches``, as the loss that was back-propagated) and the step's other entries; ``{}``
    when the step returned ``None``."""
    automatic = trainer.module.automatic_optimization
    extra = dict(outputs) if isinstance(outputs, dict) else {}
    loss = extra.pop("loss", None) if isinstance(outputs, dict) else outputs
    if not isinstance(loss, torch.Tensor):
        return extra if not automatic else {}
    if automatic:
        loss = loss / trainer.accumulate_grad_batches
    return {"loss": loss.detach(), **extra}


def _handler(
    method: Callable[..., Any], event_name: str, fields: tuple[str, ...], loader_idx: str
) -> Callable[..., Any]:
    # Lightning's hooks get the Trainer itself (its API: EarlyStopping sets trainer.should_stop), not the view
    if event_name in ("setup", "teardown"):
        return lambda event: method(trainer_of(event.trainer), event.module, stage=event.stage)
    getters = [_getter(event_name, name) for name in fields if name != "dataloader_idx"]
    if loader_idx == "always":
        getters.append(lambda event: getattr(event, "dataloader_idx", 0))
    elif loader_idx == "several":
        stage = event_name.split("_")[0]
        loaders = "val_dataloaders" if stage == "validation" else f"{stage}_dataloaders"

        def several(event: Any) -> Any:
            last = (event.dataloader_idx,) if len(getattr(event.trainer, loaders)) > 1 else ()
            return method(trainer_of(event.trainer), event.module, *[get(event) for get in getters], *last)

        return several
    if not getters:
        return lambda event: method(trainer_of(event.trainer), event.module)
    return lambda event: method(trainer_of(event.trainer), event.module, *[get(event) for get in getters])


def _getter(event_name: str, field: str) -> Callable[[Any], Any]:
    if event_name == "train_batch_end" and field == "outputs":
        return lambda event: step_outputs(event.trainer, event.outputs)
    if event_name == "keyboard_interrupt":
        return lambda event: KeyboardInterrupt()
    return lambda event: getattr(event, field)


def callback_subscriber(callback: Callback) -> LightningCallback:
    """The subscriber of a :class:`~surge_lightning.pytorch.callbacks.Callback` (its ``__surge_subscriber__``): a
    handler for each hook it overrides, and its state when it overrides ``state_dict``. Raises
    :class:`surge.PluginError` when it also has ``@surge.hookimpl`` handlers, or a hook it cannot be called with."""
    from surge_lightning.pytorch.callbacks.callback import Callback

    what = f"{type(callback).__module__}.{type(callback).__qualname__}"
    marked = [n for n in dir(callback) if getattr(inspect.getattr_static(callback, n, None), "surge_impl", None)]
    if marked:
        raise surge.PluginError(
            f"{what} subclasses surge_lightning.pytorch.callbacks.Callback and also has @surge.hookimpl handlers "
            f"({', '.join(marked)}); write it one way: Lightning's hooks on a Callback, or marked handlers on a "
            "plain class"
        )
    defaults = vars(Callback)
    hooks = [h for h in (*HOOK_NAMES, *REMOVED) if inspect.getattr_static(callback, h, None) is not defaults.get(h)]
    stateful = inspect.getattr_static(callback, "state_dict") is not defaults["state_dict"]
    if not hooks and not stateful:
        raise surge.PluginError(
            f"{what} handles nothing: it overrides none of Callback's hooks (on_train_epoch_end(self, trainer, "
            "pl_module), ...) and keeps no state, so nothing would ever call it"
        )
    return LightningCallback(callback, {hook: _loader_idx(callback, what, hook) for hook in hooks}, stateful)


def adapt(obj: object) -> LightningCallback | None:
    """This distribution's ``surge.Plugin(adapter=...)``: a :class:`LightningCallback` for an object passed in that
    does not subclass ``Callback`` but has Lightning's callback hooks; ``None`` for one without any (the core then
    says it handles nothing)."""
    hooks = [h for h in (*HOOK_NAMES, *REMOVED) if inspect.isroutine(getattr(obj, h, None))]
    if not hooks:
        return None
    what = f"{type(obj).__module__}.{type(obj).__qualname__}"
    # state alone does not make a plain object a callback (a model passed here by mistake has state too)
    stateful = callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))
    return LightningCallback(obj, {hook: _loader_idx(obj, what, hook) for hook in hooks}, stateful)


def _loader_idx(obj: object, what: str, hook: str) -> str:
    """Check that ``hook`` takes Lightning's arguments; returns how to pass ``dataloader_idx``: "never",
    "several" (Lightning's rule: when the stage has several loaders) or "always" (a Lightning 1.x signature)."""
    if hook in REMOVED:
        raise surge.PluginError(
            f"{what}.{hook} is a Lightning 1.x callback hook that Lightning 2 removed and Surge has no event for, so "
            f"it would never be called; use {REMOVED[hook]} instead"
        )
    fields = next(f for h, f in HOOKS.values() if h == hook)
    signature = inspect.signature(getattr(obj, hook))
    args = ["trainer", "pl_module", *(f for f in fields if f != "dataloader_idx")]
    keywords = {"stage": "fit"} if hook in ("setup", "teardown") else {}
    if keywords:
        args.remove("stage")
    for mode, extra in (("several" if "dataloader_idx" in fields else "never", []), ("always", ["dataloader_idx"])):
        try:
            signature.bind(*args, *extra, **keywords)
            return mode
        except TypeError:
            if not hook.endswith(("_batch_start", "_batch_end")):
                break
    expected = ", ".join([*args, *keywords, *(["dataloader_idx=0"] if "dataloader_idx" in fields else [])])
    hint = (
        "; Lightning 1.x passed `outputs` to epoch-end hooks, Lightning 2 and Surge do not: collect them in "
        "on_train_batch_end"
        if hook.endswith("_epoch_end")
        else ""
    )
    given = ", ".join(signature.parameters)
    raise surge.PluginError(
        f"{what}.{hook}({given}) does not take Lightning's arguments for this hook, ({expected}), so it cannot be "
        f"called{hint}"
    )
