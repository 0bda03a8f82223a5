"""The documentation's text, for the tests that run what it shows: an operator copies a
command or a snippet from a page (``docs/*.md``) or from the README, and the tests execute or
load that same text, so the two cannot drift."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """``docs/<name>`` (``README.md`` for the README)."""
    path = README if name == "README.md" else DOCS / name
    return path.read_text(encoding="utf-8")


def section(name: str, heading: str) -> str:
    """The text under ``heading`` (e.g. ``"## Deploying"``) of page ``name``, up to the next
    heading of the same or a higher level (fenced code blocks' ``#`` lines are not headings);
    the whole page for its ``# Title``."""
    text = page(name)
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines(keepends=True)
    start, fenced, found = 0, False, False
    kept: list[str] = []
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        is_heading = not fenced and re.match(r"#{1,6} ", line) is not None
        if found and is_heading and len(line) - len(line.lstrip("#")) <= level:
            break
        if found:
            kept.append(line)
        elif line.rstrip("\n") == heading and not fenced:
            found, start = True, number
    assert found, f"{name} has no {heading!r} (line {start})"
    return "".join(kept)


def blocks(name: str, heading: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` (``""`` for an unlabelled fence) in a section."""
    return [
        body
        for kind, body in re.findall(r"```(\w*)\n(.*?)```", section(name, heading), re.DOTALL)
        if kind == language
    ]


def commands(name: str, heading: str, program: str) -> list[list[str]]:
    """Each command line of the section's ``sh`` blocks that runs ``program``, split as the
    shell splits it (comments dropped, ``\\`` continuations joined)."""
    found = []
    for block in blocks(name, heading, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == [program]:
                found.append(words)
    return found


def deploying_commands(program: str) -> list[list[str]]:
    """The commands of docs/deploying.md (the page tests/deploy/ runs) that run ``program``."""
    return commands("deploying.md", "# Deploying", program)


def file_store_config(directory: Path) -> Path:
    """``directory/config.yaml``, the name the pages' commands use, with an empty file store
    (``acls.yaml``) beside it: where the documented ``kafkaguard acls`` lines can run."""
    config = directory / "config.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
        "listeners: [{name: PLAINTEXT, port: 9092}]\n"
        "acl_store: {type: file, path: acls.yaml}\n",
        encoding="utf-8",
    )
    (directory / "acls.yaml").write_text("acls: []\n", encoding="utf-8")
    return config
