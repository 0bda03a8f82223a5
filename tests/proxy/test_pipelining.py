"""Pipelining: many requests in flight on one connection, responses in request order.

Raw-socket clients write requests back to back (no waiting for answers); the proxy must return
every response in request order with its own correlation id, including responses it builds
itself (UNSUPPORTED_VERSION) between forwarded ones, and ``acks=0`` Produce requests that get
no response and take no slot. Then the in-flight cap, and real clients against Tansu.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import LimitsConfig
from kafkaguard.proxy.handlers import supported_versions
from tests.support.fake_broker import FakeBroker, RawClient, proxy_in_front, request
from tests.support.proxy_fixture import unique_name

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class Req:
    api_key: int
    version: int
    fields: dict[str, Any] = field(default_factory=dict)
    local: bool = False
    """Answered by the proxy itself (never reaches the broker)."""

    @property
    def expects_response(self) -> bool:
        return not (self.api_key == 0 and self.fields.get("acks") == 0)


RECORDS = bytes(16) + b"\x02" + bytes(44)
"""Opaque to the broker fake; a magic-2 batch header whose attributes say non-transactional."""


def _produce(version: int, acks: int) -> Req:
    schema = codec.request_schema(0, version)
    topic_type = codec.nested_type(schema, "topic_data")
    partition_type = codec.nested_type(topic_type, "partition_data")
    partition = codec.make_entity(partition_type, index=0, records=RECORDS)
    topic = codec.make_entity(topic_type, name="t", partition_data=(partition,))
    return Req(0, version, {"acks": acks, "topic_data": (topic,)})


# The fake broker advertises DescribeCluster v0 only: v1 is known to kio and to the proxy's
# handler, but not advertised, so the proxy answers it with UNSUPPORTED_VERSION itself.
FAKE_VERSIONS_CAP = {60: range(0, 1)}

PATTERN = [
    Req(3, 12, {"topics": None}),
    Req(18, 3, {"client_software_name": "raw", "client_software_version": "1"}),
    Req(60, 0),
    Req(60, 1, local=True),
    _produce(9, acks=0),
    Req(10, 4, {"coordinator_keys": ("g1", "g2")}),
    _produce(9, acks=1),
    Req(16, 4),
    _produce(11, acks=0),
    _produce(11, acks=0),
    Req(12, 4, {"group_id": "g1"}),
    _produce(11, acks=-1),
    Req(1, 12),
    Req(3, 1, {"topics": None}),
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeBroker]:
    versions = {k: codec.codec_versions(k) for k in codec.API_NAMES} | FAKE_VERSIONS_CAP
    async with FakeBroker((1, 2, 3), versions=versions, delay_s=0.002) as broker:
        yield broker
    assert not broker.errors


async def _connect(proxy: ProxyServer) -> RawClient:
    host, port = proxy.bootstrap().rsplit(":", 1)
    return await RawClient.connect(host, int(port))


async def _pipeline(client: RawClient, reqs: list[Req], first_corr: int) -> list[int]:
    """Write every request in one go; read and check each expected response in order."""
    for i, req in enumerate(reqs):
        body = request(req.api_key, req.version, **req.fields)
        client.send(body, first_corr + i)
    await client.writer.drain()
    answered = []
    for i, req in enumerate(reqs):
        if not req.expects_response:
            continue
        corr, response = await client.recv(req.api_key, req.version, wait_s=10)
        assert corr == first_corr + i, f"response {corr} out of order, expected {first_corr + i}"
        if req.local:
            assert response.error_code == ErrorCode.unsupported_version
        elif hasattr(response, "error_code"):
            assert response.error_code == ErrorCode.none, (req, response)
        answered.append(corr)
    return answered


async def test_mixed_pipeline_with_local_answers_and_acks0(fake: FakeBroker) -> None:
    reqs = PATTERN * 6
    async with proxy_in_front(fake) as proxy:
        client = await _connect(proxy)
        try:
            answered = await _pipeline(client, reqs, first_corr=100)
            # Nothing else arrives: acks=0 requests got no response.
            with pytest.raises(TimeoutError):
                await client.recv_frame(wait_s=0.3)
        finally:
            await client.close()
    expected = [100 + i for i, r in enumerate(reqs) if r.expects_response]
    assert answered == expected
    # The broker saw every forwarded request (acks=0 included) in order, and never the
    # locally answered ones.
    forwarded = [100 + i for i, r in enumerate(reqs) if not r.local]
    assert [s.correlation_id for s in fake.seen if s.correlation_id >= 100] == forwarded
    assert not [s for s in fake.seen if s.api_key == 60 and s.api_version == 1]
    assert len([s for s in fake.seen if s.api_key == 0]) == 5 * 6


async def test_a_question_to_the_broker_keeps_the_pipeline_in_order(fake: FakeBroker) -> None:
    """A Fetch naming a topic id the proxy never saw makes it ask the broker first (Metadata
    by id, on the client's upstream connection, with the Fetch's correlation id); requests
    behind it wait, every response comes back in order, and the question's answer never
    reaches the client."""
    hidden = uuid.uuid4()
    fake.topics[hidden] = "hidden"
    schema = codec.request_schema(1, 13)
    topic_type = codec.nested_type(schema, "topics")
    partition = codec.make_entity(codec.nested_type(topic_type, "partitions"), partition=0)
    fetch = {"topics": (codec.make_entity(topic_type, topic_id=hidden, partitions=(partition,)),)}
    reqs = [Req(3, 12, {"topics": None}), Req(1, 13, fetch), Req(60, 1, local=True)] * 2
    async with proxy_in_front(fake) as proxy:
        client = await _connect(proxy)
        try:
            answered = await _pipeline(client, reqs, first_corr=500)
            with pytest.raises(TimeoutError):
                await client.recv_frame(wait_s=0.3)
        finally:
            await client.close()
    assert answered == list(range(500, 506))
    assert [(s.api_key, s.correlation_id) for s in fake.seen if s.correlation_id >= 500] == [
        (3, 500),
        (3, 501),  # the question: asked once, the name is known afterwards
        (1, 501),
        (3, 503),
        (1, 504),
    ]


async def test_api_versions_in_a_pipeline_is_narrowed(fake: FakeBroker) -> None:
    async with proxy_in_front(fake) as proxy:
        client = await _connect(proxy)
        try:
            response = await client.roundtrip(
                request(18, 3, client_software_name="raw", client_software_version="1")
            )
        finally:
            await client.close()
    by_key = {e.api_key: (e.min_version, e.max_version) for e in response.api_keys}
    assert by_key[60] == (0, 0)  # capped by the broker
    assert by_key[3] == (0, 13)
    assert 4 not in by_key  # LeaderAndIsr: broker-internal, never advertised


async def test_inflight_cap_pauses_reading(fake: FakeBroker) -> None:
    cap, total, delay = 2, 8, 0.4
    fake.delay_s = delay
    async with proxy_in_front(fake, limits=LimitsConfig(max_inflight_requests=cap)) as proxy:
        client = await _connect(proxy)
        try:
            # Warm up (upstream connected), then write requests one per TCP write.
            await client.roundtrip(request(3, 12, topics=None), correlation_id=1)
            fake.seen.clear()
            fake.max_outstanding = 0
            start = time.monotonic()
            for i in range(total):
                client.send(request(3, 12, topics=None), 10 + i)
                await client.writer.drain()
                await asyncio.sleep(0.02)
            # All written before the broker answered the first: the proxy read only up to
            # the cap (each read held one request, so "cap + one read" is the cap here).
            assert time.monotonic() - start < delay - 0.1
            assert len(fake.seen) == cap
            assert fake.max_outstanding == cap
            corrs = []
            for _ in range(total):
                corr, _body = await client.recv(3, 12, wait_s=10)
                corrs.append(corr)
        finally:
            await client.close()
    assert corrs == [10 + i for i in range(total)]
    assert [s.correlation_id for s in fake.seen] == corrs


async def test_inflight_cap_with_one_burst_still_completes_in_order(fake: FakeBroker) -> None:
    """A burst larger than the cap in a single write: the cap may be exceeded by that one
    read (documented), and every response still comes back in order."""
    async with proxy_in_front(fake, limits=LimitsConfig(max_inflight_requests=3)) as proxy:
        client = await _connect(proxy)
        try:
            reqs = PATTERN * 4
            answered = await _pipeline(client, reqs, first_corr=1000)
        finally:
            await client.close()
    assert answered == [1000 + i for i, r in enumerate(reqs) if r.expects_response]


async def test_pipeline_against_tansu(async_proxy: ProxyServer) -> None:
    """A real broker behind the proxy: same order guarantees, local answers interleaved."""
    assert 2 not in supported_versions(
        60, async_proxy.cluster.broker_versions
    )  # Tansu stops at DescribeCluster v1: v2 is answered locally
    pattern = [
        Req(3, 12, {"topics": None}),
        Req(18, 3, {"client_software_name": "raw", "client_software_version": "1"}),
        Req(60, 2, local=True),
        Req(60, 1),
        Req(10, 4, {"key_type": 0, "coordinator_keys": (unique_name("g"),)}),
        Req(16, 4),
        Req(3, 1, {"topics": None}),
    ]
    client = await _connect(async_proxy)
    try:
        reqs = pattern * 8
        answered = await _pipeline(client, reqs, first_corr=7)
    finally:
        await client.close()
    assert answered == [7 + i for i in range(len(reqs))]


@pytest.mark.integration
async def test_aiokafka_many_concurrent_produces(async_proxy: ProxyServer) -> None:
    topic = unique_name("pipe")
    bootstrap = async_proxy.bootstrap()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        acked = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
        fire = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=0, linger_ms=0)
        await acked.start()
        await fire.start()
        try:
            async with asyncio.timeout(30):  # the produce phase
                sends = [
                    await acked.send(topic, f"acked-{i}".encode(), partition=i % 3)
                    for i in range(300)
                ]
                sends += [
                    await fire.send(topic, f"fire-{i}".encode(), partition=i % 3)
                    for i in range(100)
                ]
                results = await asyncio.gather(*sends)
                await fire.flush()
        finally:
            await acked.stop()
            await fire.stop()
        assert len(results) == 400
        assert all(r.topic == topic for r in results[:300])
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            partitions = [TopicPartition(topic, p) for p in range(3)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            values: set[bytes] = set()
            try:
                async with asyncio.timeout(30):
                    while len(values) < 400:
                        batch = await consumer.getmany(timeout_ms=1000)
                        for records in batch.values():
                            values.update(r.value for r in records if r.value is not None)
            except TimeoutError:
                acked_n = sum(v.startswith(b"acked") for v in values)
                pytest.fail(f"consumed only {acked_n} acked + {len(values) - acked_n} acks=0")
        finally:
            await consumer.stop()
        assert values == {f"acked-{i}".encode() for i in range(300)} | {
            f"fire-{i}".encode() for i in range(100)
        }
    finally:
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
