"""Every Python, shell and TOML sample of README.md and docs/*.md, executed as a reader would paste it.

A fenced ```python block runs in a fresh namespace in a temporary working directory (functions it defines
named ``test_*`` are then called, with the ``tiny_fit`` fixture when they ask for it); a ```bash/```shell
block runs in ``bash -euo pipefail`` as in a new terminal after the README's set-up: in a temporary directory
that is also ``$HOME``, where ``.venv`` is this environment, with a ``PATH`` that does not have it (nor any
``SURGE_*`` setting), after the set-up block's lines that follow its two ``make`` commands (``source
.venv/bin/activate``), and only if every command is one of :data:`SAFE_COMMANDS`; a ```toml block must
parse, and one with a ``[distributions]`` table is a lab profile that must match this environment's versions
and list the distribution of every plugin it forces on.

The HTML comment on the line before a fence adapts a sample without changing what readers see:
``<!-- test-setup: CODE -->`` runs CODE first (Python for a Python block, shell for a shell block;
``install_grad_norm()`` installs the ``surge-grad-norm`` distribution docs/plugins.md builds, and ``$REPO`` is
the repository), and ``<!-- not-tested: REASON -->`` skips the sample, saying why.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
import surge
import torch
from surge.plugins import lab

if sys.version_info >= (3, 11):
    import tomllib
else:  # the core's own dependency there
    import tomli as tomllib

REPO = Path(__file__).parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"python": "python", "bash": "shell", "shell": "shell", "sh": "shell", "toml": "toml"}
SAFE_COMMANDS = frozenset({"surge", "python", "eval", "echo", "export", "cat", "ls", "cd", "cp", "mkdir"})
"""A shell sample runs only if each of its commands starts with one of these (no `pip`, no `make`)."""

_FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*(not-tested|test-setup):(.*?)-->\Z", re.S)


@dataclass(frozen=True)
class Sample:
    document: Path
    line: int  # of the opening fence
    language: str  # python, shell or toml
    code: str
    setup: str = ""
    not_tested: str | None = None

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def samples() -> list[Sample]:
    found: list[Sample] = []
    for document in DOCUMENTS:
        text = document.read_text()
        for fence in _FENCE.finditer(text):
            language = LANGUAGES.get(fence.group(1))
            if language is None:
                continue
            before = text[: fence.start()].rstrip()
            marker = _MARKER.search(before[before.rfind("<!--") :]) if before.endswith("-->") else None
            kind, value = (marker.group(1), marker.group(2).strip()) if marker else ("", "")
            found.append(
                Sample(
                    document,
                    text.count("\n", 0, fence.start()) + 1,
                    language,
                    fence.group(2),
                    setup=value if kind == "test-setup" else "",
                    not_tested=value if kind == "not-tested" else None,
                )
            )
    return found


def after_set_up() -> str:
    """The README's set-up block less its ``make`` commands: what a reader runs in each new shell before the
    commands that follow (``source .venv/bin/activate``)."""
    readme = REPO / "README.md"
    set_up = next(s for s in samples() if s.document == readme and s.language == "shell")
    assert "make demo" in set_up.code and "make test" in set_up.code, f"{set_up.id} is not the set-up block"
    lines = [line for line in set_up.code.splitlines() if line.strip() and not line.lstrip().startswith("make ")]
    return "\n".join(lines)


def fresh_shell(home: Path) -> dict[str, str]:
    """The environment of a new terminal in the checkout after the set-up, with ``home`` as the checkout: its
    ``.venv`` is this environment (a link), which is not on ``PATH``, and no ``SURGE_*`` setting is inherited."""
    venv = Path(sys.prefix)
    (home / ".venv").symlink_to(venv, target_is_directory=True)
    hidden = {os.path.realpath(venv / "bin"), os.path.realpath(Path(sys.executable).parent)}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) not in hidden]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SURGE_") and k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")
    }
    env.update(HOME=str(home), REPO=str(REPO), PATH=os.pathsep.join(path or ["/usr/bin", "/bin"]))
    return env


def _params(language: str) -> list[Any]:
    marks = [pytest.mark.slow] if language == "shell" else []  # every shell sample starts processes
    return [pytest.param(s, id=s.id, marks=marks) for s in samples() if s.language == language]


def _skip_if_not_tested(sample: Sample) -> None:
    if sample.not_tested is not None:
        assert sample.not_tested, f"{sample.id}: <!-- not-tested: --> needs its reason"
        pytest.skip(f"not tested: {sample.not_tested}")


# -- the grad-norm plugin of docs/plugins.md, as a real installed distribution -------------------------------

GRAD_NORM = '''\
"""The plugin docs/plugins.md builds: a participant that counts every n-th optimizer step."""
from typing import Annotated, Literal

import surge
from pydantic import Field


class GradNorm:
    """Counts every n-th optimizer step.

    Args:
        every_n_steps: count every n-th optimizer step
        norm_type: the norm to log
    """

    @surge.validated
    def __init__(self, every_n_steps: Annotated[int, Field(ge=1)] = 1, norm_type: Literal["l2", "inf"] = "l2") -> None:
        self.every_n_steps, self.norm_type, self.steps_seen = every_n_steps, norm_type, 0

    @surge.hookimpl
    def train_batch_end(self, event: surge.events.TrainBatchEnd) -> None:
        if event.trainer.global_step % self.every_n_steps == 0:
            self.steps_seen += 1


plugin = surge.Plugin(name="grad-norm", kind="participant", factory=GradNorm)
'''


@pytest.fixture(scope="module")
def grad_norm_site(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Path]:
    """Builds and pip-installs (into a directory of its own) the ``surge-grad-norm`` wheel, once, on demand."""
    built: list[Path] = []

    def site() -> Path:
        if not built:
            dist = dists.Dist(
                "surge-grad-norm", "0.1.0", {"surge_grad_norm": GRAD_NORM}, [("grad-norm", "surge_grad_norm:plugin")]
            )
            built.append(dists.install({"docs": [dist]}, tmp_path_factory.mktemp("grad_norm"))["docs"])
        return built[0]

    return site


# -- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", _params("python"))
def test_python_sample(
    sample: Sample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    grad_norm_site: Callable[[], Path],
    request: pytest.FixtureRequest,
) -> None:
    _skip_if_not_tested(sample)
    monkeypatch.chdir(tmp_path)

    def install_grad_norm() -> None:
        monkeypatch.syspath_prepend(str(grad_norm_site()))
        monkeypatch.delitem(sys.modules, "surge_grad_norm", raising=False)

    namespace: dict[str, Any] = {"__name__": "__doc_sample__", "install_grad_norm": install_grad_norm}
    exec(compile(sample.setup, f"{sample.id} (test-setup)", "exec", dont_inherit=True), namespace)
    before = set(namespace)
    # blank lines first: a traceback names the sample's own line in the document
    exec(compile("\n" * sample.line + sample.code, str(sample.document), "exec", dont_inherit=True), namespace)
    for name in sorted(set(namespace) - before):
        if name.startswith("test_") and inspect.isfunction(namespace[name]):
            test = namespace[name]
            test(*(request.getfixturevalue(p) for p in inspect.signature(test).parameters))


@pytest.mark.parametrize("sample", _params("shell"))
def test_shell_sample(sample: Sample, tmp_path: Path) -> None:
    _skip_if_not_tested(sample)
    commands = [line.strip() for line in sample.code.replace("\\\n", " ").splitlines()]
    unsafe = [
        c for c in commands if c and not c.startswith("#") and shlex.split(c, comments=True)[0] not in SAFE_COMMANDS
    ]
    assert not unsafe, (
        f"{sample.id}: {unsafe} may change this environment; mark the block `<!-- not-tested: REASON -->`"
    )
    env = fresh_shell(tmp_path)
    script = f"{after_set_up()}\n{sample.setup}\n{sample.code}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, f"{sample.id} failed ({done.returncode}):\n{script}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("sample", _params("toml"))
def test_toml_sample(sample: Sample, tmp_path: Path) -> None:
    _skip_if_not_tested(sample)
    data = tomllib.loads(sample.code)
    if "distributions" not in data:
        return  # pyproject.toml tables: parsing is the check
    (tmp_path / "lab.toml").write_text(sample.code)
    profile = lab.load(str(tmp_path / "lab.toml"))  # a placeholder hash or a bad pin is a ConfigError here
    # a lab's environment holds only its distributions (and the start-up code they install); this one holds every
    # first-party plugin, and setuptools' .pth file
    ignored = {"unexpected", *lab.STARTUP_KINDS}
    assert [m.render() for m in profile.check() if m.kind not in ignored] == []
    providers = {ep.name: ep.dist.name for ep in metadata.entry_points(group="surge.plugins") if ep.dist}
    for plugin, on in profile.profile.plugins.items():
        if on and not profile.profile.autoload:
            assert profile.pins(providers.get(plugin)), (
                f"{sample.id} forces '{plugin}' on, but autoload = false and its distribution "
                f"{providers.get(plugin)} is not in [distributions]: a run under this profile would refuse"
            )


def test_every_document_has_its_samples_found() -> None:
    found = {(s.document.name, s.language) for s in samples()}
    assert {("README.md", "python"), ("README.md", "shell"), ("README.md", "toml")} <= found
    assert {("cli.md", "shell"), ("events.md", "python"), ("plugins.md", "python"), ("porting.md", "python")} <= found


def test_not_tested_is_used_sparingly() -> None:
    skipped = [s for s in samples() if s.not_tested is not None]
    assert len(skipped) <= len(samples()) // 5, [(s.id, s.not_tested) for s in skipped]


def test_events_md_puts_before_optimizer_step_before_clipping(tiny_fit: Any) -> None:
    """docs/events.md said "after unscaling and clipping"; the loop (and Lightning) clip after the event."""

    class Norms:
        def __init__(self) -> None:
            self.seen: list[tuple[str, float]] = []

        def _norm(self, event: Any, when: str) -> None:
            grads = [p.grad for g in event.optimizer.param_groups for p in g["params"] if p.grad is not None]
            self.seen.append((when, float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))))

        @surge.hookimpl
        def before_optimizer_step(self, event: surge.events.BeforeOptimizerStep) -> None:
            self._norm(event, "before")

        @surge.hookimpl
        def after_optimizer_step(self, event: surge.events.AfterOptimizerStep) -> None:
            self._norm(event, "after")

    norms = Norms()
    tiny_fit(plugins=[norms], gradient_clip_val=1e-3, limit_train_batches=2)
    assert [w for w, _ in norms.seen] == ["before", "after"] * 2
    assert all(n > 1e-3 for w, n in norms.seen if w == "before")  # unclipped
    assert all(n == pytest.approx(1e-3, rel=1e-3) for w, n in norms.seen if w == "after")  # clipped after it
    notes = (REPO / "docs" / "events.md").read_text()
    assert "`before_optimizer_step` (after unscaling, before clipping" in notes
