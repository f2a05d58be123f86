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
import zipfile
from collections.abc import Iterator, Sequence
from importlib.util import MAGIC_NUMBER, cache_from_source, source_hash
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


# == issue 26: the trust boundary, attacked again ======================================================================
#
# Each attack below plants what it needs in its own folders and runs `surge plugins check` and `surge fit` against
# the profile `surge plugins lock` wrote for the environment before the attack. The attacks that can share an
# interpreter run in one child (`_RUN`: each command with its own sys.path, working directory and variables, the
# test plugins imported afresh); those that change what runs at start-up, or which `surge` is imported, have one of
# their own. Every piece of attacking code appends its marker to the import log.

# Runs `surge` commands in one interpreter: (name, sys.path entries, argv, environment variables, working directory).
_RUN = """
import contextlib, importlib, io, json, os, site, sys
for folder in os.environ.get("ADD_SITE_DIR", "").split(os.pathsep):
    if folder:
        site.addsitedir(folder)  # a site folder of this interpreter: its .pth files run now, before surge is imported
from surge.cli import main
commands, base, home = json.loads(sys.argv[1]), list(sys.path), os.getcwd()
out = {}
for name, paths, argv, env, cwd in commands:
    for module in [m for m in sys.modules if m.split(".")[0].startswith("tp_")]:
        del sys.modules[module]  # each command imports the test plugins afresh, as a process of its own would
    importlib.invalidate_caches()
    lead = base[:1] if base[:1] == [""] else []  # the working directory stays first, as `surge fit` puts it
    sys.path[:] = lead + paths + base[len(lead) :]
    os.chdir(cwd or home)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            rc = main(argv)
        except BaseException as exc:  # noqa: BLE001 - reported, so that the other commands still run
            rc = f"{type(exc).__name__}: {exc}"
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    out[name] = {"rc": rc, "out": stdout.getvalue(), "err": stderr.getvalue(), "files": sorted(os.listdir("."))}
    os.chdir(home)
log = os.environ["SURGE_TEST_IMPORT_LOG"]
out["imported"] = open(log).read().split() if os.path.exists(log) else []
print("RESULT: " + json.dumps(out), flush=True)
"""


def _installed(folder: Path, name: str, version: str, files: dict[str, str], entry_points: str = "") -> Path:
    """A distribution laid out as an installer leaves it in ``folder``: its files, and a ``.dist-info`` with
    ``METADATA``, ``entry_points.txt`` and a ``RECORD`` listing everything (``../`` paths for files outside);
    returns the ``.dist-info`` folder."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/entry_points.txt": entry_points,
    }
    record = ""
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record += f"{relative},{dists._record_hash(text.encode())},{len(text.encode())}\n"
    (folder / info / "RECORD").write_text(record + f"{info}/RECORD,,\n")
    return folder / info


def _pin(profile: str, info: Path, hashed: bool = True) -> str:
    """``profile`` with the distribution of ``info`` pinned as `surge plugins lock [--hashes]` pins it (read from its
    files: nothing of it is imported here)."""
    from importlib import metadata

    dist = metadata.PathDistribution(info)
    value = json.dumps(f"=={dist.version}")
    if hashed:
        value = f"{{ version = {value}, sha256 = {json.dumps(lab.distribution_hash(dist))} }}"
    return profile + f"{dist.metadata['Name']} = {value}\n"


def _without_hashes(profile: str) -> str:
    """A profile of the same versions without hashes: what a lab that pins versions only writes."""
    return "".join(
        line.split(", sha256 =")[0].replace("{ version = ", "") + "\n" if ", sha256 =" in line else line + "\n"
        for line in profile.splitlines()
    )


def _forge_unchecked_pyc(source: Path, code: str) -> Path:
    """A hash-based cache of ``source`` whose flags say "unchecked": Python runs it without looking at the source."""
    cached = Path(cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    header = MAGIC_NUMBER + (1).to_bytes(4, "little") + source_hash(source.read_bytes())
    cached.write_bytes(header + marshal.dumps(compile(code, str(source), "exec")))
    return cached


# The pinned plugin of the guard attack: at import it plants a shadow of tp_zeta in the working directory, then tries
# what switched the import guard off before issue 26 (a module attribute) and, with TP_AAA_MODE=meta_path, takes the
# guard off sys.meta_path. Each attempt that did what it wanted is logged as aaa:<attempt>.
_AAA = (
    _logs("tp-aaa")
    + """
import pathlib, sys
import surge
from surge.plugins import _pinned

def _note(line):
    open(os.environ["SURGE_TEST_IMPORT_LOG"], "a").write(line + "\\n")

shadow = pathlib.Path.cwd() / "tp_zeta"
shadow.mkdir(exist_ok=True)
(shadow / "__init__.py").write_text(
    "import os\\nopen(os.environ['SURGE_TEST_IMPORT_LOG'], 'a').write('guard-shadow-ran\\\\n')\\n"
    "import surge\\nplugin = surge.Plugin(name='tp-zeta', kind='participant', factory=object)\\n"
)
try:
    _pinned._guard.homes.clear()
    _note("aaa:attribute")
except Exception:
    pass
try:
    _pinned.guard((), "")
    _note("aaa:guard-off")
except Exception:
    pass
_pinned._find = lambda *args, **kwargs: None  # the guard's helpers, replaced: the guard keeps its own
if os.environ.get("TP_AAA_MODE") == "meta_path":
    for finder in list(sys.meta_path):
        if type(finder).__module__ == "surge.plugins._pinned":
            sys.meta_path.remove(finder)
            _note("aaa:meta_path")

plugin = surge.Plugin(name="tp-aaa", kind="participant", default=True, factory=object)
"""
)

_TORCH_BACKEND = _logs("torch-backend-ran") + "\ndef load():\n    pass\n"
_PYDANTIC_PLUGIN = (
    _logs("pydantic-plugin-ran")
    + "\nclass _Plugin:\n    def new_schema_validator(self, *args, **kwargs):\n        return None, None, None\n\n\nplugin = _Plugin()\n"
)
_LAUNCHER = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from tp_tool import main
{extra}if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


@pytest.fixture(scope="module")
def trust(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    import surge

    site = dists.installed_once(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("trust")
    hashed = _lock([site["lab"]])  # the lab's environment, locked with hashes before any attack
    plain = _without_hashes(hashed)
    labs: dict[str, str] = {}

    def profile(name: str, text: str) -> str:
        (tmp / f"{name}.toml").write_text(text)
        labs[name] = str(tmp / f"{name}.toml")
        return labs[name]

    profile("hashed", hashed)
    profile("plain", plain)
    own: dict[str, Path] = {}

    # 1. a forged RECORD line makes a copy outside the install folder "its own"
    own["record"] = tmp / "record-site"
    shutil.copytree(site["lab"], own["record"])
    (tmp / "elsewhere" / "tp_alpha").mkdir(parents=True)
    (tmp / "elsewhere" / "tp_alpha" / "__init__.py").write_text(
        _logs("forged-record-ran") + dists.participant("tp-alpha", default=True)
    )
    with (own["record"] / "surge_test_alpha-1.0.0.dist-info" / "RECORD").open("a") as record:
        record.write("../elsewhere/tp_alpha/__init__.py,,\n")

    # a namespace package's portion in the working directory, before the pinned one
    own["ns"] = tmp / "ns-site"
    ns_info = _installed(
        own["ns"],
        "surge-test-ns",
        "0.1.0",
        {"tp_ns/alpha.py": dists.participant("tp-ns", default=True)},
        "[surge.plugins]\ntp-ns = tp_ns.alpha:plugin\n",
    )
    profile("ns", _pin(hashed, ns_info))
    (tmp / "ns-cwd" / "tp_ns").mkdir(parents=True)
    (tmp / "ns-cwd" / "tp_ns" / "alpha.py").write_text(
        _logs("ns-portion-ran") + dists.participant("tp-ns", default=True)
    )

    # another distribution's metadata of the same name (spelled otherwise) earlier on sys.path
    own["meta"] = tmp / "meta-site"
    _installed(
        own["meta"],
        "SURGE_TEST_ALPHA",  # surge-test-alpha, spelled otherwise
        "1.0.0",
        {"tp_alpha_meta.py": _logs("metadata-shadow-ran") + dists.participant("tp-alpha", default=True)},
        "[surge.plugins]\ntp-alpha = tp_alpha_meta:plugin\n",
    )

    # a pinned distribution's entry point edited to lead into another distribution's module
    own["gamma"] = tmp / "gamma-site"
    shutil.copytree(site["lab"], own["gamma"])
    _installed(
        own["gamma"],
        "surge-test-gamma",
        "0.1.0",
        {"tp_gamma.py": _logs("other-module-ran") + dists.participant("tp-beta", default=True)},
    )
    points = own["gamma"] / "surge_test_beta-2.0.0.dist-info" / "entry_points.txt"
    points.write_text(points.read_text().replace("tp_beta:plugin", "tp_gamma:plugin"))

    # a pinned module replaced by a link to a file outside the install folder
    own["link"] = tmp / "link-site"
    shutil.copytree(site["lab"], own["link"])
    (tmp / "outside").mkdir()
    (tmp / "outside" / "tp_beta.py").write_text(_logs("link-out-ran") + dists.participant("tp-beta", default=True))
    (own["link"] / "tp_beta.py").unlink()
    (own["link"] / "tp_beta.py").symlink_to(tmp / "outside" / "tp_beta.py")

    # a copy of a pinned plugin in a zip on sys.path
    with zipfile.ZipFile(tmp / "plugins.zip", "w") as archive:
        archive.writestr("tp_alpha/__init__.py", _logs("zip-copy-ran") + dists.participant("tp-alpha", default=True))

    # a module dropped into a pinned package's folder, which the package imports only if it is there
    own["pkg"] = tmp / "pkg-site"
    pkg_source = dists.participant("tp-pkg", default=True).replace(
        "\nclass Handlers:",
        "\ntry:\n    import tp_pkg.extra  # an optional speed-up\nexcept ImportError:\n    pass\n\n\nclass Handlers:",
    )
    pkg_info = _installed(
        own["pkg"],
        "surge-test-pkg",
        "0.1.0",
        {"tp_pkg/__init__.py": pkg_source},
        "[surge.plugins]\ntp-pkg = tp_pkg:plugin\n",
    )
    profile("pkg", _pin(hashed, pkg_info))
    (own["pkg"] / "tp_pkg" / "extra.py").write_text(_logs("dropped-module-ran"))

    # an unchecked hash-based byte-code cache of a pinned module (Python never looks at the source's stamp)
    own["unchecked"] = tmp / "unchecked-site"
    shutil.copytree(site["lab"], own["unchecked"])
    unchecked = _forge_unchecked_pyc(
        own["unchecked"] / "tp_beta.py", _logs("unchecked-pyc-ran") + dists.participant("tp-beta", default=False)
    )

    # a pinned plugin that tries to switch the import guard off
    own["guard"] = tmp / "guard-site"
    aaa_info = _installed(
        own["guard"], "surge-test-aaa", "0.1.0", {"tp_aaa.py": _AAA}, "[surge.plugins]\ntp-aaa = tp_aaa:plugin\n"
    )
    profile("guard", _pin(hashed, aaa_info))

    def check_and_fit(name: str, lab_name: str, paths: list[Path], cwd: Path | None = None, **env: str) -> list[list]:
        where = str(cwd) if cwd else ""
        if cwd:
            cwd.mkdir(parents=True, exist_ok=True)
        fit = ["--lab", labs[lab_name], "fit", "--max-epochs", "1", "--root", "root"]
        return [
            [f"{name}-check", [str(p) for p in paths], ["--lab", labs[lab_name], "plugins", "check"], env, where],
            [f"{name}-fit", [str(p) for p in paths], fit, env, where],
        ]

    commands = [
        *check_and_fit("record", "hashed", [tmp / "elsewhere", own["record"]], tmp / "record-cwd"),
        *check_and_fit("ns", "ns", [own["ns"], site["lab"]], tmp / "ns-cwd"),
        *check_and_fit("meta", "plain", [own["meta"], site["lab"]], tmp / "meta-cwd"),
        *check_and_fit("gamma", "plain", [own["gamma"]], tmp / "gamma-cwd"),
        *check_and_fit("link", "plain", [own["link"]], tmp / "link-cwd"),
        *check_and_fit("link-hashed", "hashed", [own["link"]], tmp / "link-hashed-cwd"),
        *check_and_fit("zip", "hashed", [tmp / "plugins.zip", site["lab"]], tmp / "zip-cwd"),
        *check_and_fit("pkg", "pkg", [own["pkg"], site["lab"]], tmp / "pkg-cwd"),
        *check_and_fit("unchecked", "hashed", [own["unchecked"]], tmp / "unchecked-cwd"),
        # the guard: the run first (the shadow does not exist yet when it starts), then check
        *reversed(check_and_fit("guard", "guard", [own["guard"], site["lab"]], tmp / "guard-cwd")),
        *check_and_fit(
            "guard-meta", "guard", [own["guard"], site["lab"]], tmp / "guard-meta-cwd", TP_AAA_MODE="meta_path"
        )[::-1],
    ]

    def start(
        name: str, spec: list[list], paths: Sequence[Path] = (), cwd: Path | None = None, *flags: str, **env: str
    ) -> dists.Child:
        folder = cwd or tmp / f"{name}-home"
        folder.mkdir(exist_ok=True)
        variables = {dists.IMPORT_LOG: str(tmp / f"{name}.log"), dists.HOOK_LOG: str(tmp / f"{name}.hooks"), **env}
        argv = [sys.executable, *flags, "-c", _RUN, json.dumps(spec)]
        return dists.start(argv, dists.child_env(paths, **variables), folder, timeout=180 + 30 * len(spec))

    # 2. the core itself: a copy of the `surge` package beside the script, in the working directory, on PYTHONPATH,
    # in a zip
    core = Path(surge.__file__).parent
    copy = tmp / "core-copy"
    shutil.copytree(
        core, copy / "surge", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "_plugin_template")
    )
    with zipfile.ZipFile(tmp / "core.zip", "w") as archive:
        for path in sorted((copy / "surge").rglob("*.py")):
            archive.write(path, path.relative_to(copy).as_posix())
    shutil.copytree(copy / "surge", tmp / "core-script" / "surge", symlinks=True)
    (tmp / "core-script" / "train.py").write_text(textwrap.dedent(_SCRIPT))
    shutil.copytree(copy / "surge", tmp / "core-cwd" / "surge", symlinks=True)
    core_commands = check_and_fit("core", "hashed", [])

    # 3. code that runs before Surge: sitecustomize, a .pth file, torch's and pydantic's entry points, a console script
    start_site = tmp / "startup-site"
    start_site.mkdir()
    (start_site / "tp_evil.pth").write_text(
        f"import os; open(os.environ['{dists.IMPORT_LOG}'], 'a').write('pth-ran\\n')\n"
    )
    custom = tmp / "startup-custom"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(_logs("sitecustomize-ran"))
    libs = tmp / "startup-libs" / "lib"
    _installed(
        libs,
        "surge-test-backend",
        "0.1.0",
        {"tp_backend.py": _TORCH_BACKEND},
        "[torch.backends]\ntp-backend = tp_backend:load\n",
    )
    _installed(
        libs,
        "surge-test-pydantic",
        "0.1.0",
        {"tp_pydantic.py": _PYDANTIC_PLUGIN},
        "[pydantic]\ntp-pydantic = tp_pydantic:plugin\n",
    )
    tool_info = _installed(
        libs,
        "surge-test-tool",
        "0.1.0",
        {
            "tp_tool.py": "def main():\n    return 0\n",
            "../bin/tp-tool": _LAUNCHER.format(python=sys.executable, extra=""),
            "../bin/tp-clean": _LAUNCHER.format(python=sys.executable, extra=""),
        },
        "[console_scripts]\ntp-tool = tp_tool:main\ntp-clean = tp_tool:main\n",
    )
    script = libs.parent / "bin" / "tp-tool"
    script.write_text(_LAUNCHER.format(python=sys.executable, extra=_logs("script-ran")))  # edited after install
    strict_text = _pin("strict = true\n" + hashed, tool_info, hashed=False)
    profile("strict", strict_text)
    profile("lenient", _pin(hashed, tool_info, hashed=False))
    startup_commands = [
        ["startup-check", [], ["--lab", labs["strict"], "plugins", "check"], {}, ""],
        ["startup-fit", [], ["--lab", labs["strict"], "fit", "--max-epochs", "1", "--root", "strict-root"], {}, ""],
        [
            "startup-lenient",
            [],
            ["--lab", labs["lenient"], "fit", "--max-epochs", "1", "--root", "lenient-root"],
            {},
            "",
        ],
    ]

    started = {
        "own": start("own", commands),  # each command has the sys.path entries of its attack
        "core_path": start("core_path", core_commands, [copy, site["lab"]]),
        "core_zip": start("core_zip", core_commands, [tmp / "core.zip", site["lab"]]),
        # -P: the working directory is not on sys.path, as for the `surge` console script (whose folder is)
        "core_cwd": start("core_cwd", core_commands, [site["lab"]], tmp / "core-cwd", "-P"),
        "core_script": dists.start(
            [sys.executable, str(tmp / "core-script" / "train.py")],
            dists.child_env(
                [site["lab"]], **{dists.IMPORT_LOG: str(tmp / "core_script.log"), "SURGE_LAB": labs["hashed"]}
            ),
            tmp / "core-script",
        ),
        "startup": start("startup", startup_commands, [custom, libs, site["lab"]], ADD_SITE_DIR=str(start_site)),
        "script_run": dists.start(
            [sys.executable, str(script)],
            dists.child_env([libs], **{dists.IMPORT_LOG: str(tmp / "script_run.log")}),
            tmp,
        ),
    }
    yield {"tmp": tmp, "site": site, "sites": own, "labs": labs, "unchecked": unchecked, "script": script, **started}
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


def _said(result: dict, name: str, *texts: str) -> str:
    """``_refused`` for the commands of ``_RUN``: exit 1, the texts, no traceback, and no run directory."""
    message = _refused(result, name, *texts)
    assert "root" not in result[name]["files"], result[name]["files"]
    return message


# -- the two holes: unpinned code ran, and check was green ------------------------------------------------------


def test_a_forged_record_line_does_not_make_a_copy_elsewhere_its_own(trust: dict) -> None:
    result = trust["own"].result()
    copy = trust["tmp"] / "elsewhere" / "tp_alpha"
    expected = f"`import tp_alpha` would run {copy / '__init__.py'}, which is not a file of the pinned distribution"
    _said(result, "record-check", f"shadowed   surge-test-alpha 1.0.0: plugin 'tp-alpha': {expected}")
    _said(result, "record-fit", expected, "nothing was run")
    assert "forged-record-ran" not in result["imported"]


def test_a_copy_of_the_core_on_pythonpath_or_in_a_zip_is_refused(trust: dict) -> None:
    for child, where in (
        ("core_path", trust["tmp"] / "core-copy" / "surge"),
        ("core_zip", trust["tmp"] / "core.zip" / "surge"),
    ):
        result = trust[child].result()
        message = _said(
            result, "core-check", "shadowed   surge 0.1.0: surge was imported before the lab was read, from "
        )
        assert f"from {where / '__init__.py'}, which is not a file of the pinned distribution surge 0.1.0" in message
        assert f"fix: remove or rename {where.parent if child == 'core_zip' else where} (a copy" in message
        # the run: the first module of the copy imported under the guard is refused, else the check refuses
        message = _said(
            result, "core-fit", f"would run {where}", "which is not a file of the pinned distribution surge"
        )
        assert f"remove or rename {where.parent if child == 'core_zip' else where}" in message
        assert result["imported"] == []  # no plugin was imported by the copy either


def test_a_copy_of_the_core_in_the_working_directory_is_refused(trust: dict) -> None:
    result = trust["core_cwd"].result()
    copy = trust["tmp"] / "core-cwd" / "surge"
    for command in ("core-check", "core-fit"):  # the installed surge runs, and says what a run started here would run
        _said(result, command, f"shadowed   surge 0.1.0: `import surge` would run {copy / '__init__.py'}, which is not")
    assert result["imported"] == []


def test_a_copy_of_the_core_beside_the_training_script_refuses_the_run(trust: dict) -> None:
    result = trust["core_script"].result()
    copy = trust["tmp"] / "core-script" / "surge"
    assert "surge was imported before the lab was read, from " + str(copy / "__init__.py") in result["refused"]
    assert result["imported"] == [] and result["root"] is False


# -- code that runs before Surge: reported, refused under strict ------------------------------------------------


def test_code_that_runs_before_surge_is_reported_and_refused_under_strict(trust: dict) -> None:
    result = trust["startup"].result()
    tmp = trust["tmp"]
    # it ran: Python and the libraries run it before the first line of Surge (out of a lab's reach) ...
    assert {"pth-ran", "sitecustomize-ran", "torch-backend-ran", "pydantic-plugin-ran"} <= set(result["imported"])
    # ... and check names each piece with where it comes from
    expected = (
        f"startup    no distribution: the .pth file {tmp / 'startup-site' / 'tp_evil.pth'} runs `import os; open(",
        f"fix: delete {tmp / 'startup-site' / 'tp_evil.pth'} (no distribution installed it)",
        f"startup    no distribution: {tmp / 'startup-custom' / 'sitecustomize.py'} is imported as sitecustomize",
        "autoload   surge-test-backend 0.1.0: its entry point 'tp-backend' (tp_backend:load) of the group "
        "'torch.backends': torch calls it at `import torch`",
        "fix: pip uninstall surge-test-backend (or pin it in [distributions] if the lab trusts it), or set "
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0 for every run",
        "autoload   surge-test-pydantic 0.1.0: its entry point 'tp-pydantic' (tp_pydantic:plugin) of the group 'pydantic'",
        f"script     surge-test-tool 0.1.0: its console script {trust['script']} is not a plain launcher: `import os` "
        "(line 6), which a launcher of tp_tool:main does not hold; it runs before Surge",
    )
    message = _said(result, "startup-check", *expected)
    assert "tp-clean" not in message  # the untouched launcher beside it is fine
    _said(result, "startup-fit", *expected, "nothing was run")  # strict = true
    assert result["startup-lenient"]["rc"] == 0, result["startup-lenient"]  # without strict: warned, not refused
    assert "lenient-root" in result["startup-lenient"]["files"]


def test_an_edited_console_script_runs_before_surge(trust: dict) -> None:
    rc, _, err = trust["script_run"].wait()
    assert rc == 0, err
    assert (trust["tmp"] / "script_run.log").read_text().split() == ["script-ran"]  # what check reports above


# -- the import guard cannot be switched off by a module attribute ----------------------------------------------


def test_a_pinned_plugin_cannot_switch_the_guard_off(trust: dict) -> None:
    result = trust["own"].result()
    imported = result["imported"]
    assert "aaa:attribute" not in imported and "aaa:guard-off" not in imported  # no module attribute holds it
    assert "guard-shadow-ran" not in imported  # the shadow it planted was refused
    shadow = trust["tmp"] / "guard-cwd" / "tp_zeta"
    _refused(result, "guard-fit", f"`import tp_zeta` would run {shadow / '__init__.py'}, which is not a file of")
    _said(
        result,
        "guard-check",
        f"shadowed   surge-test-pair 0.5.0: plugin 'tp-zeta': `import tp_zeta` would run {shadow}",
    )
    # taking the finder off sys.meta_path is possible (same interpreter), and refuses the run right after that import
    assert "aaa:meta_path" in imported
    refused = "refuses plugin 'tp-aaa' (distribution surge-test-aaa 0.1.0): importing its module tp_aaa took Surge's import guard off sys.meta_path"
    _refused(result, "guard-meta-fit", refused)


# -- five attacks of our own (and two more) ----------------------------------------------------------------------


def test_a_namespace_portion_in_the_working_directory_is_refused(trust: dict) -> None:
    result = trust["own"].result()
    portion = trust["tmp"] / "ns-cwd" / "tp_ns" / "alpha.py"
    expected = (
        f"`import tp_ns.alpha` would run {portion}, which is not a file of the pinned distribution surge-test-ns 0.1.0"
    )
    _said(result, "ns-check", f"shadowed   surge-test-ns 0.1.0: plugin 'tp-ns': {expected}")
    _said(result, "ns-fit", expected, "nothing was run")
    assert "ns-portion-ran" not in result["imported"]


def test_a_second_metadata_of_a_pinned_distribution_is_refused(trust: dict) -> None:
    result = trust["own"].result()
    fake = trust["sites"]["meta"] / "SURGE_TEST_ALPHA-1.0.0.dist-info"
    real = trust["site"]["lab"] / "surge_test_alpha-1.0.0.dist-info"
    expected = f"twice      surge-test-alpha: its metadata is found 2 times on sys.path: {fake} (which every lookup uses) and {real}"
    _said(result, "meta-check", expected)
    _said(result, "meta-fit", expected, "nothing was run")
    assert "metadata-shadow-ran" not in result["imported"]


def test_an_entry_point_into_another_distributions_module_is_refused(trust: dict) -> None:
    result = trust["own"].result()
    other = trust["sites"]["gamma"] / "tp_gamma.py"
    expected = (
        f"plugin 'tp-beta': `import tp_gamma` would run {other}, which is not a file of the pinned distribution "
        "surge-test-beta 2.0.0 (it installed no such module)"
    )
    _said(result, "gamma-check", expected)
    _said(result, "gamma-fit", expected)
    assert "other-module-ran" not in result["imported"]


def test_a_link_out_of_the_install_folder_is_not_its_own(trust: dict) -> None:
    result = trust["own"].result()
    link, target = trust["sites"]["link"] / "tp_beta.py", trust["tmp"] / "outside" / "tp_beta.py"
    expected = (
        f"`import tp_beta` would run {link} (a link to {target}, outside its installation folder), which is not a file"
    )
    _said(result, "link-check", expected)
    _said(result, "link-fit", expected)
    _said(
        result,
        "link-hashed-check",
        f"hash       surge-test-beta 2.0.0: tp_beta.py is a link to {target}, outside its installation folder",
    )
    assert "link-out-ran" not in result["imported"]


def test_a_copy_of_a_pinned_plugin_in_a_zip_is_refused(trust: dict) -> None:
    result = trust["own"].result()
    zipped = trust["tmp"] / "plugins.zip"
    expected = f"`import tp_alpha` would run {zipped / 'tp_alpha' / '__init__.py'}, which is not a file of the pinned"
    _said(result, "zip-check", expected, f"fix: remove or rename {zipped},")
    _said(result, "zip-fit", expected)
    assert "zip-copy-ran" not in result["imported"]


def test_a_module_dropped_into_a_pinned_package_is_found_before_the_run(trust: dict) -> None:
    result = trust["own"].result()
    dropped = trust["sites"]["pkg"] / "tp_pkg" / "extra.py"
    expected = f"foreign    surge-test-pkg 0.1.0: {dropped} is in its package folder but is not one of its files"
    _said(result, "pkg-check", expected)
    _said(result, "pkg-fit", expected, "nothing was run")  # before: the guard refused it mid-run, check was green
    assert "dropped-module-ran" not in result["imported"]


def test_an_unchecked_byte_code_cache_is_never_run_and_is_reported(trust: dict) -> None:
    result = trust["own"].result()
    cached = trust["unchecked"]
    _said(result, "unchecked-check", f"bytecode   surge-test-beta 2.0.0: the byte-code cache {cached} holds other code")
    assert result["unchecked-fit"]["rc"] == 0, result["unchecked-fit"]  # the hashed source ran, not the cache
    assert "unchecked-pyc-ran" not in result["imported"] and "tp-beta" in result["imported"]
