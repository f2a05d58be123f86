"""Attacks on a hashed lab: nothing runs code the lab did not pin, and every refusal comes before side effects.

The plugin wheels of ``tests/_distributions.py`` are installed for real (``lab``: alpha, beta, pair, all
importing cleanly; ``broken``; the two ``clash`` distributions) plus two of this module's own whose entry
points lead nowhere. Each profile is what ``surge plugins lock --hashes`` writes for its environment. Each
attack runs in a fresh interpreter (was a module ever imported? did a run directory appear?), started together
by one fixture; every generated module appends its name to an import log when it runs, and the attackers' code
appends a marker of its own, so "nothing unpinned ran" is read back from that log.

* shadowing: a package named like a pinned plugin's module in the directory ``surge fit`` runs from, and a
  module of that name beside a training script;
* byte-code: a replaced ``__pycache__`` file whose header matches the source, imported by the run, and
  imported by the script before the run;
* tampered files: a changed module, a ``RECORD`` with a line taken out, a package folder dropped beside a
  pinned module inside ``site-packages``;
* clashes and broken imports: two pinned distributions claiming one name, a pinned plugin whose import raises,
  entry points to a module or an attribute that does not exist.
"""

from __future__ import annotations

import json
import marshal
import shutil
import sys
import textwrap
from collections.abc import Iterator, Sequence
from importlib.util import MAGIC_NUMBER, cache_from_source
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
from surge.plugins import lab

pytestmark = pytest.mark.slow

ATTR = dists.Dist(
    "surge-test-noattr",
    "0.1.0",
    {"tp_noattr": dists.participant("tp-noattr", default=True)},
    [("tp-noattr", "tp_noattr:plugn")],
)
GONE = dists.Dist("surge-test-gone", "0.1.0", {"tp_here": dists.silent("tp-here")}, [("tp-gone", "tp_gone:plugin")])

# Runs `surge` commands in one interpreter, each with its own sys.path entries, and reports what they did.
_COMMANDS = """
import contextlib, io, json, os, sys
from surge.cli import main
commands, base = json.loads(sys.argv[1]), list(sys.path)
out = {}
for name, paths, argv in commands:
    sys.path[:] = paths + base
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(argv)
    out[name] = {"rc": rc, "out": stdout.getvalue(), "err": stderr.getvalue()}
log = os.environ["SURGE_TEST_IMPORT_LOG"]
out["imported"] = open(log).read().split() if os.path.exists(log) else []
out["files"] = sorted(os.listdir("."))
print("RESULT: " + json.dumps(out), flush=True)
"""

# A training script that builds a Trainer (after `import tp_alpha` when IMPORT_FIRST is set).
_SCRIPT = """
import json, os
if os.environ.get("IMPORT_FIRST"):
    import tp_alpha
import surge
from surge.errors import SurgeError
out = {}
try:
    surge.Trainer(default_root_dir="root", max_epochs=1)
except SurgeError as exc:
    out["refused"] = f"{type(exc).__name__}: {exc}"
log = os.environ["SURGE_TEST_IMPORT_LOG"]
out["imported"] = open(log).read().split() if os.path.exists(log) else []
out["root"] = os.path.exists("root")
print("RESULT: " + json.dumps(out), flush=True)
"""


def _logs(marker: str) -> str:
    """Source that appends ``marker`` to the import log: the attacker's code announcing that it ran."""
    return f"import os\nopen(os.environ['{dists.IMPORT_LOG}'], 'a').write('{marker}\\n')\n"


def _lock(paths: list[Path]) -> str:
    """What ``surge plugins lock --hashes`` writes in an environment with ``paths`` on ``sys.path``."""
    sys.path[:0] = [str(p) for p in paths]
    try:
        return lab.lock(hashes=True)
    finally:
        for p in paths:
            sys.path.remove(str(p))


def _forge_pyc(source: Path, code: str) -> Path:
    """Replace ``source``'s byte-code cache by ``code`` compiled, under a header that matches ``source``
    (modification time and size), so that Python runs it without reading ``source``."""
    cached = Path(cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    stat = source.stat()
    header = MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + stat.st_size.to_bytes(4, "little")
    cached.write_bytes(header + marshal.dumps(compile(code, str(source), "exec")))
    return cached


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    site = dists.installed_once(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("attacks")
    own = dists.install({"noattr": [ATTR], "gone": [GONE]}, tmp / "own")
    profiles = {
        "lab": _lock([site["lab"]]),
        "broken": _lock([site["lab"], site["broken"]]),
        "clash": _lock([site["lab"], site["clash"]]),
        "noattr": _lock([site["lab"], own["noattr"]]),
        "gone": _lock([site["lab"], own["gone"]]),
    }
    for name, text in profiles.items():
        (tmp / f"{name}.toml").write_text(text)
    labs = {name: str(tmp / f"{name}.toml") for name in profiles}

    # byte-code: tp_alpha's cache replaced by code that marks the log, then does what tp_alpha does
    forged = tmp / "forged"
    shutil.copytree(site["lab"], forged)
    evil = _logs("forged-pyc-ran") + dists.participant("tp-alpha", default=True)
    pyc = _forge_pyc(forged / "tp_alpha.py", evil)
    pyc_bytes = pyc.read_bytes()
    # tampered files: a changed module, a RECORD line taken out, a package folder beside a pinned module
    tampered = tmp / "tampered"
    shutil.copytree(site["lab"], tampered)
    with (tampered / "tp_beta.py").open("a") as f:
        f.write(_logs("tampered-ran"))
    record = tampered / "surge_test_alpha-1.0.0.dist-info" / "RECORD"
    record.write_text(
        "".join(line for line in record.read_text().splitlines(True) if not line.startswith("tp_alpha.py,"))
    )
    with (tampered / "tp_alpha.py").open("a") as f:
        f.write(_logs("unlisted-ran"))
    (tampered / "tp_zeta").mkdir()
    (tampered / "tp_zeta" / "__init__.py").write_text(
        _logs("site-shadow-ran") + dists.participant("tp-zeta", default=True)
    )
    # shadowing: a package in the working directory, a module beside the training script
    (tmp / "cwd" / "tp_alpha").mkdir(parents=True)
    (tmp / "cwd" / "tp_alpha" / "__init__.py").write_text(
        _logs("cwd-shadow-ran") + dists.participant("tp-alpha", default=True)
    )
    (tmp / "scripts").mkdir()
    (tmp / "scripts" / "train.py").write_text(textwrap.dedent(_SCRIPT))
    (tmp / "scripts" / "tp_beta.py").write_text(
        _logs("script-shadow-ran") + dists.participant("tp-beta", default=False)
    )

    def commands(name: str, paths: list[Path], cwd: Path, *argvs: tuple[str, list[Path], list[str]]) -> dists.Child:
        cwd.mkdir(exist_ok=True)
        spec = [(n, [str(p) for p in extra], argv) for n, extra, argv in argvs]
        env = dists.child_env(
            paths, **{dists.IMPORT_LOG: str(tmp / f"{name}.log"), dists.HOOK_LOG: str(tmp / f"{name}.hooks")}
        )
        return dists.start([sys.executable, "-c", _COMMANDS, json.dumps(spec)], env, cwd)

    def script(name: str, paths: list[Path], cwd: Path, **env: str) -> dists.Child:
        cwd.mkdir(exist_ok=True)
        variables = {dists.IMPORT_LOG: str(tmp / f"{name}.log"), "SURGE_LAB": labs["lab"], **env}
        return dists.start(
            [sys.executable, str(tmp / "scripts" / "train.py")], dists.child_env(paths, **variables), cwd
        )

    def check_and_fit(lab_name: str, extra: Sequence[Path] = ()) -> list[tuple[str, list[Path], list[str]]]:
        return [
            (f"{lab_name}-check", list(extra), ["--lab", labs[lab_name], "plugins", "check"]),
            (f"{lab_name}-fit", list(extra), ["--lab", labs[lab_name], "fit", "--max-epochs", "1", "--root", "root"]),
        ]

    started = {
        "shadow_cwd": commands("shadow_cwd", [site["lab"]], tmp / "cwd", *check_and_fit("lab")),
        "shadow_script": script("shadow_script", [site["lab"]], tmp / "script-cwd"),
        "pyc_run": commands("pyc_run", [forged], tmp / "pyc-run", *check_and_fit("lab")),
        "pyc_control": dists.start(
            [sys.executable, "-c", "import tp_alpha"],
            dists.child_env([forged], **{dists.IMPORT_LOG: str(tmp / "pyc_control.log")}),
            tmp,
        ),
        "pyc_first": script("pyc_first", [forged], tmp / "pyc-first", IMPORT_FIRST="1"),
        "tampered": commands("tampered", [tampered], tmp / "tampered-cwd", *check_and_fit("lab")),
        "failures": commands(
            "failures",
            [site["lab"]],
            tmp / "failures",
            *check_and_fit("broken", [site["broken"]]),
            *check_and_fit("clash", [site["clash"]]),
            *check_and_fit("noattr", [own["noattr"]]),
            *check_and_fit("gone", [own["gone"]]),
        ),
    }
    yield {"tmp": tmp, "site": site, "pyc": pyc, "pyc_bytes": pyc_bytes, "profiles": profiles, **started}
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


def _refused(result: dict, name: str, *texts: str) -> str:
    """The command ``name`` exited 1 with ``texts`` in its message and no traceback; returns the message."""
    run = result[name]
    message = run["out"] + run["err"]
    assert run["rc"] == 1, message
    for text in texts:
        assert text in message, message
    assert "Traceback" not in message
    return message


# -- shadowing ----------------------------------------------------------------------------------------------


def test_a_package_in_the_working_directory_is_refused_before_it_runs(attacks: dict) -> None:
    result = attacks["shadow_cwd"].result()
    shadow, own = attacks["tmp"] / "cwd" / "tp_alpha", attacks["site"]["lab"] / "tp_alpha.py"
    expected = (
        "shadowed   surge-test-alpha 1.0.0: plugin 'tp-alpha': `import tp_alpha` would run "
        f"{shadow / '__init__.py'}, which is not a file of the pinned distribution surge-test-alpha 1.0.0 "
        f"(its own is {own})",
        f"fix: remove or rename {shadow}, or start the run from another directory",
    )
    _refused(result, "lab-check", *expected)  # `surge plugins check` finds what `surge fit` here would find
    _refused(result, "lab-fit", *expected, "nothing was run")
    assert result["imported"] == []  # neither the shadow nor anything else ran
    assert result["files"] == ["tp_alpha"]  # no run directory, no file written


def test_a_module_beside_the_training_script_is_refused_before_it_runs(attacks: dict) -> None:
    result = attacks["shadow_script"].result()
    shadow = attacks["tmp"] / "scripts" / "tp_beta.py"
    assert result["refused"].startswith("LabError: the environment does not match the lab profile")
    assert f"`import tp_beta` would run {shadow}, which is not a file of the pinned distribution" in result["refused"]
    assert f"remove or rename {shadow}" in result["refused"]
    assert result["imported"] == [] and result["root"] is False


# -- byte-code ---------------------------------------------------------------------------------------------------


def test_the_forged_cache_is_what_python_runs_without_a_lab(attacks: dict) -> None:
    rc, _, err = attacks["pyc_control"].wait()
    assert rc == 0, err
    assert (attacks["tmp"] / "pyc_control.log").read_text().split() == ["forged-pyc-ran", "tp-alpha"]


def test_a_hashed_lab_runs_the_hashed_source_not_the_forged_cache(attacks: dict) -> None:
    result = attacks["pyc_run"].result()
    # the files the hash covers are intact, so the run goes on; check reports the cache, which an import before
    # the lab is read would run (see the next test)
    pyc = attacks["pyc"]
    _refused(result, "lab-check", f"bytecode   surge-test-alpha 1.0.0: the byte-code cache {pyc} holds other code")
    assert f"fix: delete {pyc}" in result["lab-check"]["out"]
    assert result["lab-fit"]["rc"] == 0, result["lab-fit"]
    assert "forged-pyc-ran" not in result["imported"] and "tp-alpha" in result["imported"]
    assert "tp-alpha:fit_start" in (attacks["tmp"] / "pyc_run.hooks").read_text().split()
    assert attacks["pyc"].read_bytes() == attacks["pyc_bytes"]  # no cache was written over it either
    assert "root" in result["files"]


def test_a_forged_cache_imported_before_the_run_refuses_the_run(attacks: dict) -> None:
    result = attacks["pyc_first"].result()
    assert result["imported"] == ["forged-pyc-ran", "tp-alpha"]  # the script ran it before surge could look
    message = result["refused"]
    assert "bytecode   surge-test-alpha 1.0.0: tp_alpha was imported before the lab was read, from " in message
    assert f"{attacks['pyc']}, byte-code that is not the code of its hashed source" in message
    assert f"fix: delete {attacks['pyc']}, then start the run again" in message
    assert result["root"] is False


# -- tampered files --------------------------------------------------------------------------------------------


def test_tampered_files_are_refused_before_any_of_them_runs(attacks: dict) -> None:
    result = attacks["tampered"].result()
    site = attacks["tmp"] / "tampered"
    expected = (
        "(4 problem(s))",
        "hash       surge-test-alpha 1.0.0: its installed files hash to",  # a RECORD line taken out...
        f"`import tp_alpha` would run {site / 'tp_alpha.py'}, which is not a file of the pinned distribution "
        "surge-test-alpha 1.0.0 (it installed no such module)",  # ...so its module is no longer its own
        "hash       surge-test-beta 2.0.0: its installed files hash to",  # a changed module
        f"shadowed   surge-test-pair 0.5.0: plugin 'tp-zeta': `import tp_zeta` would run {site / 'tp_zeta' / '__init__.py'}",
        f"(its own is {site / 'tp_zeta.py'})",
    )
    _refused(result, "lab-check", *expected)
    _refused(result, "lab-fit", *expected)
    assert result["imported"] == [] and "root" not in result["files"]


# -- clashes and broken imports -------------------------------------------------------------------------------


def test_lock_warns_about_every_plugin_a_run_under_the_profile_would_refuse(attacks: dict) -> None:
    profiles = attacks["profiles"]
    assert (
        "# warning: plugin 'tp-broken' (distribution surge-test-broken 0.3.0) fails to load: RuntimeError: "
        in profiles["broken"]
    )
    assert "Every run under this profile refuses until it is fixed" in profiles["broken"]
    assert "two distributions claim the plugin name 'tp-clash'" in profiles["clash"]
    assert "AttributeError" in profiles["noattr"] and "ModuleNotFoundError" in profiles["gone"]
    assert "# warning:" not in profiles["lab"]


def test_check_finds_the_broken_imports_and_clashes_a_run_refuses_for(attacks: dict) -> None:
    result = attacks["failures"].result()
    broken = (
        f"import     surge-test-broken 0.3.0: its plugin 'tp-broken' fails to load: RuntimeError: {dists.BROKEN_MESSAGE}",
        "fix: fix or reinstall it (pip install --force-reinstall --no-deps 'surge-test-broken==0.3.0'), or switch it off",
    )
    _refused(result, "broken-check", *broken)
    _refused(result, "broken-fit", "fatal because the lab profile", "pins surge-test-broken", dists.BROKEN_MESSAGE)
    clash = "clash      tp-clash: claimed by surge-test-clash-one 0.1.0 (tp_clash_one:plugin) and surge-test-clash-two 0.2.0"
    _refused(result, "clash-check", clash, "fix: pip uninstall surge-test-clash-one or surge-test-clash-two")
    _refused(result, "clash-fit", clash, "nothing was run")
    _refused(
        result,
        "noattr-check",
        "import     surge-test-noattr 0.1.0: its plugin 'tp-noattr' fails to load: AttributeError:",
        "'plugn'",
    )
    _refused(result, "noattr-fit", "surge-test-noattr", "'plugn'")
    gone = "nowhere    surge-test-gone 0.1.0: the entry point of its plugin 'tp-gone' (tp_gone:plugin) names tp_gone, which is not found"
    _refused(result, "gone-check", gone)
    _refused(result, "gone-fit", gone)
    assert "tp-clash" not in result["imported"]  # neither claimant ran
    assert "root" not in result["files"]  # every refusal came before the run directory
