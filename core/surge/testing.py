"""Test helpers for Surge and its plugins, and a pytest plugin that test suites opt in to.

A suite's top-level ``conftest.py`` opts in with ``pytest_plugins = ["surge.testing"]`` (or a session with
``pytest -p surge.testing``): surge does not register it for every pytest session, because importing it
imports torch. What a plugin's tests need (docs/plugins.md, "Testing"):

* :func:`run_tiny_fit` runs a short real fit with the given plugins active and returns a :class:`TinyFit`:
  the Trainer, every event in call order, and each plugin's built object (``fit.plugin("name")``);
* :func:`assert_discovered` checks that an installed distribution's ``surge.plugins`` entry point is found,
  loads, and declares the expected kind;
* :class:`PluginEnv` makes a :class:`surge.Plugin` discoverable without installing it (or hides the
  installed ones) until it is restored;
* :func:`quiet_trainer_args` gives the Trainer arguments of a run that prints and writes nothing of its own;
* :func:`launch` runs a program as a real multi-process job (``torch.distributed.run``, 2 workers by default)
  in a :func:`clean_env`, for the tests of a distributed strategy; :func:`launch_workers` starts the same workers
  without torchrun's agent process (one interpreter less), for tests about the job rather than the launcher.

In a session that opted in, Surge's log records are on (see :func:`pytest_configure`). Fixtures:

* ``tiny_fit``: :func:`run_tiny_fit` writing into the test's temporary directory;
* ``plugin_env``: a :class:`PluginEnv`, restored after the test;
* ``event_recorder``: an :class:`EventRecorder`, a participant that records every event it sees;
* ``tiny_module`` / ``tiny_datamodule``: a small real model and data set that train in milliseconds;
* ``make_trainer``: ``Trainer`` factory writing into the test's temporary directory.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from loguru import logger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge import plugins as _plugins
from surge.events import EVENTS, QUERIES, Event

__all__ = [
    "LAUNCHER_VARS",
    "ChildLines",
    "EventRecorder",
    "PluginEnv",
    "TinyFit",
    "TinyModule",
    "TinyDataModule",
    "assert_discovered",
    "clean_env",
    "launch",
    "launch_workers",
    "quiet_trainer_args",
    "run_tiny_fit",
]


class ChildLines:
    """The stdout lines of a child process (``Popen(..., stdout=PIPE, text=True)``), read on a thread so that a
    crash test can wait for a line with a timeout (for example ``ready`` before it sends SIGKILL).
    ``seen`` holds every line read so far, in order."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def expect(self, prefix: str, timeout: float = 120.0) -> str:
        """Wait for the next line starting with ``prefix`` and return the rest of it (stripped); raises
        ``AssertionError`` with the lines seen when none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line starting with {prefix!r} within {timeout:.0f} s; saw {self.seen[-20:]}"
                ) from None
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix) :].strip()


class EventRecorder:
    """A participant with a handler for every event, the core's and those plugins declare
    (``surge.Plugin(events=[...])``); ``events`` holds ``(name, event)`` in call order.

    A plugin's events are known once its module is imported, which a Trainer does before it registers its
    subscribers: the recorder gets its handlers for them (marked ``optional``, as a handler of another plugin's
    event is) then, for every :class:`surge.events.Event` class defined by that time."""

    surge_name = "event_recorder"

    def __init__(self, name: str = "event_recorder", kind: str = "participant") -> None:
        self.surge_name = name
        self.surge_kind = kind
        self.events: list[tuple[str, Event]] = []

    def names(self, *, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        return [name for name, _ in self.events if name not in skip]

    def of(self, name: str) -> list[Event]:
        return [event for n, event in self.events if n == name]

    def clear(self) -> None:
        self.events.clear()

    def __dir__(self) -> Iterable[str]:
        # The bus lists a subscriber's attributes when it registers it, after the run's plugins were imported: the
        # moment to give this recorder a handler (on the instance, where the bus looks) for each plugin event.
        for name in _plugin_events() - set(vars(self)):
            vars(self)[name] = types.MethodType(_recording_handler(name, optional=True), self)
        return super().__dir__()


def _recording_handler(event_name: str, optional: bool = False) -> Callable[..., None]:
    def handler(self: EventRecorder, event: Event) -> None:
        self.events.append((event_name, event))

    handler.__name__ = event_name
    return surge.hookimpl(optional=True)(handler) if optional else surge.hookimpl(handler)


def _plugin_events() -> set[str]:
    """The names of the event classes defined so far that are not the core's (a plugin's module defines its own)."""
    names: set[str] = set()
    pending = list(Event.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        name = vars(cls).get("name")
        if isinstance(name, str) and name.isidentifier() and name not in EVENTS and name not in QUERIES:
            names.add(name)
    return names


for _name in EVENTS:
    setattr(EventRecorder, _name, _recording_handler(_name))


@dataclass
class _FakeDist:
    name: str
    version: str

    @property
    def metadata(self) -> dict[str, str]:
        return {"Name": self.name}


@dataclass
class _FakeEntryPoint:
    name: str
    value: str
    dist: _FakeDist
    group: str = _plugins.ENTRY_POINT_GROUP

    def load(self) -> Any:
        module_name, _, attr = self.value.partition(":")
        __import__(module_name)
        return getattr(sys.modules[module_name], attr)


class PluginEnv:
    """Add plugins to discovery as if installed, or hide the installed ones, until ``restore()``.

    The ``plugin_env`` fixture restores it after the test; outside pytest, use it as a context manager
    (``with PluginEnv() as env: env.add(plugin)``). Only discovery changes: a Trainer built meanwhile
    finds the added plugins exactly as it finds installed ones (activation, settings, ordering).
    """

    def __init__(self) -> None:
        self._extra: list[_FakeEntryPoint] = []
        self._hide = False
        self._previous = _plugins.source
        self._modules: list[str] = []
        self._failing: list[str] = []
        env = self

        class _Source(_plugins._Source):
            def entry_points(self) -> Iterable[Any]:
                installed = [] if env._hide else list(env._previous.entry_points())
                return [*installed, *env._extra]

        _plugins.source = _Source()

    def add(
        self, plugin: Any, *, name: str | None = None, distribution: str = "surge-testing-fake", version: str = "0.0.1"
    ) -> None:
        """Make ``plugin`` (normally a :class:`surge.Plugin`) discoverable under ``name``."""
        name = name or getattr(plugin, "name", None) or "fake"
        module_name = f"_surge_testing_plugin_{len(self._modules)}_{name.replace('-', '_')}"
        module = types.ModuleType(module_name)
        module.plugin = plugin  # type: ignore[attr-defined]
        sys.modules[module_name] = module
        self._modules.append(module_name)
        self._extra.append(_FakeEntryPoint(name, f"{module_name}:plugin", _FakeDist(distribution, version)))

    def add_failing(self, name: str, error: str = "boom", distribution: str = "surge-testing-broken") -> None:
        """A plugin whose import raises ``RuntimeError(error)``."""
        module_name = f"_surge_testing_missing_{name.replace('-', '_')}"
        self._extra.append(_FakeEntryPoint(name, f"{module_name}:plugin", _FakeDist(distribution, "0.0.1")))
        _failing_modules[module_name] = error
        self._failing.append(module_name)
        if _FailingFinder not in sys.meta_path:
            sys.meta_path.append(_FailingFinder)  # type: ignore[arg-type]

    def hide_installed(self, keep: Iterable[str] = ("devices",)) -> None:
        """Hide installed plugins except ``keep`` (the device provider by default, so a Trainer still runs)."""
        kept = set(keep)
        installed: list[Any] = [ep for ep in self._previous.entry_points() if ep.name in kept]
        self._hide = True
        self._extra = [*installed, *self._extra]

    def restore(self) -> None:
        _plugins.source = self._previous
        for module_name in self._modules:
            sys.modules.pop(module_name, None)
        for module_name in self._failing:
            _failing_modules.pop(module_name, None)
        if not _failing_modules and _FailingFinder in sys.meta_path:
            sys.meta_path.remove(_FailingFinder)  # type: ignore[arg-type]

    def __enter__(self) -> PluginEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


_failing_modules: dict[str, str] = {}


class _FailingFinder:
    """Makes the modules registered by ``PluginEnv.add_failing`` raise on import; on ``sys.meta_path`` only
    while a ``PluginEnv`` has such a module."""

    @classmethod
    def find_spec(cls, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in _failing_modules:
            raise RuntimeError(_failing_modules[fullname])
        return None


class TinyModule(surge.Module):
    """A two-layer MLP regressor; logs ``train_loss`` per step and ``val_loss``/``test_loss`` per epoch."""

    def __init__(self, in_features: int = 8, hidden: int = 16, lr: float = 0.05) -> None:
        super().__init__()
        # by name: a subclass's own __init__ arguments (save_hyperparameters() would record the whole
        # constructor chain, as Lightning's does) stay out unless the subclass saves them
        self.save_hyperparameters("in_features", "hidden", "lr")
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def tiny_dataset(n: int = 64, in_features: int = 8, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=generator)
    y = x.sum(dim=1, keepdim=True) * 0.3 + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class TinyDataModule(surge.DataModule):
    """64 training and 32 validation/test/predict samples of a noisy linear target; batch size 8."""

    def __init__(self, batch_size: int = 8, n_train: int = 64, n_val: int = 32, in_features: int = 8) -> None:
        super().__init__()
        self.batch_size, self.n_train, self.n_val, self.in_features = batch_size, n_train, n_val, in_features
        self.calls: list[str] = []

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        self.train_set = tiny_dataset(self.n_train, self.in_features, seed=1)
        self.val_set = tiny_dataset(self.n_val, self.in_features, seed=2)

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{stage}")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.val_set.tensors[0]), batch_size=self.batch_size)


@dataclass
class TinyFit:
    """What :func:`run_tiny_fit` returns: the Trainer after the fit and every event it dispatched."""

    trainer: surge.Trainer
    recorder: EventRecorder

    @property
    def events(self) -> list[tuple[str, Event]]:
        """``(name, event)`` pairs in call order, as seen by an observer that runs after every other handler: the
        core's events and those the run's plugins publish."""
        return self.recorder.events

    def names(self, *, exclude: Iterable[str] = ()) -> list[str]:
        """Event names in call order (the plugins' events included)."""
        return self.recorder.names(exclude=exclude)

    def of(self, name: str) -> list[Event]:
        """The payloads of one event (the core's or a plugin's), in call order."""
        return self.recorder.of(name)

    def plugin(self, name: str) -> Any:
        """The object plugin ``name``'s factory built for this run (the one its handlers ran on)."""
        try:
            return self.trainer.plugin(name)
        except LookupError:
            pass
        active = sorted(n for n in self.trainer.plugin_names if n != self.recorder.surge_name)
        raise LookupError(
            f"plugin '{name}' was not active in this fit; active: {', '.join(active) or 'none'}. Ask for it by "
            f"name (run_tiny_fit(plugins=['{name}'])) unless it is on by default, and check that it is installed"
        )


_RECORDER = "tiny_fit_recorder"


def run_tiny_fit(
    plugins: Iterable[Any] | Mapping[str, Any] = (),
    *,
    ckpt_path: str | None = None,
    seed: int = 0,
    **trainer_kwargs: Any,
) -> TinyFit:
    """Fit :class:`TinyModule` on :class:`TinyDataModule` with ``plugins`` active and record every event.

    ``plugins`` is what ``Trainer(plugins=...)`` takes: names and objects (``["my-plugin", Stopper()]``) or
    names with settings (``{"my-plugin": {"every_n_steps": 2}}``). Installed default plugins are active too,
    as in any run. The fit is one epoch of 2 training and 2 validation batches (after the usual sanity check)
    unless ``trainer_kwargs`` say otherwise; ``ckpt_path`` resumes from a checkpoint. The run directory goes
    to ``default_root_dir``, a new temporary directory if not given (the ``tiny_fit`` fixture passes the
    test's ``tmp_path``).

    The fit is reproducible: torch's generator is seeded with ``seed`` before the model is built, so the
    initial weights, the order of the training batches and any draw a plugin makes from it are the same in
    every tiny fit with the same arguments (the data set itself is fixed). The caller's generator state is
    restored afterwards.
    """
    recorder = EventRecorder(_RECORDER, kind="observer")
    trainer_kwargs.setdefault("max_epochs", 1)
    trainer_kwargs.setdefault("limit_train_batches", 2)
    trainer_kwargs.setdefault("limit_val_batches", 2)
    if trainer_kwargs.get("default_root_dir") is None:
        trainer_kwargs["default_root_dir"] = tempfile.mkdtemp(prefix="surge-tiny-fit-")
    if isinstance(plugins, str):
        plugins = [plugins]
    if isinstance(plugins, Mapping):
        # Settings can only be given by name, and a dict has no room for an object: the recorder joins as
        # a temporarily discoverable plugin instead.
        with PluginEnv() as env:
            env.add(_plugins.Plugin(name=_RECORDER, kind="observer", factory=lambda: recorder))
            trainer = surge.Trainer(plugins={**plugins, _RECORDER: True}, **trainer_kwargs)
    else:
        trainer = surge.Trainer(plugins=[*plugins, recorder], **trainer_kwargs)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=ckpt_path)
    return TinyFit(trainer, recorder)


def quiet_trainer_args(**overrides: Any) -> dict[str, Any]:
    """Trainer arguments for a test run that prints and writes nothing of its own: no logger, no checkpoint
    callback, no progress bar, no model summary. ``overrides`` add arguments or turn one back on:
    ``surge.Trainer(**quiet_trainer_args(logger=["csv"], max_epochs=2))``. Lightning's Trainer takes them too."""
    return {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **overrides,
    }


def assert_discovered(name: str, distribution: str | None = None, kind: str | None = None) -> surge.Plugin:
    """Assert that an installed distribution declares plugin ``name`` and that Surge can load it.

    Reads the real ``surge.plugins`` entry points (a :class:`PluginEnv` does not count), imports them as a
    run would, and checks the distribution that declares ``name`` and the plugin's ``kind`` when given.
    The plugin must not be blocked (``SURGE_*`` variables, a lab profile) or fail to import. Returns the
    loaded :class:`surge.Plugin`.
    """
    from surge.settings import load_settings

    previous = _plugins.source
    _plugins.source = _plugins._Source()
    try:
        catalog = _plugins.discover(load_settings(), requested=[name])
    finally:
        _plugins.source = previous
    record = catalog.records.get(name)
    if record is None:
        found = ", ".join(catalog.records) or "none"
        raise AssertionError(
            f"no installed distribution declares the plugin '{name}' (entry-point group "
            f"'{_plugins.ENTRY_POINT_GROUP}'; installed plugins: {found}). Install the project "
            f'(`pip install -e .`) and check its [project.entry-points."{_plugins.ENTRY_POINT_GROUP}"] table'
        )
    if distribution is not None and _normalize(record.distribution or "") != _normalize(distribution):
        raise AssertionError(f"{record.describe()} comes from {record.distribution}, not from {distribution}")
    if record.plugin is None:
        raise AssertionError(f"{record.describe()} is installed but {record.status}: {record.reason}")
    if kind is not None and record.plugin.kind != kind:
        raise AssertionError(f"{record.describe()} is a {record.plugin.kind}, not a {kind}")
    return record.plugin


LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID")
"""What a launcher sets: a test's child must not inherit them from a test runner started under one."""


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without launcher and SLURM variables, one thread per process, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def launch(
    program: str | Path,
    args: Sequence[str],
    *,
    nproc: int = 2,
    torchrun: bool = True,
    launcher_args: Sequence[str] = ("--standalone",),
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``program`` with ``args`` under ``python -m torch.distributed.run`` (``nproc`` workers), or plainly
    (``torchrun=False``), and return the finished process with its output captured."""
    launcher = [sys.executable, "-m", "torch.distributed.run", *launcher_args, f"--nproc-per-node={nproc}"]
    command = [*(launcher if torchrun else [sys.executable]), str(program), *args]
    return subprocess.run(command, env=env or clean_env(), capture_output=True, text=True, timeout=timeout)


def launch_workers(
    program: str | Path,
    args: Sequence[str],
    *,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    grace: float = 30,
) -> subprocess.CompletedProcess[str]:
    """Run ``nproc`` workers of ``program`` as one single-node job, as ``torchrun --standalone`` would, but
    without its agent: each worker a fresh ``python program args`` with the variables torchrun gives a worker
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``ROLE_RANK``,
    ``MASTER_ADDR``/``MASTER_PORT`` on loopback; no ``TORCHELASTIC_*``: rank 0 hosts the rendezvous store, as
    under SLURM). It saves the agent's interpreter and its polling, several seconds of CPU a launch, for tests
    about what the workers do; tests of torchrun itself (restarts, several agents) use :func:`launch`.

    As under torchrun the job fails as a whole: once a worker exits non-zero the others get SIGTERM (as the
    agent sends), then SIGKILL after ``grace`` seconds; the result's return code is 0 when every worker
    succeeded, else 1 (torchrun's), with a line per failed worker at the end of its stderr. The workers share
    one stdout and one stderr, as they share the agent's. Past ``timeout`` every worker is killed and
    :class:`subprocess.TimeoutExpired` raised. A port another process took between choosing and binding it
    (the rendezvous store's "address already in use") is retried once on a new port."""
    for attempt in (0, 1):
        done = _launch_workers_once(program, args, nproc, env, timeout, grace)
        if attempt or done.returncode == 0 or "address already in use" not in done.stderr.lower():
            return done
    raise AssertionError("unreachable")  # pragma: no cover


def _launch_workers_once(
    program: str | Path,
    args: Sequence[str],
    nproc: int,
    env: dict[str, str] | None,
    timeout: float,
    grace: float,
) -> subprocess.CompletedProcess[str]:
    with socket.socket() as probe:  # a free port on loopback for rank 0's store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = env or clean_env()
    command = [sys.executable, str(program), *args]
    shared = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(nproc),
    }
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        workers = [
            subprocess.Popen(
                command,
                env={**base, **shared, "RANK": str(rank), "LOCAL_RANK": str(rank), "ROLE_RANK": str(rank)},
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
            for rank in range(nproc)
        ]
        deadline, stopping = time.monotonic() + timeout, None
        try:
            while [w.poll() for w in workers].count(None):  # every worker polled (no short cut)
                now = time.monotonic()
                if now > deadline:
                    raise subprocess.TimeoutExpired(command, timeout)
                failed = any(w.returncode not in (None, 0) for w in workers)
                if failed and stopping is None:  # the job fails as a whole: the agent's SIGTERM to the rest
                    stopping = now + grace
                    for w in workers:
                        if w.returncode is None:
                            w.terminate()
                elif stopping is not None and now > stopping:
                    for w in workers:
                        if w.returncode is None:
                            w.kill()
                time.sleep(0.05)
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    codes = [w.returncode for w in workers]
    report = "".join(f"launch_workers: rank {rank} exited with {code}\n" for rank, code in enumerate(codes) if code)
    return subprocess.CompletedProcess(command, 1 if report else 0, stdout, stderr + report)


def _normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()  # PEP 503: surge_my_thing is surge-my-thing


# -- pytest plugin: hook and fixtures ----------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Make sure Surge's log records are on (a test suite may have muted them with ``logger.disable``), so
    that a test can capture Surge's warnings with its own sink (``loguru.logger.add(...)``). Sinks and
    stdlib loggers are left as they are."""
    logger.enable("surge")


@pytest.fixture
def tiny_fit(tmp_path: Any) -> Callable[..., TinyFit]:
    """:func:`run_tiny_fit` with its run directories in the test's ``tmp_path``."""

    def fit(plugins: Iterable[Any] | Mapping[str, Any] = (), **kwargs: Any) -> TinyFit:
        kwargs.setdefault("default_root_dir", str(tmp_path))
        return run_tiny_fit(plugins, **kwargs)

    return fit


@pytest.fixture
def event_recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def plugin_env() -> Iterator[PluginEnv]:
    env = PluginEnv()
    try:
        yield env
    finally:
        env.restore()


@pytest.fixture
def tiny_module() -> TinyModule:
    torch.manual_seed(0)
    return TinyModule()


@pytest.fixture
def tiny_datamodule() -> TinyDataModule:
    return TinyDataModule()


@pytest.fixture
def make_trainer(tmp_path: Any) -> Callable[..., surge.Trainer]:
    def make(**kwargs: Any) -> surge.Trainer:
        kwargs.setdefault("default_root_dir", str(tmp_path))
        return surge.Trainer(**kwargs)

    return make
