"""``routing: sni`` in front of Tansu: the TLS server name picks the upstream node on the
listener's one port, responses advertise the pattern's names, and a ClientHello with an
unknown name, no name, or no ClientHello at all gets a TLS alert and a close (counted as
``sni``). The three-broker run with Kafka's own clients is tests/kafka/test_sni_routing.py."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaguard.certs import tooling
from kafkaguard.certs.tls import TlsConfig
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.config import BrokerPorts
from kafkaguard.proxy.core.commands import CloseCause
from kafkaguard.proxy.edge.sni import SniRouting
from kafkaguard.tansu import TansuBroker
from tests.support.proxy_fixture import (
    TANSU_NODE_ID,
    RunningProxy,
    proxy_config,
    start_proxy_thread,
    stop_proxy_thread,
)
from tests.support.raw_client import RawKafkaClient, addresses, build_request

pytestmark = pytest.mark.integration

BOOTSTRAP = "bootstrap.kafka.test"
PATTERN = "broker-$(nodeId).kafka.test"
NODE_NAME = f"broker-{TANSU_NODE_ID}.kafka.test"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sni-certs")
    tooling.init_ca(directory)
    tooling.issue_server(directory, hosts=["*.kafka.test"], ips=[])
    return directory


@pytest.fixture
def proxy(tansu: TansuBroker, ca: Path) -> Iterator[RunningProxy]:
    config = proxy_config(tansu.address, name="EXTERNAL")
    listener = dataclasses.replace(
        config.listeners[0],
        security_protocol="SSL",
        advertised_host=BOOTSTRAP,
        broker_ports=BrokerPorts(None, {}),
        ssl=TlsConfig(cert_file=ca / "server.pem", key_file=ca / "server-key.pem"),
        sni=SniRouting.parse(BOOTSTRAP, PATTERN),
    )
    running = start_proxy_thread(dataclasses.replace(config, listeners=(listener,)))
    try:
        yield running
    finally:
        stop_proxy_thread(running)


def _client(proxy: RunningProxy, ca: Path, server_name: str | None) -> RawKafkaClient:
    context = ssl.create_default_context(cafile=ca / "ca.pem")
    if server_name is None:
        context.check_hostname = False  # the refusal, not the client, must stop it
    return RawKafkaClient(
        "127.0.0.1", _port(proxy), tls=context, server_name=server_name, timeout_s=5
    )


def _port(proxy: RunningProxy) -> int:
    return int(proxy.bootstrap.rsplit(":", 1)[1])


def _metadata(client: RawKafkaClient) -> object:
    _, response = client.request(
        build_request(
            3,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return response


def test_names_route_and_are_advertised_on_the_one_port(proxy: RunningProxy, ca: Path) -> None:
    with _client(proxy, ca, BOOTSTRAP) as client:
        response = _metadata(client)
    found = {(host, port) for _, host, port in addresses(response)}
    assert found == {(NODE_NAME, _port(proxy))}
    # The node's own name reaches the node: a request for its partitions is answered there.
    with _client(proxy, ca, NODE_NAME.upper()) as client:  # names compare case-insensitively
        assert {(h, p) for _, h, p in addresses(_metadata(client))} == found
        _, coordinator = client.request(build_request(10, 3, key="g", key_type=0))
    assert coordinator.error_code == ErrorCode.none
    assert (coordinator.host, coordinator.port) == (NODE_NAME, _port(proxy))
    assert proxy.server.listeners[0].counters[CloseCause.SNI] == 0


def test_a_node_not_seen_yet_is_asked_for(proxy: RunningProxy, ca: Path) -> None:
    """A fresh proxy has answered no Metadata: the node's name still reaches the node (the
    proxy asks the cluster for its brokers); a node the cluster does not have is closed."""
    with _client(proxy, ca, NODE_NAME) as client:
        assert {(h, p) for _, h, p in addresses(_metadata(client))} == {(NODE_NAME, _port(proxy))}
    with _client(proxy, ca, "broker-5.kafka.test") as client, pytest.raises(EOFError):
        _metadata(client)
    _wait_counted(proxy, 1, CloseCause.UPSTREAM)


@pytest.mark.parametrize(
    "server_name",
    ["unknown.kafka.test", "broker-0111.kafka.test", "broker-x.kafka.test", None],
)
def test_unroutable_names_get_an_alert(
    proxy: RunningProxy, ca: Path, server_name: str | None
) -> None:
    with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
        _client(proxy, ca, server_name)
    _wait_counted(proxy, 1)


def test_plaintext_kafka_on_the_tls_port_is_refused(proxy: RunningProxy) -> None:
    with socket.create_connection(("127.0.0.1", _port(proxy)), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        assert sock.recv(64) == bytes((21, 3, 3, 0, 2, 2, 112))  # the alert, then the close
        assert sock.recv(64) == b""
    _wait_counted(proxy, 1)


def _wait_counted(proxy: RunningProxy, expected: int, cause: CloseCause = CloseCause.SNI) -> None:
    deadline = time.monotonic() + 5
    counters = proxy.server.listeners[0].counters
    while counters[cause] < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert counters[cause] == expected
