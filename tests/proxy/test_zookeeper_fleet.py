"""Issue 6, done-when: two kafkaguard instances on one ZooKeeper, ACLs managed with a standard
AdminClient (confluent-kafka) through either one, enforced by both within a second.

The PLAINTEXT client is ``User:ANONYMOUS``; it may ALTER the cluster (so it can manage ACLs)
but starts without any right on the topic, so a produce fails with TOPIC_AUTHORIZATION_FAILED
until an ACL created through the *other* proxy arrives via ZooKeeper.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkaguard.policy.config import AclStoreConfig, AuthorizerConfig, PolicyConfig
from kafkaguard.policy.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.stores.zookeeper import ZkAclClient
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.zookeeper import ZooKeeperServer, unique_chroot

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AclBinding as CkAclBinding  # noqa: E402
from confluent_kafka.admin import AclBindingFilter as CkAclBindingFilter  # noqa: E402
from confluent_kafka.admin import AclOperation as CkOp  # noqa: E402
from confluent_kafka.admin import AclPermissionType as CkPerm  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, ResourcePatternType  # noqa: E402
from confluent_kafka.admin import ResourceType as CkType  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture
def fleet(
    zookeeper: ZooKeeperServer, proxy: RunningProxy, tansu: TansuBroker
) -> Iterator[tuple[RunningProxy, RunningProxy, str]]:
    """Two enforcing proxies sharing one ZooKeeper chroot, and a topic that exists."""
    topic = unique_name("fleet")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})  # the allow-all proxy
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    chroot = unique_chroot()
    seed = ZkAclClient(zookeeper.connect, chroot=chroot)
    seed.start()
    seed.write(
        [
            AclBinding(
                ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                AccessControlEntry(ANONYMOUS, "*", AclOperation.ALTER, AclPermissionType.ALLOW),
            )
        ],
        [],
    )
    seed.stop()
    policy = PolicyConfig(
        authorizer=AuthorizerConfig(),
        acl_store=AclStoreConfig(type="zookeeper", connect=zookeeper.connect, chroot=chroot),
    )
    started = []
    try:
        for _ in range(2):
            started.append(start_proxy_thread(proxy_config(tansu.address, policy=policy)))
        yield started[0], started[1], topic
    finally:
        for running in started:
            stop_proxy_thread(running)
        admin.delete_topics([topic])[topic].result(15)


def produce_error(proxy: RunningProxy, topic: str) -> int | None:
    """Produce one record through ``proxy`` with a fresh producer; the delivery error code."""
    producer = Producer(
        {"bootstrap.servers": proxy.bootstrap, "message.timeout.ms": 10000, "log_level": 0}
    )
    box: dict[str, Any] = {}
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: box.setdefault("err", err))
    producer.flush(15)
    err = box["err"]
    return None if err is None else int(err.code())


def topic_acls(topic: str) -> list[Any]:
    return [
        CkAclBinding(
            CkType.TOPIC, topic, ResourcePatternType.LITERAL, ANONYMOUS, "*", op, CkPerm.ALLOW
        )
        for op in (CkOp.WRITE, CkOp.DESCRIBE)
    ]


def acls_seen(proxy: RunningProxy, topic: str) -> int:
    flt = ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL).to_filter()
    authorizer: Any = proxy.server.authorizer
    return len(authorizer.acls(AclBindingFilter(flt, AccessControlEntryFilter.ANY)))


def wait_for(check: Any, start: float, timeout_s: float = 2.0) -> float:
    """Seconds from ``start`` (the admin request was sent) until ``check()`` holds."""
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not propagated within {timeout_s} s")
        time.sleep(0.001)
    return time.monotonic() - start


def test_two_proxies_converge_on_acl_changes_within_a_second(
    fleet: tuple[RunningProxy, RunningProxy, str],
) -> None:
    a, b, topic = fleet
    assert produce_error(b, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.list_topics(timeout=15)  # connected, so the timing below is the change alone
    bindings = topic_acls(topic)
    sent = time.monotonic()
    for future in admin_a.create_acls(bindings).values():
        assert future.result(20) is None
    acked = time.monotonic() - sent
    assert acls_seen(a, topic) == 2  # the proxy that wrote it enforces it at once
    added = wait_for(lambda: acls_seen(b, topic) == 2, sent)
    assert produce_error(b, topic) is None  # the next request through B is authorized

    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    flt = CkAclBindingFilter(
        CkType.TOPIC, topic, ResourcePatternType.ANY, None, None, CkOp.ANY, CkPerm.ANY
    )
    admin_b.list_topics(timeout=15)
    sent = time.monotonic()
    deleted = admin_b.delete_acls([flt])[flt].result(20)
    assert len(deleted) == 2
    removed = wait_for(lambda: acls_seen(a, topic) == 0, sent)
    assert produce_error(a, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    print(
        f"CreateAcls via A acked in {acked * 1000:.1f} ms, enforced by B {added * 1000:.1f} ms "
        f"after sending; DeleteAcls via B enforced by A {removed * 1000:.1f} ms after sending"
    )
    assert added < 1.0 and removed < 1.0
