"""Port-per-broker mapping with a fake three-node cluster: clients only ever see proxy
addresses, and each node's proxy port reaches that node."""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.tansu import free_base
from tests.support.fake_broker import FakeBroker, RawClient, proxy_in_front, request

NODE_IDS = (1, 2, 3)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def addresses(entity: Any) -> Iterator[tuple[str, int]]:
    """Every (host, port) pair anywhere in a decoded response."""
    names = {f.name for f in dataclasses.fields(entity)}
    if {"host", "port"} <= names:
        yield entity.host, entity.port
    for name in names:
        value = getattr(entity, name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if dataclasses.is_dataclass(item):
                yield from addresses(item)


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    async with FakeBroker(NODE_IDS) as fake:
        yield fake
    assert not fake.errors


@pytest.fixture
def base() -> int:
    return free_base(NODE_IDS)


@pytest.fixture
async def proxy(broker: FakeBroker, base: int) -> AsyncIterator[ProxyServer]:
    async with proxy_in_front(broker, BrokerPorts(base, {})) as server:
        yield server


async def _client(proxy: ProxyServer) -> RawClient:
    host, port = proxy.bootstrap().rsplit(":", 1)
    return await RawClient.connect(host, int(port))


def _assert_proxy_addresses(
    body: Any, broker: FakeBroker, expected: dict[int, int], min_count: int
) -> list[tuple[str, int]]:
    found = list(addresses(body))
    assert len(found) >= min_count, body
    for host, port in found:
        assert port not in broker.ports, f"broker address {host}:{port} leaked in {body}"
        assert (host, port) in {("127.0.0.1", p) for p in expected.values()}, (host, port)
    return found


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
async def test_metadata_brokers_map_to_base_plus_node_id(
    broker: FakeBroker, proxy: ProxyServer, base: int, version: int
) -> None:
    client = await _client(proxy)
    try:
        # Every topic: an empty list in v0, null from v1 (MetadataRequest.json).
        every_topic = () if version == 0 else None
        response = await client.roundtrip(request(3, version, topics=every_topic))
    finally:
        await client.close()
    expected = {n: base + n for n in NODE_IDS}
    assert {b.node_id: (b.host, b.port) for b in response.brokers} == {
        n: ("127.0.0.1", p) for n, p in expected.items()
    }
    _assert_proxy_addresses(response, broker, expected, len(NODE_IDS))


async def test_each_node_port_reaches_its_node(
    broker: FakeBroker, proxy: ProxyServer, base: int
) -> None:
    # A node's port is bound only when the node first appears in a response.
    with pytest.raises(OSError):
        await RawClient.connect("127.0.0.1", base + 2)
    bootstrap = await _client(proxy)
    await bootstrap.roundtrip(request(3, 12, topics=None))
    await bootstrap.close()
    assert broker.seen[-1].node_id == NODE_IDS[0]  # the bootstrap server is node 1
    for node_id in NODE_IDS:
        client = await RawClient.connect("127.0.0.1", base + node_id)
        try:
            corr = 1000 + node_id
            response = await client.roundtrip(request(60, 1), correlation_id=corr)
        finally:
            await client.close()
        assert response.error_code == ErrorCode.none
        (seen,) = [s for s in broker.seen if s.correlation_id == corr]
        assert seen.node_id == node_id
        _assert_proxy_addresses(response, broker, {n: base + n for n in NODE_IDS}, 3)


async def test_explicit_map(broker: FakeBroker) -> None:
    ports = dict(zip(NODE_IDS, _free_ports(len(NODE_IDS)), strict=True))
    async with proxy_in_front(broker, BrokerPorts(None, ports)) as proxy:
        client = await _client(proxy)
        try:
            response = await client.roundtrip(request(3, 12, topics=None))
        finally:
            await client.close()
        assert {b.node_id: b.port for b in response.brokers} == ports
        _assert_proxy_addresses(response, broker, ports, 3)
        node3 = await RawClient.connect("127.0.0.1", ports[3])
        try:
            await node3.roundtrip(request(3, 12, topics=None), correlation_id=333)
        finally:
            await node3.close()
        assert [s.node_id for s in broker.seen if s.correlation_id == 333] == [3]


async def test_node_missing_from_explicit_map_fails_closed(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kafkaguard.proxy")
    ports = dict(zip((1, 2), _free_ports(2), strict=True))  # node 3 has no proxy port
    async with proxy_in_front(broker, BrokerPorts(None, ports)) as proxy:
        client = await _client(proxy)
        try:
            client.send(request(3, 12, topics=None), 1)
            assert await client.closed_by_peer()  # no response naming node 3's real address
        finally:
            await client.close()
    assert any("no proxy port for upstream node 3" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_find_coordinator_single(
    broker: FakeBroker, proxy: ProxyServer, base: int, version: int
) -> None:
    client = await _client(proxy)
    try:
        response = await client.roundtrip(request(10, version, key="group-a"))
    finally:
        await client.close()
    node_id = broker.coordinator_for("group-a")
    assert (response.node_id, response.host, response.port) == (
        node_id,
        "127.0.0.1",
        base + node_id,
    )
    _assert_proxy_addresses(response, broker, {n: base + n for n in NODE_IDS}, 1)


@pytest.mark.parametrize("version", [4, 5, 6])
async def test_find_coordinator_batched(
    broker: FakeBroker, proxy: ProxyServer, base: int, version: int
) -> None:
    keys = ("g1", "g2", "g3", "group-x", "none-available")
    assert {broker.coordinator_for(k) for k in keys} >= {1, 2, 3, -1}  # every shape is covered
    client = await _client(proxy)
    try:
        response = await client.roundtrip(request(10, version, coordinator_keys=keys))
    finally:
        await client.close()
    assert [c.key for c in response.coordinators] == list(keys)
    for c in response.coordinators:
        node_id = broker.coordinator_for(c.key)
        if node_id < 0:  # not available: nothing to hide, left as the broker sent it
            assert (c.node_id, c.host, c.port) == (-1, "", -1)
            assert c.error_code == ErrorCode.coordinator_not_available
        else:
            assert (c.node_id, c.host, c.port) == (node_id, "127.0.0.1", base + node_id)
    live = [c for c in response.coordinators if c.node_id >= 0]
    for c in live:
        assert c.port not in broker.ports


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster(
    broker: FakeBroker, proxy: ProxyServer, base: int, version: int
) -> None:
    client = await _client(proxy)
    try:
        response = await client.roundtrip(request(60, version))
    finally:
        await client.close()
    assert {b.broker_id: b.port for b in response.brokers} == {n: base + n for n in NODE_IDS}
    _assert_proxy_addresses(response, broker, {n: base + n for n in NODE_IDS}, 3)


@pytest.mark.parametrize(
    ("api_key", "version", "fields"),
    [(0, v, {"acks": 1}) for v in (10, 11, 12, 13)] + [(1, v, {}) for v in (16, 17, 18)],
)
async def test_node_endpoints_in_produce_and_fetch(
    broker: FakeBroker,
    proxy: ProxyServer,
    base: int,
    api_key: int,
    version: int,
    fields: dict[str, Any],
) -> None:
    client = await _client(proxy)
    try:
        response = await client.roundtrip(request(api_key, version, **fields))
    finally:
        await client.close()
    assert {e.node_id: e.port for e in response.node_endpoints} == {n: base + n for n in NODE_IDS}
    _assert_proxy_addresses(response, broker, {n: base + n for n in NODE_IDS}, 3)
    # Node ports learned from node_endpoints alone are live and reach their node.
    node2 = await RawClient.connect("127.0.0.1", base + 2)
    try:
        await node2.roundtrip(request(3, 12, topics=None), correlation_id=77)
    finally:
        await node2.close()
    assert [s.node_id for s in broker.seen if s.correlation_id == 77] == [2]
