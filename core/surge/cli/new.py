"""``surge new-plugin NAME``: a new plugin distribution, rendered from the plugin template with copier.

The template is ``plugin_template/`` of the Surge repository, shipped inside the package as
``surge/_plugin_template`` (a link in the source tree, real files in the wheel). copier is optional:
``pip install 'surge[template]'``. The command is not in the core's command list: the core contributes it
through the ``surge.commands`` entry-point group (:data:`command`), which lists it as unavailable, saying what
to install, while copier is missing. A project rendered from a git repository of the template (``--template``)
records the template's version and takes later template changes with ``copier update``; one rendered
from the copy shipped with surge records no version, since that copy is not under version control.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import surge
from surge.errors import SurgeError
from surge.plugins import ENTRY_POINT_GROUP
from surge.plugins.commands import Command

__all__ = ["KINDS", "TEMPLATE", "command", "render", "surge_requirement"]

TEMPLATE = Path(__file__).parent.parent / "_plugin_template"
"""The copier template shipped with this surge (``copier.yml`` at its root, the files in ``template/``)."""

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")  # surge.Plugin's rule for names
KINDS = ("participant", "observer", "provider")
"""What ``--kind`` renders: a hook class that runs before or after the user's Module, or an accelerator."""
_DISTRIBUTION = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _arguments(new: argparse.ArgumentParser) -> None:
    new.add_argument("name", help="the plugin's name, as users write it in plugins=[...]: lower-case, digits, '-', '_'")
    new.add_argument("--dest", metavar="DIR", help="directory to create (default: ./<distribution>)")
    new.add_argument(
        "--kind",
        choices=KINDS,
        default="participant",
        help="participant (callbacks; run before the user's Module, the default), observer (loggers; after it) or "
        "provider (an accelerator a run chooses by name: Trainer(accelerator=NAME))",
    )
    new.add_argument(
        "--default-on", action="store_true", help="active in every run unless switched off (default: on request)"
    )
    new.add_argument("--distribution", help="distribution name (default: surge-NAME, with '-' for '_')")
    new.add_argument("--description", help="one line saying what the plugin does")
    new.add_argument("--author", default="", help="author name for pyproject.toml")
    new.add_argument(
        "--template",
        metavar="SRC",
        help="copier template source: a git URL or a path (default: the template shipped with surge). Render "
        "from a git repository of the template to take its later changes with `copier update`",
    )
    new.add_argument("--vcs-ref", metavar="REF", help="tag or commit of a git --template (default: its latest tag)")


def surge_requirement(version: str) -> str:
    """The bounded requirement a plugin built against surge ``version`` declares: the rest of that minor
    series before 1.0 (``0.1.3`` gives ``surge>=0.1,<0.2``), the rest of that major series after."""
    match = re.match(r"^(\d+)\.(\d+)", version)
    if not match:
        raise SurgeError(f"cannot derive a surge requirement from the version {version!r}")
    major, minor = int(match[1]), int(match[2])
    plain = re.fullmatch(r"\d+\.\d+(\.\d+)*", version) is not None
    lower = f"{major}.{minor}" if plain else version  # a pre-release must be admitted explicitly
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"surge>={lower},<{upper}"


def render(
    name: str,
    dest: str | Path | None = None,
    *,
    kind: str = "participant",
    default: bool = False,
    distribution: str | None = None,
    description: str | None = None,
    author: str = "",
    template: str | None = None,
    vcs_ref: str | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Render the plugin template; returns the new project's directory and copier's recorded answers."""
    if not _NAME.match(name):
        raise SurgeError(
            f"invalid plugin name {name!r}: it must start with a lower-case letter and hold only lower-case "
            "letters, digits, '-' or '_' (it is what users write in Trainer(plugins=[...])), e.g. 'grad-norm'"
        )
    if kind not in KINDS:
        raise SurgeError(f"invalid --kind {kind!r}: one of {', '.join(KINDS)}")
    distribution = distribution or re.sub(r"^(surge-)?", "surge-", name.replace("_", "-"), count=1)
    if not _DISTRIBUTION.match(distribution):
        raise SurgeError(f"invalid distribution name {distribution!r}: letters, digits, '.', '_' or '-'")
    package = re.sub(r"[-.]", "_", distribution.lower())
    if not package.isidentifier():
        raise SurgeError(f"distribution {distribution!r} gives the package name {package!r}, not a Python identifier")
    target = Path(dest) if dest is not None else Path(distribution)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise SurgeError(
            f"{target} already exists and is not an empty directory; choose another --dest (an existing plugin "
            "takes template changes with `copier update` in its directory)"
        )
    source = template if template is not None else str(TEMPLATE)
    if Path(source).expanduser().exists():  # recorded in the answers file: absolute, so updates find it from anywhere
        source = str(Path(source).expanduser().resolve())
    if template is None and not (TEMPLATE / "copier.yml").is_file():
        raise SurgeError(f"the plugin template is missing from this surge installation ({TEMPLATE}); reinstall surge")
    try:
        import copier
        import yaml  # copier's own dependency
        from copier.errors import CopierError
        from plumbum import ProcessExecutionError  # copier's own dependency
    except ImportError:
        raise SurgeError("surge new-plugin needs copier: pip install 'surge[template]'") from None

    data = {
        "name": name,
        "distribution": distribution,
        "package": package,
        "kind": kind,
        "default": default,
        "description": description or f"Surge plugin {name}",
        "author": author,
        "surge_requirement": surge_requirement(surge.__version__),
    }
    try:
        copier.run_copy(source, target, data=data, defaults=True, vcs_ref=vcs_ref, quiet=True)
    except (CopierError, ValueError, ProcessExecutionError) as exc:
        raise SurgeError(f"rendering the plugin template {source} failed: {exc}") from exc
    answers = yaml.safe_load((target / ".copier-answers.yml").read_text())  # what `copier update` will read
    return target, answers


def _installed_claims(name: str) -> set[str]:
    """The distributions (name and version) that already declare a plugin called ``name``."""
    return {
        f"{ep.dist.metadata['Name']} {ep.dist.version}" if ep.dist is not None else "?"
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.name == name
    }


def _inside_git_repository_below_its_root(path: str) -> bool:
    """copier reads a template's version only from the root of a git repository; a folder below it is
    copied as plain files (no ``_commit`` is recorded, so ``copier update`` cannot work)."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        return False
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=directory, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return Path(top).resolve() != directory.resolve()


def _new_plugin(args: argparse.Namespace) -> int:
    taken = _installed_claims(args.name)
    if taken:  # two distributions claiming one name load neither, so the new plugin could never run here
        raise SurgeError(
            f"a plugin named '{args.name}' is already installed (distribution {', '.join(sorted(taken))}); two "
            "plugins with one name cannot be used together. Choose another name (`surge plugins` lists the taken "
            "ones), or uninstall that distribution first"
        )
    if args.template and _inside_git_repository_below_its_root(args.template):
        print(
            f"warning: {args.template} is a folder inside a git repository, not its root: copier copies it as "
            "plain files and records no template version, so `copier update` will not work for the new project. "
            "Pass the repository's root (its copier.yml naming the template folder in `_subdirectory`) or its URL."
        )
    target, answers = render(
        args.name,
        args.dest,
        kind=args.kind,
        default=args.default_on,
        distribution=args.distribution,
        description=args.description,
        author=args.author,
        template=args.template,
        vcs_ref=args.vcs_ref,
    )
    if args.kind == "provider":
        state = f"the accelerator '{args.name}': Trainer(accelerator='{args.name}')"
        inside = "the accelerator and its settings"
    else:
        state = "active by default" if args.default_on else f"active on request: Trainer(plugins=['{args.name}'])"
        inside = "hooks, settings and state"
    print(f"created {target}: plugin '{args.name}' ({args.kind}, {state}), distribution {answers['distribution']}")
    print(f"  {inside}: {target / 'src' / answers['package'] / '__init__.py'}")
    print(f"next:\n  cd {target}\n  pip install -e '.[test]'\n  pytest\n  surge plugins    # lists '{args.name}'")
    if "_commit" in answers:
        print(
            f"template {answers['_src_path']} at {answers['_commit']}: take its later changes with `copier update` "
            "(in a git repository with everything committed)"
        )
    else:
        print(
            "this copy of the template is not under version control, so the project records no template version "
            "and `copier update` cannot bring template changes to it; render with --template <git repository "
            "of the template> for that (docs/plugins.md, 'Template updates')"
        )
    return 0


command = Command(
    name="new-plugin",
    help="create a plugin distribution from the template",
    description="Render Surge's plugin template into a new, tested plugin distribution.",
    register=_arguments,
    run=_new_plugin,
    requires={"copier": "surge[template]"},
)
"""``surge new-plugin``, the core's entry point in the ``surge.commands`` group."""
