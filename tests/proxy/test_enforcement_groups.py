"""End to end through kafkaguard in front of Tansu: group authorization as real clients see it.

``User:ANONYMOUS`` (every PLAINTEXT client) gets READ on the groups prefixed ``ok-`` and on the
test topic only; the setup goes through a second, allow-all proxy.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkaguard.policy.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.support.proxy_fixture import RunningProxy, StartEnforcingProxy, unique_name

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _allow(
    resource_type: ResourceType, name: str, op: AclOperation, prefixed: bool = False
) -> AclBinding:
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW),
    )


@pytest.fixture
def topic(proxy: RunningProxy) -> Iterator[str]:
    name = unique_name("grp")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    yield name
    admin.delete_topics([name])[name].result(15)


@pytest.fixture
def guarded(topic: str, enforcing_proxy: StartEnforcingProxy) -> RunningProxy:
    return enforcing_proxy(
        [
            _allow(ResourceType.GROUP, "ok-", AclOperation.READ, prefixed=True),
            _allow(ResourceType.TOPIC, topic, AclOperation.READ),
        ]
    )


def test_offsets_and_group_listing_follow_group_acls(guarded: RunningProxy, topic: str) -> None:
    from confluent_kafka import (
        ConsumerGroupTopicPartitions,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    admin = AdminClient({"bootstrap.servers": guarded.bootstrap})
    allowed, denied = unique_name("ok-g"), unique_name("no-g")

    # Commit through an allowed group: READ GROUP + READ TOPIC.
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": guarded.bootstrap, "group.id": allowed, "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(allowed)])[
        allowed
    ].result(15)
    assert [(tp.topic, tp.offset, tp.error) for tp in fetched.topic_partitions] == [
        (topic, 0, None)
    ]

    # A group without ACLs: FindCoordinator already answers GROUP_AUTHORIZATION_FAILED.
    with pytest.raises(KafkaException) as info:
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(denied)])[denied].result(15)
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # ListGroups never fails; it lists only groups the principal may DESCRIBE.
    listed = admin.list_consumer_groups().result(15)
    ids = {g.group_id for g in listed.valid}
    assert allowed in ids
    assert all(g.startswith("ok-") for g in ids)
