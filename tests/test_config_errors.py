"""Configuration errors say what to fix (kafkaguard/config_tree.py, kafkaguard/proxy/config.py):
each names the file, line and key, the value found and what is allowed; an unknown key gets
the closest known one; ``check-config`` reports every error of a file at once, and what follows
from an error already reported (a default taken in place of the refused value, a section's
keys after the one that stopped it) is not reported as another."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.cli.config_schema import config_schema
from kafkaguard.config_tree import ConfigError, ConfigErrors, ConfigSection
from kafkaguard.proxy.config import load_config, parse_config

UPSTREAM = "upstream:\n  bootstrap_servers: ['127.0.0.1:9092']\n"


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> list[str]:
    """``check-config`` of ``text`` (it must refuse it): its error lines."""
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    assert main(["check-config", "--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    prefix = "kafkaguard: configuration error: "
    assert captured.err.startswith(prefix), captured.err
    return [line.strip() for line in captured.err.removeprefix(prefix).splitlines()]


def test_a_port_of_99192_is_refused_with_its_value_and_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = UPSTREAM + "listeners:\n  - name: P\n    port: 99192\n"
    assert check(tmp_path, capsys, text) == [
        f"{tmp_path / 'c.yaml'}:5 listeners[0].port: must be a TCP port from 1 to 65535, got 99192"
    ]


@pytest.mark.parametrize(
    ("section", "allowed"),
    [
        (
            "admin:\n  port: 70000\n",
            "admin.port: must be a TCP port from 0 to 65535 (0: any free port), got 70000",
        ),
        (
            "admin:\n  port: -1\n",
            "admin.port: must be a TCP port from 0 to 65535 (0: any free port), got -1",
        ),
        (
            "listeners:\n  - {name: P, port: 9092, broker_ports: {base: 65536}}\n",
            "listeners[0].broker_ports.base: must be a TCP port from 1 to 65535, got 65536",
        ),
        (
            "listeners:\n  - {name: P, port: 0}\n",
            "listeners[0].port: must be a TCP port from 1 to 65535, got 0",
        ),
        (
            "listeners:\n  - {name: P, port: 9092}\nlogging: {level: LOUD}\n",
            "logging.level: must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'",
        ),
        (
            "listeners:\n  - {name: P, port: 9092}\nmetrics: {max_principals: 0}\n",
            "metrics.max_principals: must be at least 1, got 0",
        ),
        (
            "listeners:\n  - {name: P, port: 9092}\nmetrics: {per_principal: 3}\n",
            "metrics.per_principal: must be true or false, got 3",
        ),
        ("listeners: {name: P}\n", "listeners: must be a list of mappings, got {'name': 'P'}"),
    ],
)
def test_each_error_names_the_value_found_and_what_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, allowed: str
) -> None:
    listeners = "" if "listeners" in section else "listeners:\n  - {name: P, port: 9092}\n"
    (line,) = check(tmp_path, capsys, UPSTREAM + listeners + section)
    assert line.split(" ", 1)[1] == allowed


def test_an_unknown_key_gets_the_closest_known_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = UPSTREAM + (
        "listeners:\n  - name: P\n    port: 9092\n    bind_host: 0.0.0.0\n"
        "    advertized_host: proxy.example.com\n"
    )
    lines = check(tmp_path, capsys, text)
    unknown = (
        f"{tmp_path / 'c.yaml'}:7 listeners[0].advertized_host: unknown key 'advertized_host' "
        "(did you mean `advertised_host`?)"
    )
    # beside it, the listener's own complaint about the key it lacks
    required = "listeners[0].advertised_host: is required when binding to 0.0.0.0"
    assert lines == ["2 errors:", f"{tmp_path / 'c.yaml'}:4 {required}", unknown]


def test_a_key_like_none_known_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = UPSTREAM + "listeners:\n  - {name: P, port: 9092}\nlogging:\n  zzz: 1\n"
    (line,) = check(tmp_path, capsys, text)
    assert line.endswith("logging.zzz: unknown key 'zzz' (known keys: format, level)")


def test_check_config_reports_several_errors_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Errors in two listeners, the upstream, the authorizer and at the top level: each
    with its file:line, in the file's order."""
    file = tmp_path / "c.yaml"
    text = (
        "upstream:\n"  # 1
        "  bootstrap_servers: ['kafka:99999']\n"  # 2
        "listeners:\n"  # 3
        "  - name: A\n"  # 4
        "    port: 99192\n"  # 5
        "  - name: B\n"  # 6
        "    port: 9093\n"  # 7
        "    security_protocol: PLAIN\n"  # 8
        "authorizer:\n"  # 9
        "  super_user: User:admin\n"  # 10
        "acl_store: {type: file, path: acls.yaml}\n"  # 11
        "enforcment: log_only\n"  # 12
    )
    assert check(tmp_path, capsys, text) == [
        "5 errors:",
        f"{file}:2 upstream.bootstrap_servers: must be host:port (port 1 to 65535), got "
        "'kafka:99999'",
        f"{file}:5 listeners[0].port: must be a TCP port from 1 to 65535, got 99192",
        f"{file}:8 listeners[1].security_protocol: must be one of PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL, got 'PLAIN'",
        f"{file}:10 authorizer.super_user: unknown key 'super_user' (did you mean `super_users`?)",
        f"{file}:12 enforcment: unknown key 'enforcment' (did you mean `enforcement`?)",
    ]
    with pytest.raises(ConfigErrors) as raised:
        load_config(file)
    assert len(raised.value.errors) == 5
    assert (raised.value.errors[1].at, raised.value.errors[1].key) == ("listeners[0]", "port")


def test_what_follows_from_an_error_is_not_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``advertised_host`` of the wrong type on a wildcard address: not also "is required"
    (its default, none, was taken in its place); an ``authorizer`` refused before
    ``acl_store`` was read: ``acl_store`` is not an unknown key."""
    text = UPSTREAM + (
        "listeners:\n  - {name: P, port: 9092, bind_host: 0.0.0.0, advertised_host: [x]}\n"
        "authorizer:\n  class: nocolon\n"
        "acl_store: {type: memory}\n"
    )
    file = tmp_path / "c.yaml"
    assert check(tmp_path, capsys, text) == [
        "2 errors:",
        f"{file}:4 listeners[0].advertised_host: must be a string, got ['x']",
        f"{file}:6 authorizer.class: must look like 'package.module:Class', got 'nocolon'",
    ]


def test_without_collecting_the_first_error_is_raised() -> None:
    """parse_config alone (the schema's exploration, kafkaguard/cli/config_schema.py) stops
    at the first error, as each load there must."""
    section = ConfigSection.from_text(
        UPSTREAM + "listeners:\n  - {name: P, port: 99192}\nenforcment: x\n", "c.yaml"
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(section)
    assert not isinstance(raised.value, ConfigErrors)
    assert str(raised.value) == (
        "c.yaml:4 listeners[0].port: must be a TCP port from 1 to 65535, got 99192"
    )


def test_the_schema_carries_the_range_of_ports() -> None:
    properties = config_schema()["properties"]
    listener = properties["listeners"]["items"]["properties"]
    assert listener["port"] == {"type": "integer", "minimum": 1, "maximum": 65535}
    assert listener["broker_ports"]["properties"]["base"]["maximum"] == 65535
    assert properties["admin"]["properties"]["port"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 65535,
        "default": 9404,
    }


def test_a_list_with_an_unknown_item_goes_on_as_its_known_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``enabled_mechanisms: [SCRAM-SHA-256, PLAN]`` without a credentials file: the typo,
    and the credentials file SCRAM-SHA-256 needs; not one "required for SCRAM-SHA-512" (the
    default), which the file never named."""
    text = UPSTREAM + (
        "listeners:\n"
        "  - name: S\n"
        "    port: 9092\n"
        "    security_protocol: SASL_PLAINTEXT\n"
        "    sasl: {enabled_mechanisms: [SCRAM-SHA-256, PLAN, FOO]}\n"  # 7
    )
    file = tmp_path / "c.yaml"
    assert check(tmp_path, capsys, text) == [
        "2 errors:",
        f"{file}:7 listeners[0].sasl.enabled_mechanisms: unknown 'PLAN', 'FOO' (one of PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)",
        f"{file}:7 listeners[0].sasl.credentials_file: is required for SCRAM-SHA-256",
    ]


def test_a_list_of_unknown_items_alone_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing known left: "must name at least one mechanism" follows from the typo."""
    text = UPSTREAM + (
        "listeners:\n  - name: S\n    port: 9092\n    security_protocol: SASL_PLAINTEXT\n"
        "    sasl: {enabled_mechanisms: [PLAN]}\n"
    )
    (line,) = check(tmp_path, capsys, text)
    assert line.endswith(
        "listeners[0].sasl.enabled_mechanisms: unknown 'PLAN' (one of PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512, OAUTHBEARER)"
    )
