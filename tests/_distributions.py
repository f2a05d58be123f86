"""Real plugin distributions for discovery tests, and child Python processes that see them.

A :class:`Dist` is a tiny plugin project: ``pyproject.toml`` (with its ``surge.plugins`` entry points) and
modules. :func:`install` writes each project, packs it as a wheel (the zip is written directly: building
with setuptools costs a process per project), installs every wheel with **one** real
``pip install --no-deps --no-index --target`` call, and then lays pip's output out in one directory per
group using each distribution's ``RECORD``. A child process given such a directory on ``PYTHONPATH`` finds
the distributions through ``importlib.metadata``, exactly as a user's environment would.

Generated plugin modules report through files named by environment variables:

* ``SURGE_TEST_IMPORT_LOG``: each module appends its plugin name when it is imported (a side effect of
  import, so a test can tell whether discovery imported it);
* ``SURGE_TEST_HOOK_LOG``: each handler appends ``<plugin>:<event>`` when it runs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

IMPORT_LOG = "SURGE_TEST_IMPORT_LOG"
HOOK_LOG = "SURGE_TEST_HOOK_LOG"
RESULT_PREFIX = "RESULT: "


@dataclass(frozen=True)
class Dist:
    """One distribution: ``modules`` maps a module name to its source; ``entry_points`` (in file order)
    maps a ``surge.plugins`` entry-point name to ``module:attribute``; ``providers`` are its
    ``surge.providers`` entry points (``("accelerator.cpu", "module:plugin")``)."""

    name: str
    version: str
    modules: Mapping[str, str]
    entry_points: Sequence[tuple[str, str]]
    providers: Sequence[tuple[str, str]] = ()

    @property
    def normalized(self) -> str:
        return self.name.replace("-", "_").lower()

    @property
    def dist_info(self) -> str:
        return f"{self.normalized}-{self.version}.dist-info"

    def pyproject(self) -> str:
        eps = "\n".join(f'"{name}" = "{value}"' for name, value in self.entry_points)
        return (
            textwrap.dedent(
                f"""\
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{self.name}"
            version = "{self.version}"
            dependencies = ["surge"]

            [project.entry-points."surge.plugins"]
            """
            )
            + eps
            + "\n"
            + ('\n[project.entry-points."surge.providers"]\n' if self.providers else "")
            + "".join(f'"{name}" = "{value}"\n' for name, value in self.providers)
        )


# -- plugin module sources ---------------------------------------------------------------------------

_PRELUDE = '''\
"""Generated test plugin {name!r}."""
import os


def _log(variable, line):
    path = os.environ.get(variable)
    if path:
        with open(path, "a") as f:
            f.write(line + "\\n")


_log("{import_log}", "{name}")  # the import side effect the discovery tests look for
'''


def participant(name: str, *, default: bool, events: Iterable[str] = ("fit_start", "teardown")) -> str:
    """A participant whose handlers append ``<name>:<event>`` to the hook log."""
    handlers = "".join(
        f"\n    @surge.hookimpl\n    def {event}(self, event):\n        _log({HOOK_LOG!r}, {name + ':' + event!r})\n"
        for event in events
    )
    return (
        _PRELUDE.format(name=name, import_log=IMPORT_LOG)
        + "\nimport surge\n\n\nclass Handlers:\n    def __init__(self, **settings):\n        self.settings = settings\n"
        + handlers
        + f"\n\nplugin = surge.Plugin(name={name!r}, kind='participant', default={default}, factory=Handlers)\n"
    )


def silent(name: str) -> str:
    """A default-on participant that subscribes to no event."""
    return (
        _PRELUDE.format(name=name, import_log=IMPORT_LOG)
        + "\nimport surge\n\n\nclass Nothing:\n    pass\n\n\n"
        + f"plugin = surge.Plugin(name={name!r}, kind='participant', default=True, factory=Nothing)\n"
    )


def failing(name: str, message: str) -> str:
    """A module whose import raises ``RuntimeError(message)`` after its side effect."""
    return _PRELUDE.format(name=name, import_log=IMPORT_LOG) + f"\nraise RuntimeError({message!r})\n"


def not_a_plugin(name: str) -> str:
    """The entry point's object is a dict, not a ``surge.Plugin``."""
    return _PRELUDE.format(name=name, import_log=IMPORT_LOG) + f"\nplugin = {{'name': {name!r}}}\n"


def accelerator_provider(name: str, accelerator: str) -> str:
    """A provider claiming the accelerator name ``accelerator``."""
    return (
        _PRELUDE.format(name=name, import_log=IMPORT_LOG)
        + "\nimport surge\n\n\nclass Accelerator(surge.Accelerator):\n"
        + f"    name = {accelerator!r}\n    device_type = 'cpu'\n\n"
        + "    @classmethod\n    def is_available(cls):\n        return True\n\n\n"
        + f"plugin = surge.Plugin(name={name!r}, kind='provider', provides={{'accelerator': {{{accelerator!r}: Accelerator}}}})\n"
    )


# -- wheels and pip ------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_project(dist: Dist, root: Path) -> Path:
    """The project as its author would have it on disk: ``pyproject.toml`` and ``src/<module>.py``."""
    project = root / dist.name
    (project / "src").mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text(dist.pyproject())
    for module, source in dist.modules.items():
        (project / "src" / f"{module}.py").write_text(source)
    return project


def build_wheel(dist: Dist, project: Path, wheel_dir: Path) -> Path:
    """Pack ``project`` as a pure-Python wheel (PEP 427) with its entry points."""
    files: dict[str, bytes] = {
        f"{module}.py": (project / "src" / f"{module}.py").read_bytes() for module in dist.modules
    }
    info = dist.dist_info
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: {dist.version}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: surge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    eps = "".join(f"{name} = {value}\n" for name, value in dist.entry_points)
    providers = "".join(f"{name} = {value}\n" for name, value in dist.providers)
    files[f"{info}/entry_points.txt"] = (
        f"[surge.plugins]\n{eps}" + (f"\n[surge.providers]\n{providers}" if providers else "")
    ).encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel = wheel_dir / f"{dist.normalized}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def install(groups: Mapping[str, Sequence[Dist]], root: Path) -> dict[str, Path]:
    """Install every distribution of ``groups`` with one pip call; return one directory per group holding
    exactly that group's distributions (a distribution may be in several groups)."""
    unique = {d.name: d for dists in groups.values() for d in dists}
    projects, wheels, staging = root / "projects", root / "wheels", root / "staging"
    wheels.mkdir(parents=True)
    built = [build_wheel(d, write_project(d, projects), wheels) for d in unique.values()]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(staging),
            *map(str, built),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    installed: dict[str, Path] = {}
    for group, dists in groups.items():
        target = root / "site" / group
        target.mkdir(parents=True)
        for dist in dists:
            for line in (staging / dist.dist_info / "RECORD").read_text().splitlines():
                relative = line.rsplit(",", 2)[0]
                source = staging / relative
                if relative and source.is_file():  # RECORD also lists pip's caches; copy what exists
                    (target / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target / relative)
        installed[group] = target
    return installed


# -- child processes -------------------------------------------------------------------------------


def child_env(paths: Iterable[Path | str] = (), **variables: str) -> dict[str, str]:
    """The environment of a child Python: no inherited ``SURGE_*`` settings, ``paths`` on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_") and k != "PYTHONPATH"}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(variables)
    return env


@dataclass
class Child:
    """A running child process; :meth:`wait` collects its output (bounded by ``timeout``)."""

    process: subprocess.Popen[str]
    timeout: float
    _done: tuple[int, str, str] | None = field(default=None, repr=False)

    def wait(self) -> tuple[int, str, str]:
        if self._done is None:
            try:
                out, err = self.process.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                out, err = self.process.communicate()
                raise AssertionError(
                    f"child did not finish in {self.timeout}s\nstdout:\n{out}\nstderr:\n{err}"
                ) from None
            self._done = (self.process.returncode, out, err)
        return self._done

    def result(self) -> dict:
        """The JSON object the child printed after ``RESULT: `` (the child must exit 0)."""
        rc, out, err = self.wait()
        lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
        assert rc == 0 and lines, f"child failed (rc={rc})\nstdout:\n{out}\nstderr:\n{err}"
        return json.loads(lines[-1][len(RESULT_PREFIX) :])  # type: ignore[no-any-return]


def start(args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 180) -> Child:
    process = subprocess.Popen(
        list(args),
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Child(process, timeout)


def start_python(code: str, env: Mapping[str, str], cwd: Path, timeout: float = 180) -> Child:
    """Run ``code`` in a child of this interpreter (the venv's, where surge is installed)."""
    return start([sys.executable, "-c", textwrap.dedent(code)], env, cwd, timeout)


# -- the distributions the discovery and CLI tests install ------------------------------------------

BROKEN_MESSAGE = "tp-broken needs libmissing.so, which is not installed"

ALPHA = Dist(
    "surge-test-alpha", "1.0.0", {"tp_alpha": participant("tp-alpha", default=True)}, [("tp-alpha", "tp_alpha:plugin")]
)
BETA = Dist(
    "surge-test-beta", "2.0.0", {"tp_beta": participant("tp-beta", default=False)}, [("tp-beta", "tp_beta:plugin")]
)
BROKEN = Dist(
    "surge-test-broken",
    "0.3.0",
    {"tp_broken": failing("tp-broken", BROKEN_MESSAGE)},
    [("tp-broken", "tp_broken:plugin")],
)
NOT_A_PLUGIN = Dist(
    "surge-test-notplugin",
    "0.4.0",
    {"tp_notplugin": not_a_plugin("tp-notplugin")},
    [("tp-notplugin", "tp_notplugin:plugin")],
)
# Two plugins in one distribution, declared out of order: discovery must sort them.
PAIR = Dist(
    "surge-test-pair",
    "0.5.0",
    {"tp_zeta": participant("tp-zeta", default=True), "tp_eta": participant("tp-eta", default=True)},
    [("tp-zeta", "tp_zeta:plugin"), ("tp-eta", "tp_eta:plugin")],
)
QUIET = [
    Dist(
        f"surge-test-quiet-{i:02d}",
        "0.1.0",
        {f"tp_quiet_{i:02d}": silent(f"tp-quiet-{i:02d}")},
        [(f"tp-quiet-{i:02d}", f"tp_quiet_{i:02d}:plugin")],
    )
    for i in range(20)
]
CLASH_ONE = Dist(
    "surge-test-clash-one",
    "0.1.0",
    {"tp_clash_one": participant("tp-clash", default=True)},
    [("tp-clash", "tp_clash_one:plugin")],
)
CLASH_TWO = Dist(
    "surge-test-clash-two",
    "0.2.0",
    {"tp_clash_two": participant("tp-clash", default=True)},
    [("tp-clash", "tp_clash_two:plugin")],
)
FAKE_CPU = Dist(
    "surge-test-fakecpu",
    "0.1.0",
    {"tp_fakecpu": accelerator_provider("tp-fakecpu", "cpu")},
    [("tp-fakecpu", "tp_fakecpu:plugin")],
)

GROUPS: dict[str, list[Dist]] = {
    "main": [ALPHA, BETA, BROKEN, NOT_A_PLUGIN, PAIR],
    "dup": [ALPHA],  # the same distribution a second time, in another sys.path entry
    "quiet": QUIET,
    "clash": [CLASH_ONE, CLASH_TWO],
    "fakecpu": [FAKE_CPU],
    "lab": [ALPHA, BETA, PAIR],  # plugins that all import cleanly, for lab profiles that pin every one
    "broken": [BROKEN],
}
MAIN_NAMES = ["tp-alpha", "tp-beta", "tp-broken", "tp-eta", "tp-notplugin", "tp-zeta"]

_installed: dict[str, Path] = {}


def installed_once(tmp_path_factory: object) -> dict[str, Path]:
    """Install :data:`GROUPS` once per test session (shared by every test module that asks)."""
    if not _installed:
        root = tmp_path_factory.mktemp("surge-distributions")  # type: ignore[attr-defined]
        _installed.update(install(GROUPS, root))
    return _installed
