"""The documentation site (mkdocs.yml, issue 28): `mkdocs build --strict` builds it from docs/ and the docstrings, as
`make docs` does, and CI builds it here. Strict means every link, anchor and API reference resolves; a build that
warns fails, and :func:`test_a_broken_link_fails_the_build` checks that the configuration makes it so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # quiet material's notice about MkDocs 2
    )


def _page(site: Path, path: str) -> str:
    page = site / path
    assert page.is_file(), (
        f"the site has no {path}; pages: {sorted(str(p.relative_to(site)) for p in site.rglob('*.html'))}"
    )
    return page.read_text(encoding="utf-8")


@pytest.mark.slow  # builds the whole API reference: about 15 s
def test_the_site_builds_strictly_with_the_guides_and_the_api_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = _build(REPO / "mkdocs.yml", site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr

    assert "small core" in _page(site, "index.html")
    for guide in ("guide", "events", "plugins", "cli", "porting", "resume", "benchmarks"):
        _page(site, f"{guide}/index.html")
    trainer = _page(site, "api/trainer/index.html")
    assert 'id="surge.Trainer.fit"' in trainer and 'id="surge.Trainer.validate"' in trainer
    assert not re.search(r":(class|mod|func|meth):", trainer), "a reST role reached the page (docs/_hooks.py)"
    events = _page(site, "api/events/index.html")
    for name in ("TrainBatchEnd", "BeforeOptimizerStep", "LogMetrics", "CheckpointPath"):
        assert f'id="surge.events.{name}"' in events, name
    assert "May change" in events  # each event's contract, from its docstring
    assert "train_batch_end" in events  # the hook name
    plugins = _page(site, "api/plugins/index.html")
    assert all(f'id="surge.{name}"' in plugins for name in ("Plugin", "Accelerator", "Strategy", "Precision"))
    testing = _page(site, "api/testing/index.html")
    assert 'id="surge.testing.assert_discovered"' in testing and 'id="surge.testing.tiny_fit"' in testing
    first_party = _page(site, "api/first-party/index.html")
    for package in sorted(p.name.replace("-", "_") for p in (REPO / "plugins").glob("surge-*")):
        assert f'id="{package}"' in first_party, f"docs/api/first-party.md does not document {package}"


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The site's own settings (strictness, link and anchor validation) on a page with a broken link and a broken
    anchor: the build fails naming both. Only the API reference's plugin is left out, to keep it quick."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config["plugins"] = ["search"]
    config.pop("nav", None)
    config.pop("hooks", None)
    config["docs_dir"] = "docs"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# Home\n\nSee [the guide](guide.md) and [its set-up](other.md#nowhere).\n"
    )
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Somewhere\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0, done.stderr
    assert "'guide.md'" in done.stderr and "#nowhere" in done.stderr, done.stderr
