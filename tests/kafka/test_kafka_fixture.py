"""The Apache Kafka fixtures work end to end: the upstream serves clients directly and through
kafkaguard, the referee enforces ACLs the way Kafka does, and the CLI tools run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafkaguard.proxy.config import BrokerPorts, HostPort
from kafkaguard.tansu import free_base
from tests.support.kafka_broker import KafkaBroker, run_kafka_tool
from tests.support.proxy_fixture import (
    SESSION_TIMEOUT_MS,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)

pytestmark = pytest.mark.kafka


def produce(config: dict[str, str], topic: str, value: bytes) -> KafkaError | None:
    """Produce one record and return the delivery error (``None`` = acknowledged)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(config | {"message.timeout.ms": "15000"})
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report within 20 s"
    return outcome[0]


def consume_one(config: dict[str, str], topic: str) -> bytes:
    consumer = Consumer(
        config
        | {
            "group.id": unique_name("g"),
            "auto.offset.reset": "earliest",
            "session.timeout.ms": str(SESSION_TIMEOUT_MS),
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            return bytes(value)
        raise AssertionError(f"nothing consumed from {topic} within 30 polls")
    finally:
        consumer.close()


def create_topic(broker: KafkaBroker, topic: str) -> None:
    admin = AdminClient(broker.admin_config())
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def test_upstream_metadata_and_round_trip(kafka_upstream: KafkaBroker) -> None:
    metadata = AdminClient(kafka_upstream.admin_config()).list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        1: ("127.0.0.1", kafka_upstream.port)
    }
    topic = unique_name("up")
    create_topic(kafka_upstream, topic)
    assert produce(kafka_upstream.client_config(), topic, b"direct") is None
    assert consume_one(kafka_upstream.client_config(), topic) == b"direct"


def test_referee_enforces_write_acl(kafka_referee: KafkaBroker) -> None:
    topic = unique_name("ref")
    create_topic(kafka_referee, topic)
    alice = kafka_referee.client_config("alice")
    denied = produce(alice, topic, b"no acl")
    assert denied is not None
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    admin = AdminClient(kafka_referee.admin_config())
    acl = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    admin.create_acls([acl])[acl].result(30)
    try:
        # Kafka applies the ACL once its metadata log replays it; the producer retries until
        # then only if it sees a retriable error, so ask again on a fresh producer.
        for _ in range(20):
            if produce(alice, topic, b"with acl") is None:
                break
        else:
            raise AssertionError("alice still cannot write after the ACL was created")
        bob = produce(kafka_referee.client_config("bob"), topic, b"bob has none")
        assert bob is not None
        assert bob.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        flt = AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        deleted = admin.delete_acls([flt])[flt].result(30)
        assert deleted == [acl]


def test_referee_rejects_wrong_password(kafka_referee: KafkaBroker) -> None:
    errors: list[KafkaError] = []
    config: dict[str, Any] = kafka_referee.client_config("alice")
    config |= {"sasl.password": "wrong", "log_level": "0", "error_cb": errors.append}
    producer = Producer(config)
    for _ in range(50):
        producer.poll(0.2)
        if errors:
            break
    assert [e.code() for e in errors[:1]] == [KafkaError._AUTHENTICATION]


@pytest.fixture
def guarded_upstream(kafka_upstream: KafkaBroker) -> Iterator[RunningProxy]:
    """kafkaguard (allow-all policy) in front of the upstream; Kafka's node id is 1."""
    running = start_proxy_thread(
        proxy_config(
            HostPort("127.0.0.1", kafka_upstream.port),
            broker_ports=BrokerPorts(free_base([kafka_upstream.node_id]), {}),
        )
    )
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def test_round_trip_through_kafkaguard(
    kafka_upstream: KafkaBroker, guarded_upstream: RunningProxy
) -> None:
    config = {"bootstrap.servers": guarded_upstream.bootstrap}
    metadata = AdminClient(config).list_topics(timeout=10)
    # Clients never see the real broker: node 1 is advertised on a kafkaguard port.
    assert list(metadata.brokers) == [kafka_upstream.node_id]
    assert metadata.brokers[kafka_upstream.node_id].port != kafka_upstream.port
    topic = unique_name("kg")
    assert produce(config, topic, b"via kafkaguard") is None  # auto-created upstream
    assert consume_one(config, topic) == b"via kafkaguard"
    assert consume_one(kafka_upstream.client_config(), topic) == b"via kafkaguard"


def test_kafka_topics_cli_through_kafkaguard(
    kafka_upstream: KafkaBroker, guarded_upstream: RunningProxy
) -> None:
    topic = unique_name("cli")
    create_topic(kafka_upstream, topic)
    result = run_kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        guarded_upstream.bootstrap,
        "--list",
    )
    assert result.returncode == 0, result.stderr
    assert topic in result.stdout.split()
