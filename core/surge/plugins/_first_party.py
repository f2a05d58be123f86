"""The plugins this repository publishes, and the names people use for its providers: the only place where the
core names first-party plugins, and only to say what to install (the behaviour is the plugins' own: their
switches, their provider names, their roles).

An error about a name nobody installed may point to ``pip install`` only for these: a hint built from the
name itself (``pip install surge-<typo>``) would send users to a distribution that does not exist, or to
someone else's. ``tests/test_lightning_api.py`` checks the table against ``plugins/*/pyproject.toml``.
"""

from __future__ import annotations

FIRST_PARTY: dict[str, str] = {
    "devices": "surge-devices",
    "precision": "surge-precision",
    "checkpoint": "surge-checkpoint",
    "csv": "surge-csv",
    "tensorboard": "surge-tensorboard",
    "mlflow": "surge-mlflow",
    "wandb": "surge-wandb",
    "progress": "surge-progress",
    "model_summary": "surge-progress",
    "lr_monitor": "surge-progress",
    "tpu": "surge-tpu",
    "ddp": "surge-ddp",
    "fsdp": "surge-fsdp",
    "swa": "surge-swa",
    "ema": "surge-swa",
    "early_stopping": "surge-callbacks",
    "timer": "surge-callbacks",
    "gradient_accumulation_scheduler": "surge-callbacks",
    "nan_guard": "surge-callbacks",
    "grad_norm": "surge-callbacks",
    "device_stats": "surge-callbacks",
    "tuner": "surge-tuner",
    "profilers": "surge-profilers",
    "compile": "surge-compile",
    "lightning": "surge-lightning",
    "epoch_end_outputs": "surge-lightning",
}
"""Plugin name -> the first-party distribution that ships it."""

SYNONYMS: dict[str, dict[str, str]] = {
    "precision": {
        "fp16": "16-mixed",
        "half": "16-mixed",
        "float16": "16-mixed",
        "bfloat16": "bf16-mixed",
        "float32": "32-true",
        "float": "32-true",
        "full": "32-true",
        "float64": "64-true",
        "double": "64-true",
    },
    "accelerator": {"gpu": "cuda"},
    "strategy": {"ddp_spawn": "ddp", "ddp_fork": "ddp", "ddp_notebook": "ddp", "dp": "ddp"},
}
"""Per provider slot, what people write (Lightning's names, dtype names) -> the provider name it means here:
"did you mean" proposes that, not the nearest spelling (``fp16`` is not ``fp64``, ``gpu`` is not ``tpu``)."""


SLOT_DISTRIBUTIONS: dict[str, str] = {
    "accelerator": "surge-devices",
    "strategy": "surge-devices or surge-ddp",
    "distributed": "surge-ddp",
    "precision": "surge-precision",
    "profiler": "surge-profilers",
    "tuner": "surge-tuner",
}
"""Per provider slot (and ``distributed``: a multi-process strategy), the first-party distributions to name when
no installed plugin provides what a Trainer argument chose."""

PRECISION_NAMES = frozenset({"64", "64-true", "fp64", "16", "16-mixed", "bf16", "bf16-mixed", "16-true", "bf16-true"})
"""The precision names surge-precision serves: the hint for an unknown precision points there only for these."""

SERVED_BY: dict[str, str] = {
    "max_time": "surge-callbacks",
    "accumulate_grad_batches": "surge-callbacks",
    "stochastic_weight_avg": "surge-swa",
    "track_grad_norm": "surge-callbacks",
    "terminate_on_nan": "surge-callbacks",
    "log_gpu_memory": "surge-callbacks",
}
"""The seed Trainer's arguments for training techniques, which only a plugin serves (what a value means is the
serving plugin's ``switches``), with the first-party distribution to name in the error when none is installed."""


COMMANDS: dict[str, str] = {"plot": "surge-csv", "new-plugin": "surge[template]"}
"""Commands first-party distributions contribute (``surge.commands``), and what to install for each when it is
missing."""

LIGHTNING = "surge-lightning"
"""The distribution of Lightning's names (``surge_lightning``, ``lightning`` module for module), its callback and
logger adapters, 1.x arguments and hooks, LightningCLI and checkpoint import: named by the ``surge.compat`` shim
and by the errors below when it is not installed."""

LEGACY_ARGUMENTS: dict[str, str] = {
    "gpus": "accelerator='gpu', devices=<count or indices>",
    "tpu_cores": "accelerator='tpu', devices=<count>",
    "num_processes": "accelerator='cpu', devices=<count>",
    "auto_select_gpus": "devices=[<indices>] (or CUDA_VISIBLE_DEVICES)",
    "distributed_backend": "strategy=<name>",
    "amp_backend": "precision='16-mixed'",
    "amp_level": "precision='16-mixed'",
    "checkpoint_callback": "enable_checkpointing=<bool> (or callbacks=[ModelCheckpoint(...)])",
    "resume_from_checkpoint": "trainer.fit(model, ckpt_path=<path>)",
    "weights_summary": "enable_model_summary=<bool>",
    "weights_save_path": "callbacks=[ModelCheckpoint(dirpath=<path>)]",
    "progress_bar_refresh_rate": "enable_progress_bar=<bool>",
    "process_position": "enable_progress_bar=False",
    "flush_logs_every_n_steps": "nothing (drop it)",
    "reload_dataloaders_every_epoch": "reload_dataloaders_every_n_epochs=1",
    "replace_sampler_ddp": "use_distributed_sampler=<bool>",
    "truncated_bptt_steps": "the Module's truncated_bptt_steps attribute",
}
"""Lightning 1.x Trainer arguments that Lightning 2 removed, with their modern spelling: a plugin of :data:`LIGHTNING`
translates them; without one, ``Trainer(gpus=2)`` is refused naming both and the distribution."""

LIGHTNING_PLUGINS = {"adapter": "lightning", "module_hooks": "epoch_end_outputs"}
"""The plugins of :data:`LIGHTNING` that adapt objects passed in and run the 1.x Module hooks: named, with why they
are not loaded, when one is installed but blocked."""

LEGACY_MODULE_HOOKS: dict[str, str] = {
    "training_epoch_end": "on_train_epoch_end",
    "validation_epoch_end": "on_validation_epoch_end",
    "test_epoch_end": "on_test_epoch_end",
}
"""Lightning 1.x Module hooks (``(self, outputs)``) that no core loop calls, with their Lightning 2 replacement: a
plugin of :data:`LIGHTNING` claims them (``surge.Plugin(module_hooks=...)``); without one, a Module defining one is
refused naming both and the distribution."""

CALLBACK_HINT = (
    "a Lightning callback subclasses surge_lightning.pytorch.callbacks.Callback and overrides its hooks "
    f"(on_train_epoch_end(self, trainer, pl_module), ...), with `pip install {LIGHTNING}`"
)
"""How an object written with Lightning's callback hooks runs: said by the error about an object that would handle
nothing (the distribution's adapter also takes such objects without the base class)."""


def install_hint(name: str) -> str:
    """`` `pip install <distribution>` adds it.`` for a first-party plugin name, else nothing."""
    distribution = FIRST_PARTY.get(name)
    return f" `pip install {distribution}` adds it." if distribution else ""
