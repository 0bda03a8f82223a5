"""``kafkaguard acls apply`` (issue 26): a Strimzi-shaped file (our own fixtures, in the shape of
Strimzi's KafkaUser CRD) or a kafkaguard ACL file applied to the file store, to a real
ZooKeeper, and through a running proxy's Admin API; --prune, --dry-run, invalid files."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.policy import acls_cli
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import AclBinding, ResourceType
from kafkaguard.policy.stores.acl_file_format import acl_line, format_acl_text
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.proxy.app import wire_admin
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.tansu import TansuBroker, free_base
from tests.support.doc_sessions import assert_shown, sessions
from tests.support.policy import CLUSTER, DENY, GROUP, PREFIXED, Op, acl
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
)
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(120)

USERS = """\
# KafkaUser resources as a Strimzi user keeps them (one of each API version).
apiVersion: kafka.strimzi.io/v1
kind: KafkaUser
metadata:
  name: orders-app
  labels: {strimzi.io/cluster: my-cluster}
spec:
  authentication: {type: scram-sha-512}
  authorization:
    type: simple
    acls:
      - resource: {type: topic, name: orders, patternType: literal}
        operations: [Read, Describe]
      - resource: {type: group, name: orders-, patternType: prefix}
        operations: [Read]
        host: "*"
      - resource: {type: topic, name: secrets}
        type: deny
        operations: [All]
---
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaUser
metadata:
  name: billing
spec:
  authentication: {type: tls}
  authorization:
    type: simple
    acls:
      - resource: {type: cluster}
        operation: IdempotentWrite
      - resource: {type: transactionalId, name: billing-tx}
        operations: [Write, Describe]
---
apiVersion: kafka.strimzi.io/v1
kind: KafkaTopic
metadata:
  name: orders
spec: {partitions: 3}
"""

ORDERS_APP = "User:orders-app"
BILLING = "User:CN=billing"  # tls authentication: the User Operator's CN= principal
TXN = ResourceType.TRANSACTIONAL_ID
DESIRED = frozenset(
    {
        acl(ORDERS_APP, Op.READ, name="orders"),
        acl(ORDERS_APP, Op.DESCRIBE, name="orders"),
        acl(ORDERS_APP, Op.READ, name="orders-", rtype=GROUP, ptype=PREFIXED),
        acl(ORDERS_APP, Op.ALL, DENY, name="secrets"),
        acl(BILLING, Op.IDEMPOTENT_WRITE, name="kafka-cluster", rtype=CLUSTER),
        acl(BILLING, Op.WRITE, name="billing-tx", rtype=TXN),
        acl(BILLING, Op.DESCRIBE, name="billing-tx", rtype=TXN),
    }
)
OTHER = acl("User:someone-else", Op.WRITE, name="orders")
"""A principal the file does not name: never touched, --prune included."""


def run(*argv: str) -> tuple[int, list[str]]:
    """``kafkaguard acls ARGV`` with the DescribeAcls reader the command line passes."""
    parser = argparse.ArgumentParser()
    acls_cli.add_arguments(parser)
    lines: list[str] = []
    args = parser.parse_args(list(argv))
    code = acls_cli.run(args, lines.append, reader=wire_admin.describe_acls)
    return code, lines


def changes(lines: list[str]) -> list[str]:
    return [line for line in lines if line[:2] in ("+ ", "- ")]


def plus(bindings: frozenset[AclBinding] | set[AclBinding]) -> set[str]:
    return {f"+ {acl_line(b)}" for b in bindings}


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.yaml"
    path.write_text(USERS, encoding="utf-8")
    return path


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "acls.yaml"
    path.write_text(format_acl_text([OTHER]), encoding="utf-8")
    return path


def stored(path: Path) -> frozenset[AclBinding]:
    return read_acl_file(path)[0]


def test_a_strimzi_file_applied_twice_to_the_file_store(users: Path, acl_file: Path) -> None:
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file))
    assert code == 0, out
    assert set(changes(out)) == plus(DESIRED) and len(changes(out)) == len(DESIRED)
    assert f"Note: {users}:35 kind KafkaTopic ignored" in out
    assert out[-1] == f"Applied: 7 to add, 0 to remove in file {acl_file}."
    assert stored(acl_file) == DESIRED | {OTHER}
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file))
    assert code == 0 and changes(out) == []
    assert out[-1] == f"No changes: file {acl_file} holds every ACL of the file."


def test_a_missing_acl_file_is_created(users: Path, tmp_path: Path) -> None:
    target = tmp_path / "new.yaml"
    code, out = run("apply", "-f", str(users), "--acl-file", str(target))
    assert code == 0, out
    assert stored(target) == DESIRED


def test_dry_run_prints_and_changes_nothing(users: Path, acl_file: Path) -> None:
    before = acl_file.read_bytes()
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file), "--dry-run")
    assert code == 0 and set(changes(out)) == plus(DESIRED)
    assert out[-1] == f"Dry run: 7 to add, 0 to remove in file {acl_file}; nothing changed."
    assert acl_file.read_bytes() == before


def test_prune_removes_only_the_named_principals_acls(users: Path, acl_file: Path) -> None:
    stale = acl(ORDERS_APP, Op.WRITE, name="orders")
    acl_file.write_text(format_acl_text(DESIRED | {OTHER, stale}), encoding="utf-8")
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file))
    assert code == 0 and changes(out) == []  # without --prune, nothing to remove
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file), "--prune", "--dry-run")
    assert changes(out) == [f"- {acl_line(stale)}"]
    assert stale in stored(acl_file)
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file), "--prune")
    assert code == 0 and changes(out) == [f"- {acl_line(stale)}"]
    assert stored(acl_file) == DESIRED | {OTHER}


def test_prune_empties_a_user_whose_rules_are_gone(tmp_path: Path, acl_file: Path) -> None:
    acl_file.write_text(format_acl_text(DESIRED | {OTHER}), encoding="utf-8")
    emptied = tmp_path / "emptied.yaml"
    emptied.write_text(
        "apiVersion: kafka.strimzi.io/v1\nkind: KafkaUser\nmetadata: {name: orders-app}\n"
        "spec:\n  authorization: {type: simple, acls: []}\n",
        encoding="utf-8",
    )
    code, out = run("apply", "-f", str(emptied), "--acl-file", str(acl_file), "--prune")
    assert code == 0, out
    assert stored(acl_file) == {b for b in DESIRED if b.entry.principal == BILLING} | {OTHER}


def test_a_kafkaguard_acl_file_is_applied_too(tmp_path: Path, acl_file: Path) -> None:
    desired = tmp_path / "desired.yaml"
    desired.write_text(
        "acls:\n  - {principal: User:alice, operation: [Read, Describe], permission: ALLOW,\n"
        "     resource_type: TOPIC, name: payments}\n",
        encoding="utf-8",
    )
    code, out = run("apply", "-f", str(desired), "--acl-file", str(acl_file), "--prune")
    assert code == 0, out
    assert stored(acl_file) == {
        OTHER,
        acl("User:alice", Op.READ, name="payments"),
        acl("User:alice", Op.DESCRIBE, name="payments"),
    }


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("operations: [Read, Describe]", "operations: [Reed]",
         ":12 orders-app acls[0]: operation 'Reed' is not one of Read, Write"),
        ("operation: IdempotentWrite", "operations: []",
         ":30 billing acls[0]: operations must be a non-empty list"),
        ("operation: IdempotentWrite", "operation: IdempotentWrite\n        operatons: [Read]",
         ":30 billing acls[0]: unknown key 'operatons'"),
        ("operations: [Read]\n        host", "operation: Read\n        host",
         ":14 orders-app acls[1]: kafka.strimzi.io/v1 has no 'operation'"),
        ("type: simple\n    acls:\n      - resource: {type: topic, name: orders,",
         "type: opa\n    acls:\n      - resource: {type: topic, name: orders,",
         ":10 authorization.type must be 'simple'"),
        ("{type: topic, name: secrets}", "{type: topic}",
         ":17 orders-app acls[2]: resource.name is required for a topic"),
        ("{type: group, name: orders-, patternType: prefix}",
         "{type: group, name: orders-, patternType: prefixed}",
         ":14 orders-app acls[1]: resource.patternType must be one of literal, prefix"),
        ("kafka.strimzi.io/v1beta2", "kafka.strimzi.io/v1alpha1",
         ":21 KafkaUser apiVersion kafka.strimzi.io/v1alpha1 is not one of"),
        ("name: billing\n", "labels: {}\n", ":21 KafkaUser without metadata.name"),
    ],
)  # fmt: skip
def test_an_invalid_file_is_refused_with_file_and_line(
    tmp_path: Path,
    acl_file: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    where: str,
) -> None:
    bad = tmp_path / "bad.yaml"
    assert old in USERS
    bad.write_text(USERS.replace(old, new, 1), encoding="utf-8")
    before = acl_file.read_bytes()
    code, out = run("apply", "-f", str(bad), "--acl-file", str(acl_file))
    assert code == 1 and changes(out) == []
    assert acl_file.read_bytes() == before
    assert f"{bad}{where}" in capsys.readouterr().err


def test_an_invalid_kafkaguard_file_is_refused_as_the_store_loader_refuses_it(
    tmp_path: Path, acl_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "acls:\n  - {principal: User:a, operation: Read, resource_type: TOPIC, name: t}\n",
        encoding="utf-8",
    )
    assert run("apply", "-f", str(bad), "--acl-file", str(acl_file))[0] == 1
    assert f"{bad}:2 acls[0]: permission is required" in capsys.readouterr().err


def test_one_store_is_required(users: Path, acl_file: Path) -> None:
    assert run("apply", "-f", str(users))[0] == 2
    assert run("apply", "-f", str(users), "--acl-file", str(acl_file), "--zookeeper-connect",
               "127.0.0.1:1")[0] == 2  # fmt: skip
    assert run("apply", "--acl-file", str(acl_file))[0] == 2


def test_apply_to_zookeeper_twice(zookeeper: ZooKeeperServer, chroot: str, users: Path) -> None:
    zk = ("--zookeeper-connect", zookeeper.connect, "--zookeeper-chroot", chroot)
    code, out = run("apply", "-f", str(users), *zk)
    assert code == 0, out
    assert set(changes(out)) == plus(DESIRED)
    code, out = run("apply", "-f", str(users), *zk)
    assert code == 0 and changes(out) == [], out
    listed = run("--list", *zk)[1]
    assert sum(line.count("principal=User:") for line in listed) == len(DESIRED)


def file_store_proxy(
    tansu: TansuBroker, store: Path, acls: list[AclBinding], super_users: frozenset[str]
) -> RunningProxy:
    """A proxy in front of Tansu enforcing ``acls``, kept in the file store ``store``."""
    store.write_text(format_acl_text(acls), encoding="utf-8")
    policy = PolicyConfig(
        authorizer=AuthorizerConfig(super_users=super_users),
        acl_store=AclStoreConfig(type="file", path=store),
    )
    running = start_proxy_thread(
        proxy_config(
            tansu.address,
            broker_ports=BrokerPorts(free_base([TANSU_NODE_ID]), {}),
            policy=policy,
        )
    )
    running.acl_file = store
    return running


@pytest.fixture
def admin_proxy(tansu: TansuBroker, tmp_path: Path) -> Iterator[RunningProxy]:
    """A proxy whose PLAINTEXT clients are super users (they may Create/DeleteAcls), its ACLs
    in a file store."""
    running = file_store_proxy(
        tansu, tmp_path / "proxy-acls.yaml", [OTHER], frozenset({"User:ANONYMOUS"})
    )
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def test_apply_through_a_running_proxy_with_the_admin_api(
    admin_proxy: RunningProxy, users: Path, tmp_path: Path
) -> None:
    pytest.importorskip("confluent_kafka")
    assert admin_proxy.acl_file is not None
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\nclient.id=acls-apply\n", encoding="utf-8")
    admin = ("--bootstrap-server", admin_proxy.bootstrap, "--command-config", str(props))
    stale = acl(ORDERS_APP, Op.WRITE, name="orders")
    code, out = run("apply", "-f", str(users), *admin)
    assert code == 0, out
    assert set(changes(out)) == plus(DESIRED)
    assert stored(admin_proxy.acl_file) == DESIRED | {OTHER}
    code, out = run("apply", "-f", str(users), *admin)
    assert code == 0 and changes(out) == [], out
    # A rule the file does not hold (made through the Admin API): --prune deletes it.
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._acl import AclBinding as Binding

    extra = Binding(2, "orders", 3, ORDERS_APP, "*", Op.WRITE.value, 3)  # TOPIC LITERAL ALLOW
    client = AdminClient({"bootstrap.servers": admin_proxy.bootstrap})
    for future in client.create_acls([extra]).values():
        future.result(30)
    code, out = run("apply", "-f", str(users), *admin, "--prune")
    assert code == 0 and changes(out) == [f"- {acl_line(stale)}"], out
    assert stored(admin_proxy.acl_file) == DESIRED | {OTHER}


def test_without_prune_the_acls_only_prune_would_remove_are_reported(
    users: Path, acl_file: Path
) -> None:
    stale = acl(ORDERS_APP, Op.WRITE, name="orders")  # the file's principal, not in the file
    acl_file.write_text(format_acl_text([OTHER, stale, *DESIRED]), encoding="utf-8")
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file))
    assert code == 0 and changes(out) == [], out
    assert (
        "Kept: 1 ACL of the file's principals that the file does not hold; --prune would "
        "remove them (--dry-run lists them)." in out
    )
    assert f"No changes: file {acl_file} holds every ACL of the file." in out
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file), "--dry-run")
    assert code == 0 and changes(out) == [], out
    assert f"  (--prune) - {acl_line(stale)}" in out  # listed; OTHER is never a candidate
    assert not any(acl_line(OTHER) in line for line in out)
    assert stored(acl_file) == DESIRED | {OTHER, stale}
    code, out = run("apply", "-f", str(users), "--acl-file", str(acl_file), "--prune")
    assert code == 0 and changes(out) == [f"- {acl_line(stale)}"], out
    assert not any(line.startswith("Kept:") for line in out)


@pytest.fixture
def refusing_proxy(tansu: TansuBroker, tmp_path: Path) -> Iterator[RunningProxy]:
    """A proxy enforcing ACLs in which User:ANONYMOUS (its PLAINTEXT clients) may not
    DESCRIBE the cluster: DescribeAcls is answered 31 CLUSTER_AUTHORIZATION_FAILED."""
    running = file_store_proxy(tansu, tmp_path / "refusing.yaml", [OTHER, *DESIRED], frozenset())
    try:
        yield running
    finally:
        stop_proxy_thread(running)


@pytest.mark.parametrize("prune", [False, True])
def test_a_refused_read_is_an_error_never_an_empty_store(
    refusing_proxy: RunningProxy, users: Path, capsys: pytest.CaptureFixture[str], prune: bool
) -> None:
    """Issue 38: librdkafka's describe_acls answered [] here, and apply planned 7 additions
    (and, with --prune, no removal)."""
    admin = ("--bootstrap-server", refusing_proxy.bootstrap, "--dry-run")
    code, out = run("apply", "-f", str(users), *admin, *(("--prune",) if prune else ()))
    err = capsys.readouterr().err
    assert code == 1, out
    assert changes(out) == [] and not any("Dry run" in line for line in out), out
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in err, err
    assert "as User:ANONYMOUS" in err and "DESCRIBE on Cluster:LITERAL:kafka-cluster" in err


def test_list_through_the_admin_api_reads_or_fails(
    admin_proxy: RunningProxy, refusing_proxy: RunningProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run("--list", "--bootstrap-server", admin_proxy.bootstrap)
    assert code == 0, out
    assert any(f"principal={OTHER.entry.principal}" in line for line in out), out
    code, out = run("--list", "--bootstrap-server", refusing_proxy.bootstrap)
    assert code == 1 and out == []
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in capsys.readouterr().err
    code, _ = run("--add", "--bootstrap-server", admin_proxy.bootstrap, "--topic", "t",
                  "--allow-principal", "User:x")  # fmt: skip
    assert code == 2


def test_the_docs_dry_run_session(
    users: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/acl-tools.md's ``apply`` without ``--prune`` session, replayed."""
    (session,) = sessions("acl-tools.md", "`acls apply` without `--prune`")
    monkeypatch.chdir(tmp_path)
    stale = acl(ORDERS_APP, Op.WRITE, name="orders")
    Path("acls.yaml").write_text(format_acl_text([OTHER, stale, *DESIRED]), encoding="utf-8")
    assert session.argv[0] == "acls"
    code, out = run(*session.argv[1:])
    assert code == session.exit_code
    assert_shown(session, out)


def test_the_docs_refusal_session(
    refusing_proxy: RunningProxy,
    users: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/acl-tools.md's refused ``apply --dry-run``, replayed against a proxy that refuses
    User:ANONYMOUS DescribeAcls (the page's proxy:9092 is this proxy's address)."""
    (session, *_) = sessions("acl-tools.md", "Reading a running proxy's ACLs")
    monkeypatch.chdir(users.parent)
    argv = [refusing_proxy.bootstrap if w == "proxy:9092" else w for w in session.argv[1:]]
    code, out = run(*argv)
    assert code == session.exit_code and changes(out) == [], out
    err = capsys.readouterr().err.replace(refusing_proxy.bootstrap, "proxy:9092")
    assert_shown(session, err.splitlines())
