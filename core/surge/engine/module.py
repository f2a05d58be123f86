"""``surge.Module`` and ``surge.DataModule``: the user's model and data, with Lightning's names."""

from __future__ import annotations

import contextlib
import inspect
import sys
from argparse import Namespace
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from loguru import logger
from torch import nn

from surge.engine._metrics import ReduceFx
from surge.errors import SurgeError

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


def _capture_init_args(obj: object, ignore: Sequence[str], frame_depth: int = 2) -> HParams:
    frame = inspect.currentframe()
    for _ in range(frame_depth):
        assert frame is not None
        frame = frame.f_back
    assert frame is not None
    params = inspect.signature(type(obj).__init__).parameters
    local = frame.f_locals
    found = HParams()
    for name, param in params.items():
        if name == "self" or name in ignore:
            continue
        if param.kind == param.VAR_KEYWORD:
            found.update(local.get(name, {}))
        elif param.kind != param.VAR_POSITIONAL and name in local:
            found[name] = local[name]
    return found


def _save_hyperparameters(
    obj: Module | DataModule, args: tuple[Any, ...], ignore: Sequence[str] | str | None, log: bool
) -> None:
    """``save_hyperparameters`` of a Module or DataModule, as Lightning's; called from their ``__init__``, which
    is three frames up from :func:`_capture_init_args`."""
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
    captured = _capture_init_args(obj, ignored, frame_depth=3)
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
    """

    automatic_optimization: bool = True
    """Set to ``False`` to call ``self.optimizers()``, ``self.manual_backward`` and ``opt.step()`` yourself."""

    truncated_bptt_steps: int = 0
    """Truncated back-propagation through time (the seed's ``truncated_bptt_steps``): when > 0, each training
    batch is cut by :meth:`tbptt_split_batch` into pieces of this many time steps, and each piece is one
    training step with its own backward and optimizer step: ``training_step(split, batch_idx, hiddens)``,
    where ``hiddens`` is what the previous piece returned as ``{"loss": ..., "hiddens": ...}`` (detached;
    ``None`` for the first piece of a batch)."""

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
        weighted by batch size). Values stay on their device; nothing here waits for the device.

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

    def manual_backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` through the precision plugin and with the backward events fired."""
        self.trainer._backward(loss)

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
        dict or ``argparse.Namespace`` (``save_hyperparameters(config)``), less the names in ``ignore``.
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
        leave it out with ``ignore``."""
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
    """An optimizer as manual optimization hands it out (``self.optimizers()``): ``step`` goes through the
    Trainer's precision plugin; every other attribute is the optimizer's own."""

    def __init__(self, optimizer: torch.optim.Optimizer, trainer: Trainer) -> None:
        self.optimizer = optimizer
        self._trainer = trainer

    def step(self, closure: Any = None) -> Any:
        return self._trainer.precision_plugin.optimizer_step(self.optimizer, closure)

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

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None, logger: bool = True) -> None:
        """As :meth:`Module.save_hyperparameters`."""
        _save_hyperparameters(self, args, ignore, logger)


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj`` defines ``name`` itself, in its class or on the instance (``model.training_step = fn``),
    rather than inheriting ``base``'s."""
    return name in getattr(obj, "__dict__", ()) or getattr(type(obj), name, None) is not getattr(base, name, None)


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
