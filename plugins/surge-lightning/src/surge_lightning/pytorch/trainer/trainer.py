"""``lightning.pytorch.trainer.trainer``: :class:`Trainer`."""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Any

import surge

from surge_lightning import _argparse, inventory
from surge_lightning._lazy import refusing
from surge_lightning._rank import follow_rank

__all__ = ["Trainer"]

__getattr__ = refusing(__name__)  # the names Lightning has here and Surge does not serve: the inventory says why


class Trainer(surge.Trainer):
    """Lightning's ``Trainer``: a :class:`surge.Trainer` taking Lightning's arguments (and, with this distribution
    installed, Lightning 1.x's), with the behaviour only Lightning's API has:

    * **The default logger is Lightning's**: with ``logger`` left out (or ``None``/``True``), a ``TensorBoardLogger``
      writing ``<default_root_dir>/lightning_logs/version_N`` when tensorboard is importable and surge-tensorboard is
      installed, else a ``CSVLogger`` there (its ``.experiment`` exists), as Lightning chooses; not under
      ``fast_dev_run`` or ``barebones``, where Lightning logs nothing either. ``surge.Trainer`` keeps Surge's default
      (the CSV plugin's ``surge_runs/version_N``).
    * **A second ``fit`` on a Trainer whose fit finished** returns at once with a warning that says nothing ran and
      why, as Lightning's fit loop does (``surge.Trainer`` refuses it, saying how to train further).
    * ``lightning_utilities``' ``rank_zero_only.rank`` follows the Trainer's global rank, as ``import lightning``
      sets it (torchmetrics and many projects' loggers read it).
    * **Lightning 1.x's argparse helpers** (Lightning 2 removed them): :meth:`add_argparse_args`,
      :meth:`from_argparse_args`, :meth:`parse_argparser`.
    * **What Surge does not serve says so** (the inventory, docs/porting.md): reading or assigning a member
      Lightning's Trainer has and this one does not (``trainer.fit_loop``, ``trainer.limit_val_batches``) raises an
      ``AttributeError`` saying why and what to use, and
      each run refuses, before it starts, a Module or DataModule overriding a Lightning hook Surge would never call
      (a :class:`surge.ConfigError` naming the hook, why, and what to use instead).
    """

    @classmethod
    def add_argparse_args(cls, parent_parser: Any, **kwargs: Any) -> Any:
        """Lightning 1.x: add ``--<argument>`` for every Trainer argument (1.x's too) to ``parent_parser``."""
        return _argparse.add_argparse_args(parent_parser, **kwargs)

    @classmethod
    def parse_argparser(cls, arg_parser: Any) -> Any:
        """Lightning 1.x: parse the command line with ``arg_parser`` (values as :meth:`add_argparse_args` reads them)."""
        return arg_parser.parse_args()

    @classmethod
    def from_argparse_args(cls, args: Any, **kwargs: Any) -> Trainer:
        """Lightning 1.x: a Trainer from a parsed namespace (or a parser, or a dict): every Trainer argument in it
        that is not at its default, then ``kwargs``; other entries (the model's) are left out."""
        return cls(**_argparse.arguments_of(args, **kwargs))

    def __init__(self, **options: Any) -> None:
        if options.get("logger", None) in (None, True) and not _logs_nothing(options):
            options["logger"] = _default_logger(options.get("default_root_dir"))
        super().__init__(**options)
        follow_rank(self.global_rank)
        self._fit_finished: str | None = None  # why the last fit finished, while no later fit ran
        self._idle_checkpoint: Any = None  # fast_dev_run's ModelCheckpoint: present, as Lightning's, saving nothing

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """As Lightning: under ``fast_dev_run`` (which saves no checkpoint) the default ``ModelCheckpoint`` is still
        there, idle (``best_model_path`` empty), unless ``enable_checkpointing=False``."""
        found = super().checkpoint_callbacks
        if found or not (self.fast_dev_run and self.config.enable_checkpointing):
            return found
        if self._idle_checkpoint is None:
            from surge_lightning.pytorch.callbacks import ModelCheckpoint

            self._idle_checkpoint = ModelCheckpoint()
        return [self._idle_checkpoint]

    @property
    def val_dataloaders(self) -> Any:
        """As Lightning's: the loader itself when the run has one, the list when several, ``None`` when none."""
        return _lightning_shape(super().val_dataloaders)

    @property
    def test_dataloaders(self) -> Any:
        """As Lightning's: the loader itself when the test run has one, the list when several, ``None`` when none."""
        return _lightning_shape(super().test_dataloaders)

    @property
    def predict_dataloaders(self) -> Any:
        """As Lightning's: the loader itself when the predict run has one, the list when several, ``None`` when
        none."""
        return _lightning_shape(super().predict_dataloaders)

    def fit(  # type: ignore[override]  # Lightning's arguments and their order
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        ckpt_path: str | None = None,
        weights_only: bool | None = None,
        trusted: bool = False,
    ) -> None:
        """``surge.Trainer.fit`` with Lightning 2.6's ``weights_only``: ``False`` reads ``ckpt_path`` with pickled
        code allowed (Surge's ``trusted=True``), ``True`` or ``None`` (the default) with the safe loader, Surge's
        default; the other arguments as Lightning's."""
        trusted = _trusted("fit", weights_only, trusted)
        _refuse_overrides("fit", (model, train_dataloaders, val_dataloaders, datamodule))
        if self._fit_finished is not None and ckpt_path is None:
            warnings.warn(
                f"Trainer.fit: nothing ran. This Trainer's fit already finished at epoch {self.current_epoch}, global "
                f"step {self.global_step} ({self._fit_finished}), so Lightning's fit loop returns at once. To train "
                "further, build a Trainer with higher max_epochs/max_steps and call fit(model, ckpt_path=...) with a "
                "checkpoint of this one (trainer.save_checkpoint(path))",
                UserWarning,
                stacklevel=2,
            )
            self._metrics.reset()  # Lightning's fit starts by emptying the metric dicts, then finds nothing to run
            return
        follow_rank(self.global_rank)
        if ckpt_path is not None:
            _warn_restore_order(datamodule)
        super().fit(model, train_dataloaders, val_dataloaders, datamodule, ckpt_path, trusted)
        if self.state.status == "finished":
            self._fit_finished = self.state.stop_reason or (
                f"max_steps={self.max_steps} reached"
                if 0 <= self.max_steps <= self.global_step
                else f"max_epochs={self.max_epochs} reached"
            )

    def _setup(self, stage: str, loaders: dict[str, Any]) -> None:
        super()._setup(stage, loaders)
        if stage == "fit":
            _warn_epoch_schedulers(self)

    def validate(  # type: ignore[override]  # Lightning's arguments and their order
        self,
        model: Any = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
        trusted: bool = False,
    ) -> list[dict[str, float]]:
        """``surge.Trainer.validate`` with Lightning's order of arguments and its ``weights_only`` (as in
        :meth:`fit`)."""
        trusted = _trusted("validate", weights_only, trusted)
        _refuse_overrides("validate", (model, dataloaders, datamodule))
        return super().validate(model, dataloaders, datamodule, ckpt_path, trusted, verbose)

    def test(  # type: ignore[override]  # Lightning's arguments and their order
        self,
        model: Any = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
        trusted: bool = False,
    ) -> list[dict[str, float]]:
        """``surge.Trainer.test`` with Lightning's order of arguments and its ``weights_only`` (as in :meth:`fit`)."""
        trusted = _trusted("test", weights_only, trusted)
        _refuse_overrides("test", (model, dataloaders, datamodule))
        return super().test(model, dataloaders, datamodule, ckpt_path, trusted, verbose)

    def predict(  # type: ignore[override]  # Lightning's arguments and their order
        self,
        model: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        return_predictions: bool | None = None,
        ckpt_path: str | None = None,
        weights_only: bool | None = None,
        trusted: bool = False,
    ) -> list[Any] | None:
        """``surge.Trainer.predict`` with Lightning's arguments: ``weights_only`` as in :meth:`fit`;
        ``return_predictions=False`` returns ``None`` (a ``BasePredictionWriter`` has written them), ``None`` or
        ``True`` the predictions."""
        trusted = _trusted("predict", weights_only, trusted)
        _refuse_overrides("predict", (model, dataloaders, datamodule))
        return super().predict(model, dataloaders, datamodule, ckpt_path, trusted, return_predictions is not False)


inventory.refuse_members(Trainer, "lightning.pytorch.Trainer", keep=("state",))  # state: Surge's own (mapped)


def _trusted(stage: str, weights_only: bool | None, trusted: bool) -> bool:
    """Surge's ``trusted`` for Lightning's ``weights_only``: a checkpoint may hold pickled code only when
    ``weights_only=False`` (or ``trusted=True``); the two contradicting each other is refused."""
    if weights_only is not None and not isinstance(weights_only, bool):
        raise surge.ConfigError([(f"trainer.{stage}.weights_only", f"got {weights_only!r}; use True, False or None")])
    if weights_only and trusted:
        raise surge.ConfigError(
            [
                (
                    f"trainer.{stage}.weights_only",
                    "weights_only=True (load tensors only) contradicts trusted=True (allow pickled code): pass one",
                )
            ]
        )
    return trusted or weights_only is False


def _refuse_overrides(stage: str, given: tuple[Any, ...]) -> None:
    """The Lightning hooks that a Module or DataModule given to a run overrides and Surge does not call."""
    from surge_lightning.pytorch.core.datamodule import LightningDataModule
    from surge_lightning.pytorch.core.module import LightningModule

    for obj in given:
        if isinstance(obj, surge.Module):
            base: type = LightningModule if isinstance(obj, LightningModule) else surge.Module
            inventory.check_overrides(type(obj), "lightning.pytorch.LightningModule", base, f"trainer.{stage}")
        elif isinstance(obj, surge.DataModule):
            base = LightningDataModule if isinstance(obj, LightningDataModule) else surge.DataModule
            inventory.check_overrides(type(obj), "lightning.pytorch.LightningDataModule", base, f"trainer.{stage}")


def _lightning_shape(loaders: list[Any]) -> Any:
    """Lightning's shape of a stage's loaders (its ``CombinedLoader.iterables``): one loader is the loader itself,
    none is ``None``; several stay a list (loaders given in a dict too: Surge keeps them in order, not by name)."""
    if not loaders:
        return None
    return loaders[0] if len(loaders) == 1 else loaders


_WARNED: set[str] = set()
"""The differences from Lightning already warned about in this process (each is said once)."""

_LATE_RATE_HOOKS = (
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_train_epoch_end",
)
"""The hooks that run between an epoch's last optimizer step and its end: under Lightning they see the learning
rate an epoch-interval scheduler set for the next epoch, under Surge the epoch's own."""


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def _warn_epoch_schedulers(trainer: Trainer) -> None:
    """Say, once, that an epoch-interval scheduler steps later than Lightning's when a hook that runs in between
    (the Module's, or a Callback's) may read the learning rate: the training itself is the same."""
    from surge_lightning.pytorch.callbacks.callback import Callback

    epoch_wise = [c for c in trainer.lr_scheduler_configs if c.interval == "epoch" and c.monitor is None]
    if not epoch_wise or not trainer.module.automatic_optimization:
        return
    hooks = [
        f"{type(trainer.module).__name__}.{n}"
        for n in _LATE_RATE_HOOKS
        if surge.overrides(trainer.module, surge.Module, n)
    ]
    for callback in trainer.callbacks:
        if isinstance(callback, Callback):
            hooks += [
                f"{type(callback).__name__}.{n}" for n in _LATE_RATE_HOOKS if surge.overrides(callback, Callback, n)
            ]
    if hooks:
        _warn_once(
            "epoch schedulers",
            f"{type(epoch_wise[0].scheduler).__name__} (interval 'epoch') steps after on_train_epoch_end under Surge; "
            "Lightning steps it right after the epoch's last optimizer step, so "
            f"{', '.join(hooks)} read(s) the epoch's own learning rate here where Lightning's read the next epoch's "
            "(training is the same). Read the rate in on_train_epoch_start, where both agree (docs/porting.md, "
            "Hook order)",
        )


def _warn_restore_order(datamodule: Any) -> None:
    """Say, once, that a resumed fit restores a LightningDataModule's state after its loaders are built."""
    if isinstance(datamodule, surge.DataModule) and surge.overrides(datamodule, surge.DataModule, "load_state_dict"):
        _warn_once(
            "restore order",
            f"a resumed fit calls {type(datamodule).__name__}.load_state_dict after train_dataloader/val_dataloader "
            "and configure_optimizers, and the Module's on_load_checkpoint after it and the callbacks' "
            "load_state_dict; Lightning calls the Module's on_load_checkpoint, then the DataModule's load_state_dict, "
            "then the callbacks', all before the loaders are built. Build what depends on the restored state in the "
            "loader itself (its sampler or dataset reading the DataModule when iterated), not in train_dataloader "
            "(docs/porting.md, Hook order)",
        )


def _logs_nothing(options: dict[str, Any]) -> bool:
    """Lightning replaces its loggers by a dummy under ``fast_dev_run`` and has none under ``barebones``; an
    environment default (``SURGE_TRAINER_LOGGER``) is the user's choice."""
    return bool(options.get("fast_dev_run")) or bool(options.get("barebones")) or "SURGE_TRAINER_LOGGER" in os.environ


def _default_logger(default_root_dir: Any) -> Any:
    """Lightning's default logger: ``TensorBoardLogger(save_dir=default_root_dir)`` when TensorBoard can write, else
    ``CSVLogger(save_dir=default_root_dir)``; both write ``lightning_logs/version_N`` there."""
    save_dir = os.fspath(default_root_dir) if default_root_dir is not None else os.getcwd()
    tensorboard = any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX"))
    if tensorboard and importlib.util.find_spec("surge_tensorboard") is not None:
        from surge_lightning.pytorch.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(save_dir=save_dir)
    from surge_lightning.pytorch.loggers.csv_logs import CSVLogger

    return CSVLogger(save_dir=save_dir)
