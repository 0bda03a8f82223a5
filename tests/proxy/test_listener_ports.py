"""Port-per-broker mapping against a real Tansu broker (node id 111).

* ``base``: after the first Metadata response, node 111 is served on ``base + 111`` — bound
  before the rewritten response leaves, and a connection there reaches Tansu.
* An explicit ``map`` puts the node on exactly the mapped port.
* A node id missing from an explicit map has no proxy address: the proxy closes the client's
  connection (with a log line naming the node) instead of passing the broker's address on, and
  other connections are unaffected.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.tansu import TansuBroker, free_port
from tests.support.proxy_fixture import (
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
    unique_name,
)
from tests.support.raw_client import RawKafkaClient, build_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NODE_ID = 111
METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _port_pair_not_listening() -> tuple[int, int]:
    """A base such that base + 111 is currently free, and that port."""
    port = free_port()
    return port - NODE_ID, port


@pytest.fixture
def proxy_factory(tansu: TansuBroker) -> Iterator[list[RunningProxy]]:
    started: list[RunningProxy] = []
    yield started
    for running in started:
        stop_proxy_thread(running)


def _start(
    tansu: TansuBroker, started: list[RunningProxy], broker_ports: BrokerPorts
) -> RunningProxy:
    running = start_proxy_thread(proxy_config(tansu.address, broker_ports=broker_ports))
    started.append(running)
    return running


def _bootstrap_client(proxy: RunningProxy) -> RawKafkaClient:
    host, port = proxy.bootstrap.rsplit(":", 1)
    return RawKafkaClient(host, int(port))


def _metadata_brokers(client: RawKafkaClient, version: int = 12) -> list[tuple[int, str, int]]:
    _, response = client.request(
        build_request(
            METADATA,
            version,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return [(int(b.node_id), b.host, int(b.port)) for b in response.brokers]


def test_base_plus_node_id(tansu: TansuBroker, proxy_factory: list[RunningProxy]) -> None:
    base, node_port = _port_pair_not_listening()
    proxy = _start(tansu, proxy_factory, BrokerPorts(base, {}))
    listener = proxy.server.listeners[0]
    assert proxy.bootstrap == f"127.0.0.1:{listener.config.port}"  # the listener's own port

    # bound when the node first appears, not before
    assert listener.advertised_node(NODE_ID) is None
    assert _refuses(node_port)

    with _bootstrap_client(proxy) as client:
        brokers = _metadata_brokers(client)
    assert brokers == [(NODE_ID, "127.0.0.1", base + NODE_ID)]
    assert listener.advertised_node(NODE_ID) == ("127.0.0.1", base + NODE_ID)

    # the node port reaches Tansu (its cluster id and node id come back through it)
    with RawKafkaClient("127.0.0.1", node_port) as on_node:
        assert on_node.api_versions()
        _, cluster = on_node.request(
            build_request(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
        )
        assert cluster.cluster_id == "tansu_cluster"
        assert [(b.broker_id, b.host, b.port) for b in cluster.brokers] == [
            (NODE_ID, "127.0.0.1", node_port)
        ]

    # and a real client produces through it
    from confluent_kafka import Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "log_level": 3})
    producer.produce(unique_name("ports"), b"v", on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(15) == 0
    assert errors == [None]


def test_explicit_map(tansu: TansuBroker, proxy_factory: list[RunningProxy]) -> None:
    mapped = free_port()
    proxy = _start(tansu, proxy_factory, BrokerPorts(None, {NODE_ID: mapped, 7: free_port()}))
    with _bootstrap_client(proxy) as client:
        assert _metadata_brokers(client) == [(NODE_ID, "127.0.0.1", mapped)]
        _, found = client.request(build_request(FIND_COORDINATOR, 3, key=unique_name("g")))
        assert (found.node_id, found.host, found.port) == (NODE_ID, "127.0.0.1", mapped)

    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=10_000)
    try:
        metadata = producer.send(unique_name("ports-map"), b"v").get(timeout=15)
    finally:
        producer.close(timeout=5)
    assert metadata.offset == 0
    assert {(b.host, b.port) for b in producer._metadata.brokers()} == {("127.0.0.1", mapped)}


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(METADATA, 0), (METADATA, 12), (FIND_COORDINATOR, 3), (FIND_COORDINATOR, 6),
     (DESCRIBE_CLUSTER, 1)],
)  # fmt: skip
def test_node_missing_from_explicit_map_closes_instead_of_leaking(
    tansu: TansuBroker,
    proxy_factory: list[RunningProxy],
    caplog: pytest.LogCaptureFixture,
    api_key: int,
    version: int,
) -> None:
    other = free_port()
    proxy = _start(tansu, proxy_factory, BrokerPorts(None, {NODE_ID + 1: other}))
    request = build_request(
        api_key,
        version,
        topics=None if version else (),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
        key=unique_name("g"),
        coordinator_keys=(unique_name("g"),),
    )
    with caplog.at_level(logging.INFO, logger="kafkaguard"), _bootstrap_client(proxy) as client:
        client.send(request)
        received = b""
        client.sock.settimeout(10)
        while chunk := client.sock.recv(65536):  # EOF: the proxy closed the connection
            received += chunk
        # nothing at all reached the client, so no broker address either
        assert received == b""
        assert str(tansu.port).encode() not in received

        # the proxy keeps serving other connections
        with _bootstrap_client(proxy) as neighbour:
            assert neighbour.api_versions()

    deadline = time.monotonic() + 5
    while not any("no proxy port for upstream node 111" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.05)
    closing = [r for r in caplog.records if "closing connection" in r.getMessage()]
    assert closing, [r.getMessage() for r in caplog.records]
    assert closing[0].levelno >= logging.WARNING
    assert proxy.server.listeners[0].advertised_node(NODE_ID) is None
    assert _refuses(other)  # no port was opened for the node that is in the map either


def test_node_port_in_use_closes_then_recovers(
    tansu: TansuBroker, proxy_factory: list[RunningProxy], caplog: pytest.LogCaptureFixture
) -> None:
    """A node port that cannot be bound fails closed (no address is sent), and the proxy
    binds it on a later Metadata once the port is free."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    node_port = blocker.getsockname()[1]
    proxy = _start(tansu, proxy_factory, BrokerPorts(node_port - NODE_ID, {}))
    try:
        with (
            caplog.at_level(logging.INFO, logger="kafkaguard"),
            _bootstrap_client(proxy) as client,
            pytest.raises(EOFError),
        ):
            _metadata_brokers(client)
    finally:
        blocker.close()
    assert any(f"cannot bind port {node_port}" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]

    with _bootstrap_client(proxy) as client:
        assert _metadata_brokers(client) == [(NODE_ID, "127.0.0.1", node_port)]
    with RawKafkaClient("127.0.0.1", node_port) as on_node:
        assert on_node.api_versions()
