"""The loops: a plain PyTorch training loop with events at its seams.

Read top to bottom: :func:`fit` runs the sanity check and the epochs; :func:`train_epoch` is the batch loop,
in one screen: the epoch's batches (:class:`_EpochBatches`, which continues a restored checkpoint's epoch and
keeps what a failed batch needs to be rewound), the step chosen for the epoch (:class:`_Step`: manual,
:class:`_Automatic` with gradient accumulation, :class:`_TruncatedBPTT`), then after each batch its
validation when due (:class:`_ValidationSchedule`), the step boundary (:func:`_boundary`: checkpoint requests,
agreement across processes, Ctrl-C) and the one stop test (:func:`_should_stop`). :func:`evaluate` serves
validation, test and predict, each with its six typed events (``_STAGES``).

Every event is guarded by ``if bus.<event>:`` so that an event nobody subscribed to costs one attribute test:
no payload is built and no call is made.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from surge import events as ev
from surge._data import loader_len
from surge.engine import _resume, checkpointing
from surge.engine._resume import OpenBatch, ResumePoint, epoch_start_states
from surge.engine.module import BATCH_TRANSFER_STEPS, OPTIMIZATION_STEPS, batch_transfer_steps, overridden_steps
from surge.engine.state import Interrupted
from surge.errors import SurgeError
from surge.plugins.backends import Precision, Strategy

if TYPE_CHECKING:
    from surge.engine.trainer import Trainer


def run_stage(trainer: Trainer, stage: str) -> Any:
    # once per run: which step methods take batch_idx (Lightning's `training_step(self, batch)` does not), and
    # which overridable steps the Module (and DataModule) override; the others cost nothing per step
    module = trainer.module
    trainer._takes_batch_idx = {name: takes_batch_idx(getattr(module, name)) for name in _STEP_METHODS}
    trainer._overridden = overridden_steps(module)
    trainer._batch_steps = batch_transfer_steps(module, trainer.datamodule)
    if stage == "fit":
        return fit(trainer)
    if stage == "validate":
        return evaluate(trainer, "validation", trainer._val_loaders, trainer.num_val_batches)
    if stage == "test":
        loop = trainer._loop
        limits = [_limit(d, loop.limit_test, "limit_test_batches") for d in trainer._test_loaders]
        return evaluate(trainer, "test", trainer._test_loaders, limits)
    limits = [_limit(d, trainer._loop.limit_predict, "limit_predict_batches") for d in trainer._predict_loaders]
    return evaluate(trainer, "predict", trainer._predict_loaders, limits)


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
    trainer._agreement, trainer._agreed, trainer._unagreed = None, [0, 0], [0, 0]
    if trainer._resume_point is None:  # nothing restored: the first epoch begins from its first batch
        state.epoch_start_batches, state.epoch_loop_done, state.epoch_rng = state.total_batches, False, None
    if bus.fit_start:
        bus.fit_start(ev.FitStart(trainer.view))
    if trainer._val_loaders and any(trainer.num_sanity_val_batches):
        _sanity_check(trainer)
    if bus.train_start:
        bus.train_start(ev.TrainStart(trainer.view))
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
            _boundary(trainer, now=True)  # a stop or request made in train_epoch_end holds on every rank
    finally:
        for handle in manual_hooks:
            handle.remove()
        if trainer._agreement is not None:  # the last boundary's all-reduce: every rank waits for it alike
            trainer._agreement, agreement = None, trainer._agreement
            agreement()
    if bus.train_end:
        bus.train_end(ev.TrainEnd(trainer.view))
    if bus.fit_end:
        bus.fit_end(ev.FitEnd(trainer.view))


def _sanity_check(trainer: Trainer) -> None:
    bus, state = trainer._bus, trainer.state
    held = state.should_stop, state.stop_reason  # a resumed run's stop held back by min_epochs still holds
    published = dict(trainer._metrics.callback_metrics)  # the check's values are read until it ends, then gone
    state.sanity_checking = True
    if bus.sanity_check_start:
        bus.sanity_check_start(ev.SanityCheckStart(trainer.view))
    # the sanity check only checks: every RNG it draws from is put back, so it changes no number
    with _resume.isolated_rng([trainer.train_dataloader, *trainer._val_loaders]):
        evaluate(trainer, "validation", trainer._val_loaders, trainer.num_sanity_val_batches)
    if bus.sanity_check_end:  # still checking there, as in Lightning
        bus.sanity_check_end(ev.SanityCheckEnd(trainer.view))
    state.sanity_checking = False
    trainer._metrics.callback_metrics = published
    state.should_stop, state.stop_reason = held  # the sanity check only checks; it decides nothing


def _fit_done(trainer: Trainer) -> bool:
    state, loop = trainer.state, trainer._loop
    if loop.max_epochs != -1 and state.current_epoch >= loop.max_epochs:
        return True
    return trainer.num_training_batches == 0 or _should_stop(trainer)


def _should_stop(trainer: Trainer) -> bool:
    """The stop test, after every batch and before every epoch: ``max_steps`` reached, or a stop requested
    (``request_stop``, a signal, a time limit) once ``min_epochs`` and ``min_steps`` are met."""
    state, loop = trainer.state, trainer._loop
    if loop.max_steps != -1 and state.global_step >= loop.max_steps:
        return True
    return state.should_stop and state.current_epoch >= loop.min_epochs and state.global_step >= loop.min_steps


_train_batch_end = ev._direct_builder(ev.TrainBatchEnd)
"""``ev.TrainBatchEnd(...)``, built for a fraction of a frozen dataclass's ``__init__`` (fired on every batch)."""


def train_epoch(trainer: Trainer) -> None:
    """One epoch of training, continuing from a restored checkpoint's position when there is one."""
    bus, state, metrics = trainer._bus, trainer.state, trainer._metrics
    module, strategy, precision = trainer.module, trainer.strategy, trainer.precision_plugin
    epoch = state.current_epoch
    resume = _start_epoch(trainer, epoch)  # the restored position when this epoch continues a checkpoint's
    step = _step_function(trainer, epoch, pending=resume is not None and bool(resume.grads))
    validation = _ValidationSchedule(trainer, epoch)
    batches = _EpochBatches(trainer, epoch, step, resume)
    if resume is not None:  # what followed the last batch done before the save: its validation, the stop test
        if batches.done and validation.due(batches.done) and not resume.validated:
            _validate_during_fit(trainer)
        if _should_stop(trainer):
            batches.stop()
    # how a batch reaches the device: the Module's or DataModule's transfer steps when overridden, else the
    # strategy's move and the precision's conversion (on one CPU, a check that the tensors are already there)
    transfer = batch_transfer(trainer, 0) or _default_transfer(strategy, precision)
    loop, several = trainer._loop, strategy.world_size > 1

    try:
        for batch_idx, batch in batches:
            batch = transfer(batch)
            # metrics.new_batch(batch), inlined (keep the two alike)
            metrics.batch, metrics.batch_size, metrics.late = batch, None, None
            if metrics._appended:
                metrics._appended.clear()
            if bus.train_batch_start:
                bus.train_batch_start(ev.TrainBatchStart(trainer.view, batch, batch_idx))
                if _should_stop(trainer):  # the batch is skipped: the epoch is cut here
                    batches.skip(f"skipped by the stop requested in its train_batch_start: {state.stop_reason}")
                    break
            outputs = step(batch, batch_idx)
            # what is logged from now to the next batch joins this step (trainer.should_log, inlined)
            metrics.late = write = state.global_step % trainer.config.log_every_n_steps == 0
            if metrics._step:
                metrics.end_step(write, False)  # into the metric dicts, for the train_batch_end handlers
            # the batch is done (counted before train_batch_end: a checkpoint saved there includes this batch)
            state.total_batches += 1
            batches.open_rng, batches.done = None, batches.done + 1
            if bus.train_batch_end:
                bus.train_batch_end(_train_batch_end(trainer.view, outputs, batch, batch_idx))
            if metrics.pending:  # the step's row, with what the train_batch_end handlers logged
                metrics.flush()
            validated = bool(validation.every) and validation.due(batch_idx + 1)
            if validated:
                _validate_during_fit(trainer)
            if several or trainer._checkpoint_requests or state.interrupted:
                _boundary(trainer, now=validated)
            if (state.should_stop or loop.max_steps != -1) and _should_stop(trainer):
                batches.stop()
                break
    except BaseException as exc:
        batches.failed(exc)
        raise
    finally:
        batches.close()

    if batches.cut:
        # A stop cut the epoch short. Its end still runs below, as in Lightning (train_epoch_end fires and
        # current_epoch goes up; epoch-interval schedulers do not step), but the checkpoints written from now on
        # record the truth: this epoch at this batch, the states as they are now, an open window unstepped.
        trainer._stop_record = checkpointing.record_stop(trainer)
    else:
        step.finish()  # the last, partial accumulation window of a loader without length
    state.epoch_loop_done = True
    if validation.at_epoch_end and batches.done:
        _validate_during_fit(trainer)  # loaders without length validate at the end of the epoch
    _end_epoch(trainer, epoch, step_schedulers=module.automatic_optimization and not batches.cut)


def _start_epoch(trainer: Trainer, epoch: int) -> ResumePoint | None:
    """The epoch's start: a restored checkpoint's RNG states, ``train_epoch_start``, the Module in training mode.
    Returns the restored position when the epoch continues one saved in its middle."""
    resume = trainer._resume_point
    if resume is not None and not resume.mid_epoch:
        trainer._resume_point = None
        resume.begin_epoch(trainer)  # saved between epochs: the RNG states as they were then
        resume = None
    bus = trainer._bus
    if bus.train_epoch_start:
        trainer._epoch_starting = True  # set_accumulation is allowed now
        try:
            bus.train_epoch_start(ev.TrainEpochStart(trainer.view, epoch))
        finally:
            trainer._epoch_starting = False
    trainer.module.train()
    trainer._metrics.context = "train"
    return resume


def _end_epoch(trainer: Trainer, epoch: int, step_schedulers: bool) -> None:
    """The epoch's metrics, ``train_epoch_end``, epoch-interval schedulers (not after a stop that cut the epoch
    short)."""
    bus, metrics = trainer._bus, trainer._metrics
    metrics.context = "train"
    metrics.end_epoch(write=False)
    metrics.context = "train_epoch_end"  # self.log defaults to per-epoch here, as in Lightning
    if bus.train_epoch_end:
        bus.train_epoch_end(ev.TrainEpochEnd(trainer.view, epoch))
    metrics.end_epoch()
    metrics.context = None
    if step_schedulers:
        _step_schedulers(trainer, "epoch")


class _EpochBatches:
    """The batches of one training epoch, as ``(batch_idx, batch)``: from the first, or, when a checkpoint saved
    in the middle of the epoch was restored, from the one after the last batch done before the save.

    While a batch runs it keeps the position before it (torch's RNG state, whether an accumulation window was
    open, the step count): a batch that does not finish is rewound to it (:meth:`failed`, :meth:`skip`), so a
    checkpoint written then records the position before that batch."""

    def __init__(self, trainer: Trainer, epoch: int, step: _Step, resume: ResumePoint | None) -> None:
        self.trainer, self.epoch, self.step = trainer, epoch, step
        self.end = trainer.num_training_batches
        if resume is None:
            trainer.state.epoch_rng = epoch_start_states(trainer.train_dataloader)  # once per epoch, for checkpoints
            self.iterator: Iterator[Any] = iter(trainer.train_dataloader)
            self.done = 0
        else:
            trainer._resume_point = None
            self.iterator = resume.continue_epoch(trainer)
            self.done = resume.epoch_batches
        self.stopped = False  # the epoch ended by a stop, not by running out of batches
        self.open_rng: torch.Tensor | None = None  # torch's RNG state before the running batch (a cheap copy)
        self.window_open, self.steps_before = False, 0

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        state, step, iterator = self.trainer.state, self.step, self.iterator
        get_rng_state = torch.default_generator.get_state  # torch.get_rng_state without its Python level
        while self.done < self.end:
            self.open_rng, self.window_open, self.steps_before = get_rng_state(), step.pending, state.global_step
            try:
                batch = next(iterator)
            except StopIteration:
                self.open_rng = None
                return
            state.batch_idx = self.done
            yield self.done, batch

    def finished(self) -> None:
        """The running batch is done: its step (if any) taken, nothing left to rewind (inlined in
        :func:`train_epoch`'s loop; keep the two alike)."""
        self.trainer.state.total_batches += 1
        self.open_rng = None
        self.done += 1

    def stop(self) -> None:
        self.stopped = True
        self.end = self.done

    @property
    def cut(self) -> bool:
        """A stop ended the epoch before its last batch."""
        return self.stopped and self.done < self.trainer.num_training_batches

    def skip(self, reason: str) -> None:
        """The running batch is skipped before its step (a stop requested in its ``train_batch_start``)."""
        assert self.open_rng is not None  # a batch is running
        self.trainer._open_batch = OpenBatch(self.epoch, self.done, self.open_rng, self.window_open, False, reason)
        self.open_rng = None
        self.stopped = True

    def failed(self, exc: BaseException) -> None:
        """The running batch raised (an exception, a second Ctrl-C, a non-finite loss). Before its optimizer
        step it did not happen: its logged values are dropped and a checkpoint records the position before it.
        After the step it did: it counts as done and the gradients its step consumed are dropped. Nothing to do
        when no batch was running (the failure was in a validation or at a step boundary)."""
        if self.open_rng is None:
            return
        trainer, state = self.trainer, self.trainer.state
        if state.global_step != self.steps_before:
            state.total_batches += 1
            if trainer.module.automatic_optimization:
                for param in trainer.module.parameters():
                    param.grad = None
            return
        trainer._metrics.rollback()
        text = str(exc).strip().splitlines()
        reason = f"it raised {type(exc).__name__}" + (f": {text[0]}" if text else "")
        trainer._open_batch = OpenBatch(self.epoch, self.done, self.open_rng, self.window_open, True, reason)

    def close(self) -> None:
        # Now, not at some later garbage collection (which can stall for seconds): an exception leaving the
        # epoch shuts the loader's worker processes down on its way out.
        del self.iterator


class _ValidationSchedule:
    """When validation runs during this epoch: after every ``val_check_interval`` batches (of the epoch, or of
    the run with ``check_val_every_n_epoch=None``), on the epochs ``check_val_every_n_epoch`` selects; at the
    epoch's end for a loader without length; never without validation data."""

    __slots__ = ("state", "every", "across_epochs", "at_epoch_end")

    def __init__(self, trainer: Trainer, epoch: int) -> None:
        loop, every = trainer._loop, _val_check_batches(trainer)
        self.state = trainer.state
        self.across_epochs = loop.check_val_every_n_epoch is None
        this_epoch = every is not None and (self.across_epochs or (epoch + 1) % loop.check_val_every_n_epoch == 0)  # type: ignore[operator]
        self.every: int = every if this_epoch and every is not None else 0
        self.at_epoch_end = this_epoch and every == 0

    def due(self, done_in_epoch: int) -> bool:
        """After the batch that made ``done_in_epoch`` batches of this epoch (and the run's count in state)."""
        every = self.every
        return bool(every) and (self.state.total_batches if self.across_epochs else done_in_epoch) % every == 0


def _val_check_batches(trainer: Trainer) -> int | None:
    """Validate after every this many training batches (0: at the end of an epoch of unknown length;
    ``None``: never, there is no validation data)."""
    if not trainer._val_loaders or not any(trainer.num_val_batches):
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


def _validate_during_fit(trainer: Trainer) -> None:
    # Until its batches are done it counts as not run: a checkpoint written meanwhile (after Ctrl-C in it)
    # records the RNG states from before it, and the resumed run runs it again (see ``evaluate``).
    trainer._validation_rng = _resume.rng_states(trainer.train_dataloader)
    evaluate(trainer, "validation", trainer._val_loaders, trainer.num_val_batches)
    trainer.module.train()
    trainer._metrics.context = "train"


# -- the step boundary --------------------------------------------------------------------------------


def _boundary(trainer: Trainer, now: bool = False) -> None:
    """After a batch (and its validation) and after an epoch: requested checkpoints are served, then a Ctrl-C
    stops the run. With several processes, what any rank decided holds on all of them (:func:`_agree`); ``now``:
    agree here and wait for it (after a validation, at an epoch's end)."""
    serve = bool(trainer._checkpoint_requests)
    if trainer.strategy.world_size > 1:
        serve = _agree(trainer, now)
    if serve:
        trainer._serve_checkpoint_requests()
    _raise_if_interrupted(trainer)


def _raise_if_interrupted(trainer: Trainer) -> None:
    """After Ctrl-C, no further event but ``keyboard_interrupt`` and ``teardown``."""
    if trainer.state.interrupted:
        raise Interrupted


def _agree(trainer: Trainer, now: bool) -> bool:
    """Several processes, at a step boundary: a Ctrl-C or a stop seen on any rank holds on every rank, at the
    same batch, without a collective of Surge's own on every step.

    Every ``strategy.agreement_interval`` training batches (counted over the run, so at the same boundaries on
    every rank) this rank's flags (Ctrl-C, stop, "holds no checkpoint request") start an all-reduce (max) that
    overlaps the next batch, whose answer is applied at the next boundary; after a validation and at an
    epoch's end (``now``) the ranks agree there and wait for the answer, so that what validation or the epoch's
    end decided (an early stop) holds before the next batch, as with one process. In between, ``should_stop``
    and ``interrupted`` hold what was agreed, not what this rank decided alone: a decision is kept for the next
    agreement. Returns whether to serve checkpoint requests now: only once every rank held one (a save is
    collective; SIGTERM reaches every rank, maybe a step apart)."""
    state, agreed, unagreed = trainer.state, trainer._agreed, trainer._unagreed
    unagreed[0] |= state.interrupted
    unagreed[1] |= state.should_stop and not agreed[1]
    serve = False
    started = trainer._agreement
    if started is not None:  # started at the last boundary, overlapping the batch since
        trainer._agreement = None
        serve = _apply(trainer, started())
    if now or state.total_batches % max(1, trainer.strategy.agreement_interval) == 0:
        has_request = bool(trainer._checkpoint_requests) and not serve  # served now, then held no more
        flags = [max(unagreed[0], agreed[0]), max(unagreed[1], agreed[1]), int(not has_request)]
        answer = trainer.strategy.reduce_async(torch.tensor(flags, device=trainer.strategy.root_device), "max")
        if now:
            serve = _apply(trainer, answer()) or serve
        else:
            trainer._agreement = answer
    state.interrupted, state.should_stop = bool(agreed[0]), bool(agreed[1])
    return serve


def _apply(trainer: Trainer, answer: torch.Tensor) -> bool:
    """An agreement's answer: the run's agreed flags; whether every rank held a checkpoint request."""
    state, agreed = trainer.state, trainer._agreed
    interrupted, stop, no_request = (int(v) for v in answer.tolist())
    if stop and not agreed[1] and not trainer._unagreed[1]:
        state.stop_reason = state.stop_reason or "stop requested on another process"
    agreed[0], agreed[1] = max(agreed[0], interrupted), max(agreed[1], stop)
    return not no_request


# -- the step: automatic, manual, truncated back-propagation through time ---------------------------------


class _Step:
    """What one training batch does, chosen per epoch (:func:`_step_function`): ``step(batch, batch_idx)``
    returns what ``training_step`` returned. ``pending``: gradients accumulated and not yet stepped."""

    __slots__ = ("trainer", "training_step", "precision", "device", "pending")

    def __init__(self, trainer: Trainer, training_step: Callable[..., Any]) -> None:
        self.trainer, self.training_step, self.pending = trainer, training_step, False
        self.precision, self.device = trainer.precision_plugin, trainer.strategy.root_device

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        """Manual optimization: the optimizer steps are the user's; the autocast is ours."""
        with self.precision.autocast(self.device):
            return self.training_step(batch, batch_idx)

    def finish(self) -> None:
        """At the epoch's end (not after a stop): step what is still accumulated."""
        if self.pending:
            optimization_step(self.trainer)
            self.pending = False


class _Automatic(_Step):
    """Forward and backward; every ``accumulate`` batches (and at the epoch's last), the optimizer step."""

    __slots__ = ("accumulate", "last", "unknown_length")

    def __init__(self, trainer: Trainer, training_step: Callable[..., Any], accumulate: int, pending: bool) -> None:
        super().__init__(trainer, training_step)
        self.accumulate, self.pending = accumulate, pending
        self.last = trainer.num_training_batches - 1
        self.unknown_length = math.isinf(self.last)  # such an epoch may end at any batch: keep synchronising

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        trainer, accumulate = self.trainer, self.accumulate
        steps = (batch_idx + 1) % accumulate == 0 or batch_idx == self.last
        synchronise = (
            trainer.strategy.accumulation_context(steps or self.unknown_length) if accumulate > 1 else _NO_CONTEXT
        )
        with synchronise:
            with self.precision.autocast(self.device):
                outputs = self.training_step(batch, batch_idx)
            loss = _loss_of(outputs)
            if loss is not None:
                trainer._backward(loss / accumulate if accumulate > 1 else loss)
        if loss is not None:
            self.pending = True
            if steps:
                optimization_step(trainer)
                self.pending = False
        return outputs


class _Plain(_Step):
    """:class:`_Automatic` for the common run, inlined: no accumulation, the full-precision plugin (no autocast,
    no scaling), no handler of the backward or optimizer-step events, no gradient clipping, one optimizer without
    a per-step scheduler. Chosen per epoch (:func:`_step_function`): what a plugin or the Module changes at an
    epoch's start is seen; what changes in the middle of one (a handler subscribing to those events then) is not,
    as for the other steps' choices."""

    __slots__ = ("optimizer", "state")

    def __init__(self, trainer: Trainer, training_step: Callable[..., Any]) -> None:
        super().__init__(trainer, training_step)
        self.optimizer, self.state = trainer.optimizers[0], trainer.state

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        outputs = self.training_step(batch, batch_idx)
        loss = outputs if type(outputs) is _TENSOR else _loss_of(outputs)
        if loss is not None:
            loss.backward()
            optimizer = self.optimizer
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            self.state.global_step += 1
        return outputs


def _plain(trainer: Trainer, accumulate: int) -> bool:
    """Whether this epoch's automatic optimization may take :class:`_Plain`'s inlined step."""
    bus, precision = trainer._bus, trainer.precision_plugin
    return (
        accumulate == 1
        and type(precision) is Precision
        and len(trainer.optimizers) == 1
        and not trainer.config.gradient_clip_val
        and not any(config.interval == "step" for config in trainer.lr_scheduler_configs)
        and not (bus.before_backward or bus.after_backward or bus.before_optimizer_step or bus.after_optimizer_step)
        and not (bus.before_zero_grad or bus.after_zero_grad)
    )


class _TruncatedBPTT(_Step):
    """Truncated back-propagation through time: one forward, backward and optimizer step per time split, the
    hidden state carried from split to split with its graph cut. Returns the last split's output."""

    __slots__ = ("split_size",)

    def __init__(self, trainer: Trainer, training_step: Callable[..., Any], split_size: int) -> None:
        super().__init__(trainer, training_step)
        self.split_size = split_size

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        trainer, hiddens, outputs = self.trainer, None, None
        for split in trainer.module.tbptt_split_batch(batch, self.split_size):
            with self.precision.autocast(self.device):
                outputs = self.training_step(split, batch_idx, hiddens)
            loss = _loss_of(outputs)
            hiddens = _detached(outputs.get("hiddens")) if isinstance(outputs, dict) else None
            if loss is not None:
                trainer._backward(loss)
                optimization_step(trainer)
        return outputs


class _Closure:
    """The ``optimizer_closure`` the Module's ``optimizer_step`` gets, as Lightning's: calling it runs
    ``training_step`` and the backward pass of its loss (divided for accumulation) and returns that loss, detached
    (``None`` when ``training_step`` returned ``None``). It remembers whether it ran and what the step returned."""

    __slots__ = ("step", "batch", "batch_idx", "sync", "extra", "ran", "outputs", "loss")

    def __init__(self, step: _Hooked | None, batch: Any, batch_idx: int, sync: bool, *extra: Any) -> None:
        self.step, self.batch, self.batch_idx, self.sync, self.extra = step, batch, batch_idx, sync, extra
        self.ran, self.outputs, self.loss = False, None, None

    def __call__(self) -> torch.Tensor | None:
        if self.step is None:  # the step of a window left open at the end of an epoch of unknown length
            self.ran = True
            return None
        if self.ran:  # an optimizer evaluating it again (LBFGS): the gradients are computed afresh
            self.step.zero_grad_again(self.batch_idx)
        self.ran = True
        with torch.enable_grad():  # an optimizer may call it from a no-grad context
            self.outputs, self.loss = self.step.forward_backward(self.batch, self.batch_idx, self.sync, *self.extra)
        return None if self.loss is None else self.loss.detach()


class _Hooked(_Automatic):
    """Automatic optimization in Lightning's shape, for a Module that overrides ``optimizer_step``,
    ``optimizer_zero_grad``, ``backward`` or ``configure_gradient_clipping``, or an optimizer that calls the
    closure itself (LBFGS); :class:`_Automatic` otherwise. On
    the batch that completes a window, ``module.optimizer_step(epoch, batch_idx, optimizer, closure)`` with the
    wrapped optimizer and a :class:`_Closure` over the batch; the window's other batches run the closure alone.
    The optimizer's ``step`` is :func:`step_with_closure`. After ``optimizer_step`` (whether or not it stepped,
    as in Lightning): the zero-grad events around ``module.optimizer_zero_grad``, ``global_step``, schedulers."""

    __slots__ = ("module", "epoch", "optimizer", "wrapper", "backward", "last_idx")

    def __init__(
        self, trainer: Trainer, training_step: Callable[..., Any], accumulate: int, pending: bool, epoch: int
    ) -> None:
        super().__init__(trainer, training_step, accumulate, pending)
        module = trainer.module
        self.module, self.epoch, self.last_idx = module, epoch, -1
        self.optimizer = trainer.optimizers[0]
        self.wrapper = module.optimizers()  # what self.optimizers() returns: Lightning hands over the same object
        overridden = "backward" in trainer._overridden
        self.backward = trainer._backward_through_module if overridden else trainer._backward

    def forward_backward(self, batch: Any, batch_idx: int, sync: bool, *extra: Any) -> tuple[Any, Any]:
        """``training_step`` and the backward pass of its loss; returns its output and the loss back-propagated."""
        accumulate = self.accumulate
        synchronise = self.trainer.strategy.accumulation_context(sync) if accumulate > 1 else _NO_CONTEXT
        with synchronise:
            with self.precision.autocast(self.device):
                outputs = self.training_step(batch, batch_idx, *extra)
            loss = _loss_of(outputs)
            if loss is not None:
                if accumulate > 1:
                    loss = loss / accumulate
                self.backward(loss)
        return outputs, loss

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        steps = (batch_idx + 1) % self.accumulate == 0 or batch_idx == self.last
        closure = _Closure(self, batch, batch_idx, steps or self.unknown_length)
        self.last_idx = batch_idx
        if steps:
            self.optimize(closure, batch_idx)
        else:
            closure()
            if closure.loss is not None:
                self.pending = True
        return closure.outputs

    def zero_grad_again(self, batch_idx: int) -> None:
        """Before the closure runs again within one step (as Lightning's closure does each time it runs)."""
        if self.accumulate > 1:
            raise SurgeError(
                f"the optimizer ({type(self.optimizer).__name__}) evaluates optimizer_closure several times per "
                f"step, which cannot be combined with accumulate_grad_batches={self.accumulate}: each evaluation "
                "must start from zero gradients. Set accumulate_grad_batches=1"
            )
        self.zero_grad(batch_idx)

    def zero_grad(self, batch_idx: int) -> None:
        trainer, optimizer = self.trainer, self.optimizer
        bus = trainer._bus
        if bus.before_zero_grad:
            bus.before_zero_grad(ev.BeforeZeroGrad(trainer.view, optimizer, 0))
        self.module.optimizer_zero_grad(self.epoch, batch_idx, optimizer)
        if bus.after_zero_grad:
            bus.after_zero_grad(ev.AfterZeroGrad(trainer.view, optimizer, 0))

    def optimize(self, closure: _Closure, batch_idx: int) -> None:
        trainer, epoch = self.trainer, self.epoch
        self.module.optimizer_step(epoch, batch_idx, self.wrapper, closure)
        if not closure.ran:
            raise SurgeError(
                f"{type(self.module).__name__}.optimizer_step(epoch={epoch}, batch_idx={batch_idx}, ...) returned "
                "without running optimizer_closure, so training_step did not run for this batch (Lightning raises "
                "here too). Pass it on, optimizer.step(closure=optimizer_closure), or call optimizer_closure() to "
                "compute the gradients without stepping"
            )
        self.pending = False
        self.zero_grad(batch_idx)
        trainer.state.global_step += 1
        if trainer.lr_scheduler_configs and not self.precision.last_step_skipped:
            _step_schedulers(trainer, "step")

    def finish(self) -> None:
        if self.pending:  # the batch that ended the window has passed: the closure has nothing left to run
            self.optimize(_Closure(None, None, self.last_idx, True), self.last_idx)


class _HookedTBPTT(_Hooked):
    """:class:`_TruncatedBPTT` in Lightning's shape: ``optimizer_step`` once per time split (as the seed called
    it), with the split's closure."""

    __slots__ = ("split_size",)

    def __init__(self, trainer: Trainer, training_step: Callable[..., Any], split_size: int, epoch: int) -> None:
        super().__init__(trainer, training_step, 1, False, epoch)
        self.split_size = split_size

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        hiddens, outputs = None, None
        for split in self.module.tbptt_split_batch(batch, self.split_size):
            closure = _Closure(self, split, batch_idx, True, hiddens)
            self.optimize(closure, batch_idx)
            outputs = closure.outputs
            hiddens = _detached(outputs.get("hiddens")) if isinstance(outputs, dict) else None
        return outputs


def step_with_closure(trainer: Trainer, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
    """The optimizer step of automatic optimization as the Module's ``optimizer_step`` asks for it
    (``optimizer.step(closure=...)``), in Lightning's order: the closure (through the precision plugin, which
    hands it to the optimizer or runs it first), then ``before_optimizer_step`` and the Module's
    ``configure_gradient_clipping``, then the update, then ``after_optimizer_step``. The same as
    :func:`optimization_step`'s first half otherwise."""
    bus, precision, config = trainer._bus, trainer.precision_plugin, trainer.config
    clip = config.gradient_clip_val
    algorithm = config.gradient_clip_algorithm if "gradient_clip_algorithm" in config.model_fields_set else None

    def closure_then_clip() -> Any:
        result = closure() if closure is not None else None
        if clip:
            precision.unscale_gradients(optimizer)  # true-scale gradients for handlers and for clipping
        if bus.before_optimizer_step:
            bus.before_optimizer_step(ev.BeforeOptimizerStep(trainer.view, optimizer, 0))
        trainer.module.configure_gradient_clipping(optimizer, gradient_clip_val=clip, gradient_clip_algorithm=algorithm)
        return result

    result = precision.optimizer_step(optimizer, closure_then_clip)
    if bus.after_optimizer_step:
        bus.after_optimizer_step(ev.AfterOptimizerStep(trainer.view, optimizer, 0))
    return result


def batch_transfer(trainer: Trainer, dataloader_idx: int) -> Callable[[Any], Any] | None:
    """How a batch of loader ``dataloader_idx`` reaches the device when the Module or the DataModule overrides a
    batch-transfer step, in Lightning's order: the precision's input conversion, ``on_before_batch_transfer``,
    ``transfer_batch_to_device`` (or the strategy's move), ``on_after_batch_transfer``. ``None`` otherwise: the
    loops then move it as they always do."""
    steps = trainer._batch_steps
    if not steps:
        return None
    strategy, precision = trainer.strategy, trainer.precision_plugin
    before, move, after = (steps.get(name) for name in BATCH_TRANSFER_STEPS)
    device = strategy.root_device

    def transfer(batch: Any) -> Any:
        batch = precision.convert_input(batch)
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = strategy.batch_to_device(batch) if move is None else move(batch, device, dataloader_idx)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch

    return transfer


def _default_transfer(strategy: Strategy, precision: Precision) -> Callable[[Any], Any]:
    """The strategy's move and the precision's input conversion. With neither overridden and the run on the
    CPU, a batch of tensors that are all there already is returned as it is, checked without a call per tensor
    (the common case: a loader's collated batch): the full move is taken only when one is not."""
    move, convert = strategy.batch_to_device, precision.convert_input
    plain = type(strategy).batch_to_device is Strategy.batch_to_device
    if plain and type(precision).convert_input is Precision.convert_input:
        if strategy.root_device.type != "cpu":
            return move
        tensor = torch.Tensor

        def on_cpu(batch: Any) -> Any:
            kind = type(batch)
            if kind is list or kind is tuple:
                for item in batch:
                    if type(item) is not tensor or not item.is_cpu:
                        return move(batch)
                return batch
            return batch if kind is tensor and batch.is_cpu else move(batch)

        return on_cpu
    return lambda batch: convert(move(batch))


def _step_function(trainer: Trainer, epoch: int, pending: bool) -> _Step:
    """This epoch's step, after ``train_epoch_start`` (where a plugin may change the accumulation factor).
    ``pending``: gradients restored from a checkpoint saved inside an accumulation window (automatic
    optimization only: restored in manual optimization, they are the user's to step)."""
    module = trainer.module
    training_step = trainer.strategy.wrap_training_step(module)  # the module's own method, or a DDP wrapper's
    if not trainer._takes_batch_idx.get("training_step", True):  # `training_step(self, batch)`
        training_step = _batch_only(training_step)
    accumulate = trainer.accumulate_grad_batches
    if not isinstance(accumulate, int) or accumulate < 1:
        raise SurgeError(f"trainer.accumulate_grad_batches is {accumulate!r} for epoch {epoch}; it must be an int >= 1")
    if not module.automatic_optimization:
        return _Step(trainer, training_step)
    # Lightning's shape when the Module overrides one of its steps or the optimizer calls the closure itself
    # (LBFGS); else the inlined steps, which cost less
    hooked = not trainer._overridden.isdisjoint(OPTIMIZATION_STEPS) or isinstance(
        trainer.optimizers[0], torch.optim.LBFGS
    )
    tbptt = module.truncated_bptt_steps
    if not tbptt:
        if hooked:
            return _Hooked(trainer, training_step, accumulate, pending, epoch)
        if not pending and _plain(trainer, accumulate):
            return _Plain(trainer, training_step)
        return _Automatic(trainer, training_step, accumulate, pending)
    if accumulate > 1:
        raise SurgeError(
            f"{type(module).__name__}.truncated_bptt_steps={tbptt} steps the optimizer once per time split; it "
            f"cannot be combined with accumulate_grad_batches={accumulate} (set one of them back to its default)"
        )
    return (
        _HookedTBPTT(trainer, training_step, tbptt, epoch) if hooked else _TruncatedBPTT(trainer, training_step, tbptt)
    )


def _loss_of(outputs: Any) -> torch.Tensor | None:
    if outputs is None or isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict) and "loss" in outputs:
        return outputs["loss"]  # type: ignore[no-any-return]
    raise SurgeError(
        f"training_step returned {type(outputs).__name__}; return the loss tensor, a dict with a 'loss' "
        "entry, or None to skip the batch"
    )


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
        bus.before_optimizer_step(ev.BeforeOptimizerStep(trainer.view, optimizer, 0))
    if clip:
        clip_gradients(optimizer, clip, trainer.config.gradient_clip_algorithm)
    precision.optimizer_step(optimizer)
    if bus.after_optimizer_step:
        bus.after_optimizer_step(ev.AfterOptimizerStep(trainer.view, optimizer, 0))
    if bus.before_zero_grad:
        bus.before_zero_grad(ev.BeforeZeroGrad(trainer.view, optimizer, 0))
    optimizer.zero_grad(set_to_none=True)
    if bus.after_zero_grad:
        bus.after_zero_grad(ev.AfterZeroGrad(trainer.view, optimizer, 0))
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
    """``when``: 'step' after an optimizer step, 'epoch' at an epoch's end (after its validation). Each step is
    the Module's ``lr_scheduler_step(scheduler, metric)`` when it overrides it."""
    state = trainer.state
    hook = trainer.module.lr_scheduler_step if "lr_scheduler_step" in trainer._overridden else None
    for config in trainer.lr_scheduler_configs:
        if config.interval != when:
            continue
        count = state.global_step if when == "step" else state.current_epoch + 1
        if count % config.frequency:
            continue
        if config.monitor is None:
            if hook is None:
                config.scheduler.step()
            else:
                hook(config.scheduler, None)
            continue
        value = trainer.callback_metrics.get(config.monitor)
        if value is None:
            if config.strict:
                raise SurgeError(
                    f"the lr scheduler monitors '{config.monitor}', which was not logged; logged metrics: "
                    f"{sorted(trainer.callback_metrics) or 'none'}. Log it with self.log or set strict=False"
                )
            continue
        if hook is None:
            config.scheduler.step(value)
        else:
            hook(config.scheduler, value)


def _hook_manual_optimizers(trainer: Trainer) -> list[Any]:
    """In manual optimization, count steps and fire the optimizer-step events from the optimizers' hooks."""
    handles = []
    for idx, optimizer in enumerate(trainer.optimizers):

        def pre(opt: Any, args: Any, kwargs: Any, idx: int = idx) -> None:
            if trainer._bus.before_optimizer_step:
                trainer._bus.before_optimizer_step(ev.BeforeOptimizerStep(trainer.view, opt, idx))

        def post(opt: Any, args: Any, kwargs: Any, idx: int = idx) -> None:
            if trainer._bus.after_optimizer_step:
                trainer._bus.after_optimizer_step(ev.AfterOptimizerStep(trainer.view, opt, idx))
            trainer.state.global_step += 1

        handles += [optimizer.register_step_pre_hook(pre), optimizer.register_step_post_hook(post)]
    return handles


_NO_CONTEXT = contextlib.nullcontext()
_TENSOR = torch.Tensor


# -- validation, test, predict --------------------------------------------------------------------------


class _StageEvents(NamedTuple):
    """The six events of one evaluation stage, as payload classes (each one's name is its bus attribute)."""

    start: type[ev.Event]
    epoch_start: type[ev._EpochEvent]
    batch_start: type[ev._EvalBatchStart]
    batch_end: type[ev._EvalBatchEnd]
    epoch_end: type[ev._EpochEvent]
    end: type[ev.Event]


_STAGES = {
    "validation": _StageEvents(
        ev.ValidationStart,
        ev.ValidationEpochStart,
        ev.ValidationBatchStart,
        ev.ValidationBatchEnd,
        ev.ValidationEpochEnd,
        ev.ValidationEnd,
    ),
    "test": _StageEvents(
        ev.TestStart, ev.TestEpochStart, ev.TestBatchStart, ev.TestBatchEnd, ev.TestEpochEnd, ev.TestEnd
    ),
    "predict": _StageEvents(
        ev.PredictStart,
        ev.PredictEpochStart,
        ev.PredictBatchStart,
        ev.PredictBatchEnd,
        ev.PredictEpochEnd,
        ev.PredictEnd,
    ),
}
_STEP_METHOD = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}
_STEP_METHODS = ("training_step", *_STEP_METHOD.values())


def evaluate(trainer: Trainer, stage: str, loaders: list[Any], limits: list[float]) -> Any:
    """One pass of ``stage`` ('validation', 'test' or 'predict') over ``loaders``.

    Returns one dict of epoch metrics per loader (predict: the predictions, a list per loader when several).
    """
    bus, state, metrics = trainer._bus, trainer.state, trainer._metrics
    module, strategy, precision = trainer.module, trainer.strategy, trainer.precision_plugin
    events = _STAGES[stage]
    start, epoch_start, batch_start, batch_end, epoch_end, end = (bus.dispatcher(cls) for cls in events)
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
    inference = trainer.config.inference_mode and strategy.inference_mode_ok
    inference = inference and strategy.accelerator.inference_mode_ok  # the device the strategy runs on
    with torch.inference_mode() if inference else torch.no_grad():
        if start:
            start(events.start(trainer.view))
        if epoch_start:
            epoch_start(events.epoch_start(trainer.view, state.current_epoch))
        for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
            metrics.dataloader_idx = dl_idx if several else None
            done = 0
            transfer = batch_transfer(trainer, dl_idx)
            for batch in itertools.islice(loader, math.ceil(limit) if limit != math.inf else None):
                if transfer is None:
                    batch = precision.convert_input(strategy.batch_to_device(batch))
                else:
                    batch = transfer(batch)
                metrics.new_batch(batch)
                if batch_start:
                    batch_start(events.batch_start(trainer.view, batch, done, dl_idx))
                with precision.autocast(strategy.root_device):
                    outputs = step(batch, done, dl_idx) if several else step(batch, done)
                if stage == "predict" and trainer._keep_predictions:
                    predictions[dl_idx].append(outputs)
                if batch_end:
                    batch_end(events.batch_end(trainer.view, outputs, batch, done, dl_idx))
                if metrics._step and not state.sanity_checking:  # on_step values: a row per batch, as Lightning
                    metrics.end_step(write=True, step=metrics.eval_steps.get(dl_idx, 0) + done)
                done += 1
                if single:  # several processes stop together at the next training step boundary instead
                    _raise_if_interrupted(trainer)
            if not state.sanity_checking:  # Lightning's step numbers run on across a fit's validations
                metrics.eval_steps[dl_idx] = metrics.eval_steps.get(dl_idx, 0) + done
        metrics.dataloader_idx = None
        if trainer._validation_rng is not None:  # a validation during fit ran all its batches: it counts as run
            state.validated_at, trainer._validation_rng = state.total_batches, None
        results = _publish(trainer, write=False)
        if epoch_end:
            epoch_end(events.epoch_end(trainer.view, state.current_epoch))
        results.update(_publish(trainer, reset=False))
        if end:
            end(events.end(trainer.view))
        metrics.reset_objects()  # the torchmetrics objects logged, after the *_end handlers, as Lightning resets them
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


def _publish(trainer: Trainer, write: bool = True, reset: bool = True) -> dict[str, tuple[torch.Tensor, int | None]]:
    """Reduce what was logged in this evaluation pass; the sanity check's values go to ``callback_metrics`` only,
    until the check ends (:func:`_sanity_check`), and are no result."""
    if trainer.state.sanity_checking:
        trainer._metrics.end_epoch(write=False, check=True)
        return {}
    return trainer._metrics.end_epoch(write, reset)


def _per_loader(results: dict[str, tuple[torch.Tensor, int | None]], count: int) -> list[dict[str, Any]]:
    """Lightning's return value of validate/test: one dict per loader, as Lightning's result collection
    decides: dict *i* holds what was logged while loader *i* ran (under whatever name), and every dict holds
    what was logged outside the loaders' batches (``*_epoch_end``). A float per scalar metric, a list for a
    tensor-valued one."""
    return [
        {
            key: float(value.item()) if value.numel() == 1 else value.tolist()
            for key, (value, loader) in results.items()
            if loader is None or loader == idx
        }
        for idx in range(count)
    ]
