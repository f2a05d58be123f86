"""Lightning's callbacks on Surge's bus: :class:`Callback` (``surge.compat.Callback``) and the adapter that
subscribes any object written with Lightning's callback hooks.

A Lightning callback is never registered on the bus itself: :func:`subscriber_for` wraps it in a
:class:`LightningCallback` holding one handler per hook the callback defines (a hook it leaves alone costs
nothing), each calling the hook with Lightning's arguments ``(trainer, pl_module, ...)``. Callbacks are
participants, so their hooks run before the Module's, as Lightning calls callbacks before the LightningModule.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from surge.errors import PluginError
from surge.events.hooks import PROJECT, hookimpl
from surge.events.run import _trainer_of

if TYPE_CHECKING:
    from surge.engine.module import Module
    from surge.engine.trainer import Trainer

__all__ = ["HOOKS", "Callback", "LightningCallback", "step_outputs", "subscriber_for", "unwrap"]

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

_HOOK_NAMES = frozenset(hook for hook, _ in HOOKS.values())


class Callback:
    """Lightning's ``Callback``: override the hooks you need; each is called with ``(trainer, pl_module, ...)``
    exactly as Lightning calls it (``HOOKS`` maps them onto Surge's events, docs/porting.md lists the
    differences). ``state_dict``/``load_state_dict`` put the callback's state into checkpoints under
    ``state_key`` (the class's qualified name, as in Lightning)."""

    @property
    def state_key(self) -> str:
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None: ...
    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None: ...
    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_fit_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...
    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None: ...
    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None: ...
    def on_before_backward(self, trainer: Trainer, pl_module: Module, loss: torch.Tensor) -> None: ...
    def on_after_backward(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: Module, optimizer: torch.optim.Optimizer
    ) -> None: ...
    def on_before_zero_grad(self, trainer: Trainer, pl_module: Module, optimizer: torch.optim.Optimizer) -> None: ...


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
                setattr(self, f"_{event_name}", hookimpl(specname=event_name)(handler))
        if stateful:
            self.state_dict = callback.state_dict  # type: ignore[attr-defined]
            self.load_state_dict = callback.load_state_dict  # type: ignore[attr-defined]

    @property
    def state_key(self) -> str:
        key = getattr(self.callback, "state_key", None)
        return key if isinstance(key, str) and key else type(self.callback).__qualname__

    def __repr__(self) -> str:
        return f"LightningCallback({self.callback!r})"


def unwrap(obj: object) -> object:
    """The object the user passed: a Lightning callback or logger rather than its bus adapter."""
    return getattr(obj, "__wrapped__", obj)


def step_outputs(trainer: Trainer, outputs: Any) -> Any:
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
        return lambda event: method(_trainer_of(event.trainer), event.module, stage=event.stage)
    getters = [_getter(event_name, name) for name in fields if name != "dataloader_idx"]
    if loader_idx == "always":
        getters.append(lambda event: getattr(event, "dataloader_idx", 0))
    elif loader_idx == "several":
        stage = event_name.split("_")[0]
        loaders = "val_dataloaders" if stage == "validation" else f"{stage}_dataloaders"

        def several(event: Any) -> Any:
            last = (event.dataloader_idx,) if len(getattr(event.trainer, loaders)) > 1 else ()
            return method(_trainer_of(event.trainer), event.module, *[get(event) for get in getters], *last)

        return several
    if not getters:
        return lambda event: method(_trainer_of(event.trainer), event.module)
    return lambda event: method(_trainer_of(event.trainer), event.module, *[get(event) for get in getters])


def _getter(event_name: str, field: str) -> Callable[[Any], Any]:
    if event_name == "train_batch_end" and field == "outputs":
        return lambda event: step_outputs(event.trainer, event.outputs)
    if event_name == "keyboard_interrupt":
        return lambda event: KeyboardInterrupt()
    return lambda event: getattr(event, field)


def subscriber_for(obj: object) -> object:
    """The bus subscriber for an object passed in ``callbacks=``/``plugins=``/``logger=``: the object itself when
    it has ``@surge.hookimpl`` handlers, a :class:`LightningCallback` when it has Lightning's callback hooks, or
    what its ``surge_subscriber()`` method returns (a Lightning ``Logger``'s adapter, whose ``__wrapped__`` is it).
    Raises :class:`PluginError` for an object that would handle nothing, or whose hooks cannot be called."""
    from surge.engine.module import Module
    from surge.plugins.backends import Accelerator, Precision, Strategy

    what = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if inspect.isfunction(inspect.getattr_static(obj, "surge_subscriber", None)):
        return obj.surge_subscriber()  # type: ignore[attr-defined]  # it names its adapter (a Lightning Logger's)
    if isinstance(obj, Module):
        raise PluginError(f"{what} is a Module, not a callback: pass it to trainer.fit(model)")
    for base, slot in ((Accelerator, "accelerator"), (Strategy, "strategy"), (Precision, "precision")):
        if isinstance(obj, base):
            raise PluginError(
                f"{what} is a {base.__name__}: choose it with Trainer({slot}=...), not in a list of plugins"
            )
    marked = [name for name in dir(obj) if getattr(inspect.getattr_static(obj, name, None), f"{PROJECT}_impl", None)]
    if isinstance(obj, Callback):
        if marked:
            raise PluginError(
                f"{what} subclasses surge.compat.Callback and also has @surge.hookimpl handlers "
                f"({', '.join(marked)}); write it one way: Lightning's hooks on a Callback, or marked handlers on a "
                "plain class"
            )
        defaults = vars(Callback)
        hooks = [h for h in (*_HOOK_NAMES, *REMOVED) if inspect.getattr_static(obj, h, None) is not defaults.get(h)]
        stateful = inspect.getattr_static(obj, "state_dict") is not defaults["state_dict"]
    elif marked:  # a Surge plugin: the bus checks its handlers (and refuses unmarked ones named after events)
        return obj
    else:
        hooks = [h for h in (*_HOOK_NAMES, *REMOVED) if inspect.isroutine(getattr(obj, h, None))]
        # state alone does not make a plain object a callback (a model passed here by mistake has state too)
        stateful = (
            bool(hooks)
            and callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "load_state_dict", None))
        )
    if not hooks and not stateful and callable(getattr(obj, "surge_checkpoint_path", None)):
        raise PluginError(
            f"{what} has a surge_checkpoint_path method, which Surge no longer calls: resolve ckpt_path aliases in "
            "a handler, @surge.hookimpl def checkpoint_path(self, event): return self.surge_checkpoint_path("
            "event.alias) (docs/events.md, 'Questions')"
        )
    if not hooks and not stateful:
        raise PluginError(
            f"{what} handles nothing: it has no @surge.hookimpl handler, none of Lightning's callback hooks, so "
            "nothing would ever call it. A Lightning callback subclasses "
            "surge.compat.Callback and overrides its hooks (on_train_epoch_end(self, trainer, pl_module), ...); a "
            "Surge plugin marks methods named after events with @surge.hookimpl (docs/plugins.md)"
        )
    return LightningCallback(obj, {hook: _loader_idx(obj, what, hook) for hook in hooks}, stateful)


def _loader_idx(obj: object, what: str, hook: str) -> str:
    """Check that ``hook`` takes Lightning's arguments; returns how to pass ``dataloader_idx``: "never",
    "several" (Lightning's rule: when the stage has several loaders) or "always" (a Lightning 1.x signature)."""
    if hook in REMOVED:
        raise PluginError(
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
    raise PluginError(
        f"{what}.{hook}({given}) does not take Lightning's arguments for this hook, ({expected}), so it cannot be "
        f"called{hint}"
    )


def adapt(obj: object, built_by_plugin: bool) -> object:
    """The selection's adapter (:data:`surge.plugins.selection.Adapter`): an object passed in joins through
    :func:`subscriber_for`; one a plugin built, only when it is written as a Lightning :class:`Callback`."""
    if built_by_plugin and not isinstance(obj, Callback):
        return obj
    return subscriber_for(obj)
