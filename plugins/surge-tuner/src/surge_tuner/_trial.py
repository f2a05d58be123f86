"""Short trial fits that leave no trace.

A trial runs in a **separate Trainer** built from the user's one: the same accelerator, strategy, devices,
precision and loop feeding (accumulation, clipping, batch limits), but no loggers, checkpoints, progress,
model summary or participants of the user's run, and a temporary run directory deleted afterwards. The
user's Trainer is never run, so its state, run directory and ``max_steps``/``max_epochs`` budget are
untouched.

What a trial changes on the objects it shares with the user's run is copied first (:class:`Snapshot`) and put
back afterwards: weights and buffers (bit for bit, with their device and dtype), gradients, every
submodule's train/eval mode, the state of any optimizer ``configure_optimizers`` returns (one the model keeps
across calls is restored), the DataModule's ``state_dict``, and the global RNG states, so that a ``fit`` after
tuning draws the same data order and initialisations as one without it.
"""

from __future__ import annotations

import contextlib
import copy
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import surge
import torch
from torch.optim import Optimizer

# The user's Trainer arguments a trial shares: where and how the model computes, and how the loop feeds it.
_CARRIED = (
    "accelerator",
    "strategy",
    "devices",
    "num_nodes",
    "precision",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "multiple_trainloader_mode",
    "use_distributed_sampler",
    "prepare_data_per_node",
    "move_metrics_to_cpu",
    "deterministic",
    "benchmark",
    "inference_mode",
)

# Everything else that shapes a run, set explicitly so that neither SURGE_TRAINER_* variables nor a lab
# profile's defaults turn on loggers, plugins or loop limits in a trial.
_TRIAL_OPTIONS: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "profiler": None,
    "max_epochs": -1,
    "min_epochs": None,
    "min_steps": None,
    "max_time": None,
    "fast_dev_run": False,
    "val_check_interval": None,
    "check_val_every_n_epoch": 1,
    "reload_dataloaders_every_n_epochs": 0,
    "stochastic_weight_avg": False,
    "track_grad_norm": -1,
    "terminate_on_nan": False,  # the learning-rate finder drives the loss to diverge on purpose
    "log_gpu_memory": None,
    "auto_lr_find": False,
    "auto_scale_batch_size": False,
}

_MISSING = object()


@contextlib.contextmanager
def trial_root() -> Iterator[str]:
    """A temporary ``default_root_dir`` for trial Trainers, deleted with everything in it."""
    root = tempfile.mkdtemp(prefix="surge-tune-")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def trial_trainer(user: surge.Trainer, root: str, plugins: list[object], **loop: Any) -> surge.Trainer:
    """A Trainer for one trial: the user's devices and precision, ``loop`` settings, only ``plugins``."""
    options = {name: getattr(user.config, name) for name in _CARRIED}
    options.update(_TRIAL_OPTIONS)
    options.update(loop, default_root_dir=root, plugins=plugins or None)
    return surge.Trainer(**options)


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, Mapping):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return copy.deepcopy(value)


def _optimizers_of(result: Any) -> list[Optimizer] | None:
    """The optimizers in what ``configure_optimizers`` returned; ``None`` for a shape the core will refuse."""
    if isinstance(result, Optimizer):
        return [result]
    if isinstance(result, Mapping):
        result = [result]
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], (list, tuple)):
        result = result[0]
    if not isinstance(result, (list, tuple)):
        return None
    found = [item.get("optimizer") if isinstance(item, Mapping) else item for item in result]
    optimizers = [o for o in found if isinstance(o, Optimizer)]
    return optimizers if optimizers and len(optimizers) == len(found) else None


def _rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")  # only when the program uses it; never imported here
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        sys.modules["numpy"].random.set_state(states["numpy"])


class Snapshot:
    """What trials may change on the user's model, optimizers, DataModule and RNGs, until :meth:`restore`.

    Tensors are copied to the host, so that the copy takes no accelerator memory (which would skew a batch
    size search).
    """

    def __init__(self, model: surge.Module, datamodule: surge.DataModule | None) -> None:
        self.model, self.datamodule = model, datamodule
        state = model.state_dict(keep_vars=True)
        self.tensors = {k: (_to_cpu(t), t.device) for k, t in state.items() if isinstance(t, torch.Tensor)}
        self.grads = {name: _to_cpu(p.grad) if p.grad is not None else None for name, p in model.named_parameters()}
        self.modes = [(m, m.training) for m in model.modules()]
        # A trial attaches the model to its own Trainer; afterwards it belongs to the user's again (or none).
        try:
            self.attached: Any = model.trainer
        except surge.SurgeError:  # not attached to a Trainer
            self.attached = None
        self.configure_optimizers = vars(model).get("configure_optimizers", _MISSING)
        self.datamodule_state = _to_cpu(datamodule.state_dict()) if datamodule is not None else None
        self.rng = _rng_states()
        self.optimizers: list[tuple[Optimizer, dict[str, Any], set[str]]] = []

    def route_optimizers(self, schedule: Callable[[Optimizer], Any] | None = None) -> None:
        """Send the model's ``configure_optimizers`` through the trial until :meth:`restore`: record each
        optimizer's state before it steps, drop the model's own schedulers (a trial is too short for them,
        and one that monitors a validation metric would fail without validation), and attach
        ``schedule(optimizer)`` as a per-step scheduler when given."""
        configure = self.model.configure_optimizers

        def configure_for_trial() -> Any:
            result = configure()
            optimizers = _optimizers_of(result)
            if optimizers is None:
                return result  # malformed: the core's error message says what is wrong
            for opt in optimizers:
                self.optimizers.append((opt, _to_cpu(opt.state_dict()), set(vars(opt))))
            if schedule is None:
                return optimizers
            return [
                {"optimizer": o, "lr_scheduler": {"scheduler": schedule(o), "interval": "step"}} for o in optimizers
            ]

        self.model.configure_optimizers = configure_for_trial  # type: ignore[method-assign]

    def restore(self) -> None:
        model = self.model
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                if name not in self.tensors:
                    continue
                saved, device = self.tensors[name]
                if tensor.dtype == saved.dtype and tensor.device == device and tensor.shape == saved.shape:
                    tensor.copy_(saved)  # in place: the Parameter objects stay the ones the user holds
                else:  # a precision plugin converted it, or the strategy moved it
                    tensor.data = saved.to(device)
        for name, param in model.named_parameters():
            grad = self.grads.get(name)
            param.grad = None if grad is None else grad.to(param.device)
        for module, training in self.modes:
            module.training = training
        for opt, state, attributes in self.optimizers:
            opt.load_state_dict(state)
            for added in set(vars(opt)) - attributes:  # e.g. the step counter a scheduler patches in
                delattr(opt, added)
        self.optimizers = []
        if self.configure_optimizers is _MISSING:
            vars(model).pop("configure_optimizers", None)
        else:
            model.configure_optimizers = self.configure_optimizers  # type: ignore[method-assign]
        model.trainer = self.attached
        if self.datamodule is not None and self.datamodule_state is not None:
            self.datamodule.load_state_dict(self.datamodule_state)
        _set_rng_states(self.rng)


def attribute_owners(model: surge.Module, datamodule: surge.DataModule | None, name: str) -> list[tuple[object, str]]:
    """Where the hyper-parameter ``name`` lives, as Lightning looks for it: an attribute of the model, an
    entry of ``model.hparams``, an attribute of the DataModule. ``(owner, "attr"|"item")`` pairs."""
    owners: list[tuple[object, str]] = []
    if name in vars(model) or (hasattr(type(model), name) and not callable(getattr(type(model), name))):
        owners.append((model, "attr"))
    if name in model.hparams:
        owners.append((model.hparams, "item"))
    if datamodule is not None and hasattr(datamodule, name) and not callable(getattr(datamodule, name)):
        owners.append((datamodule, "attr"))
    return owners


def read_attribute(owners: list[tuple[object, str]], name: str) -> Any:
    owner, how = owners[0]
    return owner[name] if how == "item" else getattr(owner, name)  # type: ignore[index]


def set_attribute(owners: list[tuple[object, str]], name: str, value: Any) -> None:
    for owner, how in owners:
        if how == "item":
            owner[name] = value  # type: ignore[index]
        else:
            setattr(owner, name, value)
