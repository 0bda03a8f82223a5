"""End to end: unmodified confluent-kafka, kafka-python and aiokafka clients, through kafkaguard,
to a real Tansu broker (issue 2, "Tests that must exist", first bullet).

Each test walks one client library through the whole life of a topic — create it with the
admin client, produce, consume with a consumer group, list offsets, describe the cluster and
the topic's configs, delete it — and asserts real outcomes: the exact records come back in
order, offsets equal the record counts, the cluster description names only the proxy, the
topic is gone after deletion.

Tansu quirk designed around: its ListOffsets(LATEST) answers "base offset of the last *batch*
+ 1", so a 5-record batch reports a high watermark of 1. Records are therefore produced one
per batch (each send awaited) wherever offsets are asserted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafkaguard.proxy.app.server import ProxyServer
from tests.support.proxy_fixture import SESSION_TIMEOUT_MS, RunningProxy, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

NODE_ID = 111
"""Tansu's fixed node id."""
RECORDS = 7
RETENTION_MS = "3600123"
"""A non-default topic config set at creation and read back with DescribeConfigs."""
DEADLINE_S = 30.0


def _records(tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(RECORDS)]


def _proxy_node_address(server: ProxyServer) -> tuple[str, int]:
    address = server.listeners[0].node_ports.advertised_node(NODE_ID)
    assert address is not None, "the proxy never learned Tansu's node"
    return address


def _wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


# -- confluent-kafka ------------------------------------------------------------------------


@pytest.fixture
def confluent_admin(proxy: RunningProxy) -> Iterator[Any]:
    from confluent_kafka.admin import AdminClient

    yield AdminClient({"bootstrap.servers": proxy.bootstrap, "log_level": 3})


def test_confluent_kafka_lifecycle(proxy: RunningProxy, confluent_admin: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

    admin = confluent_admin
    topic, group = unique_name("ck"), unique_name("ck-group")

    # create
    futures = admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=2, replication_factor=1, config={"retention.ms": RETENTION_MS}
            )
        ],
        request_timeout=10,
    )
    assert futures[topic].result(timeout=15) is None
    metadata = admin.list_topics(topic=topic, timeout=10)
    assert sorted(metadata.topics[topic].partitions) == [0, 1]
    proxy_host, proxy_port = _proxy_node_address(proxy.server)
    assert {(b.id, b.host, b.port) for b in metadata.brokers.values()} == {
        (NODE_ID, proxy_host, proxy_port)
    }

    # produce: one record per request, so Tansu's high watermark is exact
    records = _records(topic)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "log_level": 3})
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=on_delivery)
        assert producer.flush(10) == 0
    assert delivered == [(0, offset) for offset in range(RECORDS)]

    # consume with a consumer group
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1000,
            "log_level": 3,
        }
    )
    try:
        consumer.subscribe([topic])
        received: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        assert received == [(0, i, k, v) for i, (k, v) in enumerate(records)]
        assert {tp.partition for tp in consumer.assignment()} == {0, 1}

        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == RECORDS

        # list offsets
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, RECORDS)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 0)
        by_time = consumer.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert by_time[0].error is None
        assert by_time[0].offset == 0
    finally:
        consumer.close()

    # describe cluster: only the proxy's address for the node
    cluster = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert cluster.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(NODE_ID, proxy_host, proxy_port)]
    assert cluster.controller is not None
    assert (cluster.controller.host, cluster.controller.port) == (proxy_host, proxy_port)

    # describe configs
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=15)
    assert configs["retention.ms"].value == RETENTION_MS

    # delete
    assert admin.delete_topics([topic], request_timeout=10)[topic].result(timeout=15) is None
    assert _wait_until(lambda: topic not in admin.list_topics(timeout=10).topics)


# -- kafka-python -------------------------------------------------------------------------


def test_kafka_python_lifecycle(proxy: RunningProxy) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    topic, group = unique_name("kp"), unique_name("kp-group")
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, request_timeout_ms=10_000)
    try:
        # create
        created = admin.create_topics(
            [NewTopic(topic, 2, 1, topic_configs={"retention.ms": RETENTION_MS})],
            timeout_ms=10_000,
        )
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(topic, 0)]
        assert topic in admin.list_topics()

        # produce
        records = _records(topic)
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, linger_ms=0)
        try:
            offsets = [
                producer.send(topic, key=k, value=v, partition=0).get(timeout=10).offset
                for k, v in records
            ]
        finally:
            producer.close(timeout=5)
        assert offsets == list(range(RECORDS))

        # consume with a consumer group
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=proxy.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
        )
        try:
            received: list[tuple[int, int, bytes, bytes]] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(received) < RECORDS and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=500).values():
                    received += [(m.partition, m.offset, m.key, m.value) for m in batch]
            assert received == [(0, i, k, v) for i, (k, v) in enumerate(records)]
            consumer.commit()
            tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            assert consumer.committed(tp0) == RECORDS

            # list offsets
            assert consumer.end_offsets([tp0, tp1]) == {tp0: RECORDS, tp1: 0}
            assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
            assert consumer.offsets_for_times({tp0: 0})[tp0].offset == 0
        finally:
            consumer.close()

        # describe cluster
        proxy_host, proxy_port = _proxy_node_address(proxy.server)
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"]
        assert cluster["controller_id"] == NODE_ID
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (NODE_ID, proxy_host, proxy_port)
        ]

        # describe configs
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        topic_configs = described["topic"][topic]
        assert topic_configs["retention.ms"]["value"] == RETENTION_MS, topic_configs

        # delete
        deleted = admin.delete_topics([topic], timeout_ms=10_000)
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic, 0)]
        assert _wait_until(lambda: topic not in admin.list_topics())
    finally:
        admin.close()


# -- aiokafka -----------------------------------------------------------------------------


async def test_aiokafka_lifecycle(async_proxy: ProxyServer) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    bootstrap = async_proxy.bootstrap()
    topic, group = unique_name("ak"), unique_name("ak-group")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await asyncio.wait_for(admin.start(), 15)
    try:
        # create
        created = await asyncio.wait_for(
            admin.create_topics(
                [NewTopic(topic, 2, 1, topic_configs={"retention.ms": RETENTION_MS})],
                timeout_ms=10_000,
            ),
            15,
        )
        assert [(t[0], t[1]) for t in created.topic_errors] == [(topic, 0)]
        assert topic in await asyncio.wait_for(admin.list_topics(), 15)

        # produce
        records = _records(topic)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        await asyncio.wait_for(producer.start(), 15)
        try:
            offsets = []
            for key, value in records:
                meta = await asyncio.wait_for(
                    producer.send_and_wait(topic, key=key, value=value, partition=0), 10
                )
                offsets.append(meta.offset)
        finally:
            await asyncio.wait_for(producer.stop(), 10)
        assert offsets == list(range(RECORDS))

        # consume with a consumer group
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
        )
        await asyncio.wait_for(consumer.start(), 15)
        try:
            received: list[tuple[int, int, bytes, bytes]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DEADLINE_S
            while len(received) < RECORDS and loop.time() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for batch in batches.values():
                    received += [(m.partition, m.offset, m.key, m.value) for m in batch]
            assert received == [(0, i, k, v) for i, (k, v) in enumerate(records)]
            await asyncio.wait_for(consumer.commit(), 10)
            tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            assert await asyncio.wait_for(consumer.committed(tp0), 10) == RECORDS

            # list offsets
            assert await asyncio.wait_for(consumer.end_offsets([tp0, tp1]), 10) == {
                tp0: RECORDS,
                tp1: 0,
            }
            assert await asyncio.wait_for(consumer.beginning_offsets([tp0, tp1]), 10) == {
                tp0: 0,
                tp1: 0,
            }
            by_time = await asyncio.wait_for(consumer.offsets_for_times({tp0: 0}), 10)
            assert by_time[tp0] is not None
            assert by_time[tp0].offset == 0
        finally:
            await asyncio.wait_for(consumer.stop(), 15)

        # describe cluster
        proxy_host, proxy_port = _proxy_node_address(async_proxy)
        cluster = await asyncio.wait_for(admin.describe_cluster(), 15)
        assert cluster["cluster_id"]
        assert cluster["controller_id"] == NODE_ID
        assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (NODE_ID, proxy_host, proxy_port)
        ]

        # describe configs
        responses = await asyncio.wait_for(
            admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]), 15
        )
        entries = {
            entry[0]: entry[1]
            for response in responses
            for resource in response.resources
            for entry in resource[4]
        }
        assert entries.get("retention.ms") == RETENTION_MS, entries

        # delete
        deleted = await asyncio.wait_for(admin.delete_topics([topic], timeout_ms=10_000), 15)
        assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [(topic, 0)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while topic in await asyncio.wait_for(admin.list_topics(), 10):
            assert loop.time() < deadline, f"{topic} still listed after deletion"
            await asyncio.sleep(0.2)
    finally:
        await asyncio.wait_for(admin.close(), 10)
