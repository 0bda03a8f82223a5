"""docs/reference/*.md are what kafkaguard.cli.reference_docs generates from the code (the
configuration loaders, the argument parsers, the metrics collector): a change to any of them
without ``python -m kafkaguard.cli.reference_docs --write`` fails here."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.cli import build_parser, reference_docs
from kafkaguard.cli.config_schema import config_schema
from tests.support import docs

REFERENCE = docs.DOCS / "reference"


@pytest.mark.parametrize("name", sorted(reference_docs.PAGES))
def test_the_committed_page_is_current(name: str) -> None:
    committed = (REFERENCE / name).read_text(encoding="utf-8")
    assert committed == reference_docs.PAGES[name](), (
        f"docs/reference/{name} is stale: run python -m kafkaguard.cli.reference_docs --write"
    )


def test_a_stale_page_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert reference_docs.main(["--dir", str(tmp_path)]) == 1  # none written yet
    assert reference_docs.main(["--dir", str(tmp_path), "--write"]) == 0
    assert reference_docs.main(["--dir", str(tmp_path)]) == 0
    page = tmp_path / "metrics.md"
    page.write_text(page.read_text(encoding="utf-8").replace("kafkaguard_acls", "x"), "utf-8")
    capsys.readouterr()
    assert reference_docs.main(["--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"stale: {page} (regenerate with --write)\n"


def test_the_configuration_page_has_every_key_of_the_schema() -> None:
    page = reference_docs.configuration_page()
    schema = config_schema()
    listener = schema["properties"]["listeners"]["items"]["properties"]
    for key in schema["properties"]:
        assert f"| `{key}` |" in page
    for key in listener:
        assert f"| `listeners[].{key}` |" in page


def _progs(parser: argparse.ArgumentParser) -> Iterator[str]:
    for _, child in reference_docs.subcommands(parser):
        yield child.prog
        yield from _progs(child)


def test_the_cli_page_has_every_command() -> None:
    page = reference_docs.cli_page()
    progs = list(_progs(build_parser()))
    assert "kafkaguard analyze watch" in progs and "kafkaguard certs init-ca" in progs
    for prog in progs:
        assert f"## `{prog}`" in page
