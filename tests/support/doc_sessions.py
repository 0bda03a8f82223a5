"""Terminal sessions shown in docs/*.md (```text blocks of ``$ command`` lines, their output and
``$ echo $?``), for the tests that replay them: the page shows what the command prints."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


@dataclass(frozen=True)
class Session:
    argv: list[str]
    """The command's words, without the program name (``kafkaguard``)."""
    output: list[str]
    """The lines shown: ``...`` stands for lines left out; ``(...)`` ends a line shortened."""
    exit_code: int | None


def sessions(page: str, section: str) -> list[Session]:
    """The sessions in the ``## `` section of ``docs/<page>`` whose title starts ``section``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(section)}.*?\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert found is not None, f"docs/{page} has no section {section!r}"
    out = []
    for block in re.findall(r"```text\n(.*?)```", found.group(1), re.DOTALL):
        lines = block.splitlines()
        assert lines[0].startswith("$ kafkaguard "), lines[0]
        code = None
        if len(lines) > 2 and lines[-2] == "$ echo $?":
            code, lines = int(lines[-1]), lines[:-2]
        out.append(Session(shlex.split(lines[0][2:])[1:], lines[1:], code))
    return out


def assert_shown(session: Session, printed: list[str]) -> None:
    """Every line the page shows was printed, in that order (``...`` skips any lines; a line
    ending ``(...)`` matches a printed line that starts as it does)."""
    position = 0
    for shown in session.output:
        if shown == "...":
            continue
        prefix = shown.split("(...)", 1)[0] if "(...)" in shown else None
        while position < len(printed):
            line = printed[position]
            position += 1
            if line == shown or (prefix is not None and line.startswith(prefix)):
                break
        else:
            raise AssertionError(f"not printed (in this order): {shown!r}\nprinted: {printed}")
