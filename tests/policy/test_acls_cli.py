"""`kafkaguard acls` against a temporary file store (kafka-acls.sh behaviour)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kafkaguard.policy import acls_cli
from kafkaguard.policy.model import ResourceType
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.policy import CLUSTER, DENY, GROUP, PREFIXED, TOPIC, Op, acl


def run(*argv: str) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser()
    acls_cli.add_arguments(parser)
    lines: list[str] = []
    code = acls_cli.run(parser.parse_args(list(argv)), lines.append)
    return code, lines


def stored(path: Path) -> frozenset:
    return read_acl_file(path)[0]


def test_add_list_remove(tmp_path: Path) -> None:
    f = str(tmp_path / "acls.yaml")
    code, out = run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "orders",
    )
    assert code == 0
    assert out == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"  # noqa: E501
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    ]
    assert stored(tmp_path / "acls.yaml") == {acl("User:alice", Op.READ, name="orders")}
    code, out = run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "orders",
    )
    assert out[0].startswith("Acl (pattern=ResourcePattern(resourceType=TOPIC, name=orders")
    assert out[0].endswith("already exists.")
    code, out = run("--acl-file", f, "--list", "--topic", "orders")
    assert out == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n"  # noqa: E501
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    ]
    code, _ = run(
        "--acl-file",
        f,
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "orders",
    )
    assert code == 0
    assert stored(tmp_path / "acls.yaml") == frozenset()


def test_producer_consumer_idempotent_expansion(tmp_path: Path) -> None:
    f = str(tmp_path / "acls.yaml")
    code, _ = run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:p",
        "--producer",
        "--idempotent",
        "--topic",
        "t-",
        "--transactional-id",
        "tx",
        "--resource-pattern-type",
        "literal",
    )
    assert code == 0
    assert stored(tmp_path / "acls.yaml") == {
        acl("User:p", Op.WRITE, name="t-"),
        acl("User:p", Op.DESCRIBE, name="t-"),
        acl("User:p", Op.CREATE, name="t-"),
        acl("User:p", Op.WRITE, name="tx", rtype=ResourceType.TRANSACTIONAL_ID),
        acl("User:p", Op.DESCRIBE, name="tx", rtype=ResourceType.TRANSACTIONAL_ID),
        acl("User:p", Op.IDEMPOTENT_WRITE, name="kafka-cluster", rtype=CLUSTER),
    }
    g = str(tmp_path / "g.yaml")
    code, _ = run(
        "--acl-file",
        g,
        "--add",
        "--allow-principal",
        "User:c",
        "--allow-host",
        "10.0.0.1",
        "--consumer",
        "--topic",
        "in",
        "--group",
        "grp",
        "--resource-pattern-type",
        "prefixed",
    )
    assert code == 0
    assert stored(tmp_path / "g.yaml") == {
        acl("User:c", Op.READ, name="in", ptype=PREFIXED, host="10.0.0.1"),
        acl("User:c", Op.DESCRIBE, name="in", ptype=PREFIXED, host="10.0.0.1"),
        acl("User:c", Op.READ, name="grp", rtype=GROUP, ptype=PREFIXED, host="10.0.0.1"),
    }


def test_deny_and_default_operation_all(tmp_path: Path) -> None:
    f = str(tmp_path / "acls.yaml")
    assert (
        run(
            "--acl-file",
            f,
            "--add",
            "--deny-principal",
            "User:bad",
            "--deny-host",
            "10.9.9.9",
            "--topic",
            "*",
        )[0]
        == 0
    )
    assert stored(tmp_path / "acls.yaml") == {
        acl("User:bad", Op.ALL, DENY, name="*", host="10.9.9.9")
    }


def test_list_match_and_principal(tmp_path: Path) -> None:
    f = str(tmp_path / "acls.yaml")
    run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:a",
        "--operation",
        "Read",
        "--topic",
        "*",
    )
    run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:b",
        "--operation",
        "Read",
        "--topic",
        "or",
        "--resource-pattern-type",
        "prefixed",
    )
    run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:b",
        "--operation",
        "Read",
        "--topic",
        "other",
    )
    _, out = run("--acl-file", f, "--list", "--topic", "orders", "--resource-pattern-type", "match")
    assert len(out) == 2 and "name=*" in out[0] + out[1] and "name=or," in out[0] + out[1]
    _, out = run("--acl-file", f, "--list", "--principal", "User:b")
    assert out[0] == "ACLs for principal `User:b`"
    assert len(out) == 3
    _, out = run("--acl-file", f, "--list")
    assert len(out) == 3


def test_remove_all_for_resource_with_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = str(tmp_path / "acls.yaml")
    run(
        "--acl-file",
        f,
        "--add",
        "--allow-principal",
        "User:a",
        "--allow-principal",
        "User:b",
        "--operation",
        "Read",
        "--topic",
        "t",
    )
    monkeypatch.setattr("builtins.input", lambda: "n")
    code, out = run("--acl-file", f, "--remove", "--topic", "t")
    assert code == 0 and "Are you sure you want to delete all ACLs for resource filter" in out[0]
    assert len(stored(tmp_path / "acls.yaml")) == 2
    monkeypatch.setattr("builtins.input", lambda: "y")
    run("--acl-file", f, "--remove", "--topic", "t")
    assert stored(tmp_path / "acls.yaml") == frozenset()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--add", "--topic", "t"], "--allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "User:a", "--operation", "Read"], "at least one resource"),
        (
            ["--add", "--allow-principal", "User:a", "--producer"],
            "With --producer you must specify a --topic",
        ),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "With --consumer"),
        (
            ["--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"],
            "--idempotent option",
        ),
        (
            [
                "--add",
                "--allow-principal",
                "User:a",
                "--topic",
                "t",
                "--resource-pattern-type",
                "match",
            ],
            "not valid when adding",
        ),
        (
            [
                "--add",
                "--allow-principal",
                "User:a",
                "--topic",
                "t",
                "--operation",
                "IdempotentWrite",
            ],
            "ResourceType TOPIC only supports",
        ),
        (["--list", "--allow-principal", "User:a"], "--list cannot be combined"),
    ],
)
def test_usage_errors(tmp_path: Path, argv: list[str], message: str, capsys) -> None:
    code, _ = run("--acl-file", str(tmp_path / "a.yaml"), *argv)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "a.yaml").exists()


def test_invalid_binding_and_config_lookup(tmp_path: Path, capsys) -> None:
    code, _ = run(
        "--acl-file",
        str(tmp_path / "a.yaml"),
        "--add",
        "--allow-principal",
        "alice",
        "--topic",
        "t",
    )
    assert code == 1 and "principalType:principalName" in capsys.readouterr().err
    code, _ = run(
        "--acl-file",
        str(tmp_path / "a.yaml"),
        "--add",
        "--allow-principal",
        "User:a",
        "--topic",
        "*",
        "--resource-pattern-type",
        "prefixed",
    )
    assert code == 1 and "LITERAL" in capsys.readouterr().err
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text("acl_store:\n  type: file\n  path: sub/acls.yaml\n")
    (tmp_path / "sub").mkdir()
    code, _ = run(
        "--config",
        str(cfg),
        "--add",
        "--allow-principal",
        "User:a",
        "--cluster",
        "--operation",
        "Alter",
    )
    assert code == 0
    assert stored(tmp_path / "sub" / "acls.yaml") == {
        acl("User:a", Op.ALTER, name="kafka-cluster", rtype=CLUSTER)
    }
    assert TOPIC is ResourceType.TOPIC


def test_module_entry_point(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("acls: []\n")
    assert acls_cli.main(["--acl-file", str(tmp_path / "a.yaml"), "--list"]) == 0
