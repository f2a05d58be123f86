"""``surge.Module`` and ``surge.DataModule``: the user's model and data, with Lightning's names."""

from __future__ import annotations

import contextlib
import inspect
import sys
from argparse import Namespace
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from surge._logging import logger
from surge.engine._metrics import ReduceFx
from surge.errors import SurgeError
from surge.plugins.backends import move_to_device

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer

__all__ = ["Module", "DataModule", "HParams", "ManualOptimizer"]


class HParams(dict):  # type: ignore[type-arg]
    """A dict whose keys read as attributes too (``self.hparams.lr``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no hyper-parameter {name!r}; saved: {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def _capture_init_args(obj: object, ignore: Sequence[str]) -> HParams:
    """The arguments of ``obj``'s constructor chain, as Lightning collects them: every ``__init__`` frame of
    ``obj`` on the stack (a base class's that calls ``save_hyperparameters``, the subclass's that called it
    through ``super().__init__(...)``, ...), each read through its own signature, ``**kwargs`` merged in and
    ``*args`` left out; an outer (subclass) frame's value wins. The values are the arguments' current ones."""
    chain: list[dict[str, Any]] = []
    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__init__" and code.co_argcount and frame.f_locals.get(code.co_varnames[0]) is obj:
            chain.append(_frame_arguments(frame))
        frame = frame.f_back
    found = HParams()
    for arguments in chain:  # innermost first: the subclass's values win
        found.update((name, value) for name, value in arguments.items() if name not in ignore)
    return found


def _frame_arguments(frame: Any) -> dict[str, Any]:
    """The named arguments of the call running in ``frame`` (less the first, ``self``), with the items of its
    ``**kwargs``."""
    code, local = frame.f_code, frame.f_locals
    count = code.co_argcount + code.co_kwonlyargcount
    arguments = {name: local[name] for name in code.co_varnames[1:count] if name in local}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs = code.co_varnames[count + bool(code.co_flags & inspect.CO_VARARGS)]
        arguments.update(local.get(kwargs) or {})
    return arguments


def _save_hyperparameters(
    obj: Module | DataModule, args: tuple[Any, ...], ignore: Sequence[str] | str | None, log: bool
) -> None:
    """``save_hyperparameters`` of a Module or DataModule, as Lightning's; called from their ``__init__`` (or a base
    class's)."""
    where = f"{type(obj).__name__}.save_hyperparameters"
    obj._log_hyperparams = log
    ignored = [ignore] if isinstance(ignore, str) else list(ignore or ())
    names = [arg for arg in args if isinstance(arg, str)]
    given = [arg for arg in args if not isinstance(arg, str)]
    for arg in given:
        if not isinstance(arg, (Mapping, Namespace)):
            raise SurgeError(
                f"{where}({arg!r}): takes a dict, an argparse.Namespace or names of __init__ arguments, not a "
                f"{type(arg).__name__}; pass {{'name': value}} to save values under names of your own"
            )
    if len(given) > 1:
        raise SurgeError(
            f"{where}: got {len(given)} dicts or Namespaces; pass one (its items become the hyper-parameters), or "
            "names of __init__ arguments"
        )
    captured = _capture_init_args(obj, ignored)
    if given:
        (container,) = given
        values = dict(vars(container) if isinstance(container, Namespace) else container)
        if not values:
            return  # as Lightning: an empty one saves nothing
        if names:
            logger.warning("{}: the names {} are ignored beside a dict or Namespace, as in Lightning", where, names)
        # the __init__ argument it came in (load_from_checkpoint passes the saved values back through it)
        obj._hparams_name = next((name for name, value in captured.items() if _same(value, container)), None)
    else:
        unknown = [name for name in names if name not in captured]
        if unknown:
            raise SurgeError(
                f"{where}{tuple(names)}: {unknown} are not arguments of __init__ (its arguments: {sorted(captured)})"
            )
        values = {name: value for name, value in captured.items() if not names or name in names}
        obj._hparams_name = None
    obj.hparams.update(values)
    for name in ignored:  # also what an earlier call (a base class's) saved, as Lightning
        obj.hparams.pop(name, None)


def _same(value: Any, container: Any) -> bool:
    try:
        return value is container or bool(value == container)
    except Exception:  # a tensor or array compared with a dict
        return False


class Module(nn.Module):
    """An ``nn.Module`` that knows how to train itself.

    Define ``training_step`` and ``configure_optimizers`` (and optionally ``validation_step``, ``test_step``,
    ``predict_step``). Any ``on_<event>`` method is a handler of that event (see :mod:`surge.events`): it
    may take ``event``, nothing, or parameters named like the event's fields
    (``def on_train_batch_end(self, outputs, batch, batch_idx)`` works as in Lightning). ``setup(stage)`` and
    ``teardown(stage)`` handle those events; ``on_save_checkpoint(checkpoint)`` and
    ``on_load_checkpoint(checkpoint)`` handle ``before_checkpoint_save`` and ``after_checkpoint_load``.
    The Module's handlers run after the participants' and before the observers'.

    The steps the loops take can be overridden as in Lightning, with its arguments and at its places:
    :meth:`optimizer_step` (with the closure that runs ``training_step`` and :meth:`backward`),
    :meth:`optimizer_zero_grad`, :meth:`backward`, :meth:`lr_scheduler_step`, :meth:`configure_gradient_clipping`,
    :meth:`transfer_batch_to_device`, :meth:`on_before_batch_transfer` and :meth:`on_after_batch_transfer`.
    """

    automatic_optimization: bool = True
    """Set to ``False`` to call ``self.optimizers()``, ``self.manual_backward`` and ``opt.step()`` yourself."""

    truncated_bptt_steps: int = 0
    """Truncated back-propagation through time (the seed's ``truncated_bptt_steps``): when > 0, each training
    batch is cut by :meth:`tbptt_split_batch` into pieces of this many time steps, and each piece is one
    training step with its own backward and optimizer step: ``training_step(split, batch_idx, hiddens)``,
    where ``hiddens`` is what the previous piece returned as ``{"loss": ..., "hiddens": ...}`` (detached;
    ``None`` for the first piece of a batch)."""

    plain_hparams_only: bool = True
    """Whether a hyper-parameter with no plain form (an ``nn.Module``, a class, a ``functools.partial``) makes
    ``fit``/``validate``/``test`` raise :class:`~surge.errors.ConfigError` naming it (Surge's rule, the default), or,
    set to ``False`` on a class, stays in ``self.hparams`` while checkpoints and loggers leave it out, with one
    warning naming the keys and the fix (surge-lightning's ``LightningModule`` does, as Lightning saves such values
    and a Surge checkpoint still loads with ``torch.load(weights_only=True)``)."""

    _surge_event_fields: ClassVar[Mapping[tuple[str, str], Callable[..., Any]]] = {}
    """What the Module's handlers get for a field of an event, by ``(event name, field)``, where a subclass's API
    hands its hooks something other than the event holds (surge-lightning's ``LightningModule``: the ``outputs`` of
    ``on_train_batch_end`` as Lightning's dict). Read once, when the Module joins a run."""

    _log_hyperparams: bool = True
    """``save_hyperparameters(logger=...)``: whether the loggers get ``hparams`` (Lightning's attribute)."""
    _hparams_name: str | None = None
    """The ``__init__`` argument the saved dict or Namespace came in, which ``load_from_checkpoint`` fills."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._surge_trainer: Trainer | None = None
        self.hparams: HParams = HParams()

    # -- the methods users define --------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Return the loss tensor, or a dict with a ``"loss"`` entry, or ``None`` to skip the batch."""
        raise NotImplementedError(f"{type(self).__name__} must define training_step(self, batch, batch_idx)")

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """By default, the module applied to the batch (or to its first element). With several predict
        loaders the loop also passes ``dataloader_idx``."""
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        return self(batch)

    def tbptt_split_batch(self, batch: Any, split_size: int) -> list[Any]:
        """The pieces of a sequence batch for truncated back-propagation through time: every tensor (inside
        lists, tuples and dicts) is cut along dimension 1, the time dimension of batch-first sequences, into
        pieces of ``split_size`` steps. Override for another layout."""
        lengths = {t.shape[1] for t in _tensors(batch) if t.dim() > 1}
        if len(lengths) != 1:
            raise SurgeError(
                f"{type(self).__name__}.tbptt_split_batch: the batch's tensors have time lengths {sorted(lengths)} "
                "along dimension 1; truncated_bptt_steps needs batch-first sequences of one length, or override "
                "tbptt_split_batch(batch, split_size)"
            )
        (length,) = lengths
        return [_slice_time(batch, start, start + split_size) for start in range(0, length, split_size)]

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, ``(optimizers, schedulers)``, or a dict
        ``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler": ..., "interval": "epoch"|"step",
        "frequency": 1, "monitor": "val_loss"}}`` (or a list of such dicts)."""
        raise NotImplementedError(f"{type(self).__name__} must define configure_optimizers(self) to be fitted")

    # -- what the module asks of the running trainer ---------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        if self._surge_trainer is None:
            raise SurgeError(f"{type(self).__name__} is not attached to a Trainer; call trainer.fit(model) first")
        return self._surge_trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        """Attach the Module to ``trainer``, or detach it (``None``), as Lightning's setter does; a Trainer does
        this itself when it runs the Module (a tuner's trial runs restore the previous one with it)."""
        self._surge_trainer = trainer

    @property
    def device(self) -> torch.device:
        for parameter in self.parameters():
            return parameter.device
        for buffer in self.buffers():
            return buffer.device
        return torch.device("cpu")

    @property
    def current_epoch(self) -> int:
        return self._surge_trainer.current_epoch if self._surge_trainer else 0

    @property
    def global_step(self) -> int:
        return self._surge_trainer.global_step if self._surge_trainer else 0

    def log(
        self,
        name: str,
        value: Any,
        *,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: ReduceFx = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
    ) -> None:
        """Record a metric. In training it is logged per step by default, elsewhere per epoch (the mean,
        weighted by batch size). Values stay on their device; nothing here waits for the device. A value is one
        number: a tensor of more than one element raises :class:`~surge.errors.LoggedValueError` (a one-element
        tensor of any shape is its number, as in Lightning).

        ``value`` may be a torchmetrics ``Metric`` (updated by the step, as in Lightning): per step its
        forward result is logged, per epoch its ``compute()``, after which it is ``reset()``; ``reduce_fx``
        and ``sync_dist`` do not apply (the metric reduces and syncs across processes itself)."""
        trainer = self._surge_trainer
        if trainer is None or trainer.config.barebones:
            _warn_unattached(name, "the module is not attached to a running Trainer" if trainer is None else _BAREBONES)
            return
        trainer._metrics.record(
            name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size, add_dataloader_idx
        )

    def log_dict(self, values: Mapping[str, Any], **kwargs: Any) -> None:
        """``self.log`` for each entry; ``values`` may be a torchmetrics ``MetricCollection`` (its metrics
        under their prefixed names, as Lightning logs them)."""
        torchmetrics = sys.modules.get("torchmetrics")  # optional: only a program that imported it has one
        if torchmetrics is not None and isinstance(values, torchmetrics.MetricCollection):
            # names with prefix/postfix; metrics of a compute group share the group's state, not a copy
            items = values.items(keep_base=False, copy_state=False)
        else:
            items = values.items()
        for name, value in items:
            self.log(name, value, **kwargs)

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer (or list of them) from ``configure_optimizers``, for manual optimization.

        Each comes wrapped in a :class:`ManualOptimizer`, whose ``step`` goes through the precision plugin (with
        ``16-mixed`` the gradient scaler unscales, skips a non-finite step and updates its scale, as after
        :meth:`manual_backward`'s scaled backward it must); ``use_pl_optimizer=False`` (Lightning's name)
        returns the bare optimizers."""
        optimizers = self.trainer.optimizers
        if use_pl_optimizer:
            cached: list[ManualOptimizer] = self.__dict__.get("_surge_manual_optimizers") or []
            if [m.optimizer for m in cached] != optimizers:
                cached = [ManualOptimizer(o, self.trainer) for o in optimizers]
                self.__dict__["_surge_manual_optimizers"] = cached
            optimizers = cached  # type: ignore[assignment]
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def lr_schedulers(self) -> Any:
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Back-propagate ``loss`` in manual optimization, as Lightning's: through the precision plugin (which
        scales it under ``16-mixed``) and :meth:`backward` (yours, when you override it), with
        ``before_backward``/``after_backward`` around it; ``args`` and ``kwargs`` go on to :meth:`backward` and
        from there to ``Tensor.backward`` (``retain_graph=True``)."""
        trainer = self.trainer
        if args or kwargs or "backward" in trainer._overridden:
            trainer._backward_through_module(loss, *args, **kwargs)
        else:
            trainer._backward(loss)

    # -- the steps the loops call, which a Module may override (Lightning's names, arguments and places) -----
    # Which of them a Module overrides is read once per run; one not overridden costs nothing per step: the
    # loops then run their own inlined step instead of calling it. docs/porting.md says where Surge's order of
    # calls differs from Lightning's.

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Step the optimizer; in automatic optimization, called on each batch that completes an accumulation
        window (every batch without accumulation; each time split with ``truncated_bptt_steps``), with the
        current epoch, the batch's index, the optimizer wrapped in a :class:`ManualOptimizer` (its ``step`` goes
        through the precision plugin: under ``16-mixed`` the gradient scaler unscales, skips a non-finite step
        and updates its scale) and ``optimizer_closure``.

        The closure runs ``training_step`` and :meth:`backward` of its loss (divided by
        ``accumulate_grad_batches``) and returns that loss, detached (``None`` when ``training_step`` returned
        ``None``). It must run: pass it to ``optimizer.step(closure=optimizer_closure)`` (the default; the
        optimizer calls it, then ``before_optimizer_step`` fires, :meth:`configure_gradient_clipping` clips, and
        the weights are updated), or call ``optimizer_closure()`` yourself to compute the gradients without
        stepping; an override that never runs it is an error, as in Lightning. The window's other batches run
        the closure without this method. After it returns the gradients are zeroed
        (:meth:`optimizer_zero_grad`), ``global_step`` counts one step, and step-interval schedulers step.
        Not called in manual optimization. A learning-rate warm-up, as in Lightning::

            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
                optimizer.step(closure=optimizer_closure)
                scale = min(1.0, (self.trainer.global_step + 1) / 500)
                for group in optimizer.param_groups:
                    group["lr"] = scale * self.hparams.lr
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Reset the gradients of ``optimizer`` (the torch optimizer itself), after each optimizer step of
        automatic optimization, between ``before_zero_grad`` and ``after_zero_grad``, with the epoch and the
        index of the batch that stepped. Lightning zeroes them before the backward of the first batch of the
        next window instead, so with ``accumulate_grad_batches=k`` its ``batch_idx`` is that batch's (``0, k,
        2k, ...``) where Surge's is the stepping batch's (``k-1, 2k-1, ...``); the same with ``k=1``."""
        optimizer.zero_grad()

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute the gradients of ``loss``: the loss of each training batch in automatic optimization (divided
        by ``accumulate_grad_batches``), and what :meth:`manual_backward` gets in manual optimization, after the
        precision plugin scaled it (under ``16-mixed`` ``loss`` is the scaled loss), between ``before_backward``
        and ``after_backward``. ``args`` and ``kwargs`` are :meth:`manual_backward`'s extra arguments."""
        loss.backward(*args, **kwargs)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step ``scheduler``, each time the loop steps a scheduler of ``configure_optimizers`` in automatic
        optimization (after the optimizer steps of an ``"interval": "step"`` one, at the epoch's end for
        ``"epoch"``, every ``frequency``); ``metric`` is the value of its ``monitor`` (``ReduceLROnPlateau``),
        else ``None``. Override it for a scheduler whose ``step`` takes other arguments."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients before each optimizer step of automatic optimization, after the
        ``before_optimizer_step`` handlers (gradients are true-scale under ``16-mixed``), with the torch
        optimizer and the Trainer's ``gradient_clip_val`` and ``gradient_clip_algorithm`` (``None`` where the
        Trainer was not given them). Called whether or not the Trainer clips; the default calls
        :meth:`clip_gradients` with those values."""
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device`` (the strategy's device); every batch of every stage (training, the sanity
        check, validation, test, predict) comes through here when it is overridden, with its loader's index
        (``0`` in training). The default moves tensors inside lists, tuples, dicts and dataclasses; override it
        for a batch of your own class. Not overridden, the strategy moves the batch itself."""
        return move_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` before :meth:`transfer_batch_to_device` (it is still where the loader made it):
        return the batch to use. Every stage, with the loader's index (``0`` in training)."""
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` after :meth:`transfer_batch_to_device` (it is on the device, before
        ``<stage>_batch_start``): return the batch to use (a GPU augmentation goes here). Every stage."""
        return batch

    # -- Lightning's helpers for manual optimization, freezing and loggers ------------------------------
    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters compute gradients until :meth:`untoggle_optimizer`: every other
        optimizer's parameters get ``requires_grad=False`` (their settings are kept and restored), as in
        Lightning, so that a GAN's generator step leaves no gradients on the discriminator."""
        optimizer = _unwrapped(optimizer)
        saved: dict[nn.Parameter, bool] = {}
        for opt in self.trainer.optimizers:
            for group in opt.param_groups:
                for param in group["params"]:
                    if param not in saved:
                        saved[param] = param.requires_grad
                        param.requires_grad = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.requires_grad = saved[param]
        self.__dict__["_surge_toggled"] = saved

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the other optimizers' parameters back the ``requires_grad`` they had before :meth:`toggle_optimizer`."""
        optimizer = _unwrapped(optimizer)
        saved: dict[nn.Parameter, bool] = self.__dict__.pop("_surge_toggled", {})
        for opt in self.trainer.optimizers:
            if opt is optimizer:
                continue
            for group in opt.param_groups:
                for param in group["params"]:
                    if param in saved:
                        param.requires_grad = saved[param]

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the block, :meth:`untoggle_optimizer` after it (even if it raises)."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def clip_gradients(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients of ``optimizer``'s parameters, by their total norm (``"norm"``) or by value
        (``"value"``), for manual optimization; unset arguments take the Trainer's ``gradient_clip_val`` and
        ``gradient_clip_algorithm``, and contradicting them is an error (as in Lightning). Under ``16-mixed``
        the gradients are unscaled first, so the value applies to the true gradients."""
        config = self.trainer.config
        if gradient_clip_val is None:
            gradient_clip_val = config.gradient_clip_val or 0.0
        elif config.gradient_clip_val is not None and config.gradient_clip_val != gradient_clip_val:
            raise SurgeError(
                f"{type(self).__name__}.clip_gradients(gradient_clip_val={gradient_clip_val!r}) contradicts "
                f"Trainer(gradient_clip_val={config.gradient_clip_val!r}); set the value in one place only"
            )
        algorithm = config.gradient_clip_algorithm
        if gradient_clip_algorithm is not None:
            given = gradient_clip_algorithm.lower()
            if "gradient_clip_algorithm" in config.model_fields_set and given != algorithm:
                raise SurgeError(
                    f"{type(self).__name__}.clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r}) "
                    f"contradicts Trainer(gradient_clip_algorithm={algorithm!r}); set it in one place only"
                )
            algorithm = given  # type: ignore[assignment]
        if algorithm not in ("norm", "value"):
            raise SurgeError(f"clip_gradients: gradient_clip_algorithm is {algorithm!r}; use 'norm' or 'value'")
        if isinstance(gradient_clip_val, bool) or not isinstance(gradient_clip_val, (int, float)):
            raise SurgeError(f"clip_gradients: gradient_clip_val must be an int or a float, got {gradient_clip_val!r}")
        if gradient_clip_val <= 0:
            return
        from surge.engine.loops import clip_gradients

        optimizer = _unwrapped(optimizer)
        self.trainer.precision_plugin.unscale_gradients(optimizer)
        clip_gradients(optimizer, gradient_clip_val, algorithm)

    def freeze(self) -> Module:
        """No parameter computes gradients, and the module is in eval mode (for inference); returns it."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Module:
        """Every parameter computes gradients again, and the module is in training mode; returns it."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    @property
    def on_gpu(self) -> bool:
        """Whether the module's parameters are on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's active logger objects (:attr:`surge.Trainer.loggers`); ``[]`` when not attached."""
        return self._surge_trainer.loggers if self._surge_trainer is not None else []

    @property
    def logger(self) -> Any:
        """The first of :attr:`loggers` (``None`` without any): ``self.logger.experiment`` is the
        TensorBoard ``SummaryWriter`` or the MLflow client."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None, logger: bool = True) -> None:
        """Store hyper-parameters in ``self.hparams`` (call it from ``__init__``), as Lightning's: the arguments of
        ``__init__`` (all of them, or the ones named: ``save_hyperparameters("lr", "hidden")``), or the items of a
        dict or ``argparse.Namespace`` (``save_hyperparameters(config)``), less the names in ``ignore`` (also
        removed from what an earlier call saved). Called in a base class's ``__init__``, "the arguments" are those
        of the whole constructor chain: every ``__init__`` of this object running, a subclass's value winning,
        ``**kwargs`` merged in and ``*args`` left out.
        ``logger=False`` keeps them from the loggers (they are still saved in checkpoints). When the dict or
        Namespace is an argument of ``__init__``, ``load_from_checkpoint`` passes the saved values back through
        that argument (as a dict), as Lightning's; otherwise it passes those that are arguments of ``__init__``.

        ``self.hparams`` keeps the values as given; checkpoints and loggers get them converted to plain types
        (:func:`surge._plain.plain_hparams`): paths, dates and ``torch.dtype``/``device`` as strings,
        ``timedelta`` as seconds, an ``Enum`` as its ``.value``, a dataclass as a dict of its fields, numpy
        scalars and arrays as numbers and lists, sets as sorted lists. So ``load_from_checkpoint`` calls
        ``__init__`` with those plain values (``Color(kind)``, ``Path(root)`` or ``Cfg(**cfg)`` turn them back).
        A value with no plain form (a function, an arbitrary object) makes ``fit``/``validate``/``test`` raise
        :class:`~surge.errors.ConfigError` naming it before the run starts: convert it in ``__init__`` or
        leave it out with ``ignore`` (or, on a class with :attr:`plain_hparams_only` ``False``, it is left out of
        checkpoints and loggers, with a warning)."""
        _save_hyperparameters(self, args, ignore, logger)

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str,
        *,
        map_location: Any = None,
        strict: bool = True,
        trusted: bool = False,
        **kwargs: Any,
    ) -> Any:
        """A new module built from the checkpoint's saved hyper-parameters (overridden by ``kwargs``) with the
        checkpoint's weights (:func:`surge.checkpoint.load`: a local path or fsspec URL, read with
        ``weights_only`` unless ``trusted``). A sharded checkpoint is refused with the hint its strategy recorded.

        As in Lightning, the module's ``on_load_checkpoint(checkpoint)`` runs before the weights are loaded,
        with the checkpoint dict (it may change it); a hook that takes ``event`` needs a running Trainer and
        is left to ``fit(ckpt_path=...)``."""
        from surge import checkpoint as _checkpoint

        saved = _checkpoint.load(checkpoint_path, trusted=trusted)
        if "state_dict" not in saved:
            sharded = _checkpoint.sharded_message(checkpoint_path, saved)
            raise _checkpoint.CheckpointError(
                sharded or f"checkpoint {checkpoint_path} is not a Surge checkpoint (it has no 'state_dict' entry)"
            )
        model = cls(**{**_init_arguments(cls, saved), **kwargs})
        hook = getattr(model, "on_load_checkpoint", None)
        if callable(hook):
            required = [
                p.name
                for p in inspect.signature(hook).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
            if not required:
                hook()
            elif len(required) == 1 and required[0] not in ("event", "trainer"):
                hook(saved)
        model.load_state_dict(saved["state_dict"], strict=strict)
        return model.to(map_location) if map_location is not None else model

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the global-zero process only."""
        if self._surge_trainer is None or self._surge_trainer.is_global_zero:
            print(*args, **kwargs)


def _init_arguments(cls: type[Module], saved: Mapping[str, Any]) -> dict[str, Any]:
    """The ``__init__`` arguments a checkpoint's hyper-parameters give, as Lightning's ``load_from_checkpoint``: all
    of them through the argument the dict or Namespace came in (``hparams_name``), else those that are arguments
    of ``__init__`` (all of them when it takes ``**kwargs``)."""
    hparams = dict(saved.get("hparams") or {})
    params = inspect.signature(cls.__init__).parameters
    named = {p.name for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
    through = saved.get("hparams_name")
    if through in named:
        return {through: hparams}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return hparams
    return {name: value for name, value in hparams.items() if name in named}


class ManualOptimizer:
    """An optimizer as the Trainer hands it to the Module (Lightning's ``LightningOptimizer``): what
    ``self.optimizers()`` returns, and the ``optimizer`` of :meth:`Module.optimizer_step`. ``step`` goes through
    the Trainer's precision plugin; every other attribute is the optimizer's own (``.optimizer`` is the torch
    optimizer; unlike Lightning's wrapper it is not an instance of the optimizer's class)."""

    def __init__(self, optimizer: torch.optim.Optimizer, trainer: Trainer) -> None:
        self.optimizer = optimizer
        self._trainer = trainer

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update the weights through the precision plugin. In manual optimization the step events fire from the
        optimizer's own hooks. In automatic optimization (inside ``optimizer_step``), as in Lightning:
        ``closure`` runs first (the optimizer may call it, as ``LBFGS`` does), then ``before_optimizer_step``
        fires and :meth:`Module.configure_gradient_clipping` clips, then the update, then
        ``after_optimizer_step``. Returns what the optimizer's ``step`` returned."""
        trainer = self._trainer
        if trainer.module.automatic_optimization:
            from surge.engine.loops import step_with_closure

            return step_with_closure(trainer, self.optimizer, closure)
        return trainer.precision_plugin.optimizer_step(self.optimizer, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self.optimizer!r})"


def _unwrapped(optimizer: Any) -> Any:
    """The torch optimizer of what ``self.optimizers()`` handed out."""
    return optimizer.optimizer if isinstance(optimizer, ManualOptimizer) else optimizer


_warned: set[tuple[str, str]] = set()


_BAREBONES = "Trainer(barebones=True) turns logging off (as Lightning's does)"


def _warn_unattached(name: str, why: str) -> None:
    if (name, why) not in _warned:
        _warned.add((name, why))
        logger.warning("self.log({!r}) ignored: {}", name, why)


class DataModule:
    """The data of an experiment: download once, split, and hand out loaders per stage."""

    _log_hyperparams: bool = True
    _hparams_name: str | None = None
    trainer: Trainer | None = None
    """The Trainer running with this DataModule (set by each ``fit``/``validate``/``test``/``predict``), as
    Lightning's ``LightningDataModule.trainer``; ``None`` before."""

    def __init__(self) -> None:
        self.hparams: HParams = HParams()

    def prepare_data(self) -> None:
        """Download or write to disk. Runs on one process per node (``prepare_data_per_node``)."""

    def setup(self, stage: str) -> None:
        """Build datasets for ``stage`` ('fit', 'validate', 'test' or 'predict'); runs on every process."""

    def teardown(self, stage: str) -> None:
        pass

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no train_dataloader()")

    def val_dataloader(self) -> Any:
        raise NotImplementedError

    def test_dataloader(self) -> Any:
        raise NotImplementedError

    def predict_dataloader(self) -> Any:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    # The batch-transfer steps, as the Module's (see there); when both define one, the DataModule's is used, as
    # in Lightning (with a warning).
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """As :meth:`Module.transfer_batch_to_device`."""
        return move_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """As :meth:`Module.on_before_batch_transfer`."""
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """As :meth:`Module.on_after_batch_transfer`."""
        return batch

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None, logger: bool = True) -> None:
        """As :meth:`Module.save_hyperparameters`."""
        _save_hyperparameters(self, args, ignore, logger)


OPTIMIZATION_STEPS = ("optimizer_step", "optimizer_zero_grad", "backward", "configure_gradient_clipping")
"""The overridable steps of automatic optimization that make the loop take Lightning's shape (a closure handed to
``optimizer_step``); ``lr_scheduler_step`` is called where schedulers step, whatever the shape."""
BATCH_TRANSFER_STEPS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")

# What the loops pass to each step a Module may override: the parameters it is called with (positional, then
# keyword), as Lightning calls it, and the signature to write.
_STEP_CALLS: dict[str, tuple[int, tuple[str, ...], str]] = {
    "optimizer_step": (4, (), "epoch, batch_idx, optimizer, optimizer_closure=None"),
    "optimizer_zero_grad": (3, (), "epoch, batch_idx, optimizer"),
    "backward": (1, (), "loss, *args, **kwargs"),
    "lr_scheduler_step": (2, (), "scheduler, metric"),
    "configure_gradient_clipping": (
        1,
        ("gradient_clip_val", "gradient_clip_algorithm"),
        "optimizer, gradient_clip_val=None, gradient_clip_algorithm=None",
    ),
    "transfer_batch_to_device": (3, (), "batch, device, dataloader_idx"),
    "on_before_batch_transfer": (2, (), "batch, dataloader_idx"),
    "on_after_batch_transfer": (2, (), "batch, dataloader_idx"),
}


def overridden_steps(module: Module) -> frozenset[str]:
    """The names of the Module's overridable steps it overrides (in its class or on the instance)."""
    return frozenset(name for name in _STEP_CALLS if overrides(module, Module, name))


def check_step_signatures(module: Module, datamodule: DataModule | None, stage: str) -> None:
    """Refuse, before a run of ``stage``, an overridden step it calls that cannot take the arguments the loops
    pass it (Lightning 1.x's ``optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, ...)``, a misspelt
    keyword)."""
    names = _STEP_CALLS if stage == "fit" else BATCH_TRANSFER_STEPS
    for owner, base in ((module, Module), (datamodule, DataModule)):
        if owner is None:
            continue
        for name in names:
            count, keywords, wanted = _STEP_CALLS[name]
            if not hasattr(base, name) or not overrides(owner, base, name):
                continue
            method = getattr(owner, name)
            try:
                inspect.signature(method).bind(*[None] * count, **dict.fromkeys(keywords))
            except TypeError as exc:
                where = f"{type(owner).__name__}.{name}{_signature(method)}"
                raise SurgeError(
                    f"{where} cannot take the arguments the loop passes ({exc}); write it as "
                    f"`def {name}(self, {wanted})`, as in Lightning 2"
                ) from None
            except ValueError:  # no signature to read (a builtin): left to the call
                continue


def _signature(method: Any) -> str:
    """The parameters of ``method`` as written, without annotations: ``(batch, device)``."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return "(...)"
    return "(" + ", ".join(str(p.replace(annotation=p.empty)) for p in params) + ")"


def batch_transfer_steps(module: Module, datamodule: DataModule | None) -> dict[str, Callable[..., Any]]:
    """The batch-transfer steps a run calls, by name: those the DataModule or the Module overrides; the
    DataModule's when both do, as in Lightning (which warns, as here)."""
    found: dict[str, Callable[..., Any]] = {}
    for name in BATCH_TRANSFER_STEPS:
        in_module = overrides(module, Module, name)
        if datamodule is not None and overrides(datamodule, DataModule, name):
            if in_module:
                logger.warning(
                    "{} and {} both define {}: the DataModule's is used (as in Lightning); remove one of them",
                    type(module).__name__,
                    type(datamodule).__name__,
                    name,
                )
            found[name] = getattr(datamodule, name)
        elif in_module:
            found[name] = getattr(module, name)
    return found


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj`` defines ``name`` itself, in its class or on the instance (``model.training_step = fn``),
    rather than inheriting ``base``'s or a subclass's do-nothing default (:func:`default_hook`)."""
    if name in getattr(obj, "__dict__", ()):
        return True
    found = getattr(type(obj), name, None)
    return found is not getattr(base, name, None) and not is_default_hook(found)


def default_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn``, a base class's hook that does nothing, as not an override: a subclass of :class:`Module` that
    gives the hooks of another API as no-ops (so that an override may call ``super().on_fit_start()``, as
    Lightning's do) makes the loops call none of them, and costs nothing, until a user's class overrides one."""
    fn.__surge_default_hook__ = True  # type: ignore[attr-defined]
    return fn


def is_default_hook(method: object) -> bool:
    """Whether ``method`` (a function or a bound method) is marked by :func:`default_hook`."""
    return getattr(method, "__surge_default_hook__", False) is True


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return [t for value in batch.values() for t in _tensors(value)]
    if isinstance(batch, (list, tuple)):
        return [t for value in batch for t in _tensors(value)]
    return []


def _slice_time(batch: Any, start: int, stop: int) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[:, start:stop] if batch.dim() > 1 else batch
    if isinstance(batch, Mapping):
        return type(batch)({k: _slice_time(v, start, stop) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_slice_time(v, start, stop) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_slice_time(v, start, stop) for v in batch)
    return batch
