"""kafkaguard's ZooKeeper ACL layout against the real thing: Kafka 3.9.2's AclAuthorizer.

Kafka 3.9 is the last release with ZooKeeper ACLs; its ``kafka.admin.AclCommand
--authorizer-properties zookeeper.connect=<zk>/<chroot>`` (``kafka-acls.sh`` without
``--bootstrap-server``) loads ``kafka.security.authorizer.AclAuthorizer`` on the given ZooKeeper
and edits ``/kafka-acl*`` itself. Both directions are checked on Debian's ZooKeeper:

* Kafka writes → kafkaguard reads: ACLs the tool adds (literal and prefixed, allow and deny,
  topic/group/transactional id, host-specific) reach a *running* proxy through Kafka's change
  notifications, equal exactly what the tool wrote, and are enforced (a host-specific prefixed
  ALLOW for ``User:ANONYMOUS`` from 127.0.0.1); the tool's removal is picked up the same way.
* kafkaguard writes → Kafka reads: ACLs added and removed by ``kafkaguard acls`` and by
  :class:`ZooKeeperAclStore` (the path CreateAcls/DeleteAcls take) are listed exactly by the
  tool, and a long-running Kafka 3.9 ``AclAuthorizer`` (a small Java program, run in the JVM's
  source-file mode, that prints its ACL cache whenever it changes) follows every add and
  remove: it only ever re-reads a znode when a change notification names it, so this proves
  kafkaguard's notifications are ones Kafka consumes.

The resource znodes kafkaguard writes are byte-identical to Kafka's (whose JSON comes from a
HashMap: ``{"acls":[{"principal":..,"permissionType":..,"host":..,"operation":..}],
"version":1}``: the HashMap's key order, not the order the keys are put in); the first test
checks the bytes.
Six JVM runs in all. Needs Debian's ``zookeeper`` (skips without it, like the other ZooKeeper
tests), Kafka 3.9.2's jars, and a JDK for the source-file program (skipped without one outside
CI, failed in CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkaguard.policy import acls_cli
from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.zookeeper import (
    ZkAclClient,
    ZooKeeperAclStore,
    decode_acls,
    encode_acls,
)
from kafkaguard.tansu import TansuBroker
from tests.support.kafka_broker import (
    TOOL_JVM_OPTS,
    cache_dir,
    log_config_args,
    require_kafka,
    run_kafka_tool,
)
from tests.support.proxy_fixture import (
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

KAFKA_39 = "3.9.2"
ACL_COMMAND_39 = "kafka.admin.AclCommand"

Row = tuple[str, ...]
"""(resourceType, name, patternType, principal, host, operation, permissionType), Kafka's
enum names: how both sides' ACLs are compared."""


def row(binding: AclBinding) -> Row:
    p, e = binding.pattern, binding.entry
    return (
        p.resource_type.name, p.name, p.pattern_type.name,
        e.principal, e.host, e.operation.name, e.permission_type.name,
    )  # fmt: skip


def rows(bindings: Iterable[AclBinding]) -> set[Row]:
    return {row(b) for b in bindings}


_HEADER = re.compile(
    r"^Current ACLs for resource `ResourcePattern\(resourceType=(\w+), name=(.*), "
    r"patternType=(\w+)\)`:\s*$"
)
_ENTRY = re.compile(r"^\s*\(principal=(.*), host=(.*), operation=(\w+), permissionType=(\w+)\)\s*$")


def parse_listing(stdout: str) -> set[Row]:
    """``--list`` output (Kafka's or ``kafkaguard acls``') as rows; any other line fails."""
    out: set[Row] = set()
    pattern: tuple[str, str, str] | None = None
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if header := _HEADER.match(line):
            pattern = (header[1], header[2], header[3])
        elif (entry := _ENTRY.match(line)) and pattern is not None:
            out.add((*pattern, entry[1], entry[2], entry[3], entry[4]))
        else:
            raise AssertionError(f"unexpected line in the ACL listing: {line!r}\n{stdout}")
    return out


def kafka39_acls(connect: str, *args: str) -> str:
    """Kafka 3.9's ZooKeeper-based kafka-acls; its stdout (it must succeed)."""
    result = run_kafka_tool(
        ACL_COMMAND_39,
        "--authorizer-properties",
        f"zookeeper.connect={connect}",
        *args,
        version=KAFKA_39,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def kafkaguard_acls(*argv: str) -> list[str]:
    """``kafkaguard acls ...`` in process; its output lines (it must succeed)."""
    parser = argparse.ArgumentParser()
    acls_cli.add_arguments(parser)
    lines: list[str] = []
    assert acls_cli.run(parser.parse_args(list(argv)), out=lines.append) == 0
    return lines


def acl(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = AclPermissionType.ALLOW,
    ptype: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm)
    )


def wait_until(
    check: Callable[[], bool], describe: Callable[[], object], timeout_s: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s: {describe()}")
        time.sleep(0.05)


# -- Kafka writes, kafkaguard reads -------------------------------------------------------------


def produce_error(bootstrap: str, topic: str) -> int | None:
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "log_level": 0}
    )
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report within 15 s"
    return None if outcome[0] is None else int(outcome[0].code())


def test_acls_written_by_kafka39_are_read_live_and_enforced(
    zookeeper: ZooKeeperServer, chroot: str, tansu: TansuBroker, raw_zk: Any
) -> None:
    require_kafka(KAFKA_39)
    connect = zookeeper.connect + chroot
    prefix = unique_name("zk39") + "-"
    topic = prefix + "orders"
    admin = AdminClient({"bootstrap.servers": str(tansu.address), "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    policy = PolicyConfig(
        authorizer=AuthorizerConfig(),
        acl_store=AclStoreConfig(type="zookeeper", connect=zookeeper.connect, chroot=chroot),
    )
    proxy = start_proxy_thread(proxy_config(tansu.address, policy=policy))
    try:
        authorizer = proxy.server.authorizer
        assert authorizer is not None

        def in_force() -> set[Row]:
            return rows(authorizer.acls(AclBindingFilter.ANY))

        assert in_force() == set()
        assert produce_error(proxy.bootstrap, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

        kafka39_acls(
            connect, "--add",
            "--allow-principal", "User:alice", "--allow-host", "10.0.0.1",
            "--deny-principal", "User:bob", "--deny-host", "10.0.0.7",
            "--operation", "Read", "--operation", "Describe",
            "--topic", "orders", "--group", "readers",
        )  # fmt: skip
        kafka39_acls(
            connect, "--add", "--resource-pattern-type", "prefixed",
            "--allow-principal", "User:carol", "--allow-principal", "User:ANONYMOUS",
            "--allow-host", "127.0.0.1", "--operation", "Write",
            "--topic", prefix, "--transactional-id", "tx-",
        )  # fmt: skip
        anonymous_write = (
            "TOPIC", prefix, "PREFIXED", "User:ANONYMOUS", "127.0.0.1", "WRITE", "ALLOW",
        )  # fmt: skip
        expected = {
            (rtype, name, "LITERAL", principal, host, op, perm)
            for rtype, name in (("TOPIC", "orders"), ("GROUP", "readers"))
            for principal, host, perm in (
                ("User:alice", "10.0.0.1", "ALLOW"),
                ("User:bob", "10.0.0.7", "DENY"),
            )
            for op in ("READ", "DESCRIBE")
        } | {
            (rtype, name, "PREFIXED", principal, "127.0.0.1", "WRITE", "ALLOW")
            for rtype, name in (("TOPIC", prefix), ("TRANSACTIONAL_ID", "tx-"))
            for principal in ("User:carol", "User:ANONYMOUS")
        }
        assert len(expected) == 12 and anonymous_write in expected
        # The running proxy learns them from Kafka's change notifications...
        wait_until(lambda: in_force() == expected, in_force)
        # ...and a full load (a proxy starting now) reads the same.
        fresh = ZkAclClient(zookeeper.connect, chroot=chroot)
        fresh.start()
        try:
            assert rows(fresh.snapshot()) == expected
        finally:
            fresh.stop()
        assert produce_error(proxy.bootstrap, topic) is None  # the host-specific ALLOW
        # kafkaguard writes a resource znode with the very bytes Kafka's AclAuthorizer wrote.
        for path in (f"{chroot}/kafka-acl/Topic/orders", f"{chroot}/kafka-acl/Group/readers"):
            written, _ = raw_zk.get(path)
            assert encode_acls(decode_acls(written, path)) == written

        kafka39_acls(
            connect, "--remove", "--force", "--resource-pattern-type", "prefixed",
            "--allow-principal", "User:ANONYMOUS", "--allow-host", "127.0.0.1",
            "--operation", "Write", "--topic", prefix,
        )  # fmt: skip
        wait_until(lambda: in_force() == expected - {anonymous_write}, in_force)
        assert produce_error(proxy.bootstrap, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        stop_proxy_thread(proxy)
        admin.delete_topics([topic])[topic].result(15)


# -- kafkaguard writes, Kafka reads -------------------------------------------------------------

WATCHER = """\
import java.util.*;
import kafka.security.authorizer.AclAuthorizer;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;

/** Kafka 3.9's AclAuthorizer on a ZooKeeper chroot, printing its ACL cache (which only
 *  change notifications update) whenever it changes; exits when stdin closes or after args[1]
 *  seconds. */
public class AclWatch {
    static volatile boolean done = false;

    public static void main(String[] args) throws Exception {
        Thread stdin = new Thread(() -> {
            try { while (System.in.read() != -1) { } } catch (java.io.IOException e) { }
            done = true;
        });
        stdin.setDaemon(true);
        stdin.start();
        AclAuthorizer authorizer = new AclAuthorizer();
        authorizer.configure(Map.of("zookeeper.connect", args[0]));
        long deadline = System.currentTimeMillis() + Long.parseLong(args[1]) * 1000L;
        String last = null;
        try {
            while (!done && System.currentTimeMillis() < deadline) {
                List<String> lines = new ArrayList<>();
                for (AclBinding b : authorizer.acls(AclBindingFilter.ANY)) {
                    lines.add(String.join("|", b.pattern().resourceType().name(),
                        b.pattern().name(), b.pattern().patternType().name(),
                        b.entry().principal(), b.entry().host(),
                        b.entry().operation().name(), b.entry().permissionType().name()));
                }
                Collections.sort(lines);
                String now = String.join("\\n", lines);
                if (!now.equals(last)) {
                    StringBuilder out = new StringBuilder();
                    lines.forEach(l -> out.append("ACL ").append(l).append('\\n'));
                    System.out.print(out.append("END\\n"));
                    System.out.flush();
                    last = now;
                }
                Thread.sleep(50);
            }
        } finally {
            authorizer.close();
        }
    }
}
"""


def java_compiler_missing() -> str | None:
    """Source-file mode (``java Foo.java``) needs the JDK's jdk.compiler module."""
    try:
        modules = subprocess.run(
            ["java", "--list-modules"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run java: {exc}"
    if "jdk.compiler@" not in modules:
        return "the Java runtime has no jdk.compiler (install a JDK: openjdk-17-jdk-headless)"
    return None


class AclAuthorizerWatch:
    """Kafka 3.9's AclAuthorizer in its own JVM; :meth:`wait_for` its cache to hold rows."""

    LIFETIME_S = 180

    def __init__(self, tmp: Path, connect: str) -> None:
        source = tmp / "AclWatch.java"
        source.write_text(WATCHER, encoding="utf-8")
        self.stderr_path = tmp / "acl-watch.stderr"
        classpath = require_kafka(KAFKA_39)
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [
                    "java", *TOOL_JVM_OPTS,
                    *log_config_args(cache_dir(), level="warn", to_stderr=True),
                    "-cp", classpath, str(source), connect, str(self.LIFETIME_S),
                ],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        self.snapshots: queue.Queue[set[Row]] = queue.Queue()
        self.latest: set[Row] | None = None
        threading.Thread(target=self._read, name="acl-watch", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        current: set[Row] = set()
        for line in self.proc.stdout:
            if line.startswith("ACL "):
                fields = line[4:].rstrip("\n").split("|")
                assert len(fields) == 7, line
                current.add(tuple(fields))
            elif line.strip() == "END":
                self.snapshots.put(current)
                current = set()

    def wait_for(self, expected: set[Row], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.latest != expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.proc.poll() is not None:
                raise AssertionError(
                    f"Kafka's AclAuthorizer holds {self.latest}, expected {expected}\n"
                    + self.stderr_path.read_text(errors="replace")[-3000:]
                )
            try:
                self.latest = self.snapshots.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue

    def stop(self) -> None:
        """Closing stdin ends the program (it closes the authorizer); killed after a bound."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def acl_authorizer_39(
    zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path
) -> Iterator[AclAuthorizerWatch]:
    require_kafka(KAFKA_39)
    reason = java_compiler_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    watch = AclAuthorizerWatch(tmp_path, zookeeper.connect + chroot)
    try:
        yield watch
    finally:
        watch.stop()


async def store_change(
    zookeeper: ZooKeeperServer,
    chroot: str,
    add: Iterable[AclBinding] = (),
    remove: Iterable[AclBinding] = (),
) -> None:
    """One change through ZooKeeperAclStore, the store a proxy's CreateAcls/DeleteAcls use."""
    store = ZooKeeperAclStore(zookeeper.connect, chroot=chroot)
    await store.start()
    try:
        if add:
            await store.add(list(add))
        if remove:
            await store.remove(list(remove))
    finally:
        await store.close()


def test_acls_written_by_kafkaguard_are_consumed_and_listed_by_kafka39(
    zookeeper: ZooKeeperServer, chroot: str, acl_authorizer_39: AclAuthorizerWatch, raw_zk: Any
) -> None:
    connect = zookeeper.connect + chroot
    acl_authorizer_39.wait_for(set())  # loaded (and created Kafka's paths under the chroot)

    T, G, TX, U = (
        ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.USER,
    )  # fmt: skip
    op, perm, pre = AclOperation, AclPermissionType, PatternType.PREFIXED
    deny_write = acl(T, "payments", "User:*", op.WRITE, perm.DENY)
    transactional = acl(TX, "tx-1", "User:alice", op.WRITE)
    by_store = [
        acl(T, "payments", "User:alice", op.READ, host="192.168.0.10"),
        deny_write,
        acl(G, "team-", "User:bob", op.READ, ptype=pre),
        acl(T, "team-", "User:mallory", op.ALL, perm.DENY, ptype=pre),
        transactional,
        acl(U, "User:carol", "User:bob", op.DESCRIBE_TOKENS),
    ]
    kafkaguard_acls(
        "--zookeeper-connect", connect, "--add", "--allow-principal", "User:admin",
        "--operation", "Alter", "--operation", "Describe", "--cluster",
    )  # fmt: skip
    asyncio.run(store_change(zookeeper, chroot, add=by_store))
    expected = rows(by_store) | {
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:admin", "*", op_name, "ALLOW")
        for op_name in ("ALTER", "DESCRIBE")
    }
    assert len(expected) == 8

    acl_authorizer_39.wait_for(expected)  # Kafka consumed kafkaguard's notifications
    assert parse_listing(kafka39_acls(connect, "--list")) == expected
    assert parse_listing("\n".join(kafkaguard_acls("--zookeeper-connect", connect, "--list"))) == (
        expected
    )

    # Removal: one entry of a shared znode (CLI), the last entry of another (store: the znode
    # goes away, as Kafka does it).
    kafkaguard_acls(
        "--zookeeper-connect", connect, "--remove", "--force",
        "--deny-principal", "User:*", "--operation", "Write", "--topic", "payments",
    )  # fmt: skip
    asyncio.run(store_change(zookeeper, chroot, remove=[transactional]))
    assert raw_zk.exists(f"{chroot}/kafka-acl/TransactionalId/tx-1") is None
    assert raw_zk.exists(f"{chroot}/kafka-acl/Topic/payments") is not None
    remaining = expected - rows([deny_write, transactional])
    acl_authorizer_39.wait_for(remaining)
    assert parse_listing(kafka39_acls(connect, "--list")) == remaining
