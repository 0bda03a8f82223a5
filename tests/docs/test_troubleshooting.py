"""docs/troubleshooting.md's fixes grant what they say: each ``kafkaguard acls`` line of the
page, run as written on a file store, makes ``explain`` allow the request its section is
about (and nothing to a principal the lines do not name); the page's ``explain`` line runs;
the ``check-config`` messages it quotes are what check-config prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kafkaguard.cli import main
from tests.support import docs
from tests.support.ports import taken_port

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


UPSTREAM = "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
PLANTED = {
    "upstream: is required: give the brokers to proxy, …": "listeners: [{name: P, port: 9092}]\n",
    "listeners[0].advertized_host: unknown key 'advertized_host' (did you mean "
    "`advertised_host`?)": UPSTREAM + "listeners: [{name: P, port: 9092, advertized_host: x}]\n",
    "must be host:port (port 1 to 65535), got …": "upstream: {bootstrap_servers: [kafka]}\n"
    "listeners: [{name: P, port: 9092}]\n",
    "listeners[0].advertised_host: is required when binding to 0.0.0.0": UPSTREAM
    + "listeners: [{name: P, port: 9092, bind_host: 0.0.0.0}]\n",
    "must be a TCP port from 1 to 65535, got …": UPSTREAM + "listeners: [{name: P, port: 99192}]\n",
    "must be at least …, got …": UPSTREAM
    + "listeners: [{name: P, port: 9092}]\nlimits: {max_connections: 0}\n",
    "must be one of …, got …": UPSTREAM
    + "listeners: [{name: P, port: 9092}]\nenforcement: enforcing\n",
    "environment variable NAME is not set": "upstream: {bootstrap_servers: ['${env:NAME}']}\n"
    "listeners: [{name: P, port: 9092}]\n",
}
"""A configuration that check-config refuses with each message the page's table quotes."""


@pytest.mark.parametrize("message", sorted(PLANTED))
def test_the_check_config_messages_quoted_are_printed(
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = docs.section(PAGE, "## `check-config` messages")
    assert re.search(f"`+{re.escape(message)}`+", table), f"the page no longer quotes {message!r}"
    monkeypatch.delenv("NAME", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(PLANTED[message], encoding="utf-8")
    assert main(["check-config", "--config", str(config)]) == 2
    printed = capsys.readouterr().err
    parts = message.split("…")
    at = 0
    for part in parts:  # the quoted pieces in order, the … standing for the file's values
        at = printed.find(part, at)
        assert at >= 0, f"check-config printed {printed!r}, not {message!r}"


def test_the_admin_bind_failure_quoted_is_what_run_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin listener binds before the upstream is asked, so a taken port is reported
    without any broker; the page's line is printed with the port that was taken."""
    # Keep this process on the default event loop policy: run installs uvloop's, and every
    # later asyncio.run in the session would get it (tests/test_cli.py does the same).
    monkeypatch.setattr("kafkaguard.cli.serve.install_event_loop_policy", lambda: "asyncio")
    table = docs.section(PAGE, "## The proxy does not start")
    (quoted,) = re.findall(r"`(the admin listener cannot bind 127\.0\.0\.1:9404: [^`]+)`", table)
    with taken_port() as port:
        config = tmp_path / "config.yaml"
        config.write_text(
            "upstream: {bootstrap_servers: ['127.0.0.1:1']}\n"
            f"listeners: [{{name: P, port: 1}}]\nadmin: {{port: {port}}}\n",
            encoding="utf-8",
        )
        assert main(["run", "--config", str(config)]) == 1
    expected = "kafkaguard: cannot start: " + quoted.replace(":9404", f":{port}")
    assert capsys.readouterr().err.strip() == expected
