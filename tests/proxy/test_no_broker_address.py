"""Clients never learn a broker address (issue 2: "Clients never learn a broker address").

Set-up, and why it is honest. Tansu listens on ``127.0.0.2:P`` and *advertises*
``kafka-upstream.invalid:P``. ``.invalid`` is reserved (RFC 2606) and never resolves, so any
client that is handed the broker's advertised address cannot connect to it: a leaked address
makes the client fail, not silently bypass the proxy. The proxy alone is given a resolver
(its own event loop's ``getaddrinfo``) that maps that name to ``127.0.0.2`` — the stand-in for
a broker network only the proxy can reach. The clients' resolvers (librdkafka's, Python's
``socket.getaddrinfo``) are untouched.

* Control: a client talking to Tansu directly *is* given the unreachable address and cannot
  deliver a record — the set-up can tell a leak from no leak.
* confluent-kafka, kafka-python and aiokafka produce and consume (consumer group included)
  through the proxy — possible only if every address they were given is a proxy address.
* A raw-socket client decodes every response of every version the proxy advertises for
  Metadata, FindCoordinator (single and batched, group and transaction keys), DescribeCluster
  (broker and controller endpoints), and the ``node_endpoints`` versions of Produce and Fetch,
  on the bootstrap port and on the node's port: every host/port anywhere in a response is the
  proxy's advertised host and one of its listening ports (never Tansu's), and the broker's
  host name and IP never appear anywhere in the response bytes.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.proxy.config import BrokerPorts, HostPort
from kafkaguard.tansu import TansuBroker, free_base, free_port
from tests.support.proxy_fixture import (
    SESSION_TIMEOUT_MS,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, addresses, build_request, schema_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HIDDEN_HOST = "kafka-upstream.invalid"
"""What Tansu advertises: a name no client can resolve."""
BROKER_IP = "127.0.0.2"
"""Where Tansu really listens (all of 127/8 is loopback on Linux)."""
NODE_ID = 111
DEADLINE_S = 30.0

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, PRODUCE, FETCH, CREATE_TOPICS = 3, 10, 60, 0, 1, 19


class AliasingEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose resolver knows names nobody else can resolve."""

    def __init__(self, aliases: dict[str, str]) -> None:
        super().__init__()
        self.aliases = aliases

    async def getaddrinfo(self, host: Any, port: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return await super().getaddrinfo(self.aliases.get(host, host), port, **kwargs)


@pytest.fixture(scope="module")
def hidden_tansu() -> Iterator[TansuBroker]:
    port = free_port(BROKER_IP)
    broker = TansuBroker(port=port, host=BROKER_IP, advertised=HostPort(HIDDEN_HOST, port))
    broker.start()
    try:
        asyncio.run(broker.wait_ready())
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def hidden_proxy(hidden_tansu: TansuBroker) -> Iterator[RunningProxy]:
    config = proxy_config(hidden_tansu.address, broker_ports=BrokerPorts(free_base([NODE_ID]), {}))
    running = start_proxy_thread(
        config, loop_factory=lambda: AliasingEventLoop({HIDDEN_HOST: BROKER_IP})
    )
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def _proxy_ports(proxy: RunningProxy) -> set[int]:
    listener = proxy.server.listeners[0]
    ports = {listener.bootstrap_port}
    node = listener.node_ports.advertised_node(NODE_ID)
    if node is not None:
        ports.add(node[1])
    return ports


def _assert_no_leak(frame: bytes, response: Any, proxy: RunningProxy, tansu: TansuBroker) -> int:
    """No trace of the broker in ``frame``; every address in it is the proxy's. Returns how
    many addresses the response carried."""
    assert HIDDEN_HOST.encode() not in frame, response
    assert BROKER_IP.encode() not in frame, response
    found = list(addresses(response))
    proxy_host = proxy.server.listeners[0].config.advertised_host
    ports = _proxy_ports(proxy)
    for path, host, port in found:
        assert host == proxy_host, f"{path}: host {host!r} is not the proxy's ({response})"
        assert port in ports, f"{path}: port {port} is not a proxy port {ports} ({response})"
        assert port != tansu.port
    return len(found)


def test_the_advertised_address_is_unreachable_for_clients(hidden_tansu: TansuBroker) -> None:
    """Control: talking to Tansu directly, a client is handed the hidden address and fails."""
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(HIDDEN_HOST, hidden_tansu.port)

    with RawKafkaClient(BROKER_IP, hidden_tansu.port) as client:
        _, response = client.request(build_request(METADATA, 1, topics=None))
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
        (NODE_ID, HIDDEN_HOST, hidden_tansu.port)
    ]

    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": str(hidden_tansu.address),
            "message.timeout.ms": 2500,
            "log_level": 0,
        }
    )
    producer.produce(unique_name("direct"), b"x", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(10) == 0
    assert len(errors) == 1
    assert errors[0] is not None, "a direct client reached the broker's hidden address"


def test_confluent_kafka_works_only_through_proxy_addresses(
    hidden_proxy: RunningProxy, hidden_tansu: TansuBroker
) -> None:
    from confluent_kafka import Consumer, Producer

    topic, group = unique_name("hide-ck"), unique_name("hide-ck-group")
    values = [f"ck-{i}".encode() for i in range(5)]
    producer = Producer(
        {
            "bootstrap.servers": hidden_proxy.bootstrap,
            "message.timeout.ms": 10_000,
            "log_level": 3,
        }
    )
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(15) == 0
    assert errors == [None] * len(values)
    # the proxy really went through the unreachable name
    assert hidden_proxy.server.cluster.node_address(NODE_ID) == HostPort(
        HIDDEN_HOST, hidden_tansu.port
    )

    consumer = Consumer(
        {
            "bootstrap.servers": hidden_proxy.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1000,
            "log_level": 3,
        }
    )
    try:
        consumer.subscribe([topic])
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received.append(msg.value())
        assert received == values
        brokers = consumer.list_topics(timeout=10).brokers
        assert {(b.host, b.port) for b in brokers.values()} <= {
            ("127.0.0.1", port) for port in _proxy_ports(hidden_proxy)
        }
    finally:
        consumer.close()


def test_kafka_python_works_only_through_proxy_addresses(hidden_proxy: RunningProxy) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic, group = unique_name("hide-kp"), unique_name("hide-kp-group")
    values = [f"kp-{i}".encode() for i in range(5)]
    producer = KafkaProducer(bootstrap_servers=hidden_proxy.bootstrap, request_timeout_ms=10_000)
    try:
        offsets = [producer.send(topic, v, partition=0).get(timeout=15).offset for v in values]
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(len(values)))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=hidden_proxy.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000,
    )
    try:
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(values) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                received += [m.value for m in batch]
        assert received == values
    finally:
        consumer.close()


async def test_aiokafka_works_only_through_proxy_addresses(hidden_proxy: RunningProxy) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, group = unique_name("hide-ak"), unique_name("hide-ak-group")
    values = [f"ak-{i}".encode() for i in range(5)]
    producer = AIOKafkaProducer(bootstrap_servers=hidden_proxy.bootstrap)
    await asyncio.wait_for(producer.start(), 15)
    try:
        offsets = [
            (await asyncio.wait_for(producer.send_and_wait(topic, v, partition=0), 15)).offset
            for v in values
        ]
    finally:
        await asyncio.wait_for(producer.stop(), 10)
    assert offsets == list(range(len(values)))

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=hidden_proxy.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000,
    )
    await asyncio.wait_for(consumer.start(), 15)
    try:
        received: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while len(received) < len(values) and loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                received += [m.value for m in batch]
        assert received == values
    finally:
        await asyncio.wait_for(consumer.stop(), 15)


def _sweep_requests(versions: dict[int, range], topic: str, topic_id: uuid.UUID) -> list[Any]:
    """One request per advertised version of every API whose response may carry an address."""
    requests: list[Any] = []
    for v in versions[METADATA]:
        requests.append(
            build_request(
                METADATA,
                v,
                topics=None if v else (),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    for v in versions[FIND_COORDINATOR]:
        for key_type, key in ((0, unique_name("sweep-group")), (1, unique_name("sweep-txn"))):
            requests.append(
                build_request(
                    FIND_COORDINATOR,
                    v,
                    key=key,
                    key_type=key_type,
                    coordinator_keys=(key, unique_name("sweep-other")),
                )
            )
    for v in versions[DESCRIBE_CLUSTER]:
        for endpoint_type in (1, 2):  # brokers, controllers (KIP-919)
            requests.append(
                build_request(
                    DESCRIBE_CLUSTER,
                    v,
                    include_cluster_authorized_operations=False,
                    endpoint_type=endpoint_type,
                )
            )
    # Produce v10+ and Fetch v16+ responses may carry node_endpoints (KIP-951); also ask for
    # a partition that does not exist, the case where a broker names the leader.
    for v in (v for v in versions[PRODUCE] if v >= 10):
        mod = schema_module(PRODUCE, v)
        partitions = tuple(
            mod.PartitionProduceData(index=index, records=_record_batch(b"sweep"))
            for index in (0, 99)
        )
        requests.append(
            build_request(
                PRODUCE,
                v,
                acks=1,
                timeout=timedelta(seconds=1),
                topic_data=(mod.TopicProduceData(name=topic, partition_data=partitions),),
            )
        )
    for v in (v for v in versions[FETCH] if v >= 16):
        mod = schema_module(FETCH, v)
        partitions = tuple(
            mod.FetchPartition(partition=index, fetch_offset=0, partition_max_bytes=1024)
            for index in (0, 99)
        )
        requests.append(
            build_request(
                FETCH,
                v,
                max_wait=timedelta(0),
                min_bytes=0,
                topics=(mod.FetchTopic(topic_id=topic_id, partitions=partitions),),
                forgotten_topics_data=(),
            )
        )
    return requests


def _record_batch(value: bytes) -> bytes:
    """One v2 record batch (built by kafka-python: Tansu drops a Produce without records)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def _create_topic(client: RawKafkaClient, version: int, topic: str) -> uuid.UUID:
    mod = schema_module(CREATE_TOPICS, version)
    spec = mod.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    _, created = client.request(
        build_request(CREATE_TOPICS, version, topics=(spec,), timeout=timedelta(seconds=10))
    )
    assert created.topics[0].error_code == 0, created
    topic_id: uuid.UUID = created.topics[0].topic_id
    assert topic_id is not None
    return topic_id


def test_every_decoded_response_carries_only_proxy_addresses(
    hidden_proxy: RunningProxy, hidden_tansu: TansuBroker
) -> None:
    host, port = hidden_proxy.bootstrap.rsplit(":", 1)
    topic = unique_name("sweep")
    with RawKafkaClient(host, int(port)) as bootstrap:
        versions = bootstrap.api_versions()
        for api in (METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, PRODUCE, FETCH):
            assert versions.get(api), f"the proxy does not advertise api key {api}"
        # The sweep covers every version a client may use, up to the newest kio knows.
        assert max(versions[METADATA]) >= 12
        assert max(versions[FIND_COORDINATOR]) >= 4  # batched (KIP-699)
        assert max(versions[DESCRIBE_CLUSTER]) >= 1  # endpoint types (KIP-919)

        topic_id = _create_topic(bootstrap, max(versions[CREATE_TOPICS]), topic)

        requests = _sweep_requests(versions, topic, topic_id)
        carried = 0
        for request in requests:
            frame, response = bootstrap.request(request)
            carried += _assert_no_leak(frame, response, hidden_proxy, hidden_tansu)

        node = hidden_proxy.server.listeners[0].node_ports.advertised_node(NODE_ID)
        assert node is not None
        # The same sweep on the node's own proxy port.
        with RawKafkaClient(node[0], node[1]) as on_node:
            on_node.api_versions()
            for request in requests:
                frame, response = on_node.request(request)
                carried += _assert_no_leak(frame, response, hidden_proxy, hidden_tansu)
    # Not vacuous: Metadata, FindCoordinator and DescribeCluster each carried addresses.
    assert carried >= 2 * (
        len(versions[METADATA])
        + 2 * len(versions[FIND_COORDINATOR])
        + 2 * len(versions[DESCRIBE_CLUSTER])
    )
