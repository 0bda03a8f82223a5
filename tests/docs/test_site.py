"""``mkdocs build --strict`` builds the documentation site from docs/ without a warning: a
broken link, a missing anchor, a page left out of the navigation or a missing included file
fails the suite. The broken cases are planted in a copy, to show that the build catches them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import docs

SOURCES = ("mkdocs.yml", "docs", "README.md", "config.example.yaml")
"""What the site is built from: the pages, and the files they include (pymdownx.snippets)."""


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )


def _nav_pages(entries: list[object]) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = _build(docs.ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((docs.ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = _nav_pages(config["nav"])
    assert pages[:4] == ["index.md", "security-model.md", "operator-guide.md", "running.md"]
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index.md" else page[:-3])
        assert built.with_suffix(".html").exists() or (built / "index.html").exists(), page
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "demo_client.py" in home  # the README's quick start, included


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in SOURCES:
        source = docs.ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copyfile(source, root / name)
    return root


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@pytest.mark.parametrize(
    "plant,reported",
    [
        (
            lambda r: _append(r / "docs/troubleshooting.md", "\n[gone](no-such-page.md)\n"),
            "no-such-page.md",
        ),
        (
            lambda r: _append(r / "docs/troubleshooting.md", "\n[gone](design.md#no-such-part)\n"),
            "no-such-part",
        ),
        (lambda r: (r / "docs/orphan.md").write_text("# Orphan\n"), "orphan.md"),
        (lambda r: (r / "config.example.yaml").unlink(), "config.example.yaml"),
    ],
    ids=["broken link", "missing anchor", "page not in nav", "included file missing"],
)
def test_a_broken_site_fails_the_build(copy: Path, tmp_path: Path, plant, reported: str) -> None:
    assert _build(copy, tmp_path / "before").returncode == 0  # the copy builds as it is
    plant(copy)
    done = _build(copy, tmp_path / "site")
    assert done.returncode != 0 and reported in done.stderr, done.stderr


def test_the_readme_links_every_operator_page_and_no_missing_file() -> None:
    """The README is not part of the site (only its quick start is included), so the build
    does not check its links: a page renamed in docs/ would leave a dead link on GitHub, and a
    page added to the operator guide would be missing from the README's list."""
    text = docs.page("README.md")
    links = {
        target.split("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if "://" not in target and not target.startswith("#")
    }
    missing = sorted(link for link in links if not (docs.ROOT / link).exists())
    assert not missing, f"README.md links files that do not exist: {missing}"
    config = yaml.safe_load((docs.ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    operator = next(e["Operator guide"] for e in config["nav"] if "Operator guide" in e)
    unlinked = [page for page in _nav_pages(operator) if f"docs/{page}" not in links]
    assert not unlinked, f"README.md's documentation list lacks {unlinked}"
