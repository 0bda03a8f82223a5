"""Large broker responses that need no rewrite are streamed to the client as they arrive
(cut-through), without ever letting another response interleave with them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_correlation_id
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.proxy.server import ProxyServer
from kafkaguard.tansu import free_base
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
