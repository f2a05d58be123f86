"""What a Trainer writes into a checkpoint and restores from one; the file format is :mod:`surge.checkpoint`'s.

A checkpoint records a position the loop can continue from exactly (:mod:`surge.engine._resume`), the
states of the optimizers, schedulers, precision, stateful plugins and datamodule, and the metric store.
``ckpt_path`` aliases (``"last"``, ``"best"``) are resolved here by asking the active plugins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from surge import events as ev
from surge._logging import logger
from surge._plain import plain_hparams, recorded_hparams
from surge.checkpoint import (
    ALIASES,
    FORMAT_VERSION,
    _first_line,
    experiment_diff,
    experiment_identity,
    sharded_message,
    snapshot,
)
from surge.engine import _resume
from surge.errors import CheckpointError, SurgeError
from surge.events.bus import Subscriber, Tier

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer


# -- what a Trainer writes and restores --------------------------------------------------------------


def dump(trainer: Trainer, weights_only: bool, fire: bool = True) -> dict[str, Any]:
    """``Trainer.dump_checkpoint``: everything needed to resume, as plain tensors and containers.

    After a stop cut an epoch short, the run's resumable state is the one recorded at the stop
    (:func:`_record_stop`), not what the cut-short epoch's end changed since."""
    state, module = trainer.state, trainer.module
    recorded = trainer._stop_record
    checkpoint: dict[str, Any] = {
        "surge_checkpoint_version": FORMAT_VERSION,
        "epoch": recorded["epoch"] if recorded else state.current_epoch,
        "global_step": state.global_step,
        "state_dict": trainer.strategy.module_state_dict(module),
        "hparams": plain_hparams(recorded_hparams(module)),
        "experiment": experiment_identity(module, trainer.datamodule),
        "plugin_set": trainer.plugin_set(),
    }
    if module._hparams_name is not None:  # save_hyperparameters(config): the __init__ argument it came in
        checkpoint["hparams_name"] = module._hparams_name
    if not weights_only:
        checkpoint.update(recorded["resume"] if recorded else resume_state(trainer))
        if not checkpoint["accumulated_grads"]:
            del checkpoint["accumulated_grads"]
        if recorded and _changed_since(recorded["versions"], module):
            note = (
                "the Module's weights changed after the stop that ended the fit (a train_end handler, such as EMA's "
                "apply_at_end, wrote into them), so this checkpoint holds the changed weights beside the states of "
                "the stop: resuming it does not continue the original run exactly. Save from a handler before the "
                "change (train_epoch_end), or switch the handler off for runs you mean to resume"
            )
            checkpoint["loops"] = {**checkpoint["loops"], "inexact": note}
            logger.warning("checkpoint: {}", note)
    if fire and trainer._bus.before_checkpoint_save:
        trainer._bus.before_checkpoint_save(ev.BeforeCheckpointSave(trainer.view, checkpoint))
    return checkpoint


def resume_state(trainer: Trainer) -> dict[str, Any]:
    """What a checkpoint holds beyond the weights: optimizer, scheduler, precision, plugin, datamodule and
    metric states, and where the run stands (:func:`surge.engine._resume.resumable_state`)."""
    module = trainer.module
    resume: dict[str, Any] = {
        "optimizer_states": [trainer.strategy.optimizer_state_dict(module, o) for o in trainer.optimizers],
        "lr_schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
        "precision": trainer.precision_plugin.state_dict(),
        "plugins": {
            _state_key(s): s.obj.state_dict()  # type: ignore[attr-defined]
            for s in trainer._plugin_subscribers
            if _stateful(s.obj) and s.obj is not trainer.precision_plugin  # that one has its own entry
        },
        "metrics": trainer._metrics.state_dict(),
    }
    if trainer.datamodule is not None:
        resume["datamodule"] = trainer.datamodule.state_dict()
    resume.update(_resume.resumable_state(trainer))
    return resume


def record_stop(trainer: Trainer) -> dict[str, Any]:
    """The resumable state at a stop that cuts an epoch short, kept for the checkpoints written after it.

    Copied (:func:`snapshot`), since the cut-short epoch's end still runs and changes scheduler, metric
    and plugin states; the optimizer states are kept by reference (no step follows a stop), so the cost
    is one copy of the small states, not of the model."""
    resume = resume_state(trainer)
    optimizer_states = resume.pop("optimizer_states")
    resume = snapshot(resume)
    resume["optimizer_states"] = [
        {**opt_state, "param_groups": snapshot(opt_state["param_groups"])} if "param_groups" in opt_state else opt_state
        for opt_state in optimizer_states
    ]
    versions = [t._version for t in trainer.module.state_dict(keep_vars=True).values()]
    return {"epoch": trainer.state.current_epoch, "resume": resume, "versions": versions}


def _changed_since(versions: list[int], module: torch.nn.Module) -> bool:
    """Whether a weight or buffer was written in place since ``versions`` were read (torch counts each
    in-place write of a tensor in its version counter): cheap, and no copy of the weights is kept."""
    now = [t._version for t in module.state_dict(keep_vars=True).values()]
    return now != versions


def restore(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> None:
    """``Trainer.restore_checkpoint`` after the file is read: weights always; in ``fit`` also optimizers,
    schedulers, precision, plugin and datamodule states and the loop's position (the loops continue
    from it)."""
    with _must_fit(url):
        # A resume continues the checkpoint's run, so its plugin set matters; validate/test/predict only take the
        # weights. A checkpoint of another format records no plugin set.
        if trainer.state.stage == "fit" and "converted_from" not in checkpoint:
            _warn_plugin_set_diff(url, checkpoint.get("plugin_set", []), trainer.plugin_set())
        _warn_experiment_diff(trainer, url, checkpoint.get("experiment"))
        sharded = sharded_message(url, checkpoint)
        if sharded is not None:
            raise CheckpointError(sharded)
        if "state_dict" not in checkpoint:
            raise CheckpointError(f"checkpoint {url} is not a Surge checkpoint (it has no 'state_dict' entry)")
        if trainer.state.stage == "fit" and "loops" not in checkpoint:
            raise CheckpointError(
                f"checkpoint {url} holds weights only (saved with weights_only=True or save_weights_only=True): it has "
                "no optimizer, scheduler, loop or RNG state, so fit(ckpt_path=...) cannot continue its run. To start a "
                "new run from these weights, load them first (model = MyModule.load_from_checkpoint(path), or "
                "model.load_state_dict(surge.checkpoint.load(path)['state_dict'])) and call fit without ckpt_path"
            )
    bus = trainer._bus
    if bus.before_checkpoint_load:
        bus.before_checkpoint_load(ev.BeforeCheckpointLoad(trainer.view, checkpoint))
    with _must_fit(url):
        _restore_states(trainer, checkpoint, url)
    if "converted_from" in checkpoint:
        _warn_not_carried(trainer, checkpoint, url)
    if bus.after_checkpoint_load:
        bus.after_checkpoint_load(ev.AfterCheckpointLoad(trainer.view, checkpoint))


@contextlib.contextmanager
def _must_fit(url: str) -> Iterator[None]:
    """A well-formed file whose contents do not fit this run (another model, or damage a recomputed marker
    hides) fails as a ``CheckpointError`` naming it, not as whatever restoring tripped over."""
    try:
        yield
    except SurgeError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {url} does not fit this run: {type(exc).__name__}: {_first_line(exc)}. Restore it with the "
            "model, optimizers and plugins that wrote it"
        ) from exc


def _restore_states(trainer: Trainer, checkpoint: dict[str, Any], url: str) -> None:
    trainer.strategy.load_module_state_dict(trainer.module, checkpoint["state_dict"])
    loops = checkpoint.get("loops")
    if loops and trainer.state.stage == "fit":
        optimizer_states = checkpoint.get("optimizer_states", [])
        scheduler_states = checkpoint.get("lr_schedulers", [])
        if len(optimizer_states) != len(trainer.optimizers) or len(scheduler_states) != len(
            trainer.lr_scheduler_configs
        ):
            raise SurgeError(
                f"checkpoint {url} holds {len(optimizer_states)} optimizer and {len(scheduler_states)} scheduler "
                f"states, but configure_optimizers returned {len(trainer.optimizers)} and "
                f"{len(trainer.lr_scheduler_configs)}; resume with the configuration that wrote it"
            )
        for opt, opt_state in zip(trainer.optimizers, optimizer_states, strict=True):
            trainer.strategy.load_optimizer_state_dict(trainer.module, opt, opt_state)
            # It stepped before the save; without this torch warns when a scheduler steps before it does again.
            opt._opt_called = checkpoint.get("global_step", 0) > 0  # type: ignore[attr-defined]
        for config, sched_state in zip(trainer.lr_scheduler_configs, scheduler_states, strict=True):
            config.scheduler.load_state_dict(sched_state)
        trainer.precision_plugin.load_state_dict(checkpoint.get("precision", {}))
        trainer._metrics.load_state_dict(checkpoint.get("metrics", {}), trainer.strategy.root_device)
        _warn_callable_reduce_fx(checkpoint.get("metrics", {}), url)
        plugin_states = checkpoint.get("plugins", {})
        for sub in trainer._plugin_subscribers:
            key = _saved_state_key(trainer, sub, plugin_states)
            if key is not None:
                sub.obj.load_state_dict(plugin_states[key])  # type: ignore[attr-defined]
        if trainer.datamodule is not None and "datamodule" in checkpoint:
            trainer.datamodule.load_state_dict(checkpoint["datamodule"])
        trainer._resume_point = _resume.restore_position(trainer, checkpoint, url)
        trainer._bus.resumed_at(trainer.state.global_step)  # step filters count on from the checkpoint


def _warn_callable_reduce_fx(metrics: Mapping[str, Any], url: str) -> None:
    """Values of the training epoch logged with a callable ``reduce_fx`` before the save: a checkpoint cannot hold
    the callable, so the resumed run reduces them with the one its next ``self.log`` of that name passes, and with
    ``"mean"`` if no such call follows in the epoch."""
    names = sorted({str(entry.get("name")) for entry in metrics.get("epoch", []) if entry.get("reduce_fx") is None})
    if names:
        logger.warning(
            "resuming from {}: the training epoch's {} logged with a callable reduce_fx before the save, which a "
            "checkpoint cannot hold; the resumed run reduces {} with the callable its next self.log of that name "
            "passes, and with 'mean' if none follows in this epoch, where the original run used the callable. Log "
            "with reduce_fx='mean'/'sum'/'max'/'min', or save at epoch boundaries, where that matters",
            url,
            f"values of {', '.join(repr(n) for n in names)} were",
            "them" if len(names) > 1 else "it",
        )


def resolve(trainer: Trainer, ckpt_path: str, stage: str) -> str | None:
    """The checkpoint URL ``ckpt_path`` names. An alias (``"last"``, ``"best"``) is answered by the first
    active plugin, in bus order, whose ``checkpoint_path`` handler returns a path. ``None``: ``fit``
    was asked for ``"last"`` and there is none yet, so training starts from scratch."""
    if ckpt_path not in ALIASES:
        return ckpt_path
    asked = trainer.event_order("checkpoint_path")
    if not asked:
        raise SurgeError(
            f"ckpt_path={ckpt_path!r}: no active plugin resolves {ckpt_path!r} (a plugin does so with a "
            "checkpoint_path handler, docs/events.md). Enable the checkpoint plugin (enable_checkpointing=True, "
            "plugins=['checkpoint']) with the run's checkpoint directory, or pass the checkpoint's path"
        )
    answer, by = trainer._bus.ask(ev.CheckpointPath(trainer.view, ckpt_path, stage))  # type: ignore[arg-type]
    if answer is not None:
        logger.info("ckpt_path={!r} resolved to {} by {}", ckpt_path, answer, by.describe() if by else "?")
        return str(answer)
    if ckpt_path == "last" and stage == "fit":
        logger.warning(
            "ckpt_path='last': there is no checkpoint yet (asked: {}); training starts from scratch", ", ".join(asked)
        )
        return None
    raise SurgeError(
        f"ckpt_path={ckpt_path!r}: no checkpoint to use (asked: {', '.join(asked)}; none has a {ckpt_path!r} "
        "checkpoint). Train first, or pass the checkpoint's path"
    )


# -- plugin states -------------------------------------------------------------------------------------


def _stateful(obj: object) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _state_key(sub: Subscriber) -> str:
    key = getattr(sub.obj, "state_key", None)
    return key if isinstance(key, str) and key else sub.name


def _saved_state_key(trainer: Trainer, sub: Subscriber, states: Mapping[str, Any]) -> str | None:
    """The key of ``sub``'s state in a checkpoint's ``plugins``: its state key, else the first of its
    ``state_key_aliases`` there (the key another framework's equivalent callback wrote, in a converted checkpoint)."""
    if not _stateful(sub.obj) or sub.obj is trainer.precision_plugin:
        return None
    aliases = getattr(sub.obj, "state_key_aliases", ())
    for key in (_state_key(sub), *(aliases if isinstance(aliases, (list, tuple)) else ())):
        if isinstance(key, str) and key in states:
            return key
    return None


def _warn_not_carried(trainer: Trainer, checkpoint: Mapping[str, Any], url: str) -> None:
    """One warning naming what of a converted checkpoint (another framework's) this run did not take over."""
    info = checkpoint["converted_from"]
    lines = list(info.get("not_carried", []))
    if trainer.state.stage == "fit" and "loops" in checkpoint:
        states = checkpoint.get("plugins", {})
        taken = {_saved_state_key(trainer, sub, states) for sub in trainer._plugin_subscribers}
        lines += [f"the callback state {key!r}: no active Surge plugin takes it" for key in states if key not in taken]
    else:
        lines = [f"everything but the weights ({trainer.state.stage} restores only them)"]
    logger.warning(
        "restored {}, a {} {} checkpoint; not carried over:\n{}",
        url,
        info.get("format"),
        info.get("version"),
        "\n".join(f"  - {line}" for line in lines),
    )


def check_state_keys(subscribers: Sequence[Subscriber]) -> None:
    """Two stateful participants with one state key would overwrite each other's checkpointed state."""
    seen: dict[str, Subscriber] = {}
    for sub in subscribers:
        if not _stateful(sub.obj) or sub.tier is Tier.PROVIDER:
            continue
        key = _state_key(sub)
        if key in seen:
            raise SurgeError(
                f"{seen[key].describe()} and {sub.describe()} share the state key '{key}'; give each instance "
                "a distinct `state_key` so their checkpointed states do not overwrite each other"
            )
        seen[key] = sub


def _warn_plugin_set_diff(url: str, saved: list[dict[str, Any]], current: list[dict[str, Any]]) -> None:
    def key(entry: dict[str, Any]) -> tuple[str, str]:
        return entry["name"], f"{entry.get('distribution') or '-'} {entry.get('version') or '-'}"

    before, now = dict(map(key, saved)), dict(map(key, current))
    lines = [f"  - {n} ({before[n]}): in the checkpoint, not active now" for n in sorted(set(before) - set(now))]
    lines += [f"  + {n} ({now[n]}): active now, not in the checkpoint" for n in sorted(set(now) - set(before))]
    lines += [f"  ~ {n}: {before[n]} -> {now[n]}" for n in sorted(set(before) & set(now)) if before[n] != now[n]]
    if lines:
        logger.warning("resuming from {} with a different plugin set:\n{}", url, "\n".join(lines))


def _warn_experiment_diff(trainer: Trainer, url: str, saved: Any) -> None:
    """The checkpoint's experiment (when it records one) differs from the run's: say how; restore anyway."""
    if not isinstance(saved, Mapping) or trainer.module is None:
        return
    lines = experiment_diff(saved, experiment_identity(trainer.module, trainer.datamodule))
    if lines:
        logger.warning(
            "restoring {}, a checkpoint of another experiment (the checkpoint's -> this run's):\n{}\nIts weights "
            "load as asked; if this is not the checkpoint you meant, pass the path of one of this experiment's",
            url,
            "\n".join(f"  ~ {line}" for line in lines),
        )
