"""Large broker responses that need no rewrite are streamed to the client as they arrive
(cut-through), without ever letting another response interleave with them. Fetch v16+
responses stream too: only their ``node_endpoints`` tail (KIP-951) is held back and rewritten,
so no broker address reaches the client; Produce v10+ and small Fetch responses get their tail
rewritten exactly."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_correlation_id
from kafkaguard.protocol.skim.tails import _parse_tags, fetch_response_tail
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.core.exchange import CUT_THROUGH_MIN
from kafkaguard.tansu import free_base
from tests.support.exchange_driver import Driver, closed, to_broker, to_client
from tests.support.exchange_driver import request as driver_request
from tests.support.fake_broker import FakeBroker, RawClient, proxy_in_front, request

FETCH_VERSION = 12  # names topics, no node_endpoints: forwarded and answered byte for byte


def fetch() -> object:
    """A sessionless (epoch -1) fetch of partition 0 of topic "big"."""
    schema = codec.request_schema(1, FETCH_VERSION)
    topic_type = codec.nested_type(schema, "topics")
    partition_type = codec.nested_type(topic_type, "partitions")
    return codec.make_entity(
        schema,
        replica_id=-1,
        max_wait=timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 30,
        session_id=0,
        session_epoch=-1,
        topics=(
            codec.make_entity(
                topic_type,
                topic="big",
                partitions=(codec.make_entity(partition_type, partition=0, fetch_offset=0),),
            ),
        ),
    )


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeBroker, ProxyServer]]:
    # DescribeCluster v0 not advertised by the broker: the proxy answers it itself.
    versions = {k: codec.codec_versions(k) for k in codec.API_NAMES} | {60: range(1, 3)}
    async with FakeBroker(node_ids=(1,), versions=versions) as fake:
        async with proxy_in_front(fake, BrokerPorts(free_base([1]), {})) as proxy:
            yield fake, proxy
        assert not fake.errors


async def test_large_response_reaches_the_client_before_the_broker_finishes(
    env: tuple[FakeBroker, ProxyServer],
) -> None:
    fake, proxy = env
    fake.script(1, "trickle")
    host, port = proxy.bootstrap().split(":")
    client = await RawClient.connect(host, int(port))
    client.send(fetch(), correlation_id=1)
    first = await asyncio.wait_for(client.reader.read(65536), 5)
    assert first and not fake.trickled.is_set(), "the first bytes waited for the last ones"
    # Mid-stream, a request the proxy answers itself at once (DescribeCluster v0 is not
    # advertised by this broker): its answer must wait until the stream has ended.
    client.send(request(60, 0, include_cluster_authorized_operations=False), correlation_id=2)
    received = bytearray(first)
    async with asyncio.timeout(10):
        while len(received) < len(fake.trickled_bytes):
            received += await client.reader.read(1 << 20)
    assert bytes(received[: len(fake.trickled_bytes)]) == fake.trickled_bytes
    # The rest, if any (with TCP_NODELAY the next response can arrive in the same read).
    client._ready.extend(
        map(bytes, client._frames.feed(bytes(received[len(fake.trickled_bytes) :])))
    )
    after = await client.recv_frame()
    assert peek_correlation_id(after) == 2
    assert codec.decode_response(after, 60, 0).error_code == ErrorCode.unsupported_version
    # The connection is still in step: another request round-trips normally.
    metadata = await client.roundtrip(request(3, 12, topics=None), correlation_id=3)
    assert metadata.brokers
    await client.close()


# -- Fetch v16+ and Produce v10+: node_endpoints in the tail (sans-I/O, on the exchange core) ---

BROKER_HOST = b"broker-2.internal"


def fetch16() -> bytes:
    """A sessionless Fetch v16 (no partitions: the response is the broker's to fill)."""
    body = codec.make_entity(
        codec.request_schema(1, 16),
        max_wait=timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 30,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    return driver_request(body, 1)


def fetch16_response(records: bytes, with_endpoints: bool) -> Any:
    schema = codec.response_schema(1, 16)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partitions")
    node_t = codec.nested_type(schema, "node_endpoints")
    partition = codec.make_entity(part_t, partition_index=0, high_watermark=9, records=records)
    moved = codec.make_entity(part_t, ErrorCode.not_leader_or_follower, partition_index=1)
    endpoints = (codec.make_entity(node_t, node_id=2, host=BROKER_HOST.decode(), port=9092),)
    return codec.make_entity(
        schema,
        throttle_time=timedelta(0),
        responses=(
            codec.make_entity(topic_t, topic_id=uuid.uuid4(), partitions=(partition, moved)),
        ),
        node_endpoints=endpoints if with_endpoints else (),
    )


def connected() -> Driver:
    d = Driver(super_users="User:alice")
    d.connect()
    return d


@pytest.mark.parametrize("with_endpoints", [False, True])
def test_a_large_fetch_v16_response_streams_and_only_its_tail_is_rewritten(
    with_endpoints: bool,
) -> None:
    d = connected()
    assert to_broker(d.client(fetch16()))
    response = fetch16_response(b"r" * (4 * CUT_THROUGH_MIN), with_endpoints)
    frame = codec.encode_response(response, 1)
    first = to_client(d.broker(frame[:1000]))
    assert first == frame[:1000]  # before its last byte: cut-through
    assert d.exchange.busy
    sent = first
    for start in range(1000, len(frame), 50_000):
        sent += to_client(d.broker(frame[start : start + 50_000]))
    assert not d.exchange.busy and len(sent) == len(frame)
    if not with_endpoints:
        assert sent == frame  # the broker's bytes
        return
    assert BROKER_HOST not in sent
    tail_at = fetch_response_tail(frame, 16)
    assert tail_at is not None and sent[:tail_at] == frame[:tail_at]  # records untouched
    fields = _parse_tags(sent[tail_at:])
    assert fields is not None
    endpoints = [data for tag, data in fields if tag == 0]
    assert endpoints and b"proxy.test" in endpoints[0]
    assert (30002).to_bytes(4, "big") in endpoints[0]
    # The connection stays in step.
    assert to_broker(d.client(fetch16()))


@pytest.mark.parametrize(("api_key", "version"), [(1, 16), (1, 18), (0, 10), (0, 11)])
def test_a_buffered_response_gets_its_node_endpoints_rewritten_exactly(
    api_key: int, version: int
) -> None:
    d = connected()
    if api_key == 1:
        request = codec.encode_request(
            codec.make_entity(
                codec.request_schema(1, version),
                max_wait=timedelta(0),
                session_epoch=-1,
                topics=(),
                forgotten_topics_data=(),
            ),
            1,
            "test",
        )
    else:
        request = codec.encode_request(
            codec.make_entity(
                codec.request_schema(0, version),
                acks=-1,
                timeout=timedelta(seconds=1),
                topic_data=(),
            ),
            1,
            "test",
        )
    assert to_broker(d.client(request))
    schema = codec.response_schema(api_key, version)
    node_t = codec.nested_type(schema, "node_endpoints")
    response = codec.make_entity(
        schema,
        node_endpoints=(
            codec.make_entity(node_t, node_id=2, host=BROKER_HOST.decode(), port=9092, rack="r1"),
        ),
    )
    sent = to_client(d.broker(codec.encode_response(response, 1)))
    assert BROKER_HOST not in sent
    (node,) = codec.decode_response(sent, api_key, version).node_endpoints
    assert (node.host, node.port, node.rack) == ("proxy.test", 30002, "r1")


def test_a_streamed_fetch_response_that_breaks_its_layout_closes_before_its_tail() -> None:
    d = connected()
    assert to_broker(d.client(fetch16()))
    frame = codec.encode_response(fetch16_response(b"r" * (2 * CUT_THROUGH_MIN), True), 1)
    # Two bytes more than the structure holds, announced in the size: the walk ends at the
    # tagged fields, which then do not fill the tail.
    bad = (len(frame) - 2).to_bytes(4, "big") + frame[4:] + b"\x00\x00"
    sent = to_client(d.broker(bad[:1000]))
    out = d.broker(bad[1000:])
    sent += to_client(out)
    close = closed(out)
    assert close is not None and close.cause is CloseCause.UPSTREAM
    assert BROKER_HOST not in sent and len(sent) < len(bad)


def test_the_read_that_ends_a_streamed_fetch_may_carry_the_next_response() -> None:
    d = connected()
    assert to_broker(d.client(fetch16()))
    second = codec.encode_request(
        codec.make_entity(
            codec.request_schema(1, 16),
            max_wait=timedelta(0),
            session_epoch=-1,
            topics=(),
            forgotten_topics_data=(),
        ),
        2,
        "test",
    )
    assert to_broker(d.client(second))
    big = codec.encode_response(fetch16_response(b"r" * (2 * CUT_THROUGH_MIN), True), 1)
    small = codec.encode_response(fetch16_response(b"s", True), 2)
    sent = to_client(d.broker(big[:5000]))
    sent += to_client(d.broker(big[5000:] + small[:10]))
    sent += to_client(d.broker(small[10:]))
    assert BROKER_HOST not in sent
    assert len(sent) == len(big) + len(small) - (len(BROKER_HOST) - len(b"proxy.test"))
    first, rest = sent[: len(big)], sent[len(big) :]
    assert peek_correlation_id(first) == 1 and peek_correlation_id(rest) == 2
    (node,) = codec.decode_response(rest, 1, 16).node_endpoints
    assert (node.host, node.port) == ("proxy.test", 30002)
