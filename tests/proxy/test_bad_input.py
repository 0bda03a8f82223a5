"""Bad input from either side: each case gets a clear log line and a closed (or error-answered)
connection, never a crashed proxy, and a neighbour connection opened beforehand keeps working.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.framing import DEFAULT_MAX_FRAME_BYTES, frame
from kafkaguard.proxy.app.server import ProxyServer
from tests.support.fake_broker import (
    Action,
    FakeBroker,
    RawClient,
    logged,
    proxy_in_front,
    request,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

LOGGER = "kafkaguard.proxy"
METADATA = request(3, 12, topics=None)


@dataclass
class Env:
    fake: FakeBroker
    proxy: ProxyServer
    caplog: pytest.LogCaptureFixture

    async def connect(self) -> RawClient:
        host, port = self.proxy.bootstrap().rsplit(":", 1)
        return await RawClient.connect(host, int(port))

    async def neighbour(self) -> RawClient:
        client = await self.connect()
        response = await client.roundtrip(METADATA, correlation_id=1)
        assert response.brokers
        return client

    def logged(self, *fragments: str) -> list[str]:
        return logged(self.caplog, *fragments)

    async def wait_upstream_connections(self, count: int) -> None:
        await wait_until(lambda: self.fake.open_connections == count)


def _peer(client: RawClient) -> str:
    host, port = client.writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


@pytest.fixture
async def env(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Env]:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    versions = {k: codec.codec_versions(k) for k in codec.API_NAMES} | {60: range(0, 1)}
    async with FakeBroker((1,), versions=versions) as fake, proxy_in_front(fake) as proxy:
        yield Env(fake, proxy, caplog)
    assert not fake.errors
    # Nothing escaped to the event loop's exception handler (an unhandled error in a callback).
    crashes = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert not crashes, [r.getMessage() for r in crashes]


async def _assert_closed_with_log(
    env: Env, neighbour: RawClient, client: RawClient, *fragments: str
) -> None:
    peer = _peer(client)
    try:
        assert await client.closed_by_peer(wait_s=5), "the proxy kept the connection open"
    finally:
        await client.close()
    lines = env.logged(peer, *fragments)
    assert lines, f"no log line naming {peer} and {fragments}: {env.logged(peer)}"
    # The neighbour is unaffected, and the proxy still accepts new connections.
    response = await neighbour.roundtrip(METADATA, correlation_id=2)
    assert len(response.brokers) == 1
    fresh = await env.connect()
    try:
        await fresh.roundtrip(METADATA, correlation_id=3)
    finally:
        await fresh.close()
    await neighbour.close()


# -- client side -------------------------------------------------------------------------------


async def test_oversized_frame(env: Env) -> None:
    neighbour = await env.neighbour()
    client = await env.connect()
    seen_before = len(env.fake.seen)
    client.writer.write((DEFAULT_MAX_FRAME_BYTES + 1).to_bytes(4, "big") + b"\0" * 100)
    await _assert_closed_with_log(
        env, neighbour, client, "bad request", f"exceeds the limit of {DEFAULT_MAX_FRAME_BYTES}"
    )
    assert len(env.fake.seen) == seen_before + 2  # only the neighbour's and the fresh one's


async def test_frame_at_the_limit_is_not_refused_for_its_size(env: Env) -> None:
    # Control for the test above: a prefix of exactly the limit is accepted and buffered.
    client = await env.connect()
    try:
        client.writer.write(DEFAULT_MAX_FRAME_BYTES.to_bytes(4, "big") + b"\0" * 100)
        assert not await client.closed_by_peer(wait_s=0.5)
    finally:
        await client.close()
    assert not env.logged("exceeds the limit")


async def test_truncated_frame_then_eof(env: Env) -> None:
    neighbour = await env.neighbour()
    await env.wait_upstream_connections(1)
    client = await env.connect()
    peer = _peer(client)
    data = codec.encode_request(METADATA, 9, "truncated")
    client.writer.write(data[: len(data) // 2])
    await client.writer.drain()
    await env.wait_upstream_connections(2)
    client.writer.write_eof()
    assert await client.closed_by_peer()
    await client.close()
    await env.wait_upstream_connections(1)  # its upstream connection was released
    assert not [s for s in env.fake.seen if s.correlation_id == 9]
    assert env.logged(peer, "disconnected")
    assert len((await neighbour.roundtrip(METADATA, correlation_id=2)).brokers) == 1
    await neighbour.close()


async def test_eof_mid_frame_is_reported_above_debug(env: Env) -> None:
    client = await env.connect()
    peer = _peer(client)
    data = codec.encode_request(METADATA, 9, "truncated")
    client.writer.write(data[:20])
    await client.writer.drain()
    await asyncio.sleep(0.1)
    client.writer.write_eof()
    assert await client.closed_by_peer()
    await client.close()
    records = [
        r
        for r in env.caplog.records
        if r.name == LOGGER and peer in r.getMessage() and r.levelno >= logging.INFO
    ]
    assert records and "20 bytes of an unfinished one" in records[0].getMessage()


@pytest.mark.parametrize(
    ("garbage", "fragment"),
    [
        (b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n", "exceeds the limit"),
        (frame(b"\x00\x03\x00"), "shorter than a header"),
        (b"\xff\xff\xff\xfe\x00\x00", "negative frame size"),
        (frame(struct.pack(">hhih", 0, 9, 5, 3) + b"abc" + b"\x01\x02\x03"), "cannot decode"),
        (frame(struct.pack(">hhih", 3, 1, 5, 9) + b"\xff\xfe"), "client id runs past"),
    ],
    ids=["http", "short", "negative", "produce-body", "client-id"],
)
async def test_garbage_bytes(env: Env, garbage: bytes, fragment: str) -> None:
    neighbour = await env.neighbour()
    client = await env.connect()
    client.writer.write(garbage)
    await _assert_closed_with_log(env, neighbour, client, "bad request", fragment)


@pytest.mark.parametrize("api_key", [999, 4, 7, 58, -1])
async def test_unknown_or_broker_internal_api_key(env: Env, api_key: int) -> None:
    neighbour = await env.neighbour()
    client = await env.connect()
    client.writer.write(frame(struct.pack(">hhih", api_key, 0, 42, 1) + b"x" + b"\0" * 8))
    await _assert_closed_with_log(env, neighbour, client, f"api key {api_key} is not served")
    assert not [s for s in env.fake.seen if s.api_key == api_key]  # never passed through


@pytest.mark.parametrize(("api_key", "version"), [(3, 14), (3, 99), (0, 2), (60, 3)])
async def test_version_unknown_to_kio_closes(env: Env, api_key: int, version: int) -> None:
    neighbour = await env.neighbour()
    client = await env.connect()
    client.writer.write(frame(struct.pack(">hhih", api_key, version, 42, 1) + b"x" + b"\0" * 8))
    await _assert_closed_with_log(env, neighbour, client, f"unsupported version {version}")
    assert not [s for s in env.fake.seen if s.correlation_id == 42]


async def test_known_but_unadvertised_version_gets_an_error_response(env: Env) -> None:
    neighbour = await env.neighbour()
    client = await env.connect()
    try:
        response = await client.roundtrip(request(60, 1), correlation_id=5)
        assert response.error_code == ErrorCode.unsupported_version
        # The connection stays usable.
        assert (await client.roundtrip(request(60, 0), correlation_id=6)).brokers
    finally:
        await client.close()
    assert env.logged("describe_cluster v1 is not supported")
    assert not [s for s in env.fake.seen if s.api_key == 60 and s.api_version == 1]
    assert (await neighbour.roundtrip(METADATA, correlation_id=2)).brokers
    await neighbour.close()


async def test_api_versions_above_known_gets_v0_unsupported_version_listing(env: Env) -> None:
    client = await env.connect()
    try:
        body = request(18, 4, client_software_name="future", client_software_version="9")
        data = bytearray(codec.encode_request(body, 77, "future-client"))
        data[6:8] = struct.pack(">h", 5)  # ApiVersions v5: newer than the proxy knows
        client.writer.write(bytes(data))
        raw = await client.recv_frame()
        # KIP-511: header v0 and a v0 body, whatever version was asked.
        response = codec.decode_response(raw, 18, 0)
        assert int.from_bytes(raw[4:8], "big") == 77
        assert response.error_code == ErrorCode.unsupported_version
        ranges = {e.api_key: (e.min_version, e.max_version) for e in response.api_keys}
        assert ranges[18] == (0, 4)
        assert ranges[60] == (0, 0)  # the broker's cap applies
        assert 4 not in ranges and 999 not in ranges
        for key, (low, high) in ranges.items():
            assert low >= codec.codec_versions(key).start
            assert high < codec.codec_versions(key).stop
        # The client retries with a version it shares, on the same connection.
        retry = await client.roundtrip(body, correlation_id=78)
        assert retry.error_code == ErrorCode.none
    finally:
        await client.close()
    assert not [s for s in env.fake.seen if s.api_key == 18 and s.api_version == 5]


async def test_client_disconnect_mid_request(env: Env) -> None:
    neighbour = await env.neighbour()
    await env.wait_upstream_connections(1)
    env.fake.script(3, 1.0)  # the broker is slow to answer the next Metadata
    client = await env.connect()
    peer = _peer(client)
    client.send(METADATA, 9)
    await client.writer.drain()
    await wait_until(lambda: any(s.correlation_id == 9 for s in env.fake.seen))
    client.writer.transport.abort()  # RST, with the request in flight at the broker
    await env.wait_upstream_connections(1)  # the proxy dropped its upstream connection too
    assert env.logged(peer, "disconnected")
    assert len((await neighbour.roundtrip(METADATA, correlation_id=2)).brokers) == 1
    await neighbour.close()


# -- broker side -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ("close", "the broker closed the connection"),
        ("garbage", "bad response from the broker"),
        ("oversized", "the broker closed the connection"),
        ("undecodable", "cannot relay the broker's response"),
        ("wrong_correlation", "correlation id 1009, expected 9"),
    ],
)
async def test_broker_misbehaves_mid_request(env: Env, action: Action, fragment: str) -> None:
    neighbour = await env.neighbour()
    env.fake.script(3, action)
    client = await env.connect()
    client.send(METADATA, 9)
    await _assert_closed_with_log(env, neighbour, client, fragment)
