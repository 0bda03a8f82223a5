"""The README's "Deploying" commands, for the tests that run them (tests/deploy/): what an
operator copies from the README is what the tests execute, so the two cannot drift."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def deploying_commands(program: str) -> list[list[str]]:
    """Each command line of the ``sh`` blocks of README's "## Deploying" section that runs
    ``program``, split as the shell splits it (comments dropped, ``\\`` continuations
    joined)."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Deploying\n(.*?)^## ", text, re.DOTALL | re.MULTILINE)
    assert section is not None, "README.md has no Deploying section"
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section.group(1), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == [program]:
                commands.append(words)
    return commands
