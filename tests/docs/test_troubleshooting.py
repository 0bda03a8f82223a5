"""docs/troubleshooting.md's fixes grant what they say: each ``kafkaguard acls`` line of the
page, run as written on a file store, makes ``explain`` allow the request its section is
about (and nothing to a principal the lines do not name); the page's ``explain`` line runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.cli import main
from tests.support import docs

PAGE = "troubleshooting.md"
FIXED = [
    ("User:orders-service", "WRITE", "--topic", "orders"),
    ("User:orders-service", "CREATE", "--topic", "orders"),  # WRITE on a missing topic
    ("User:billing", "READ", "--topic", "orders"),
    ("User:billing", "READ", "--group", "billing"),
    ("User:orders-service", "IDEMPOTENT_WRITE", "--cluster"),
    ("User:orders-service", "WRITE", "--transactional-id", "orders-tx"),
]
"""What each section's error needs, after its fix."""


def _explain(config: Path, principal: str, operation: str, *resource: str) -> int:
    argv = ["explain", "--config", str(config), "--principal", principal]
    return main([*argv, "--operation", operation, *resource])


def test_the_fixes_grant_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = docs.file_store_config(tmp_path)
    monkeypatch.chdir(tmp_path)  # the page's commands name config.yaml
    for fixed in FIXED:
        assert _explain(config, *fixed) == 1, fixed  # denied before
    commands = docs.commands(PAGE, "# Troubleshooting", "kafkaguard")
    fixes = [words[1:] for words in commands if words[1] == "acls"]
    assert len(fixes) == 5 and all("--add" in argv for argv in fixes)
    for argv in fixes:
        assert main(argv) == 0, argv
    for fixed in FIXED:
        # 3: allowed only if the topic exists; a consumer is not granted CREATE, and a Metadata
        # request naming a missing topic would need it (KafkaApis.handleTopicMetadataRequest)
        expected = 3 if fixed == ("User:billing", "READ", "--topic", "orders") else 0
        assert _explain(config, *fixed) == expected, fixed
    assert _explain(config, "User:someone-else", "WRITE", "--topic", "orders") == 1
    (example,) = [words[1:] for words in commands if words[1] == "explain"]
    capsys.readouterr()
    assert main(example) == 0  # WRITE orders for User:orders-service from 10.1.2.3
    assert capsys.readouterr().out.startswith("ALLOWED")
