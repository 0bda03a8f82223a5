"""ZooKeeperAclStore against a real ZooKeeper (Debian's package): Kafka's layout byte for byte,
ACLs written by hand the way Kafka's AclAuthorizer writes them, live propagation, concurrent
writers, an outage, and ``kafkaguard acls`` / ``migrate`` against ZooKeeper."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kafkaguard.config_tree import ConfigError, ConfigSection
from kafkaguard.policy import acls_cli
from kafkaguard.policy.config import build_store, parse_policy_config
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.policy.stores.base import AclStoreError
from kafkaguard.policy.stores.file import read_acl_file
from kafkaguard.policy.stores.zookeeper import (
    ZkAclClient,
    ZooKeeperAclStore,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    entry_json,
    node_bindings,
)
from tests.support.zookeeper import ZooKeeperFactory, ZooKeeperServer, unique_chroot

pytestmark = pytest.mark.timeout(60)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
T, G, C, TX = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)

# A resource znode (``ResourceZNode``, entries from ``AclEntry.toJsonCompatibleMap``), in the key
# order Kafka 3.9's AclAuthorizer really writes
# (HashMap order; tests/kafka/test_zookeeper_layout_kafka39.py compares with its znodes).
GOLDEN = (
    b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"},'
    b'{"principal":"User:*","permissionType":"Deny","host":"10.0.0.1",'
    b'"operation":"IdempotentWrite"}],"version":1}'
)
GOLDEN_EXTENDED_CHANGE = (
    b'{"version":1,"resourceType":"TOPIC","name":"z_other","patternType":"PREFIXED"}'
)


def acl(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    ptype: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm)
    )


StoreFactory = Callable[..., Awaitable[ZooKeeperAclStore]]


@pytest.fixture
async def zk_store(zookeeper: ZooKeeperServer, chroot: str) -> AsyncIterator[StoreFactory]:
    started: list[ZooKeeperAclStore] = []

    async def start(connect: str | None = None, **kwargs: Any) -> ZooKeeperAclStore:
        store = ZooKeeperAclStore(
            connect or zookeeper.connect, chroot=kwargs.pop("chroot", chroot), **kwargs
        )
        started.append(store)
        await store.start()
        return store

    try:
        yield start
    finally:
        for store in started:
            await store.close()


async def eventually(check: Callable[[], bool], timeout_s: float = 1.0) -> float:
    """Seconds until ``check()`` holds; fails after ``timeout_s``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


# -- formats (no ZooKeeper) ------------------------------------------------------------------


def test_encoding_matches_kafkas_golden_json() -> None:
    alice = AccessControlEntry("User:alice", "*", AclOperation.READ, ALLOW)
    anyone = AccessControlEntry("User:*", "10.0.0.1", AclOperation.IDEMPOTENT_WRITE, DENY)
    assert encode_acls([entry_json(alice), entry_json(anyone)]) == GOLDEN
    pattern = ResourcePattern(T, "z_other", PRE)
    assert encode_change(pattern) == GOLDEN_EXTENDED_CHANGE
    assert encode_change(ResourcePattern(T, "some-topic", LIT)) == b"TOPIC:some-topic"
    assert decode_change("/kafka-acl-extended-changes", GOLDEN_EXTENDED_CHANGE) == pattern
    # Older brokers wrote the PascalCase type; Kafka's decoder is case-insensitive.
    assert decode_change("/kafka-acl-changes", b"Topic:a:b") == ResourcePattern(T, "a:b", LIT)


def test_decoding_follows_kafkas_rules() -> None:
    # ZkData's scaladoc example: spaces, other key order.
    data = (
        b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow",'
        b'"operation": "Read","principal": "User:alice"}, {"host":"*","permissionType":"DENY",'
        b'"operation":"DESCRIBECONFIGS","principal":"User:bob"}, {"host":"*",'
        b'"permissionType":"Allow","operation":"describe_configs","principal":"User:carol"}]}'
    )
    pattern = ResourcePattern(T, "topic-1", LIT)
    got = node_bindings(pattern, decode_acls(data, "x"), "x")
    assert got == {
        acl(T, "topic-1", "User:alice", AclOperation.READ, host="host1"),
        acl(T, "topic-1", "User:bob", AclOperation.DESCRIBE_CONFIGS, DENY),
        # SecurityUtils.operation("describe_configs") is UNKNOWN: never matches, skipped.
    }
    assert decode_acls(b"", "x") == []  # an empty znode holds no ACLs
    with pytest.raises(AclStoreError, match="version"):
        decode_acls(b'{"version":2,"acls":[]}', "x")


# -- the store against ZooKeeper -------------------------------------------------------------


async def test_znodes_are_byte_compatible_with_kafka(
    zk_store: StoreFactory, raw_zk: Any, chroot: str
) -> None:
    store = await zk_store()
    # createAclPaths
    for path in ("/kafka-acl/TransactionalId", "/kafka-acl-extended/prefixed/DelegationToken"):
        assert raw_zk.exists(chroot + path) is not None
    await store.add([acl(C, "kafka-cluster", "User:alice", AclOperation.READ)])
    await store.add(
        [acl(C, "kafka-cluster", "User:*", AclOperation.IDEMPOTENT_WRITE, DENY, host="10.0.0.1")]
    )
    data, _ = raw_zk.get(chroot + "/kafka-acl/Cluster/kafka-cluster")
    assert data == GOLDEN
    await store.add([acl(T, "z_other", "User:bob", AclOperation.WRITE, ptype=PRE)])
    data, _ = raw_zk.get(chroot + "/kafka-acl-extended/prefixed/Topic/z_other")
    assert json.loads(data)["acls"] == [
        {"principal": "User:bob", "permissionType": "Allow", "operation": "Write", "host": "*"}
    ]
    literal = sorted(raw_zk.get_children(chroot + "/kafka-acl-changes"))
    assert all(c.startswith("acl_changes_") and len(c) == 22 for c in literal)
    payloads = [raw_zk.get(f"{chroot}/kafka-acl-changes/{c}")[0] for c in literal]
    assert payloads == [b"CLUSTER:kafka-cluster", b"CLUSTER:kafka-cluster"]
    (extended,) = raw_zk.get_children(chroot + "/kafka-acl-extended-changes")
    payload = raw_zk.get(f"{chroot}/kafka-acl-extended-changes/{extended}")[0]
    assert payload == GOLDEN_EXTENDED_CHANGE
    # Removing the last ACL of a resource deletes its znode.
    await store.remove([acl(T, "z_other", "User:bob", AclOperation.WRITE, ptype=PRE)])
    assert raw_zk.exists(chroot + "/kafka-acl-extended/prefixed/Topic/z_other") is None
    assert store.snapshot() == {
        acl(C, "kafka-cluster", "User:alice", AclOperation.READ),
        acl(C, "kafka-cluster", "User:*", AclOperation.IDEMPOTENT_WRITE, DENY, host="10.0.0.1"),
    }
    with pytest.raises(AclStoreError, match="cannot be stored"):
        await store.add([acl(G, "a/b", "User:x", AclOperation.READ)])


async def test_reads_acls_written_by_kafka_and_follows_its_notifications(
    zk_store: StoreFactory, raw_zk: Any, chroot: str
) -> None:
    def write(path: str, entries: list[dict[str, str]]) -> None:
        raw_zk.ensure_path(chroot + path.rsplit("/", 1)[0])
        raw_zk.create(chroot + path, json.dumps({"version": 1, "acls": entries}).encode())

    def entry(principal: str, op: str, perm: str = "Allow", host: str = "*") -> dict[str, str]:
        return {"principal": principal, "permissionType": perm, "operation": op, "host": host}

    write("/kafka-acl/Topic/orders", [entry("User:alice", "Read"), entry("User:x", "Frobnicate")])
    write("/kafka-acl/Topic/*", [entry("User:ops", "DESCRIBE", "ALLOW")])
    write("/kafka-acl/Cluster/kafka-cluster", [entry("User:*", "IdempotentWrite", "Deny")])
    write("/kafka-acl-extended/prefixed/Group/group-", [entry("User:bob", "DescribeConfigs")])
    write("/kafka-acl/Widget/w", [entry("User:bob", "Read")])  # unknown type dir: ignored
    store = await zk_store()
    assert store.snapshot() == {
        acl(T, "orders", "User:alice", AclOperation.READ),
        acl(T, "*", "User:ops", AclOperation.DESCRIBE),
        acl(C, "kafka-cluster", "User:*", AclOperation.IDEMPOTENT_WRITE, DENY),
        acl(G, "group-", "User:bob", AclOperation.DESCRIBE_CONFIGS, ptype=PRE),
    }

    # A broker's AclAuthorizer changes a resource: conditional setData, then a notification
    # (older brokers wrote the PascalCase type in the payload).
    data, stat = raw_zk.get(chroot + "/kafka-acl/Topic/orders")
    doc = json.loads(data)
    doc["acls"].append(entry("User:carol", "Write"))
    raw_zk.set(chroot + "/kafka-acl/Topic/orders", json.dumps(doc).encode(), version=stat.version)
    raw_zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"Topic:orders", sequence=True)
    write("/kafka-acl-extended/prefixed/TransactionalId/tx-", [entry("User:dan", "Write")])
    raw_zk.create(
        chroot + "/kafka-acl-extended-changes/acl_changes_",
        b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx-","patternType":"PREFIXED"}',
        sequence=True,
    )
    carol = acl(T, "orders", "User:carol", AclOperation.WRITE)
    dan = acl(TX, "tx-", "User:dan", AclOperation.WRITE, ptype=PRE)
    await eventually(lambda: {carol, dan} <= store.snapshot())

    # Our write to that znode keeps the entry we cannot interpret, for the tool that wrote it.
    await store.remove([carol])
    data, _ = raw_zk.get(chroot + "/kafka-acl/Topic/orders")
    assert json.loads(data)["acls"] == [entry("User:alice", "Read"), entry("User:x", "Frobnicate")]


async def test_two_stores_converge_within_a_second(zk_store: StoreFactory) -> None:
    a, b = await zk_store(), await zk_store()
    binding = acl(T, "live", "User:alice", AclOperation.READ)
    await a.add([binding])
    assert binding in a.snapshot()  # the writer's own view is updated before add() returns
    seen = await eventually(lambda: binding in b.snapshot())
    await b.remove([binding])
    gone = await eventually(lambda: binding not in a.snapshot())
    print(f"propagation: add {seen * 1000:.1f} ms, remove {gone * 1000:.1f} ms")
    assert seen < 1.0 and gone < 1.0


async def test_concurrent_writers_do_not_lose_updates(
    zk_store: StoreFactory, zookeeper: ZooKeeperServer, chroot: str
) -> None:
    a, b = await zk_store(), await zk_store()
    # A third writer outside any store, the way `kafkaguard acls` writes.
    cli = ZkAclClient(zookeeper.connect, chroot=chroot)
    cli.start()

    def shared(i: int, who: str) -> AclBinding:
        return acl(T, "shared", f"User:{who}-{i}", AclOperation.READ)

    def cli_writer() -> None:
        for i in range(15):
            cli.write([shared(i, "cli")], [])

    thread = threading.Thread(target=cli_writer)
    try:
        thread.start()
        await asyncio.gather(
            *(a.add([shared(i, "a")]) for i in range(15)),
            *(b.add([shared(i, "b")]) for i in range(15)),
        )
        await asyncio.to_thread(thread.join, 30)
        expected = {shared(i, who) for i in range(15) for who in ("a", "b", "cli")}
        assert cli.snapshot() == expected
        await eventually(lambda: a.snapshot() == expected and b.snapshot() == expected)
    finally:
        cli.stop()


async def test_outage_keeps_acls_refuses_writes_and_resyncs(
    zookeeper_factory: ZooKeeperFactory,
) -> None:
    server = zookeeper_factory()
    chroot = unique_chroot()
    kept = acl(T, "orders", "User:alice", AclOperation.READ)
    store = ZooKeeperAclStore(server.connect, chroot=chroot, session_timeout_s=6)
    other = ZkAclClient(server.connect, chroot=chroot)
    try:
        await store.start()
        await store.add([kept])
        # A write whose notification the proxy never sees (as if it was missed): only a
        # full resync can pick it up.
        other.start()
        missed = acl(T, "missed", "User:bob", AclOperation.READ)
        other.zk.create(chroot + "/kafka-acl/Topic/missed", encode_acls([entry_json(missed.entry)]))
        other.stop()

        server.stop()
        await eventually(lambda: not store.connected, 10)
        assert store.snapshot() == {kept}  # never fail open, never drop to empty
        started = time.monotonic()
        with pytest.raises(AclStoreError, match="not connected"):
            await store.add([acl(T, "new", "User:carol", AclOperation.READ)])
        assert time.monotonic() - started < 3.0  # refused at once, not at session timeout

        server.start()
        await eventually(lambda: store.connected and store.resyncs >= 1, 15)
        await eventually(lambda: store.snapshot() == {kept, missed}, 5)
        await store.add([acl(T, "new", "User:carol", AclOperation.READ)])
        assert len(store.snapshot()) == 3
    finally:
        await store.close()


# -- configuration and the CLI ---------------------------------------------------------------


def test_config_builds_a_zookeeper_store(tmp_path: Path) -> None:
    (tmp_path / "zk.jaas").write_text('Client { x required username="kg" password="s3"; };')
    cfg_file = tmp_path / "p.yaml"
    cfg_file.write_text(
        "acl_store:\n  type: zookeeper\n  connect: 127.0.0.1:2181\n  chroot: /kafka\n"
        "  digest_auth_file: zk.jaas\n  session_timeout_s: 6\n"
    )
    cfg = parse_policy_config(ConfigSection.from_file(cfg_file)).acl_store
    assert (cfg.type, cfg.connect, cfg.chroot, cfg.session_timeout_s) == (
        "zookeeper",
        "127.0.0.1:2181",
        "/kafka",
        6.0,
    )
    assert cfg.digest_auth_file == tmp_path / "zk.jaas"
    store = build_store(cfg)
    assert isinstance(store, ZooKeeperAclStore)
    assert store.description == "zookeeper 127.0.0.1:2181/kafka"
    with pytest.raises(ConfigError, match="connect"):
        parse_policy_config(ConfigSection.from_text("acl_store:\n  type: zookeeper\n"))


def run_cli(*argv: str) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser()
    acls_cli.add_arguments(parser)
    lines: list[str] = []
    code = acls_cli.run(parser.parse_args(list(argv)), lines.append)
    return code, lines


def test_acls_cli_and_migrate_round_trip(
    zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    zk = ("--zookeeper-connect", zookeeper.connect, "--zookeeper-chroot", chroot)
    original = {
        acl(T, "orders", "User:alice", AclOperation.READ),
        acl(T, "ord", "User:bob", AclOperation.WRITE, DENY, PRE, host="10.0.0.1"),
        acl(C, "kafka-cluster", "User:ops", AclOperation.ALTER),
        acl(TX, "tx", "User:app", AclOperation.DESCRIBE),
    }
    source = tmp_path / "acls.yaml"
    source.write_text(format_acl_text(original))
    code, out = run_cli(
        "migrate", "--from", "file", "--to", "zookeeper", "--acl-file", str(source), *zk
    )
    assert code == 0, out
    assert out == [
        f"Copied 4 ACLs from file {source} to zookeeper {zookeeper.connect}{chroot} "
        "(4 new, 0 already present)."
    ]
    # The CLI edits ZooKeeper directly, in Kafka's layout.
    code, out = run_cli(*zk, "--add", "--allow-principal", "User:eve", "--group", "g1")
    assert code == 0
    code, out = run_cli(*zk, "--list", "--group", "g1")
    assert out == [
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g1, "
        "patternType=LITERAL)`:\n\t(principal=User:eve, host=*, operation=ALL, "
        "permissionType=ALLOW)\n"
    ]
    code, _ = run_cli(*zk, "--remove", "--force", "--group", "g1")
    assert code == 0
    back = tmp_path / "back.yaml"
    code, out = run_cli(
        "migrate", "--from", "zookeeper", "--to", "file", "--acl-file", str(back), *zk
    )
    assert code == 0, out
    assert read_acl_file(back)[0] == original
    code, _ = run_cli("migrate", "--from", "file", "--to", "file", "--acl-file", str(back))
    assert code == 2
