"""The loops: a plain PyTorch training loop with events at its seams.

Read top to bottom: :func:`fit` runs the sanity check and the epochs; :func:`train_epoch` is the batch
loop; :func:`optimization_step` is forward, backward and step; :func:`evaluate` serves validation, test
and predict. Every event is guarded by ``if bus.<event>:`` so that an event nobody subscribed to costs one
attribute test: no payload is built and no call is made.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from typing import TYPE_CHECKING, Any

import torch

from surge import events as ev
from surge._data import loader_len
from surge.engine import _resume, checkpointing
from surge.engine._lightning_callbacks import step_outputs
from surge.engine._lightning_v1 import epoch_end_outputs
from surge.engine._resume import OpenBatch, epoch_start_states
from surge.engine.state import Interrupted
from surge.errors import SurgeError

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer


def run_stage(trainer: Trainer, stage: str) -> Any:
    # once per run: which step methods take batch_idx (Lightning's `training_step(self, batch)` does not)
    module = trainer.module
    trainer._takes_batch_idx = {name: takes_batch_idx(getattr(module, name)) for name in _STEP_METHODS}
    if stage == "fit":
        return fit(trainer)
    if stage == "validate":
        return evaluate(trainer, "validation", trainer.val_dataloaders, trainer.num_val_batches)
    if stage == "test":
        loop = trainer._loop
        limits = [_limit(d, loop.limit_test, "limit_test_batches") for d in trainer.test_dataloaders]
        return evaluate(trainer, "test", trainer.test_dataloaders, limits)
    limits = [_limit(d, trainer._loop.limit_predict, "limit_predict_batches") for d in trainer.predict_dataloaders]
    return evaluate(trainer, "predict", trainer.predict_dataloaders, limits)


def takes_batch_idx(step: Any) -> bool:
    """Lightning's rule for a step method: it receives ``batch_idx`` when it has a parameter of that name,
    takes ``*args``, or takes at least two positional parameters; else it is called with the batch only."""
    try:
        params = list(inspect.signature(step).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): pass everything
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.name == "batch_idx" or p.kind is p.VAR_POSITIONAL for p in params)


def _limit(loader: Any, limit: int | float, what: str) -> float:
    from surge._data import num_batches

    return num_batches(loader_len(loader), limit, what)


# -- fit --------------------------------------------------------------------------------------------


def fit(trainer: Trainer) -> None:
    bus, state = trainer._bus, trainer.state
    trainer._agreement = None
    if trainer._resume_point is None:  # nothing restored: the first epoch begins from its first batch
        state.epoch_start_batches, state.epoch_loop_done, state.epoch_rng = state.total_batches, False, None
    if bus.fit_start:
        bus.fit_start(ev.FitStart(trainer))
    if trainer.val_dataloaders and any(trainer.num_sanity_val_batches):
        state.sanity_checking = True
        if bus.sanity_check_start:
            bus.sanity_check_start(ev.SanityCheckStart(trainer))
        # the sanity check only checks: every RNG it draws from is put back, so it changes no number
        with _resume.isolated_rng([trainer.train_dataloader, *trainer.val_dataloaders]):
            evaluate(trainer, "validation", trainer.val_dataloaders, trainer.num_sanity_val_batches)
        state.sanity_checking = False
        if bus.sanity_check_end:
            bus.sanity_check_end(ev.SanityCheckEnd(trainer))
        state.should_stop, state.stop_reason = False, None  # the sanity check only checks; it decides nothing
    if bus.train_start:
        bus.train_start(ev.TrainStart(trainer))
    manual_hooks = _hook_manual_optimizers(trainer) if not trainer.module.automatic_optimization else []
    try:
        while not _fit_done(trainer):
            reload_every = trainer.config.reload_dataloaders_every_n_epochs
            if reload_every and state.current_epoch > 0 and state.current_epoch % reload_every == 0:
                trainer.reload_dataloaders()
            resume = trainer._resume_point  # set when fit(ckpt_path=...) restored a checkpoint
            if resume is not None and resume.epoch_loop_done:  # saved in train_epoch_end: only its end remains
                trainer._resume_point = None
                resume.begin_epoch(trainer)
                if trainer.module.automatic_optimization:
                    _step_schedulers(trainer, "epoch")
            else:
                train_epoch(trainer)
            state.current_epoch += 1
            state.epoch_start_batches, state.epoch_loop_done, state.epoch_rng = state.total_batches, False, None
            serve = bool(trainer._checkpoint_requests)
            if trainer.strategy.world_size > 1:  # a stop or request made in train_epoch_end holds on every rank
                serve = _agree(trainer)
            if serve:
                trainer._serve_checkpoint_requests()
    finally:
        for handle in manual_hooks:
            handle.remove()
        if trainer._agreement is not None:  # the last boundary's all-reduce: every rank waits for it alike
            trainer._agreement, agreement = None, trainer._agreement
            agreement()
    if bus.train_end:
        bus.train_end(ev.TrainEnd(trainer))
    if bus.fit_end:
        bus.fit_end(ev.FitEnd(trainer))


def _fit_done(trainer: Trainer) -> bool:
    state, loop = trainer.state, trainer._loop
    if loop.max_steps != -1 and state.global_step >= loop.max_steps:
        return True
    if loop.max_epochs != -1 and state.current_epoch >= loop.max_epochs:
        return True
    if trainer.num_training_batches == 0:
        return True
    return state.should_stop and _min_reached(trainer)


def _min_reached(trainer: Trainer) -> bool:
    state, loop = trainer.state, trainer._loop
    return state.current_epoch >= loop.min_epochs and state.global_step >= loop.min_steps


def _stop_after_batch(trainer: Trainer) -> bool:
    """The checks after each batch (inlined in the batch loop for speed)."""
    state, loop = trainer.state, trainer._loop
    return (loop.max_steps != -1 and state.global_step >= loop.max_steps) or (
        state.should_stop and _min_reached(trainer)
    )


def _raise_if_interrupted(trainer: Trainer) -> None:
    """The step boundary: after Ctrl-C, no further event but ``keyboard_interrupt`` and ``teardown``."""
    if trainer.state.interrupted:
        raise Interrupted


def train_epoch(trainer: Trainer) -> None:
    """One epoch of training, continuing from a restored checkpoint's position when there is one."""
    bus, state, loop, metrics = trainer._bus, trainer.state, trainer._loop, trainer._metrics
    module, strategy, precision = trainer.module, trainer.strategy, trainer.precision_plugin
    epoch = state.current_epoch
    n = trainer.num_training_batches
    val_every = _val_check_batches(trainer)
    global_val = loop.check_val_every_n_epoch is None
    val_epoch = val_every is not None and (global_val or (epoch + 1) % loop.check_val_every_n_epoch == 0)  # type: ignore[operator]
    automatic = module.automatic_optimization
    training_step = strategy.wrap_training_step(module)  # the module's own method, or a DDP wrapper's forward
    if not trainer._takes_batch_idx.get("training_step", True):  # `training_step(self, batch)`
        training_step = _batch_only(training_step)
    distributed = strategy.world_size > 1
    no_context, unknown_length = _NO_CONTEXT, math.isinf(n)

    resume = trainer._resume_point
    if resume is not None and not resume.mid_epoch:
        trainer._resume_point = None
        resume.begin_epoch(trainer)  # saved between epochs: the RNG states as they were then
        resume = None
    if bus.train_epoch_start:
        trainer._epoch_starting = True
        try:
            bus.train_epoch_start(ev.TrainEpochStart(trainer, epoch))
        finally:
            trainer._epoch_starting = False
    module.train()
    metrics.context = "train"
    accumulate = trainer.accumulate_grad_batches  # after train_epoch_start: a plugin may change it there
    if not isinstance(accumulate, int) or accumulate < 1:
        raise SurgeError(f"trainer.accumulate_grad_batches is {accumulate!r} for epoch {epoch}; it must be an int >= 1")
    tbptt = module.truncated_bptt_steps if automatic else 0
    if tbptt and accumulate > 1:
        raise SurgeError(
            f"{type(module).__name__}.truncated_bptt_steps={tbptt} steps the optimizer once per time split; it "
            f"cannot be combined with accumulate_grad_batches={accumulate} (set one of them back to its default)"
        )
    epoch_outputs = epoch_end_outputs(module, "training_epoch_end")  # None unless the Module has that 1.x hook
    end = n
    if resume is None:
        state.epoch_rng = epoch_start_states(trainer.train_dataloader)  # once per epoch, for checkpoints
        iterator = iter(trainer.train_dataloader)
        batch_idx = 0
        pending = False  # gradients accumulated but not yet stepped
    else:
        trainer._resume_point = None
        iterator = resume.continue_epoch(trainer)
        # gradients restored in manual optimization are the user's to step, not an open window of the loop's
        batch_idx, pending = resume.epoch_batches, bool(resume.grads) and automatic
        # what followed the last batch done before the save: its validation (unless it ran), the stop checks
        due = val_epoch and val_every and (state.total_batches if global_val else batch_idx) % val_every == 0
        if batch_idx and due and not resume.validated:
            _validate_during_fit(trainer)
        if _stop_after_batch(trainer):
            end = batch_idx
    cut = end < n  # the epoch ends before its last batch: a stop (max_steps, a requested stop), not its end
    # torch's RNG state before the running batch (a cheap copy): a batch that does not finish is rewound to it
    open_rng: torch.Tensor | None = None
    window_open, steps_before = pending, state.global_step
    try:
        while batch_idx < end:
            open_rng, window_open, steps_before = torch.get_rng_state(), pending, state.global_step
            try:
                batch = next(iterator)
            except StopIteration:
                open_rng = None
                break
            state.batch_idx = batch_idx
            batch = precision.convert_input(strategy.batch_to_device(batch))
            metrics.new_batch(batch)
            if bus.train_batch_start:
                bus.train_batch_start(ev.TrainBatchStart(trainer, batch, batch_idx))
                if state.should_stop and _min_reached(trainer):  # the batch is skipped: the epoch is cut here
                    reason = f"skipped by the stop requested in its train_batch_start: {state.stop_reason}"
                    trainer._open_batch = OpenBatch(epoch, batch_idx, open_rng, window_open, False, reason)
                    open_rng, cut = None, True
                    break
            if tbptt:
                outputs = _tbptt_batch(trainer, training_step, batch, batch_idx, tbptt)
            elif automatic:
                steps = (batch_idx + 1) % accumulate == 0 or batch_idx + 1 == n
                # an unknown epoch length (n infinite) may end at any batch: keep synchronising then
                with strategy.accumulation_context(steps or unknown_length) if accumulate > 1 else no_context:
                    with precision.autocast(strategy.root_device):
                        outputs = training_step(batch, batch_idx)
                    loss = _loss_of(outputs)
                    if loss is not None:
                        if accumulate > 1:
                            loss = loss / accumulate
                        trainer._backward(loss)
                if loss is not None:
                    pending = True
                    if steps:
                        optimization_step(trainer)
                        pending = False
            else:
                with precision.autocast(strategy.root_device):  # the steps are the user's; the autocast is ours
                    outputs = training_step(batch, batch_idx)
            metrics.end_step(write=trainer.should_log)
            if epoch_outputs is not None and (kept := step_outputs(trainer, outputs)):
                epoch_outputs.append(kept)
            state.total_batches += 1  # counted before train_batch_end: a checkpoint saved there includes this batch
            open_rng = None
            if bus.train_batch_end:
                bus.train_batch_end(ev.TrainBatchEnd(trainer, outputs, batch, batch_idx))
            batch_idx += 1
            if val_epoch and val_every and (state.total_batches if global_val else batch_idx) % val_every == 0:
                _validate_during_fit(trainer)
            serve = bool(trainer._checkpoint_requests)
            if distributed:  # one small collective: what any rank decided holds on all of them
                serve = _agree(trainer)
            if state.interrupted or serve:  # the step boundary: Ctrl-C, requested checkpoints
                _step_boundary(trainer, serve)
            if (loop.max_steps != -1 and state.global_step >= loop.max_steps) or (
                state.should_stop and _min_reached(trainer)
            ):
                cut = True
                break
    except BaseException as exc:
        if open_rng is not None:  # raised inside a batch (not at a step boundary or in a validation)
            _batch_failed(trainer, exc, OpenBatch(epoch, batch_idx, open_rng, window_open, True, ""), steps_before)
        raise
    finally:
        # Now, not at some later garbage collection (which can stall for seconds): an exception leaving the
        # epoch shuts the loader's worker processes down on its way out.
        del iterator
    cut = cut and batch_idx < n
    if cut:
        # A stop cut the epoch short. Its end still runs below, as in Lightning (train_epoch_end fires and
        # current_epoch goes up; epoch-interval schedulers do not step), but the checkpoints written from now on
        # record the truth: this epoch at this batch, the states as they are now, an open window unstepped.
        trainer._stop_record = checkpointing.record_stop(trainer)
    elif pending:
        optimization_step(trainer)  # the last, partial accumulation window of a loader without length
    state.epoch_loop_done = True
    if val_epoch and not val_every and batch_idx:
        _validate_during_fit(trainer)  # loaders without length validate at the end of the epoch
    metrics.context = "train"
    metrics.end_epoch(write=False)
    metrics.context = "train_epoch_end"  # self.log defaults to per-epoch here, as in Lightning
    if epoch_outputs is not None:
        module.training_epoch_end(epoch_outputs)  # type: ignore[operator]
    if bus.train_epoch_end:
        bus.train_epoch_end(ev.TrainEpochEnd(trainer, epoch))
    metrics.end_epoch()
    metrics.context = None
    if automatic and not cut:
        _step_schedulers(trainer, "epoch")


def _val_check_batches(trainer: Trainer) -> int | None:
    """Validate after every this many training batches (0: at the end of an epoch of unknown length;
    ``None``: never, there is no validation data)."""
    if not trainer.val_dataloaders or not any(trainer.num_val_batches):
        return None
    interval, n = trainer._loop.val_check_interval, trainer.num_training_batches
    if isinstance(interval, int):
        if trainer._loop.check_val_every_n_epoch is not None and interval > n:
            raise SurgeError(
                f"val_check_interval={interval} is larger than the {n} training batches of an epoch; lower it, "
                "or pass check_val_every_n_epoch=None to count batches across epochs"
            )
        return interval
    if math.isinf(n):
        if interval != 1.0:
            raise SurgeError(
                f"val_check_interval={interval} is a fraction, but the training loader has no length; pass an int"
            )
        return 0
    return max(1, int(n * interval))


def _step_boundary(trainer: Trainer, serve: bool) -> None:
    """After a batch and its validation: serve requested checkpoints, then stop if Ctrl-C was pressed."""
    if serve:
        trainer._serve_checkpoint_requests()
    _raise_if_interrupted(trainer)


def _agree(trainer: Trainer) -> bool:
    """Several processes, at a step boundary: a Ctrl-C or a stop seen on any rank holds on every rank.

    This rank's flags (Ctrl-C, stop, "holds no checkpoint request") start an all-reduce (max) that overlaps
    the next step; what the previous boundary's all-reduce agreed is applied now. So a decision taken
    during step k takes effect after step k+1, on every rank alike, and no step waits for a collective of
    its own. Until then ``should_stop`` and ``interrupted`` hold the agreed values, not local ones.
    Returns whether to serve checkpoint requests now: only once every rank held one (a save is
    collective; SIGTERM reaches every rank, maybe a step apart)."""
    state = trainer.state
    previous = trainer._agreement
    interrupted, stop, no_request = previous().tolist() if previous is not None else (0, 0, -1)
    # what was agreed is sent again with the local flags: once agreed, a decision stays agreed
    flags = [max(int(state.interrupted), interrupted), max(int(state.should_stop), stop)]
    serve = not no_request  # every rank held a request at the last boundary: all serve theirs now
    flags.append(-int(bool(trainer._checkpoint_requests) and not serve))
    trainer._agreement = trainer.strategy.reduce_async(torch.tensor(flags, device=trainer.strategy.root_device), "max")
    state.interrupted = bool(interrupted)
    if stop and not state.should_stop:
        state.stop_reason = state.stop_reason or "stop requested on another process"
    state.should_stop = bool(stop)
    return serve


def _batch_failed(trainer: Trainer, exc: BaseException, batch: OpenBatch, steps_before: int) -> None:
    """A batch raised (an exception, a second Ctrl-C, a non-finite loss). Before its optimizer step it did
    not happen: its logged values are dropped and a checkpoint records the position before it. After the
    step it did: it counts as done and the gradients its step consumed are dropped."""
    state = trainer.state
    if state.global_step != steps_before:
        state.total_batches += 1
        if trainer.module.automatic_optimization:
            for param in trainer.module.parameters():
                param.grad = None
        return
    trainer._metrics.rollback()
    text = str(exc).strip().splitlines()
    batch.reason = f"it raised {type(exc).__name__}" + (f": {text[0]}" if text else "")
    trainer._open_batch = batch


def _validate_during_fit(trainer: Trainer) -> None:
    # Until its batches are done it counts as not run: a checkpoint written meanwhile (after Ctrl-C in it)
    # records the RNG states from before it, and the resumed run runs it again (see ``evaluate``).
    trainer._validation_rng = _resume.rng_states(trainer.train_dataloader)
    evaluate(trainer, "validation", trainer.val_dataloaders, trainer.num_val_batches)
    trainer.module.train()
    trainer._metrics.context = "train"


def _loss_of(outputs: Any) -> torch.Tensor | None:
    if outputs is None or isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict) and "loss" in outputs:
        return outputs["loss"]  # type: ignore[no-any-return]
    raise SurgeError(
        f"training_step returned {type(outputs).__name__}; return the loss tensor, a dict with a 'loss' "
        "entry, or None to skip the batch"
    )


def _tbptt_batch(trainer: Trainer, training_step: Any, batch: Any, batch_idx: int, split_size: int) -> Any:
    """Truncated back-propagation through time: one forward, backward and optimizer step per time split,
    the hidden state carried from split to split with its graph cut. Returns the last split's output."""
    strategy, precision = trainer.strategy, trainer.precision_plugin
    hiddens: Any = None
    outputs: Any = None
    for split in trainer.module.tbptt_split_batch(batch, split_size):
        with precision.autocast(strategy.root_device):
            outputs = training_step(split, batch_idx, hiddens)
        loss = _loss_of(outputs)
        hiddens = _detached(outputs.get("hiddens")) if isinstance(outputs, dict) else None
        if loss is not None:
            trainer._backward(loss)
            optimization_step(trainer)
    return outputs


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def optimization_step(trainer: Trainer) -> None:
    """Unscale, clip, step, zero the gradients, count the step, and step per-step schedulers."""
    bus, precision = trainer._bus, trainer.precision_plugin
    optimizer = trainer.optimizers[0]
    clip = trainer.config.gradient_clip_val
    if clip:
        precision.unscale_gradients(optimizer)  # true-scale gradients for handlers and for clipping
    if bus.before_optimizer_step:
        bus.before_optimizer_step(ev.BeforeOptimizerStep(trainer, optimizer, 0))
    if clip:
        clip_gradients(optimizer, clip, trainer.config.gradient_clip_algorithm)
    precision.optimizer_step(optimizer)
    if bus.after_optimizer_step:
        bus.after_optimizer_step(ev.AfterOptimizerStep(trainer, optimizer, 0))
    if bus.before_zero_grad:
        bus.before_zero_grad(ev.BeforeZeroGrad(trainer, optimizer, 0))
    optimizer.zero_grad(set_to_none=True)
    if bus.after_zero_grad:
        bus.after_zero_grad(ev.AfterZeroGrad(trainer, optimizer, 0))
    trainer.state.global_step += 1
    if trainer.lr_scheduler_configs and not precision.last_step_skipped:
        _step_schedulers(trainer, "step")


def clip_gradients(optimizer: torch.optim.Optimizer, value: float, algorithm: str) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if algorithm == "norm":
        torch.nn.utils.clip_grad_norm_(params, value)
    else:
        torch.nn.utils.clip_grad_value_(params, value)


def _step_schedulers(trainer: Trainer, when: str) -> None:
    """``when``: 'step' after an optimizer step, 'epoch' at an epoch's end (after its validation)."""
    state = trainer.state
    for config in trainer.lr_scheduler_configs:
        if config.interval != when:
            continue
        count = state.global_step if when == "step" else state.current_epoch + 1
        if count % config.frequency:
            continue
        if config.monitor is None:
            config.scheduler.step()
            continue
        value = trainer.callback_metrics.get(config.monitor)
        if value is None:
            if config.strict:
                raise SurgeError(
                    f"the lr scheduler monitors '{config.monitor}', which was not logged; logged metrics: "
                    f"{sorted(trainer.callback_metrics) or 'none'}. Log it with self.log or set strict=False"
                )
            continue
        config.scheduler.step(value)


def _hook_manual_optimizers(trainer: Trainer) -> list[Any]:
    """In manual optimization, count steps and fire the optimizer-step events from the optimizers' hooks."""
    handles = []
    for idx, optimizer in enumerate(trainer.optimizers):

        def pre(opt: Any, args: Any, kwargs: Any, idx: int = idx) -> None:
            if trainer._bus.before_optimizer_step:
                trainer._bus.before_optimizer_step(ev.BeforeOptimizerStep(trainer, opt, idx))

        def post(opt: Any, args: Any, kwargs: Any, idx: int = idx) -> None:
            if trainer._bus.after_optimizer_step:
                trainer._bus.after_optimizer_step(ev.AfterOptimizerStep(trainer, opt, idx))
            trainer.state.global_step += 1

        handles += [optimizer.register_step_pre_hook(pre), optimizer.register_step_post_hook(post)]
    return handles


_NO_CONTEXT = contextlib.nullcontext()


# -- validation, test, predict --------------------------------------------------------------------------


_STEP_METHOD = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}
_STEP_METHODS = ("training_step", *_STEP_METHOD.values())


def evaluate(trainer: Trainer, stage: str, loaders: list[Any], limits: list[float]) -> Any:
    """One pass of ``stage`` ('validation', 'test' or 'predict') over ``loaders``.

    Returns one dict of epoch metrics per loader (predict: the predictions, a list per loader when several).
    """
    bus, state, metrics = trainer._bus, trainer.state, trainer._metrics
    module, strategy, precision = trainer.module, trainer.strategy, trainer.precision_plugin
    batch_start, batch_end = getattr(bus, f"{stage}_batch_start"), getattr(bus, f"{stage}_batch_end")
    BatchStart, BatchEnd = ev.EVENTS[f"{stage}_batch_start"], ev.EVENTS[f"{stage}_batch_end"]
    step = getattr(module, _STEP_METHOD[stage])
    if not trainer._takes_batch_idx.get(_STEP_METHOD[stage], True):  # `validation_step(self, batch)`
        step = _batch_only(step)
    several = len(loaders) > 1
    single = strategy.world_size == 1
    was_training = module.training
    module.eval()
    previous_context = metrics.context
    metrics.context = stage
    predictions: list[list[Any]] = [[] for _ in loaders]
    # None unless the Module has Lightning 1.x's validation_epoch_end/test_epoch_end(outputs)
    epoch_outputs = epoch_end_outputs(module, f"{stage}_epoch_end", len(loaders)) if stage != "predict" else None
    inference = trainer.config.inference_mode and trainer.strategy.inference_mode_ok
    inference = inference and trainer.strategy.accelerator.inference_mode_ok  # the device the strategy runs on
    no_grad = torch.inference_mode() if inference else torch.no_grad()
    with no_grad:
        bus.emit(ev.EVENTS[f"{stage}_start"](trainer)) if getattr(bus, f"{stage}_start") else None
        if getattr(bus, f"{stage}_epoch_start"):
            bus.emit(ev.EVENTS[f"{stage}_epoch_start"](trainer, state.current_epoch))  # type: ignore[call-arg]
        for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
            metrics.dataloader_idx = dl_idx if several else None
            iterator = iter(loader)
            batch_idx = 0
            while batch_idx < limit:
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                batch = precision.convert_input(strategy.batch_to_device(batch))
                metrics.new_batch(batch)
                if batch_start:
                    batch_start(BatchStart(trainer, batch, batch_idx, dl_idx))  # type: ignore[call-arg]
                with precision.autocast(strategy.root_device):
                    outputs = step(batch, batch_idx, dl_idx) if several else step(batch, batch_idx)
                if stage == "predict":
                    predictions[dl_idx].append(outputs)
                elif epoch_outputs is not None and outputs is not None:
                    epoch_outputs[dl_idx].append(outputs)
                if batch_end:
                    batch_end(BatchEnd(trainer, outputs, batch, batch_idx, dl_idx))  # type: ignore[call-arg]
                if metrics._step and not state.sanity_checking:  # on_step values: a row per batch, as Lightning
                    metrics.end_step(write=True, step=metrics.eval_steps.get(dl_idx, 0) + batch_idx)
                batch_idx += 1
                if single:  # several processes stop together at the next training step boundary instead
                    _raise_if_interrupted(trainer)
            if not state.sanity_checking:  # Lightning's step numbers run on across a fit's validations
                metrics.eval_steps[dl_idx] = metrics.eval_steps.get(dl_idx, 0) + batch_idx
        metrics.dataloader_idx = None
        if trainer._validation_rng is not None:  # a validation during fit ran all its batches: it counts as run
            state.validated_at, trainer._validation_rng = state.total_batches, None
        results = _publish(trainer, write=False)
        if epoch_outputs is not None:  # a list per loader, or the list itself for one loader, as in Lightning 1.x
            getattr(module, f"{stage}_epoch_end")(epoch_outputs if several else epoch_outputs[0])
        if getattr(bus, f"{stage}_epoch_end"):
            bus.emit(ev.EVENTS[f"{stage}_epoch_end"](trainer, state.current_epoch))  # type: ignore[call-arg]
        results.update(_publish(trainer))
        if getattr(bus, f"{stage}_end"):
            bus.emit(ev.EVENTS[f"{stage}_end"](trainer))
    metrics.context = previous_context
    if was_training:
        module.train()
    if stage == "predict":
        return predictions[0] if not several else predictions
    return _per_loader(results, len(loaders)) if trainer.state.stage != "fit" else None


def _batch_only(step: Any) -> Any:
    """``step`` called as the loops call every step, ``(batch, batch_idx[, dataloader_idx])``, for a step
    method that takes the batch only (and ``dataloader_idx`` when there are several loaders)."""

    def call(batch: Any, batch_idx: int, *rest: Any) -> Any:
        return step(batch, *rest)

    return call


def _publish(trainer: Trainer, write: bool = True) -> dict[str, torch.Tensor]:
    """Reduce what was logged in this evaluation pass; the sanity check's values are dropped."""
    if trainer.state.sanity_checking:
        trainer._metrics.discard()
        return {}
    return trainer._metrics.end_epoch(write)


def _per_loader(results: dict[str, torch.Tensor], count: int) -> list[dict[str, Any]]:
    """Lightning's return value of validate/test: one dict per loader, shared metrics in each (a float
    per scalar metric, a list for a tensor-valued one)."""
    per_loader: list[dict[str, Any]] = []
    for idx in range(count):
        suffix = f"/dataloader_idx_{idx}"
        per_loader.append(
            {
                key: float(value.item()) if value.numel() == 1 else value.tolist()
                for key, value in results.items()
                if "/dataloader_idx_" not in key or key.endswith(suffix)
            }
        )
    return per_loader
