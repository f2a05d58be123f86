"""Fuzzing the inputs a user or an environment hands Surge: Trainer arguments, lab profiles, checkpoint files
and plugin metadata. Every case ends in a result, a ``SurgeError`` subclass that names what is wrong, or a
documented warning, never another exception and never a hang. (The run config is fuzzed in
``test_cli_config_fuzz.py``.)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata as metadata
import os
import signal
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import surge
import torch
from _fuzzing import examples  # tests/ is on sys.path (pytest `pythonpath`)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from loguru import logger
from surge import checkpoint as store
from surge.config import TrainerConfig
from surge.errors import (
    CheckpointError,
    ConfigError,
    LabError,
    PluginConflictError,
    PluginError,
    ProviderError,
    SurgeError,
)
from surge.plugins import lab
from surge.settings import SurgeSettings
from surge.testing import PluginEnv, TinyDataModule, TinyModule, quiet_trainer_args

FUZZ = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
HANG_SECONDS = 60


@contextlib.contextmanager
def no_hang(seconds: int = HANG_SECONDS) -> Iterator[None]:
    """Fail (instead of waiting for CI's timeout) when one example runs longer than ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise AssertionError(f"an example ran for more than {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SURGE_TRAINER_") or key in ("SURGE_LAB", "SURGE_STRICT_PLUGINS"):
            monkeypatch.delenv(key)


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | st.binary(max_size=6)
    | st.sampled_from(["auto", "cpu", "gpu", "ddp", "32-true", "16-mixed", "inf", "norm", "00:00:01:00", "-1", ""])
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=6) | st.integers(-3, 3), children, max_size=3)
    ),
    max_leaves=8,
) | st.sampled_from([object(), TinyModule, len, torch.device("cpu"), Path("rel/dir"), ...])


# -- Trainer arguments ----------------------------------------------------------------------------------------

# Values of the right type and near the edges, so that examples get past type checks into the later stages.
PLAUSIBLE = (
    st.integers(-3, 6)
    | st.floats(0.0, 1.5)
    | st.booleans()
    | st.none()
    | st.sampled_from(
        [
            "auto",
            "cpu",
            "gpu",
            "mps",
            "ddp",
            "fsdp",
            "32-true",
            "bf16-mixed",
            "64",
            "simple",
            "advanced",
            "norm",
            "value",
            "min_size",
            "warn",
            "inf",
            "00:00:00:01",
            "1:2",
            [0],
            [0, 0],
            [],
            {"hours": 1},
            {"hours": -1},
            {0: 2},
            {-1: 0},
            ["checkpoint"],
            ["no-such-plugin"],
            {"checkpoint": False},
            {"checkpoint": {"save_top_k": "x"}},
            {"csv": {"bad": 1}},
        ]
    )
)

# Arguments that name providers or plugins: a bad value there may also be a PluginError (unknown name).
PROVIDER_ARGUMENTS = {
    "accelerator",
    "strategy",
    "precision",
    "plugins",
    "profiler",
    "logger",
    "devices",
    "checkpoint_io",
}


@FUZZ
@given(
    kwargs=st.dictionaries(
        st.sampled_from(sorted(TrainerConfig.model_fields)) | st.text(max_size=12), PLAUSIBLE | VALUES, max_size=4
    )
)
# found in CI (issue 28): checkpoint_io="auto" was an unknown provider; it is the default file writer
@example(kwargs={"checkpoint_io": "auto"})
def test_any_trainer_arguments_give_a_trainer_or_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    monkeypatch.chdir(tmp_path)  # a random default_root_dir lands here
    kwargs.setdefault("enable_progress_bar", False)
    with no_hang():
        try:
            surge.Trainer(**kwargs)
        except ConfigError as exc:
            assert exc.problems and all(path.startswith("trainer") or "." in path for path, _ in exc.problems)
        except PluginError:
            assert PROVIDER_ARGUMENTS & set(kwargs), "a PluginError only for arguments that name plugins"


# -- lab profiles --------------------------------------------------------------------------------------------

TOML_PIECES = st.sampled_from(
    [
        "[distributions]\n",
        "[plugins]\n",
        "[trainer]\n",
        "[tool.surge.lab]\n",
        "tool = 1\n",
        "autoload = false\n",
        "autoload = 'no'\n",
        'surge-checkpoint = "==0.1.0"\n',
        'surge-checkpoint = { version = ">=0.1", sha256 = "00" }\n',
        "surge_checkpoint = '*'\n",
        "checkpoint = true\n",
        "max_epochs = 3\n",
        "max_epochs = -7\n",
        "plugins = []\n",
        "devices = [0, 1]\n",
        'x = """\n',
        "= 1\n",
        "[[a]]\n",
        "a.b.c = 1\n",
        "\x00",
        "\n",
    ]
)
TOML_TEXT = st.lists(TOML_PIECES | st.text(max_size=12), max_size=12).map("".join)
LAB_KEYS = ["autoload", "distributions", "plugins", "trainer", "autolaod", "extra"]
LAB_TABLES = st.dictionaries(
    st.sampled_from(LAB_KEYS) | st.text(max_size=6),
    VALUES
    | st.dictionaries(
        st.sampled_from(["surge-checkpoint", "surge_checkpoint", "checkpoint", "max_epochs", "version", "sha256"])
        | st.text(max_size=6),
        VALUES | st.dictionaries(st.sampled_from(["version", "sha256", "pin"]), VALUES, max_size=2),
        max_size=3,
    ),
    max_size=4,
)


def _lab_or_error(load: Any) -> None:
    with no_hang():
        try:
            result = load()
        except ConfigError as exc:
            assert exc.problems and "lab profile" in str(exc)
            return
        except LabError as exc:
            assert "lab profile" in str(exc)
            return
    assert result is None or isinstance(result, lab.Lab)


@FUZZ
@given(text=TOML_TEXT, raw=st.none() | st.binary(max_size=40))
def test_any_profile_file_gives_a_lab_or_a_lab_or_config_error(tmp_path: Path, text: str, raw: bytes | None) -> None:
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "lab.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass") if raw is None else raw)
    _lab_or_error(lambda: lab.load(str(path)))


@FUZZ
@given(text=TOML_TEXT)
def test_any_pyproject_gives_a_lab_none_or_a_config_error(tmp_path: Path, text: str) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    (directory / "pyproject.toml").write_text("# surge\n" + text, encoding="utf-8", errors="surrogatepass")
    _lab_or_error(lambda: lab.resolve(SurgeSettings(lab=None), cwd=directory))


@FUZZ
@given(tables=LAB_TABLES)
def test_any_profile_tables_give_a_profile_or_a_config_error(tables: dict[str, Any]) -> None:
    with no_hang():
        try:
            profile = lab.parse(tables, "fuzz.toml")
        except ConfigError as exc:
            assert exc.problems and "fuzz.toml" in str(exc)
            return
    assert isinstance(profile, lab.LabProfile)


# -- checkpoint files ----------------------------------------------------------------------------------------


def _trainer(root: Path) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=str(root),
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        **quiet_trainer_args(),
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """One valid checkpoint (data, marker) from a real fit, written once for every example."""
    root = tmp_path_factory.mktemp("saved")
    trainer = _trainer(root)
    torch.manual_seed(0)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    path = root / "good.ckpt"
    trainer.save_checkpoint(str(path))
    return path.read_bytes(), Path(store.marker_url(str(path))).read_bytes()


def _marker(data: bytes, name: str) -> bytes:
    return f"{hashlib.sha256(data).hexdigest()}  {name}\n".encode()


DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.9999)),
    st.tuples(
        st.just("flip"), st.lists(st.tuples(st.floats(0.0, 0.9999), st.integers(1, 255)), min_size=1, max_size=4)
    ),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=16)),
)
MARKER = st.one_of(
    st.just("kept"),  # the marker of the original data
    st.just("recommitted"),  # a marker recomputed for the damaged data: only unpickling can tell
    st.just("missing"),
    st.binary(max_size=80).map(lambda b: ("replaced", b)),
)


def _damage(data: bytes, damage: tuple[str, Any]) -> bytes:
    kind, arg = damage
    if kind == "truncate":
        return data[: int(arg * len(data))]
    if kind == "append":
        return data + arg
    out = bytearray(data)
    for where, mask in arg:
        out[int(where * len(out))] ^= mask
    return bytes(out)


def _write_damaged(directory: Path, saved: tuple[bytes, bytes], damage: Any, marker: Any) -> str:
    data = _damage(saved[0], damage)
    path = directory / "damaged.ckpt"
    path.write_bytes(data)
    if marker == "kept":
        Path(store.marker_url(str(path))).write_bytes(saved[1].replace(b"good.ckpt", b"damaged.ckpt"))
    elif marker == "recommitted":
        Path(store.marker_url(str(path))).write_bytes(_marker(data, path.name))
    elif marker != "missing":
        Path(store.marker_url(str(path))).write_bytes(marker[1])
    return str(path)


def _changed(saved: tuple[bytes, bytes], damage: Any) -> bool:
    return _damage(saved[0], damage) != saved[0]


@FUZZ
@given(damage=DAMAGE, marker=MARKER)
def test_a_damaged_checkpoint_file_is_refused_naming_it(
    tmp_path: Path, saved: tuple[bytes, bytes], damage: Any, marker: Any
) -> None:
    path = _write_damaged(Path(tempfile.mkdtemp(dir=tmp_path)), saved, damage, marker)
    with no_hang():
        try:
            checkpoint = store.load(path)
        except CheckpointError as exc:
            assert path in str(exc)
            return
    # Only a recommitted file can load (a flip inside tensor bytes leaves a well-formed checkpoint).
    assert marker == "recommitted" or not _changed(saved, damage)
    assert isinstance(checkpoint, dict)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=DAMAGE, marker=st.sampled_from(["kept", "recommitted", "missing"]))
# found in CI: a flip that renames the optimizer's "state" key under a recomputed marker (a KeyError in restore)
@example(damage=("flip", [(0.05714246894570953, 1)]), marker="recommitted")
def test_fit_from_a_damaged_checkpoint_fails_naming_it(
    tmp_path: Path, saved: tuple[bytes, bytes], damage: Any, marker: Any
) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    path = _write_damaged(directory, saved, damage, marker)
    with no_hang():
        try:
            _trainer(directory).fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path=path)
        except SurgeError as exc:
            assert path in str(exc)
            return
    assert marker == "recommitted" or not _changed(saved, damage)


# -- plugin metadata -----------------------------------------------------------------------------------------

ENTRY_POINT_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=10).filter(
    lambda n: n[0].isalpha()
) | st.sampled_from(["checkpoint", "devices", "Bad Name", "x y", "-lead", "ümlaut"])
PLUGIN_NAMES = ENTRY_POINT_NAMES | st.just("")
WRONG_OBJECTS = st.sampled_from([None, 1, "plugin", {"name": "x"}, [surge.Plugin], surge.Plugin, TinyModule, len])
MALFORMED_VALUES = st.sampled_from(["", ":", "a b", "::x", "surge.testing:", ".x:y", "x:y:z", "surge.testing:[x]"])
BROKEN = st.one_of(
    st.tuples(st.just("nowhere"), st.integers(0, 10**6)),  # a module that is not installed
    st.tuples(st.just("no-attribute"), st.integers(0, 10**6)),  # a module without that attribute
    st.tuples(st.just("malformed"), MALFORMED_VALUES),
    st.tuples(st.just("raises"), st.text(max_size=20)),  # the import raises
    st.tuples(st.just("wrong-type"), WRONG_OBJECTS),
    st.tuples(st.just("other-name"), PLUGIN_NAMES),  # a valid Plugin whose name is not the entry point's
    st.tuples(
        st.just("invalid-declaration"),  # surge.Plugin(...) itself raises, at import
        st.tuples(PLUGIN_NAMES, st.sampled_from(["participant", "observer", "provider", "service", ""])),
    ),
)


class _Marker:
    pass


def _valid(name: str) -> surge.Plugin:
    return surge.Plugin(name=name, kind="participant", factory=_Marker)


class _Extra(surge.plugins._Source):
    """Installed entry points plus real ``importlib.metadata.EntryPoint`` objects (no distribution)."""

    def __init__(self, previous: Any, extra: list[metadata.EntryPoint]) -> None:
        self.previous, self.extra = previous, extra

    def entry_points(self) -> list[Any]:
        return [*self.previous.entry_points(), *self.extra]


def _install(
    env: PluginEnv, extra: list[metadata.EntryPoint], name: str, case: tuple[str, Any], index: int
) -> tuple[str, str]:
    """Make the broken entry point ``name`` discoverable; returns its identity (distribution, value): the
    same identity twice is one entry point seen twice (ignored), another one a conflict."""
    kind, arg = case
    group = surge.plugins.ENTRY_POINT_GROUP
    dist = f"surge-fuzz-{index}"
    value = {
        "nowhere": f"surge_fuzz_not_installed_{arg}:plugin",
        "no-attribute": f"surge.testing:no_plugin_here_{arg}",
        "malformed": str(arg),
        "invalid-declaration": f"_surge_fuzz_declaration_{index}:plugin",
    }.get(kind)
    if value is not None:
        extra.append(metadata.EntryPoint(name, value, group))  # no distribution
        dist = ""
    if kind == "raises":
        env.add_failing(name, error=arg, distribution=dist)
    elif kind == "wrong-type":
        env.add(arg, name=name, distribution=dist)
    elif kind == "other-name":
        env.add(_valid(arg if arg != name else arg + "x") if _valid_name(arg) else 3, name=name, distribution=dist)
    elif kind == "invalid-declaration":
        module_name = f"_surge_fuzz_declaration_{index}"
        module = types.ModuleType(module_name)
        declared_name, declared_kind = arg

        def declare(attribute: str) -> Any:  # the declaration runs when the entry point is loaded
            if attribute != "plugin":
                raise AttributeError(attribute)
            return surge.Plugin(name=declared_name, kind=declared_kind)  # type: ignore[arg-type]

        module.__getattr__ = declare  # type: ignore[method-assign]
        sys.modules[module_name] = module
    return dist, value if value is not None else str(index)


def _valid_name(name: str) -> bool:
    try:
        _valid(name)
    except PluginError:
        return False
    return True


@FUZZ
@given(cases=st.lists(st.tuples(ENTRY_POINT_NAMES, BROKEN), min_size=1, max_size=4), strict=st.booleans())
def test_broken_plugin_metadata_is_a_warning_and_a_failed_record_or_a_plugin_error(
    cases: list[tuple[str, tuple[str, Any]]], strict: bool
) -> None:
    installed = set(surge.plugins.discover(SurgeSettings(), lab=None).records)
    extra: list[metadata.EntryPoint] = []
    previous = surge.plugins.source
    surge.plugins.source = _Extra(previous, extra)
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", filter="surge")
    logger.enable("surge")
    names = list(dict.fromkeys(name for name, _ in cases))
    try:
        with PluginEnv() as env, no_hang():
            identities: dict[str, set[tuple[str, str]]] = {}
            for index, (name, case) in enumerate(cases):
                identities.setdefault(name, set()).add(_install(env, extra, name, case, index))
            taken = bool(installed & set(names)) or any(len(ids) > 1 for ids in identities.values())
            try:
                catalog = surge.plugins.discover(SurgeSettings(strict_plugins=strict), lab=None)
            except PluginConflictError as exc:
                assert taken, f"a conflict without a taken name: {exc}"
                return
            except PluginError as exc:
                assert strict and "SURGE_STRICT_PLUGINS" in str(exc)
                assert any(f"plugin '{name}'" in str(exc) for name in names)
                return
            assert not strict  # a name two distributions claim fails like a broken plugin: neither is loaded
            for name in names:
                record = catalog.records[name]
                assert record.status == "failed" and record.plugin is None and record.reason
                assert any(f"plugin '{name}'" in m and "failed to load and is skipped" in m for m in messages)
            try:
                trainer = surge.Trainer(enable_progress_bar=False, logger=False)  # the run goes on without them
            except ProviderError as exc:  # unless a clash took out the provider every run needs: said, and why
                assert taken and any(catalog.records[name].reason in str(exc) for name in names), exc
                return
            assert not set(names) & set(trainer.plugin_names)
            with pytest.raises(ConfigError, match="failed") as info:  # asking for one by name says why
                surge.Trainer(plugins=[names[0]], enable_progress_bar=False, logger=False)
            assert catalog.records[names[0]].reason in str(info.value)
    finally:
        logger.remove(sink)
        surge.plugins.source = previous
        for module_name in [m for m in sys.modules if m.startswith("_surge_fuzz_declaration_")]:
            del sys.modules[module_name]
