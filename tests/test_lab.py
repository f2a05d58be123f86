"""Lab profiles (``surge.plugins.lab``), checked against real installed distributions.

The plugin wheels of ``tests/_distributions.py`` are installed once per session with pip; the group ``lab``
holds three that import cleanly (``surge-test-alpha``, ``-beta``, ``-pair``), ``broken`` one whose import
raises. In-process tests put a group on ``sys.path`` (``importlib.metadata`` then finds it as in a user's
environment) and start from the profile ``surge.plugins.lab.lock()`` writes for it, edited per scenario. What needs a
fresh interpreter (was a module ever imported?) or the console script runs in child processes, started
together by one fixture.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import fsspec
import pytest
import surge
from loguru import logger
from surge.cli import main
from surge.errors import ConfigError, LabError, PluginError
from surge.plugins import lab
from surge.testing import TinyDataModule, TinyModule


def _surge() -> list[str]:
    script = Path(sys.executable).with_name("surge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "surge"]


def _lock(paths: list[Path], hashes: bool = False) -> str:
    """What ``surge plugins lock`` writes in an environment that also has ``paths`` on ``sys.path``."""
    sys.path[:0] = [str(p) for p in paths]
    try:
        return lab.lock(hashes=hashes)
    finally:
        for p in paths:
            sys.path.remove(str(p))


def _without(profile: str, distribution: str) -> str:
    return "".join(line for line in profile.splitlines(keepends=True) if not line.startswith(f"{distribution} ="))


def _repin(profile: str, distribution: str, value: str) -> str:
    return _without(profile, distribution) + f"{distribution} = {value}\n"


def _read(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return dists.installed_once(tmp_path_factory)


@dataclass
class Env:
    tmp: Path
    lock: str  # the locked profile of this environment: autoload = false, every distribution pinned

    def write(self, text: str, name: str = "lab.toml") -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)

    def use(self, text: str, monkeypatch: pytest.MonkeyPatch) -> str:
        path = self.write(text)
        monkeypatch.setenv("SURGE_LAB", path)
        return path

    @property
    def root(self) -> Path:
        return self.tmp / "root"


@pytest.fixture
def env(site: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """The ``lab`` group installed, no inherited ``SURGE_*`` setting, the working directory a fresh one."""
    for key in [k for k in os.environ if k.startswith("SURGE_")]:
        monkeypatch.delenv(key)
    monkeypatch.syspath_prepend(str(site["lab"]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(dists.HOOK_LOG, str(tmp_path / "hooks.log"))
    return Env(tmp_path, lab.lock())


def _trainer(root: Path, **kwargs: object) -> surge.Trainer:
    defaults: dict[str, object] = dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, enable_progress_bar=False
    )
    return surge.Trainer(default_root_dir=str(root), **{**defaults, **kwargs})


def _fit(root: Path, **kwargs: object) -> surge.Trainer:
    trainer = _trainer(root, **kwargs)
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    return trainer


# -- the environment matches, or the run refuses before any side effect ------------------------------


def test_a_matching_profile_lets_a_run_start(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "autoload = false" in env.lock
    for pin in ('surge = "==0.1.0"', 'surge-test-alpha = "==1.0.0"', 'surge-test-pair = "==0.5.0"'):
        assert pin in env.lock
    env.use(env.lock, monkeypatch)
    trainer = _fit(env.root)
    assert trainer.run_dir is not None and Path(trainer.run_dir).is_dir()
    assert "tp-alpha:fit_start" in _read(env.tmp / "hooks.log")


@pytest.mark.parametrize(
    ("kind", "edit", "expected"),
    [
        (
            "missing",
            lambda p: p + 'surge-test-absent = "==0.3.1"\n',
            [
                "missing",
                "surge-test-absent: not installed; the lab pins ==0.3.1",
                "pip install 'surge-test-absent==0.3.1'",
            ],
        ),
        (
            "version",
            lambda p: _repin(p, "surge-test-alpha", '">=1.1,<2"'),
            [
                "version",
                "surge-test-alpha: 1.0.0 is installed; the lab pins <2,>=1.1",
                "pip install 'surge-test-alpha<2,>=1.1'",
            ],
        ),
        (
            "unexpected",
            lambda p: _without(p, "surge-test-pair"),
            [
                "unexpected",
                "surge-test-pair 0.5.0: provides the plugins tp-eta, tp-zeta but is not in the profile",
                "pip uninstall surge-test-pair",
            ],
        ),
    ],
)
def test_each_mismatch_refuses_before_any_run_directory_with_the_diff_and_the_fix(
    env: Env, monkeypatch: pytest.MonkeyPatch, kind: str, edit: object, expected: list[str]
) -> None:
    path = env.use(edit(env.lock), monkeypatch)  # type: ignore[operator]
    with pytest.raises(LabError) as info:
        _fit(env.root)
    message = str(info.value)
    assert f"the environment does not match the lab profile {path} (1 problem(s))" in message
    for text in expected:
        assert text in message
    assert "nothing was run" in message
    assert not env.root.exists()  # refused before the run directory (before the Trainer existed at all)


def test_a_hash_mismatch_refuses_with_both_hashes(
    env: Env, site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = lab.lock(hashes=True)
    alpha_line = next(line for line in locked.splitlines() if line.startswith("surge-test-alpha ="))
    expected = alpha_line.split('sha256 = "')[1][:64]
    # the same files installed elsewhere hash the same; one changed byte does not
    same, tampered = env.tmp / "same", env.tmp / "tampered"
    shutil.copytree(site["lab"], same)
    shutil.copytree(site["lab"], tampered)
    with (tampered / "tp_alpha.py").open("a") as f:
        f.write("# patched in place\n")
    sys.path.remove(str(site["lab"]))
    monkeypatch.syspath_prepend(str(same))
    for module in ("tp_alpha", "tp_beta", "tp_eta", "tp_zeta"):  # imported from site["lab"] by earlier tests
        monkeypatch.delitem(sys.modules, module, raising=False)
    path = env.use(locked, monkeypatch)
    assert lab.load(path).check() == []
    sys.path.remove(str(same))
    monkeypatch.syspath_prepend(str(tampered))
    with pytest.raises(LabError) as info:
        _fit(env.root)
    message = str(info.value)
    assert "hash       surge-test-alpha 1.0.0: its installed files hash to " in message
    assert f"the lab pins {expected}" in message
    assert "pip install --force-reinstall --no-deps 'surge-test-alpha==1.0.0'" in message
    assert not env.root.exists()


def test_the_hash_is_the_documented_one(site: dict[str, Path]) -> None:
    from importlib import metadata

    info = site["lab"] / "surge_test_alpha-1.0.0.dist-info"
    dist = metadata.PathDistribution(info)
    hashed = ["surge_test_alpha-1.0.0.dist-info/METADATA", "surge_test_alpha-1.0.0.dist-info/WHEEL"]
    hashed += ["surge_test_alpha-1.0.0.dist-info/entry_points.txt", "tp_alpha.py"]
    lines = "".join(f"{p} {hashlib.sha256((site['lab'] / p).read_bytes()).hexdigest()}\n" for p in sorted(hashed))
    assert lab.distribution_hash(dist) == hashlib.sha256(lines.encode()).hexdigest()
    assert (info / "RECORD").exists() and (info / "INSTALLER").exists()  # listed, but per install: left out


def test_what_the_guard_trusts_is_what_the_hash_covers(site: dict[str, Path], tmp_path: Path) -> None:
    """Issue 26, item 1: a RECORD line leading out of the installation folder (``../x``, an absolute path, a
    file that is a link out of it) is never the distribution's own, and does not change its hash."""
    from importlib import metadata

    from surge.plugins import _pinned

    installed = tmp_path / "site"
    shutil.copytree(site["lab"], installed)
    elsewhere = tmp_path / "elsewhere" / "tp_alpha"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("raise SystemExit('unpinned code ran')\n")
    info = installed / "surge_test_alpha-1.0.0.dist-info"
    dist = metadata.PathDistribution(info)
    before = lab.distribution_hash(dist)
    with (info / "RECORD").open("a") as record:  # RECORD is left out of the hash: forged lines cost nothing
        record.write(f"../elsewhere/tp_alpha/__init__.py,,\n{elsewhere / '__init__.py'},,\n")
        record.write("tp_alpha.py/../../elsewhere/tp_alpha/__init__.py,,\n")
    own, outside = _pinned.own_files(dist)
    home = _pinned.home_of(dist, ["tp_alpha"], hashed=True)
    assert home is not None and outside == {}
    info_files = [f"surge_test_alpha-1.0.0.dist-info/{n}" for n in ("METADATA", "WHEEL", "entry_points.txt")]
    assert (
        home.files
        == frozenset(own.values())
        == frozenset((installed / p).resolve() for p in ["tp_alpha.py", *info_files])
    )
    assert not home.owns(str(elsewhere / "__init__.py"))
    assert lab.distribution_hash(dist) == before
    # a file of its own replaced by a link out of the folder is neither trusted nor hashable
    (tmp_path / "elsewhere" / "tp_alpha.py").write_bytes((installed / "tp_alpha.py").read_bytes())
    (installed / "tp_alpha.py").unlink()
    (installed / "tp_alpha.py").symlink_to(tmp_path / "elsewhere" / "tp_alpha.py")
    own, outside = _pinned.own_files(dist)
    assert "tp_alpha.py" not in own and outside == {"tp_alpha.py": (tmp_path / "elsewhere" / "tp_alpha.py").resolve()}
    assert not _pinned.home_of(dist, ["tp_alpha"]).owns(str(installed / "tp_alpha.py"))  # type: ignore[union-attr]
    with pytest.raises(LabError, match="tp_alpha.py is a link to .*, outside its installation folder"):
        lab.distribution_hash(dist)


def test_every_mismatch_is_listed_at_once_with_one_command_for_all(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = _without(_repin(env.lock, "surge-test-alpha", '"==1.0.1"'), "surge-test-pair")
    env.use(profile + 'surge-test-absent = "0.3.1"\n\n[plugins]\nabsent_plugin = true\n', monkeypatch)
    with pytest.raises(LabError) as info:
        _trainer(env.root)
    message = str(info.value)
    assert "(4 problem(s))" in message
    assert "absent_plugin: forced on by the lab, but no installed distribution provides it" in message
    assert (
        "all at once: pip uninstall -y surge-test-pair && pip install 'surge-test-absent==0.3.1' 'surge-test-alpha==1.0.1'"
        in message
    )


# -- import failures ---------------------------------------------------------------------------------------


def test_a_failing_plugin_is_skipped_by_default_and_fatal_when_strict_or_pinned(
    env: Env, site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site["broken"]))
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", filter="surge")
    logger.enable("surge")  # a library is silent until the application configures logging
    try:
        trainer = _trainer(env.root)  # no lab: reported and skipped
    finally:
        logger.remove(sink)
        logger.disable("surge")
    assert trainer.catalog.records["tp-broken"].status == "failed"
    assert any("tp-broken" in m and dists.BROKEN_MESSAGE in m for m in messages)

    monkeypatch.setenv("SURGE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="SURGE_STRICT_PLUGINS"):
        _trainer(env.root)
    monkeypatch.delenv("SURGE_STRICT_PLUGINS")

    path = env.use(lab.lock(), monkeypatch)  # now pinned: fatal without SURGE_STRICT_PLUGINS
    with pytest.raises(PluginError) as info:
        _trainer(env.root)
    assert dists.BROKEN_MESSAGE in str(info.value)
    assert f"fatal because the lab profile {path} pins surge-test-broken" in str(info.value)

    env.use(lab.lock().replace("autoload = false", "autoload = true") + "\n[plugins]\ntp-broken = false\n", monkeypatch)
    assert _trainer(env.root).catalog.records["tp-broken"].status == "blocked"  # off, so never imported


# -- forced plugins and Trainer defaults ----------------------------------------------------------------------


def test_forced_plugins_win_over_the_run_and_the_environment(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    path = env.use(env.lock + "\n[plugins]\ntp-alpha = false\ntp-beta = true\n", monkeypatch)
    trainer = _fit(env.root)
    alpha = trainer.catalog.records["tp-alpha"]
    assert (alpha.status, alpha.reason) == ("blocked", f"switched off by the lab profile {path}")
    assert "tp-beta" in trainer.plugin_names  # on request only, but forced on
    assert "tp-beta:fit_start" in _read(env.tmp / "hooks.log") and "tp-alpha:fit_start" not in _read(
        env.tmp / "hooks.log"
    )
    # over the run's own choices...
    assert "tp-beta" in _trainer(env.root, plugins={"tp-beta": False}).plugin_names
    with pytest.raises(ConfigError, match=r"trainer.plugins.tp-alpha: .* is blocked: switched off by the lab"):
        _trainer(env.root, plugins=["tp-alpha"])
    # ...and over the environment's
    monkeypatch.setenv("SURGE_DISABLE_PLUGINS", "tp-beta")
    monkeypatch.setenv("SURGE_PLUGINS", "devices,tp-alpha,tp-beta")
    trainer = _trainer(env.root)
    assert "tp-beta" in trainer.plugin_names and trainer.catalog.records["tp-alpha"].status == "blocked"


def test_lab_trainer_defaults_sit_under_the_environment_and_explicit_arguments(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.use(env.lock + "\n[trainer]\nmax_epochs = 3\nlog_every_n_steps = 7\nlimit_val_batches = 0.5\n", monkeypatch)
    config = surge.Trainer(default_root_dir=str(env.root)).config
    assert (config.max_epochs, config.log_every_n_steps, config.limit_val_batches) == (3, 7, 0.5)
    monkeypatch.setenv("SURGE_TRAINER_LOG_EVERY_N_STEPS", "5")
    config = surge.Trainer(default_root_dir=str(env.root), max_epochs=1).config
    assert (config.max_epochs, config.log_every_n_steps, config.limit_val_batches) == (1, 5, 0.5)


# -- where the profile comes from ---------------------------------------------------------------------------


def test_surge_lab_may_be_an_fsspec_url(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/labs/ok.toml", env.lock.encode())
    fs.pipe("/labs/old.toml", _repin(env.lock, "surge-test-beta", '"==1.9"').encode())
    try:
        monkeypatch.setenv("SURGE_LAB", "memory://labs/ok.toml")
        assert _fit(env.root).run_dir is not None
        monkeypatch.setenv("SURGE_LAB", "memory://labs/old.toml")
        with pytest.raises(LabError, match=r"lab profile memory://labs/old.toml .*\n.*surge-test-beta: 2.0.0 is"):
            _trainer(env.root)
        monkeypatch.setenv("SURGE_LAB", "memory://labs/nowhere.toml")
        with pytest.raises(LabError, match=r"cannot read the lab profile memory://labs/nowhere.toml"):
            _trainer(env.root)
    finally:
        fs.rm("/labs", recursive=True)


def test_pyproject_lab_table_and_the_order_of_precedence(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = env.lock.replace("[distributions]", "[tool.surge.lab.distributions]")
    (env.tmp / "pyproject.toml").write_text('[project]\nname = "exp"\n\n[tool.surge.lab]\n' + table)
    (env.tmp / "sub").mkdir()
    monkeypatch.chdir(env.tmp / "sub")  # found from a subdirectory too
    assert main(["plugins", "check"]) == 0
    assert f"matches the lab profile {env.tmp / 'pyproject.toml'} [tool.surge.lab]" in capsys.readouterr().out
    bad = table.replace('surge-test-beta = "==2.0.0"', 'surge-test-beta = "==2.0.1"')
    (env.tmp / "pyproject.toml").write_text("[tool.surge.lab]\n" + bad)
    with pytest.raises(LabError, match=r"pyproject.toml \[tool.surge.lab\] .*\n.*surge-test-beta: 2.0.0"):
        _trainer(env.root)
    assert not env.root.exists()
    # SURGE_LAB over pyproject.toml, --lab over SURGE_LAB
    good, worse = env.write(env.lock, "good.toml"), env.write(_without(env.lock, "surge-test-alpha"), "worse.toml")
    monkeypatch.setenv("SURGE_LAB", good)
    assert main(["plugins", "check"]) == 0
    assert main(["plugins", "check", "--lab", worse]) == 1
    assert main(["--lab", worse, "plugins", "check"]) == 1
    assert "unexpected surge-test-alpha 1.0.0" in capsys.readouterr().out
    assert os.environ["SURGE_LAB"] == good  # --lab lasts for its command only


def test_a_typo_in_the_profile_names_the_file_and_the_dotted_path(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = 'autolaod = false\n[distributions]\nsurge = { version = "=0.1", sha265 = "0" }\n'
    path = env.use(profile + "[trainer]\nmax_epoch = 3\n", monkeypatch)
    with pytest.raises(ConfigError) as info:
        _trainer(env.root)
    message = str(info.value)
    assert f"4 problem(s) in lab profile {path}:" in message
    assert "autolaod: unknown key; did you mean 'autoload'?" in message
    assert "distributions.surge.sha265: unknown key; did you mean 'sha256'?" in message
    assert "distributions.surge.version: got '=0.1': not a PEP 440 version specifier" in message
    assert "trainer.max_epoch: unknown argument; did you mean 'max_epochs'?" in message
    (env.tmp / "pyproject.toml").write_text("[tool.surge.lab]\nautoload = 'no'\n[tool.surge.lab.plugins]\nx = 1\n")
    monkeypatch.delenv("SURGE_LAB")
    with pytest.raises(ConfigError) as info:
        _trainer(env.root)
    assert "tool.surge.lab.autoload: got 'no': Input should be a valid boolean" in str(info.value)
    assert "tool.surge.lab.plugins.x: got 1" in str(info.value)


# -- the commands -------------------------------------------------------------------------------------------


def test_lock_then_check_round_trips_and_check_fails_after_a_change(
    env: Env, site: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "lock", "-o", "lab.toml", "--hashes"]) == 0
    written = (env.tmp / "lab.toml").read_text()
    assert 'surge-test-alpha = { version = "==1.0.0", sha256 = "' in written
    assert "# surge: an editable install, so no hash" in written
    assert main(["plugins", "check", "--lab", "lab.toml"]) == 0
    assert "the environment matches the lab profile lab.toml" in capsys.readouterr().out
    monkeypatch.syspath_prepend(str(site["broken"]))  # a plugin installed after the lock
    assert main(["plugins", "check", "--lab", "lab.toml"]) == 1
    out = capsys.readouterr().out
    assert "unexpected surge-test-broken 0.3.0: provides the plugin tp-broken" in out
    assert "fix: pip uninstall surge-test-broken" in out
    # a lab refuses the listing and a run as it refuses a Trainer; lock still writes
    assert main(["plugins", "--lab", "lab.toml"]) == 1
    assert main(["fit", "--lab", "lab.toml", "--root", str(env.root)]) == 1
    assert "surge fit: error: the environment does not match the lab profile lab.toml" in capsys.readouterr().err
    assert not env.root.exists()
    assert main(["plugins", "lock"]) == 0 and "surge-test-broken" in capsys.readouterr().out


def test_check_without_a_profile_says_where_one_can_come_from(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "check"]) == 1
    assert "no lab profile to check: pass --lab PATH, set SURGE_LAB" in capsys.readouterr().err


# -- in fresh interpreters ---------------------------------------------------------------------------------

_BLOCKING = """
import json, os, sys
log = os.environ["SURGE_TEST_IMPORT_LOG"]
def imported():
    return open(log).read().split() if os.path.exists(log) else []
out = {}
import surge, surge.plugins
from surge.errors import LabError
from surge.settings import load_settings
from surge.testing import TinyDataModule, TinyModule

os.environ["SURGE_LAB"] = os.environ["LAB_NO_ALPHA"]
try:
    surge.Trainer(default_root_dir="root")
except LabError as exc:
    out["refused"] = str(exc)
out["imported_by_the_refused_run"] = imported()
catalog = surge.plugins.discover(load_settings())  # discovery on its own applies the lab too
out["alpha"] = [catalog.records["tp-alpha"].status, catalog.records["tp-alpha"].reason]
out["imported_by_discovery"] = imported()

os.environ["SURGE_LAB"] = os.environ["LAB_ALPHA_OFF"]
trainer = surge.Trainer(default_root_dir="root", max_epochs=1, limit_train_batches=2, num_sanity_val_steps=0,
                        enable_progress_bar=False)
trainer.fit(TinyModule(), datamodule=TinyDataModule())
out["active"] = [n for n in trainer.plugin_names if n.startswith("tp-")]
out["imported_by_the_run"] = imported()
print("RESULT: " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def children(site: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("lab")
    full = _lock([site["lab"]])
    profiles = {
        "full": full,
        "no-alpha": _without(full, "surge-test-alpha"),
        "alpha-off": full + "\n[plugins]\ntp-alpha = false\ntp-beta = true\n",
        "old-alpha": _repin(full, "surge-test-alpha", '"==0.9"'),
    }
    for name, text in profiles.items():
        (tmp / f"{name}.toml").write_text(text)
    (tmp / "blocking").mkdir()
    blocking_env = dists.child_env(
        [site["lab"]],
        **{dists.IMPORT_LOG: str(tmp / "blocking" / "imports.log")},
        LAB_NO_ALPHA=str(tmp / "no-alpha.toml"),
        LAB_ALPHA_OFF=str(tmp / "alpha-off.toml"),
    )
    url_env = dists.child_env([site["lab"]], SURGE_LAB=(tmp / "full.toml").as_uri())
    started = {
        "blocking": dists.start_python(_BLOCKING, blocking_env, tmp / "blocking"),
        "fit_url": dists.start([*_surge(), "fit", "--max-epochs", "1", "--root", str(tmp / "url-root")], url_env, tmp),
        "fit_refused": dists.start(
            [*_surge(), "--lab", str(tmp / "old-alpha.toml"), "fit", "--root", str(tmp / "refused-root")],
            dists.child_env([site["lab"]]),
            tmp,
        ),
        "check_changed": dists.start(
            [*_surge(), "plugins", "check", "--lab", str(tmp / "full.toml")],
            dists.child_env([site["lab"], site["broken"]]),
            tmp,
        ),
    }
    yield {"tmp": tmp, **started}
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


@pytest.mark.slow
def test_autoload_false_never_imports_an_unlisted_plugin(children: dict) -> None:
    result = children["blocking"].result()
    assert "unexpected surge-test-alpha 1.0.0: provides the plugin tp-alpha" in result["refused"]
    assert "fix: pip uninstall surge-test-alpha" in result["refused"]
    assert result["imported_by_the_refused_run"] == []  # the check imports nothing
    status, reason = result["alpha"]
    assert status == "blocked" and "surge-test-alpha is not in the lab profile" in reason and "autoload" in reason
    assert result["imported_by_discovery"] == ["tp-beta", "tp-eta", "tp-zeta"]


@pytest.mark.slow
def test_a_forced_off_plugin_is_never_imported_and_a_forced_on_one_runs(children: dict) -> None:
    result = children["blocking"].result()
    assert "tp-alpha" not in result["imported_by_the_run"]
    assert result["active"] == ["tp-beta", "tp-eta", "tp-zeta"]


@pytest.mark.slow
def test_surge_fit_under_a_file_url_lab(children: dict) -> None:
    rc, out, err = children["fit_url"].wait()
    assert rc == 0, f"{out}\n{err}"
    assert "final validation accuracy:" in out
    assert any((children["tmp"] / "url-root" / "surge_runs").iterdir())


@pytest.mark.slow
def test_surge_fit_refuses_under_a_mismatching_lab(children: dict) -> None:
    rc, out, err = children["fit_refused"].wait()
    assert rc == 1, f"{out}\n{err}"
    assert "surge fit: error: the environment does not match the lab profile" in err
    assert "surge-test-alpha: 1.0.0 is installed; the lab pins ==0.9" in err
    assert "fix: pip install 'surge-test-alpha==0.9'" in err
    assert "Traceback" not in err
    assert not (children["tmp"] / "refused-root").exists()


@pytest.mark.slow
def test_surge_plugins_check_exits_1_with_the_diff(children: dict) -> None:
    rc, out, err = children["check_changed"].wait()
    assert rc == 1, f"{out}\n{err}"
    assert "unexpected surge-test-broken 0.3.0" in out and "pip uninstall surge-test-broken" in out
    assert dists.BROKEN_MESSAGE not in out + err  # checking imports nothing
