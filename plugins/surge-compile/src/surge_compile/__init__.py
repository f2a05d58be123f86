"""surge-compile: ``torch.compile`` of the Module's ``forward``, the code every step runs.

* ``Trainer(plugins={"compile": {"mode": ..., "fullgraph": ..., "dynamic": ..., "backend": ...}})`` (or
  ``plugins=["compile"]`` for torch's defaults) compiles ``trainer.module.forward`` when each run's ``setup``
  fires: after the precision converted the Module and the strategy placed or wrapped it (DDP, FSDP), so the
  compiled code runs inside the strategy's wrapper, the order torch asks for.
* ``trainer.fit(torch.compile(model))``, as in Lightning: the Trainer trains ``model`` itself and hands the
  wrapper to this plugin (the ``compiler`` role, :class:`surge.events.protocols.Compiler`), which compiles ``model.forward`` with the wrapper's own ``torch.compile`` settings.
* Recompilations are counted and explained: ``compile/recompiles`` and ``compile/seconds`` go to every logger
  after a step that compiled, and each recompilation is a warning with the guard that failed.

Only ``forward`` is compiled, never ``training_step``: the parameters stay the Module's own tensors (optimizers,
checkpoints, hooks and weight averages see what they always saw; no ``_orig_mod.`` prefix reaches a state dict),
and ``self.log``, ``self.trainer`` and the other Python of a step run eagerly instead of breaking the graph.

Written against Surge's public API only. Importing this module builds nothing and imports neither
``torch._dynamo`` nor ``torch._inductor``: discovery imports it for every ``Trainer()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import surge
import torch
from pydantic import AfterValidator
from surge import logger
from torch import nn

if TYPE_CHECKING:
    from surge import events as ev
    from surge.events.run import Run  # what a handler sees of the Trainer (event.trainer)

__all__ = ["CompileConfig", "CompiledForward", "plugin"]

_PATH = "trainer.plugins.compile"


def _known_mode(mode: str | None) -> str | None:
    if mode is None:
        return mode
    import torch._inductor

    modes = list(torch._inductor.list_mode_options())
    if mode not in modes:
        raise ValueError(f"torch.compile has no mode {mode!r}; use one of {', '.join(modes)} (or leave it out)")
    return mode


def _known_backend(backend: str) -> str:
    import torch._dynamo

    backends = sorted(torch._dynamo.list_backends(exclude_tags=()))
    if backend not in backends:
        raise ValueError(f"torch.compile has no backend {backend!r}; use one of {', '.join(backends)}")
    return backend


class CompiledForward:
    """Compiles the Module's ``forward`` for the length of each run and reports what torch compiled.

    * **When**: at ``setup`` of every ``fit``/``validate``/``test``/``predict``, on the Module as the strategy
      set it up; ``teardown`` puts the Module's own ``forward`` back. torch compiles lazily, at the first call,
      and keeps its compiled code with the function, so a later run of the same class reuses it.
    * **What is reported**: every graph torch compiles during the run is attributed to the kind of call that
      made it: ``module.train()`` or ``eval()``, with gradients, under ``no_grad`` or under ``inference_mode``
      (torch guards on all three, so training steps, validation and a model summary's example pass each
      compile their own graph): the first of each kind is logged at INFO. Another compilation for a kind
      already compiled in this run is a *recompilation*: a WARNING with the guard that failed (a new batch
      size, a Python value the graph depended on), counted in :attr:`recompiles`. After a training step or
      an evaluation run that compiled, ``compile/recompiles`` and ``compile/seconds`` (time spent compiling
      in this run, backward graphs included) go to every logger.
    * The counts are per run and cover every ``torch.compile``'d function the process compiles during the
      run (torch's compile callbacks are process-wide); they are not saved in checkpoints: a resumed run
      compiles again.

    The arguments are those of ``torch.compile`` (``None``: torch's default):

    Args:
        mode: Inductor's mode: ``default``, ``reduce-overhead`` (CUDA graphs), ``max-autotune``,
            ``max-autotune-no-cudagraphs`` (or another name ``torch._inductor.list_mode_options()`` knows).
        fullgraph: Fail at the first graph break instead of running the code around it eagerly.
        dynamic: ``True``: shape-generic code from the start; ``False``: never (a new shape compiles again);
            ``None``: specialise, then generalise the dimensions that changed (a recompilation, once).
        backend: A ``torch._dynamo.list_backends(exclude_tags=())`` name (``eager`` and ``aot_eager`` for
            debugging).
    """

    surge_name = "compile"

    @surge.validated
    def __init__(
        self,
        mode: Annotated[str | None, AfterValidator(_known_mode)] = None,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        backend: Annotated[str, AfterValidator(_known_backend)] = "inductor",
    ) -> None:
        self.options: dict[str, Any] = {"mode": mode, "fullgraph": fullgraph, "dynamic": dynamic, "backend": backend}
        """The keyword arguments given to ``torch.compile``."""
        self.recompiles = 0
        """Recompilations in the current (or last) run."""
        self.reasons: list[str] = []
        """The failed guard of each recompilation, as torch states it."""
        self.compile_seconds = 0.0
        """Time spent compiling in the current (or last) run."""
        self._context: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None  # a wrapper's torch.compile
        self._module: nn.Module | None = None
        self._compiled: Callable[..., Any] | None = None
        self._started: dict[tuple[Any, str], float] = {}  # (trigger, compile id) -> perf_counter() at start
        self._finished: list[tuple[str, str]] = []  # (compile id, kind of call) of compilations not yet reported
        self._compiled_frames: set[tuple[str, str]] = set()  # (torch's frame id, kind of call) compiled in this run

    def adopt(self, compiled: nn.Module) -> None:
        """Called by the Trainer when a run was given ``torch.compile(module)`` (a ``torch._dynamo``
        ``OptimizedModule``): that run compiles ``module.forward`` with the wrapper's ``torch.compile``
        settings instead of this plugin's."""
        self._context = compiled.dynamo_ctx  # type: ignore[assignment]  # what torch.compile(fn) calls on fn

    # -- the run --------------------------------------------------------------------------------------
    @surge.hookimpl
    def setup(self, event: ev.Setup) -> None:
        module = event.trainer.module
        self.recompiles, self.reasons, self.compile_seconds = 0, [], 0.0
        self._started, self._finished, self._compiled_frames = {}, [], set()
        if type(module).forward is nn.Module.forward:
            logger.warning(
                "compile: {} has no forward (its steps compute in training_step), so nothing is compiled; define "
                "forward and call self(x) in the steps, or remove 'compile' from plugins",
                type(module).__name__,
            )
            return
        if self._context is not None:
            compiled = self._context(module.forward)
            logger.info(
                "compile: {}.forward is compiled with the settings of the torch.compile wrapper passed in",
                type(module).__name__,
            )
        else:
            compiled = torch.compile(module.forward, **self.options)
        module.__dict__["forward"] = compiled  # an instance attribute: nn.Module.__call__ finds it first
        self._module, self._compiled = module, compiled
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._compile_started)
        callback_handler.register_end_callback(self._compile_ended)

    @surge.hookimpl
    def train_batch_end(self, event: ev.TrainBatchEnd) -> None:
        if self._finished:
            self._report(event.trainer)

    @surge.hookimpl
    def validation_end(self, event: ev.ValidationEnd) -> None:
        if self._finished:
            self._report(event.trainer)

    @surge.hookimpl
    def test_end(self, event: ev.TestEnd) -> None:
        if self._finished:
            self._report(event.trainer)

    @surge.hookimpl
    def predict_end(self, event: ev.PredictEnd) -> None:
        if self._finished:
            self._report(event.trainer)

    @surge.hookimpl
    def teardown(self, event: ev.Teardown) -> None:
        try:
            if self._finished:
                self._report(event.trainer)
        finally:
            self._restore()
        if self._compiled is not None:
            logger.info(
                "compile: {} s compiling in this {} run, {} recompilation(s)",
                round(self.compile_seconds, 2),
                event.stage,
                self.recompiles,
            )
        self._module = self._compiled = self._context = None

    # -- helpers --------------------------------------------------------------------------------------
    def _compile_started(self, args: Any) -> None:
        self._started[(args.callback_trigger, args.compile_id)] = time.perf_counter()

    def _compile_ended(self, args: Any) -> None:
        from torch._dynamo.callback import CallbackTrigger

        started = self._started.pop((args.callback_trigger, args.compile_id), None)
        if started is not None:
            self.compile_seconds += time.perf_counter() - started
        if args.callback_trigger is CallbackTrigger.DYNAMO:  # a graph of a Python frame (not its lazy backward)
            self._finished.append((args.compile_id, self._kind_of_call()))

    def _kind_of_call(self) -> str:
        """What torch's global guards see of the call being compiled (callbacks run in the caller's state)."""
        mode = "train()" if self._module is None or self._module.training else "eval()"
        if torch.is_inference_mode_enabled():
            return f"{mode} calls under inference_mode"
        return f"{mode} calls {'with gradients' if torch.is_grad_enabled() else 'under no_grad'}"

    def _report(self, trainer: Run) -> None:
        """Classify the compilations since the last report, warn about recompilations, log the counts. Run at
        step boundaries: torch records a compilation's details only after its end callback returned."""
        from torch._dynamo.utils import get_compilation_metrics

        finished, self._finished = self._finished, []
        # the forward graph's record (a lazily compiled backward graph has one of its own, with the same id)
        records = {str(m.compile_id): m for m in get_compilation_metrics() if m.is_forward is not False}
        for compile_id, kind in finished:
            record = records.get(compile_id)
            frame = compile_id.rpartition("/")[0]  # "<frame>/<n-th compilation of that frame>"
            where = (
                f"{record.co_name} ({record.co_filename}:{record.co_firstlineno})"
                if record is not None and record.co_name
                else f"compiled frame {frame}"
            )
            if (frame, kind) not in self._compiled_frames:
                self._compiled_frames.add((frame, kind))
                logger.info("compile: compiled {} for {} (torch compile id {})", where, kind, compile_id)
                continue
            self.recompiles += 1
            reason = (record.recompile_reason if record is not None else None) or "torch recorded no reason"
            self.reasons.append(reason)
            logger.warning(
                "compile: recompiled {} for {} at global step {} (recompilation {} of this run), because "
                "a guard of the code compiled before failed: {}. Each recompilation costs compile time, and past "
                "torch._dynamo.config.recompile_limit the function runs eagerly; for batches of changing size pass "
                "dynamic=True to the compile plugin (or drop_last=True to the DataLoader)",
                where,
                kind,
                trainer.global_step,
                self.recompiles,
                reason.strip(),
            )
        metrics = {"compile/recompiles": float(self.recompiles), "compile/seconds": self.compile_seconds}
        trainer.log_metrics(metrics, source="compile")

    def _restore(self) -> None:
        if self._compiled is None:
            return
        from torch._dynamo.callback import callback_handler

        if self._compile_started in callback_handler.start_callbacks:
            callback_handler.remove_start_callback(self._compile_started)
        if self._compile_ended in callback_handler.end_callbacks:
            callback_handler.remove_end_callback(self._compile_ended)
        module = self._module
        if module is not None and module.__dict__.get("forward") is self._compiled:
            del module.__dict__["forward"]


CompileConfig = surge.settings_model(CompiledForward)
"""The ``compile`` plugin's settings, derived from :class:`CompiledForward`'s signature."""

plugin = surge.Plugin(
    name="compile",
    kind="participant",
    factory=CompiledForward,
    default=False,
    role="compiler",  # trainer.fit(torch.compile(model)) hands the wrapper to adopt() (surge.events.protocols.Compiler)
    description="torch.compile of the Module's forward; recompilations logged with their reasons",
)
