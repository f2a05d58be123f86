"""The hook specifications: Surge's public contract with plugins.

One hook per lifecycle event, each taking a single argument ``event``, a frozen dataclass from
:mod:`surge.events`. Each docstring says when the hook fires, what the handler may change, and what its
return value means (for every hook: nothing, it is ignored).

Implement a hook by defining a function or method of the same name marked with :func:`surge.hookimpl`::

    class Stopper:
        @surge.hookimpl
        def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
            if event.trainer.global_step >= 100:
                event.trainer.request_stop("enough")

Order of handlers: providers, then participants, then the user's Module, then observers (loggers,
progress); ``tryfirst``/``trylast`` move a handler within its tier; ``before=``/``after=`` name other
plugins (see :func:`surge.hookimpl`).

Besides the events, the questions at the end of this module are value-returning hooks (``firstresult``: the
first answer that is not ``None`` is taken). What else a plugin object may carry (``state_dict`` with
``load_state_dict`` and ``state_key``, ``surge_name``, ``surge_kind``, ``surge_unused_hooks``, a profiler's
``handler_timer``) is typed in :mod:`surge.events.protocols` and checked when the object joins a run. Events a
plugin publishes are declared in its ``surge.Plugin(events=[...])``; their classes carry their contract.
"""

from __future__ import annotations

import pluggy

from surge import events as ev

hookspec = pluggy.HookspecMarker("surge")


@hookspec
def init_start(event: ev.InitStart) -> None:
    """In ``Trainer(...)``, as soon as its arguments are validated, its plugins activated and its bus built: before
    it checks the plugins' state keys and builds its run state (metrics, data slots, accumulation). ``trainer.state``
    exists (all counters at zero); the Module and the data do not.

    May change: Nothing: the trainer is not ready to run. Use it to check the configuration.
    """


@hookspec
def init_end(event: ev.InitEnd) -> None:
    """At the end of ``Trainer(...)``, once accelerator, strategy and precision are chosen.

    May change: Nothing.
    """


@hookspec
def setup(event: ev.Setup) -> None:
    """At the start of ``fit``/``validate``/``test``/``predict``, after the model is on its device and before any data is read. ``event.stage`` names the entry point. The user's ``Module.setup(stage)`` and ``DataModule.setup(stage)`` run here.

    May change: Handlers may prepare state for the stage.
    """


@hookspec
def fit_start(event: ev.FitStart) -> None:
    """Once per ``fit``, after ``setup`` and the optimizers are configured, before the sanity check.

    May change: Nothing.
    """


@hookspec
def sanity_check_start(event: ev.SanityCheckStart) -> None:
    """Before the validation sanity check (``num_sanity_val_steps``). Skipped entirely when there is none.

    May change: Nothing; metrics logged during the sanity check are discarded.
    """


@hookspec
def sanity_check_end(event: ev.SanityCheckEnd) -> None:
    """After the validation sanity check. A stop requested during the sanity check is dropped here: the
    check only checks.

    May change: Nothing.
    """


@hookspec
def train_start(event: ev.TrainStart) -> None:
    """Before the first training epoch.

    May change: Nothing.
    """


@hookspec
def train_epoch_start(event: ev.TrainEpochStart) -> None:
    """At the start of every training epoch; ``event.epoch`` counts from 0.

    May change: Nothing.
    """


@hookspec
def train_batch_start(event: ev.TrainBatchStart) -> None:
    """Before ``training_step`` for every batch, after the batch is on the device.

    May change: A handler may call ``trainer.request_stop(reason)``; the stop takes effect at this step boundary.
    """


@hookspec
def before_backward(event: ev.BeforeBackward) -> None:
    """Before ``loss.backward()`` (in manual optimization: inside ``self.manual_backward(loss)``); ``event.loss`` is the loss already divided for gradient accumulation.

    May change: Nothing (the loss is read-only).
    """


@hookspec
def after_backward(event: ev.AfterBackward) -> None:
    """After the backward pass; gradients are populated (and still accumulating when ``accumulate_grad_batches > 1``).

    May change: Handlers may inspect gradients; changing them in place is allowed and is the documented way to transform gradients.
    """


@hookspec
def before_optimizer_step(event: ev.BeforeOptimizerStep) -> None:
    """Before ``optimizer.step()``: gradients are accumulated and unscaled (true scale), not yet clipped
    (``gradient_clip_val`` applies right after this event, as in Lightning).

    May change: Handlers may inspect or modify gradients in place.
    """


@hookspec
def after_optimizer_step(event: ev.AfterOptimizerStep) -> None:
    """After ``optimizer.step()``; gradients (clipped, if clipping is on) are still present and
    ``trainer.global_step`` is not yet incremented.

    May change: Nothing.
    """


@hookspec
def before_zero_grad(event: ev.BeforeZeroGrad) -> None:
    """Before the optimizer's gradients are reset, after each optimizer step.

    May change: Nothing.
    """


@hookspec
def after_zero_grad(event: ev.AfterZeroGrad) -> None:
    """After the optimizer's gradients are reset.

    May change: Nothing.
    """


@hookspec
def train_batch_end(event: ev.TrainBatchEnd) -> None:
    """After the training step (and the optimizer step, when this batch completes an accumulation window); ``event.outputs`` is what ``training_step`` returned.

    May change: A handler may call ``trainer.request_stop(reason)``, ``trainer.save_checkpoint(path)`` (a fit resumed from it continues exactly after this batch) or ``trainer.request_checkpoint(save, reason)``.
    """


@hookspec
def train_epoch_end(event: ev.TrainEpochEnd) -> None:
    """After the last training batch of the epoch and any validation run at the epoch's end; epoch-level metrics are in ``trainer.callback_metrics``.

    May change: A handler may call ``trainer.request_stop(reason)`` or ``trainer.save_checkpoint(path)`` (a fit resumed from it goes on with the next epoch).
    """


@hookspec
def train_end(event: ev.TrainEnd) -> None:
    """After the last training epoch.

    May change: Nothing.
    """


@hookspec
def validation_start(event: ev.ValidationStart) -> None:
    """Before a validation run: during ``fit`` (sanity check included), or from ``Trainer.validate``.

    May change: Nothing.
    """


@hookspec
def validation_epoch_start(event: ev.ValidationEpochStart) -> None:
    """At the start of a validation run, after the model is switched to eval mode.

    May change: Nothing.
    """


@hookspec
def validation_batch_start(event: ev.ValidationBatchStart) -> None:
    """Before ``validation_step`` for every batch.

    May change: Nothing.
    """


@hookspec
def validation_batch_end(event: ev.ValidationBatchEnd) -> None:
    """After ``validation_step``; ``event.outputs`` is what it returned.

    May change: Nothing.
    """


@hookspec
def validation_epoch_end(event: ev.ValidationEpochEnd) -> None:
    """After the last validation batch; epoch metrics are in ``trainer.callback_metrics``.

    May change: A handler may call ``trainer.request_stop(reason)`` (early stopping does).
    """


@hookspec
def validation_end(event: ev.ValidationEnd) -> None:
    """After a validation run, before the model returns to train mode.

    May change: A handler may call ``trainer.save_checkpoint(path)``; during ``fit``, a fit resumed from it continues after this validation.
    """


@hookspec
def test_start(event: ev.TestStart) -> None:
    """Before a test run (``Trainer.test``).

    May change: Nothing.
    """


@hookspec
def test_epoch_start(event: ev.TestEpochStart) -> None:
    """At the start of a test run.

    May change: Nothing.
    """


@hookspec
def test_batch_start(event: ev.TestBatchStart) -> None:
    """Before ``test_step`` for every batch.

    May change: Nothing.
    """


@hookspec
def test_batch_end(event: ev.TestBatchEnd) -> None:
    """After ``test_step``.

    May change: Nothing.
    """


@hookspec
def test_epoch_end(event: ev.TestEpochEnd) -> None:
    """After the last test batch; metrics are in ``trainer.callback_metrics``.

    May change: Nothing.
    """


@hookspec
def test_end(event: ev.TestEnd) -> None:
    """After a test run.

    May change: Nothing.
    """


@hookspec
def predict_start(event: ev.PredictStart) -> None:
    """Before a prediction run (``Trainer.predict``).

    May change: Nothing.
    """


@hookspec
def predict_epoch_start(event: ev.PredictEpochStart) -> None:
    """At the start of a prediction run.

    May change: Nothing.
    """


@hookspec
def predict_batch_start(event: ev.PredictBatchStart) -> None:
    """Before ``predict_step`` for every batch.

    May change: Nothing.
    """


@hookspec
def predict_batch_end(event: ev.PredictBatchEnd) -> None:
    """After ``predict_step``; ``event.outputs`` is the prediction.

    May change: Nothing.
    """


@hookspec
def predict_epoch_end(event: ev.PredictEpochEnd) -> None:
    """After the last prediction batch.

    May change: Nothing.
    """


@hookspec
def predict_end(event: ev.PredictEnd) -> None:
    """After a prediction run.

    May change: Nothing.
    """


@hookspec
def before_checkpoint_save(event: ev.BeforeCheckpointSave) -> None:
    """When a checkpoint dict has been assembled, before it is written. ``event.checkpoint`` is that dict.

    May change: A handler may add its own entry under its own key; it must not change or remove others' entries.
    """


@hookspec
def after_checkpoint_save(event: ev.AfterCheckpointSave) -> None:
    """After a checkpoint has been written and committed.

    May change: Nothing.
    """


@hookspec
def before_checkpoint_load(event: ev.BeforeCheckpointLoad) -> None:
    """After a checkpoint file is read and verified, before anything is restored from it.

    May change: A handler may migrate its own entry in ``event.checkpoint`` (for example from an older format).
    """


@hookspec
def after_checkpoint_load(event: ev.AfterCheckpointLoad) -> None:
    """After weights, optimizers, loop progress and plugin states are restored from ``event.checkpoint``.

    May change: A handler may read its own entry and restore anything not covered by ``load_state_dict``.
    """


@hookspec
def log_hyperparams(event: ev.LogHyperparams) -> None:
    """Once per ``fit``/``validate``/``test``, on global rank zero, after ``setup`` and before the first batch, when the Module or DataModule has hyper-parameters (``self.save_hyperparameters()``). `event.params` maps names to values as saved.

    May change: Nothing. Loggers record the parameters (the CSV logger writes ``hparams.yaml``).
    """


@hookspec
def log_metrics(event: ev.LogMetrics) -> None:
    """On global rank zero whenever logged metrics are written: after the optimizer step every ``log_every_n_steps`` steps, after each validation or test batch that logged ``on_step=True`` values (at Lightning's step: that dataloader's batches evaluated so far in the run), at the end of each training, validation and test epoch, and when a plugin calls ``trainer.log_metrics``. `event.metrics` holds Python floats: the core moves every value to the host in one batched copy per device, only when there is a subscriber.

    May change: Nothing. Loggers write the row; they should flush so that a killed run leaves it on disk.
    """


@hookspec
def fit_end(event: ev.FitEnd) -> None:
    """Once per ``fit``, after ``train_end``, when training finished or was stopped by request.

    May change: Nothing.
    """


@hookspec
def exception(event: ev.Exception_) -> None:
    """Exactly once when a run fails: ``event.error`` is the exception. Every subscriber sees it even when another subscriber raises; the original exception is re-raised afterwards, and ``teardown`` still runs.

    May change: Nothing. Use it to flush, mark a run as failed, or clean up.
    """


@hookspec
def keyboard_interrupt(event: ev.KeyboardInterrupt_) -> None:
    """When Ctrl-C (SIGINT) stopped the run at a step boundary. Control then returns to the caller; ``trainer.interrupted`` is true.

    May change: Nothing.
    """


@hookspec
def teardown(event: ev.Teardown) -> None:
    """Always, as the last event of ``fit``/``validate``/``test``/``predict``, on success, failure or interrupt. Every subscriber sees it even when another raises. The user's ``Module.teardown(stage)`` runs here.

    May change: Handlers release what they acquired in ``setup`` and flush what they buffer.
    """


# -- questions (value-returning hooks: the first answer that is not None is taken) --------------------------


@hookspec(firstresult=True)
def checkpoint_path(event: ev.CheckpointPath) -> str | None:
    """When ``ckpt_path`` is an alias (``event.alias``: ``"last"`` or ``"best"``), before anything is restored.
    Return the path or URL of the checkpoint the alias names, or ``None`` to let the next plugin (in bus order)
    answer; with no answer, ``fit`` starts from scratch for ``"last"``, and anything else is an error.

    May change: Nothing. Returns: ``str | None``.
    """
