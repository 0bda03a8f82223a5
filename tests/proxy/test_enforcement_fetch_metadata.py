"""End to end through kafkaguard in front of Tansu: Metadata and Fetch as real clients see them.

``User:ANONYMOUS`` (every PLAINTEXT client) may READ one topic only; records are produced to
both topics through a second, allow-all proxy.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from kio.schema.fetch.v12 import request as req12

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
from tests.support.raw_client import RawKafkaClient

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


@pytest.fixture
def topics(proxy: RunningProxy) -> Iterator[tuple[str, str]]:
    allowed, denied = unique_name("ok"), unique_name("secret")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for future in admin.create_topics([NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": proxy.bootstrap})
    for name in (allowed, denied):
        producer.produce(name, value=f"hello {name}".encode())
    assert producer.flush(15) == 0
    yield allowed, denied
    for future in admin.delete_topics([allowed, denied]).values():
        future.result(15)


@pytest.fixture
def restricted(topics: tuple[str, str], enforcing_proxy: StartEnforcingProxy) -> RunningProxy:
    read = AclBinding(
        ResourcePattern(ResourceType.TOPIC, topics[0], PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    return enforcing_proxy([read])


def test_metadata_hides_and_denies_topics_without_describe(
    restricted: RunningProxy, topics: tuple[str, str]
) -> None:
    allowed, denied = topics
    admin = AdminClient({"bootstrap.servers": restricted.bootstrap})
    listed = admin.list_topics(timeout=15).topics
    assert allowed in listed and denied not in listed
    named = admin.list_topics(topic=denied, timeout=15).topics[denied]
    assert named.error is not None
    assert named.error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_reads_allowed_topic_and_mixed_fetch_gets_29_per_partition(
    restricted: RunningProxy, topics: tuple[str, str]
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    allowed, denied = topics
    consumer = KafkaConsumer(
        bootstrap_servers=restricted.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        consumer.assign([TopicPartition(allowed, 0)])
        consumer.seek_to_beginning()  # ListOffsets through the proxy
        values: list[bytes] = []
        for _ in range(20):
            records = consumer.poll(timeout_ms=500)
            values += [r.value for batch in records.values() for r in batch]
            if values:
                break
        assert values == [f"hello {allowed}".encode()]
    finally:
        consumer.close()

    # A client that skips Metadata and fetches both topics at once: the broker only ever sees
    # the allowed topic; the other one comes back 29 with no records.
    host, port = restricted.bootstrap.rsplit(":", 1)
    with RawKafkaClient(host, int(port)) as client:
        _, response = client.request(
            req12.FetchRequest(
                max_wait=timedelta(milliseconds=100),
                min_bytes=1,
                topics=tuple(
                    req12.FetchTopic(
                        topic=name,
                        partitions=(
                            req12.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            ),
                        ),
                    )
                    for name in (denied, allowed)
                ),
                forgotten_topics_data=(),
            )
        )
    got = {
        t.topic: (int(p.error_code), bool(p.records))
        for t in response.responses
        for p in t.partitions
    }
    assert got == {denied: (29, False), allowed: (0, True)}
