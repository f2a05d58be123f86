"""``Tuner(trainer)``: the learning-rate and batch-size finders, run as short trial fits that leave no trace."""

from __future__ import annotations

from typing import Any

import surge
from pydantic import BaseModel, ValidationError
from surge import logger

from surge_tuner._batch_size import Outcome, ScaleBatchSizeSettings, free_memory, is_oom_error, search
from surge_tuner._lr_find import LossRecorder, LRFinder, LRFindSettings, Sweep, schedule
from surge_tuner._trial import (
    Snapshot,
    attribute_owners,
    read_attribute,
    set_attribute,
    trial_root,
    trial_trainer,
)


def _validate(model: type[BaseModel], values: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path = ".".join([where, *(str(part) for part in error["loc"])])
            shown = f"got {error['input']!r}: " if error["type"] != "extra_forbidden" else "unknown argument; "
            problems.append((path, shown + error["msg"]))
        raise surge.ConfigError(problems, f"{where} arguments") from None


class Tuner:
    """Tunes hyper-parameters of a :class:`surge.Module` before ``trainer.fit``.

    Each finder runs short trial fits in a separate Trainer with ``trainer``'s devices, strategy and
    precision (and its accumulation, clipping and batch limits), without loggers, checkpoints or other
    plugins, in a temporary directory that is deleted afterwards. The model's weights, gradients and modes,
    its optimizers' states, the DataModule's state and the RNG states are restored afterwards; ``trainer``
    itself is not run. Only the tuned hyper-parameter changes.
    """

    def __init__(self, trainer: surge.Trainer) -> None:
        if not isinstance(trainer, surge.Trainer):
            raise surge.SurgeError(f"Tuner(trainer) needs a surge.Trainer, got {type(trainer).__name__}")
        self.trainer = trainer

    def lr_find(
        self,
        model: surge.Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: surge.DataModule | None = None,
        *,
        dataloaders: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder:
        """Train ``num_training`` steps with the learning rate growing from ``min_lr`` to ``max_lr``
        (``mode="exponential"`` or ``"linear"``), stopping early once the smoothed loss exceeds
        ``early_stop_threshold`` times its best. Every optimizer step uses the swept rate, in every
        parameter group; the model's own schedulers are left out of the trial, and validation is skipped.

        With ``update_attr``, the suggestion is set on ``attr_name``, or else on ``lr`` or
        ``learning_rate``: wherever the model has it as an attribute or ``hparams`` entry, and on the
        DataModule if it has it. Returns the :class:`LRFinder` (``results``, ``suggestion()``, ``plot()``).
        """
        datamodule = _lightning_data("lr_find", train_dataloaders, dataloaders, datamodule, method)
        if datamodule is train_dataloaders:
            train_dataloaders = None
        settings: LRFindSettings = _validate(
            LRFindSettings,
            {
                "min_lr": min_lr,
                "max_lr": max_lr,
                "num_training": num_training,
                "mode": mode,
                "early_stop_threshold": early_stop_threshold,
                "update_attr": update_attr,
                "attr_name": attr_name,
            },
            "Tuner.lr_find",
        )
        _check_model(model, "lr_find")
        if not model.automatic_optimization:
            raise surge.SurgeError(
                f"Tuner.lr_find: {type(model).__name__} uses manual optimization; the finder sets the learning "
                "rate through a per-step scheduler, which only automatic optimization steps"
            )
        owners: list[tuple[object, str]] = []
        name = settings.attr_name
        if settings.update_attr:
            candidates = [name] if name else ["lr", "learning_rate"]
            for name in candidates:
                owners = attribute_owners(model, datamodule, name)
                if owners:
                    break
            if not owners:
                raise surge.SurgeError(
                    f"Tuner.lr_find(update_attr=True): {type(model).__name__} has no {' or '.join(map(repr, candidates))} "
                    "attribute or hparams entry to set the suggestion on; add one that configure_optimizers reads, "
                    "pass attr_name=..., or update_attr=False"
                )

        lrs = schedule(settings)
        recorder = LossRecorder(lrs, settings.early_stop_threshold)
        snapshot = Snapshot(model, datamodule)
        try:
            snapshot.route_optimizers(lambda optimizer: Sweep(optimizer, lrs))
            with trial_root() as root:
                trial = trial_trainer(
                    self.trainer,
                    root,
                    [recorder],
                    max_steps=settings.num_training,
                    limit_train_batches=self.trainer.config.limit_train_batches,
                    overfit_batches=self.trainer.config.overfit_batches,
                    limit_val_batches=0,
                    num_sanity_val_steps=0,
                )
                trial.fit(model, train_dataloaders, val_dataloaders, datamodule)
        finally:
            snapshot.restore()
        if trial.interrupted:
            raise KeyboardInterrupt("Tuner.lr_find was interrupted; the model is as it was")

        finder = LRFinder(settings.mode, settings.min_lr, settings.max_lr, settings.num_training, recorder.results)
        if settings.update_attr:
            lr = finder.suggestion()
            if lr is not None:
                set_attribute(owners, name, lr)
                logger.info("lr finder: set {} = {:.3g} (steps recorded: {})", name, lr, len(finder.results["lr"]))
        return finder

    def scale_batch_size(
        self,
        model: surge.Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: surge.DataModule | None = None,
        *,
        dataloaders: Any = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> int:
        """Find the largest batch size whose trial fit (``steps_per_trial`` training steps, and as many
        validation batches first) does not run out of memory, set it on ``batch_arg_name`` and return it.

        ``mode="power"`` doubles from ``init_val`` until a trial fails; ``"binsearch"`` then bisects between
        the last size that fit and the first that failed. ``batch_arg_name`` is looked up, and set, as an
        attribute of the model, an entry of ``model.hparams`` and an attribute of the DataModule, wherever
        it is; the loaders must read it: pass a ``datamodule`` or define ``train_dataloader()`` on the
        model, not ``train_dataloaders=``.
        """
        datamodule = _lightning_data("scale_batch_size", train_dataloaders, dataloaders, datamodule, method)
        if datamodule is train_dataloaders:
            train_dataloaders = None
        settings: ScaleBatchSizeSettings = _validate(
            ScaleBatchSizeSettings,
            {
                "mode": mode,
                "steps_per_trial": steps_per_trial,
                "init_val": init_val,
                "max_trials": max_trials,
                "batch_arg_name": batch_arg_name,
            },
            "Tuner.scale_batch_size",
        )
        _check_model(model, "scale_batch_size")
        if train_dataloaders is not None:
            raise surge.SurgeError(
                "Tuner.scale_batch_size rebuilds the training loader at every batch size, so it cannot use "
                "loaders passed as train_dataloaders=; pass a datamodule, or define train_dataloader() on the "
                f"model, reading its `{settings.batch_arg_name}`"
            )
        name = settings.batch_arg_name
        owners = attribute_owners(model, datamodule, name)
        if not owners:
            where = f"{type(model).__name__}" + (f" or {type(datamodule).__name__}" if datamodule is not None else "")
            raise surge.SurgeError(
                f"Tuner.scale_batch_size: {where} has no `{name}` attribute or hparams entry to scale; add one that "
                "the loaders read, or pass batch_arg_name=..."
            )
        original = read_attribute(owners, name)
        whole: list[int] = []  # the training set's size, once one batch holds all of it

        def try_size(size: int) -> Outcome:
            set_attribute(owners, name, size)
            snapshot = Snapshot(model, datamodule)
            try:
                snapshot.route_optimizers()
                with trial_root() as root:
                    trial = trial_trainer(
                        self.trainer,
                        root,
                        [],
                        max_steps=settings.steps_per_trial,
                        limit_train_batches=None,  # the loader's full length tells when one batch holds all data
                        overfit_batches=0.0,
                        limit_val_batches=self.trainer.config.limit_val_batches,
                        num_sanity_val_steps=settings.steps_per_trial,
                    )
                    trial.fit(model, None, val_dataloaders, datamodule)
            except Exception as exc:
                if not is_oom_error(exc):
                    raise
                out_of_memory = True
            else:
                out_of_memory = False
            finally:
                snapshot.restore()
            if out_of_memory:  # out of the except block: the error's frames, and their tensors, are gone now
                free_memory()
                logger.info("batch size finder: {} = {} runs out of memory", name, size)
                return "out_of_memory"
            if trial.interrupted:
                raise KeyboardInterrupt("Tuner.scale_batch_size was interrupted; the model is as it was")
            logger.info("batch size finder: {} = {} fits", name, size)
            batches = trial.num_training_batches
            if batches == 1:
                whole[:] = [n for n in [_samples(trial.train_dataloader)] if n is not None]
            return "too_large" if batches == 0 else "fits_all" if batches == 1 else "fits"

        try:
            found = search(try_size, settings.mode, settings.init_val, settings.max_trials)
        except BaseException:
            set_attribute(owners, name, original)
            raise
        if whole and found > whole[0]:  # a batch larger than the training set holds nothing more
            logger.info("batch size finder: {} = {} holds the whole training set of {}", name, found, whole[0])
            found = whole[0]
        set_attribute(owners, name, found)
        logger.info("batch size finder: set {} = {}", name, found)
        return found


def _samples(loader: Any) -> int | None:
    """How many samples an epoch of ``loader`` draws (its sampler's length, a rank's share under ddp)."""
    try:
        return len(loader.sampler)
    except (AttributeError, TypeError):  # a combined loader, an iterable dataset
        return None


def _lightning_data(
    finder: str, train_dataloaders: Any, dataloaders: Any, datamodule: surge.DataModule | None, method: str
) -> surge.DataModule | None:
    """Lightning's ways to pass data to a finder: a DataModule where the training loaders go (``lr_find(model,
    dm)``); ``dataloaders``/``method`` for another stage than ``fit``, which the finders here do not search."""
    if method != "fit" or dataloaders is not None:
        raise surge.SurgeError(
            f"Tuner.{finder}(method={method!r}, dataloaders=...): the finders here run trial fits only; call "
            f"{finder} with the training data (train_dataloaders=, a datamodule, or the model's train_dataloader())"
        )
    if isinstance(train_dataloaders, surge.DataModule):
        if datamodule is not None:
            raise surge.SurgeError(
                f"Tuner.{finder}() got two DataModules (in train_dataloaders and datamodule); pass one"
            )
        return train_dataloaders
    return datamodule


def _check_model(model: Any, finder: str) -> None:
    if not isinstance(model, surge.Module):
        raise surge.SurgeError(f"Tuner.{finder}(model=...) got {type(model).__name__}; pass a surge.Module")
