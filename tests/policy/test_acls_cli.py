"""`kafkaguard acls` against a temporary file store (kafka-acls.sh behaviour), and which store(s)
--config, --acl-file and --zookeeper-connect name, for migrate against a real ZooKeeper."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kafkaguard.policy import acls_cli
from kafkaguard.policy.model import ResourceType
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.policy.stores.file import read_acl_file
from tests.support.policy import CLUSTER, DENY, GROUP, PREFIXED, TOPIC, Op, acl
from tests.support.zookeeper import ZooKeeperServer


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


# -- which store(s): --config, --acl-file, --zookeeper-connect (migrate: one per side) ----------

UNREACHABLE_ZK = "127.0.0.1:1"
"""Usage errors are found before any store is opened: nothing ever connects here."""

MIGRATED = {
    acl("User:alice", Op.READ, name="orders"),
    acl("User:bob", Op.WRITE, DENY, name="ord", ptype=PREFIXED, host="10.0.0.1"),
    acl("User:ops", Op.ALTER, name="kafka-cluster", rtype=CLUSTER),
    acl("User:app", Op.READ, name="g", rtype=GROUP),
}


def _file_config(tmp_path: Path, acl_file: str = "acls.yaml") -> Path:
    config = tmp_path / "file-proxy.yaml"
    config.write_text(f"acl_store:\n  type: file\n  path: {acl_file}\n", encoding="utf-8")
    return config


def _zookeeper_config(tmp_path: Path, connect: str, chroot: str = "") -> Path:
    config = tmp_path / "zk-proxy.yaml"
    config.write_text(
        f"acl_store:\n  type: zookeeper\n  connect: '{connect}'\n  chroot: '{chroot}'\n",
        encoding="utf-8",
    )
    return config


def test_migrate_file_into_the_configs_zookeeper_and_back(
    zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    # The fleet's config already points at ZooKeeper: only the old file is named.
    config = _zookeeper_config(tmp_path, zookeeper.connect, chroot)
    old = tmp_path / "old-acls.yaml"
    old.write_text(format_acl_text(MIGRATED), encoding="utf-8")
    migrate = ("migrate", "--from", "file", "--to", "zookeeper", "--config", str(config))
    code, out = run(*migrate, "--acl-file", str(old))
    assert code == 0, out
    assert out == [
        f"Copied 4 ACLs from file {old} to zookeeper {zookeeper.connect}{chroot} "
        "(4 new, 0 already present)."
    ]
    code, out = run(*migrate, "--acl-file", str(old))
    assert out[0].endswith("(0 new, 4 already present).")
    # The config's ZooKeeper as the source; the file as the target (created).
    back = tmp_path / "back.yaml"
    code, out = run(
        "migrate", "--from", "zookeeper", "--to", "file", "--config", str(config),
        "--acl-file", str(back),
    )  # fmt: skip
    assert code == 0, out
    assert stored(back) == MIGRATED


def test_migrate_zookeeper_into_the_configs_file(
    zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    zk = ("--zookeeper-connect", zookeeper.connect, "--zookeeper-chroot", chroot)
    source = tmp_path / "seed.yaml"
    source.write_text(format_acl_text(MIGRATED), encoding="utf-8")
    code, out = run(
        "migrate", "--from", "file", "--to", "zookeeper", "--acl-file", str(source), *zk
    )
    assert code == 0, out
    # A file-backed proxy config: its acl_store.path (relative to the config) is the target,
    # and ACLs already in it are kept.
    (tmp_path / "conf").mkdir()
    config = _file_config(tmp_path / "conf")
    kept = acl("User:carol", Op.DESCRIBE, name="audit")
    (tmp_path / "conf" / "acls.yaml").write_text(format_acl_text({kept}), encoding="utf-8")
    code, out = run("migrate", "--from", "zookeeper", "--to", "file", "--config", str(config), *zk)
    assert code == 0, out
    assert out[0].endswith("(4 new, 0 already present).")
    assert stored(tmp_path / "conf" / "acls.yaml") == MIGRATED | {kept}


FILE_TO_ZK = ("migrate", "--from", "file", "--to", "zookeeper")
ZK_TO_FILE = ("migrate", "--from", "zookeeper", "--to", "file")
OTHER_FILE = ("--acl-file", "other.yaml")
OTHER_ZK = ("--zookeeper-connect", UNREACHABLE_ZK)


@pytest.mark.parametrize(
    ("config", "argv", "message"),
    [
        pytest.param(
            "file",
            (*FILE_TO_ZK, *OTHER_FILE, *OTHER_ZK),
            "is already the file side: drop --acl-file or --config",
            id="file-side-twice",
        ),
        pytest.param(
            "zookeeper",
            (*FILE_TO_ZK, *OTHER_FILE, *OTHER_ZK),
            "is already the zookeeper side: drop --zookeeper-connect or --config",
            id="zookeeper-side-twice",
        ),
        pytest.param(
            "file",
            FILE_TO_ZK,
            "give the zookeeper side with --zookeeper-connect or a --config whose "
            "acl_store.type is zookeeper",
            id="no-zookeeper-side",
        ),
        pytest.param(
            "zookeeper", ZK_TO_FILE, "give the file side with --acl-file", id="no-file-side"
        ),
        pytest.param(None, (*ZK_TO_FILE, *OTHER_FILE), "give the zookeeper side", id="one-side"),
        pytest.param(
            "memory",
            (*FILE_TO_ZK, *OTHER_FILE, *OTHER_ZK),
            "acl_store.type is 'memory'; migrate copies between a file and a zookeeper store",
            id="memory-config",
        ),
        pytest.param(
            "zookeeper",
            (*ZK_TO_FILE, *OTHER_FILE, "--zookeeper-chroot", "/kafka"),
            "--zookeeper-chroot and --zookeeper-digest-auth-file go with --zookeeper-connect",
            id="chroot-without-connect",
        ),
        pytest.param(
            "file",
            ("--list", *OTHER_FILE),
            "give one store, not --config and --acl-file",
            id="list-config-and-file",
        ),
        pytest.param(
            None,
            ("--list", *OTHER_FILE, *OTHER_ZK),
            "give one store, not --acl-file and --zookeeper-connect",
            id="list-file-and-zookeeper",
        ),
        pytest.param(
            "memory", ("--list",), "acl_store.type is 'memory'; it cannot be edited", id="memory"
        ),
        pytest.param(None, ("--list",), "give --config <proxy config>, --acl-file", id="none"),
    ],
)
def test_store_choice_errors_open_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: str | None,
    argv: tuple[str, ...],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    configs = {
        "file": _file_config(tmp_path),
        "zookeeper": _zookeeper_config(tmp_path, UNREACHABLE_ZK),
        "memory": tmp_path / "memory.yaml",
    }
    configs["memory"].write_text("authorizer: {}\n", encoding="utf-8")
    before = sorted(tmp_path.iterdir())
    code, out = run(*argv, *(("--config", str(configs[config])) if config else ()))
    assert (code, out) == (2, [])
    assert message in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == before  # no ACL file created, none written
