"""Port-per-broker mapping against a real Tansu broker (node id 111).

* ``base``: after the first Metadata response, node 111 is served on ``base + 111`` — bound
  before the rewritten response leaves, and a connection there reaches Tansu.
* An explicit ``map`` puts the node on exactly the mapped port.
* A node id missing from an explicit map has no proxy address: the proxy closes the client's
  connection (with a log line naming the node) instead of passing the broker's address on, and
  other connections are unaffected.
* The ``map`` in YAML (issue #15 part 3): integer node ids as YAML writes them; check-config
  refuses a node id that is not an integer, a port given twice, and a port another listener
  (or the admin listener) already has; it warns when a ``base`` range reaches another port.
  config.example.yaml's commented map, uncommented, is valid and serves a three-node cluster.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from kafkaguard.cli import main
from kafkaguard.config_tree import ConfigSection
from kafkaguard.policy.stores.acl_file_format import format_acl_text
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import (
    BrokerPorts,
    UpstreamConfig,
    config_warnings,
    load_config,
    parse_config,
)
from kafkaguard.tansu import TansuBroker, free_port
from tests.support.fake_broker import FakeBroker, RawClient, request
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
    assert listener.node_ports.advertised_node(NODE_ID) is None
    assert _refuses(node_port)

    with _bootstrap_client(proxy) as client:
        brokers = _metadata_brokers(client)
    assert brokers == [(NODE_ID, "127.0.0.1", base + NODE_ID)]
    assert listener.node_ports.advertised_node(NODE_ID) == ("127.0.0.1", base + NODE_ID)

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
    assert proxy.server.listeners[0].node_ports.advertised_node(NODE_ID) is None
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
    assert any(
        f"cannot bind 127.0.0.1:{node_port} (node {NODE_ID}'s port)" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]

    with _bootstrap_client(proxy) as client:
        assert _metadata_brokers(client) == [(NODE_ID, "127.0.0.1", node_port)]
    with RawKafkaClient("127.0.0.1", node_port) as on_node:
        assert on_node.api_versions()


# -- broker_ports in the configuration file (check-config) ------------------------------------
EXAMPLE = Path(__file__).parents[3] / "config.example.yaml"


def _config(listeners: str, extra: str = "") -> str:
    return f"upstream: {{bootstrap_servers: ['127.0.0.1:9092']}}\nlisteners:\n{listeners}{extra}"


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["check-config", "--config", str(path)])
    return code, capsys.readouterr().err


def test_map_with_yaml_integer_keys() -> None:
    text = _config("  - {name: A, port: 9192, broker_ports: {map: {0: 9300, 1: 9301, 17: 9317}}}\n")
    (listener,) = parse_config(ConfigSection.from_text(text, "c.yaml")).listeners
    assert dict(listener.broker_ports.explicit) == {0: 9300, 1: 9301, 17: 9317}
    assert listener.broker_ports.port_for(17) == 9317 and listener.broker_ports.port_for(2) is None
    block = _config("  - name: A\n    port: 9192\n    broker_ports:\n      map:\n        0: 9300\n")
    (listener,) = parse_config(ConfigSection.from_text(block, "c.yaml")).listeners
    assert dict(listener.broker_ports.explicit) == {0: 9300}


@pytest.mark.parametrize(
    ("broker_ports", "message"),
    [
        ("{map: {broker-0: 9300}}", "node id 'broker-0' is not an integer"),
        ("{map: {-1: 9300}}", "node id '-1' is not an integer"),
        ("{map: {1.5: 9300}}", "node id '1.5' is not an integer"),
        ("{map: {0: 9300, 1: 9300}}", "nodes 0 and 1 both map to port 9300"),
        ("{map: {0: 9192}}", "node 0: port 9192 is the listener's own port"),
        ("{map: {0: 70000}}", "node 0: 70000 is not a TCP port"),
        ("{map: {0: '9300'}}", "node 0: '9300' is not a TCP port"),
        ("{map: {}}", "must map node ids"),
        ("{map: [9300, 9301]}", "must map node ids"),
        ("{base: 9200, map: {0: 9300}}", "either base or map"),
        ("{base: 70000}", "base: must be a TCP port"),
    ],
)
def test_check_config_refuses_bad_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broker_ports: str, message: str
) -> None:
    text = _config(f"  - name: A\n    port: 9192\n    broker_ports: {broker_ports}\n")
    code, err = _check(tmp_path, text, capsys)
    assert code == 2, err
    assert re.search(r"config.yaml:\d+ listeners\[0\]\.broker_ports", err), err
    assert message in err, err


@pytest.mark.parametrize(
    ("listeners", "extra", "message"),
    [
        (
            "  - {name: A, port: 9192, broker_ports: {map: {0: 9300}}}\n"
            "  - {name: B, port: 9300}\n",
            "",
            "listeners[1].port: port 9300 (bootstrap port) is also listener A's node 0's port",
        ),
        (
            "  - {name: A, port: 9192, broker_ports: {map: {0: 9300}}}\n"
            "  - {name: B, port: 9193, broker_ports: {map: {5: 9300}}}\n",
            "",
            "listeners[1].broker_ports: port 9300 (node 5's port) is also listener A's node 0's",
        ),
        (
            "  - {name: A, port: 9192}\n  - {name: B, port: 9192, bind_host: 0.0.0.0, "
            "advertised_host: kafka.example}\n",
            "",
            "port 9192 (bootstrap port) is also listener A's bootstrap port",
        ),
        (
            "  - {name: A, port: 9192, broker_ports: {map: {0: 9404}}}\n",
            "admin: {port: 9404}\n",
            "admin.port: port 9404 is also listener A's node 0's port",
        ),
    ],
)
def test_check_config_refuses_ports_of_other_listeners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listeners: str, extra: str, message: str
) -> None:
    code, err = _check(tmp_path, _config(listeners, extra), capsys)
    assert (code, message in err) == (2, True), err


def test_same_port_on_other_addresses_is_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listeners = (
        "  - {name: A, port: 9192, bind_host: 127.0.0.1, broker_ports: {map: {0: 9300}}}\n"
        "  - {name: B, port: 9192, bind_host: 127.0.0.2, broker_ports: {map: {0: 9300}}}\n"
        "  - {name: C, port: 9300, bind_host: '::1'}\n"
    )
    code, err = _check(tmp_path, _config(listeners), capsys)
    assert (code, err) == (0, "")


def test_check_config_warns_about_base_ranges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A base range is checked for node ids 0..99 (the file does not say which ids exist)."""
    listeners = (
        "  - {name: A, port: 9192, broker_ports: {base: 9200}}\n"  # 9200..9299
        "  - {name: B, port: 9250, broker_ports: {base: 9500}}\n"  # bootstrap in A's range
        "  - {name: C, port: 9193, broker_ports: {map: {0: 9310}}}\n"  # outside A's range
        "  - {name: D, port: 9194, broker_ports: {base: 9550}}\n"  # overlaps B's range
        "  - {name: E, port: 9195, broker_ports: {base: 9703}}\n"  # the admin port: node 1
    )
    code, err = _check(tmp_path, _config(listeners, "admin: {port: 9704}\n"), capsys)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 3, err
    assert (
        "listener A: broker_ports base 9200 would serve node 50 on port 9250, listener B's "
        "bootstrap port" in err
    )
    assert (
        "listeners B and D: broker_ports bases 9500 and 9550 both serve port 9550 (node 50 "
        "of B, node 0 of D)" in err
    )
    assert (
        "listener E: broker_ports base 9703 would serve node 1 on port 9704, the admin "
        "listener's port" in err
    )


def _example_with_map() -> tuple[str, dict[int, int]]:
    """config.example.yaml with its commented ``map:`` in place of its ``base:``."""
    example = EXAMPLE.read_text(encoding="utf-8")
    (commented,) = re.findall(r"^ *# map: (\{.*\})$", example, re.MULTILINE)
    mapped = yaml.safe_load(commented)
    assert all(isinstance(node, int) for node in mapped), mapped  # YAML int keys, as written
    text = re.sub(r"^( *)base: 9200$", r"\1# base: 9200", example, count=1, flags=re.MULTILINE)
    text = re.sub(r"^( *)# map: ", r"\1map: ", text, count=1, flags=re.MULTILINE)
    assert text.count("\n      map: {") == 1
    return text, mapped


def test_example_map_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, mapped = _example_with_map()
    (tmp_path / "acls.yaml").write_text(format_acl_text([]), encoding="utf-8")  # opened by check
    code, err = _check(tmp_path, text, capsys)
    assert (code, err) == (0, "")
    config = load_config(tmp_path / "config.yaml")
    assert dict(config.listeners[0].broker_ports.explicit) == mapped == {0: 9300, 1: 9301, 2: 9302}
    assert config_warnings(config) == []


async def test_example_map_serves_a_three_node_cluster(tmp_path: Path) -> None:
    """The example file with its map, run in front of a three-node cluster whose node ids are
    the map's. Its fixed ports (9192, 9300-9302) may be taken on a shared machine, so each is
    replaced by a free one; everything else is the example's, its ACL store an empty file."""
    text, mapped = _example_with_map()
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "acls.yaml").write_text(format_acl_text([]), encoding="utf-8")
    example = load_config(path)
    async with FakeBroker(tuple(mapped)) as broker:
        ports = {node: free_port() for node in mapped}
        listener = replace(
            example.listeners[0],
            port=free_port(),
            broker_ports=BrokerPorts(None, ports),
        )
        config = replace(
            example, listeners=(listener,), upstream=UpstreamConfig((broker.bootstrap,), 5.0)
        )
        server = ProxyServer(config)
        await server.start(probe_attempts=1)
        try:
            client = await RawClient.connect("127.0.0.1", listener.port)
            try:
                metadata = await client.roundtrip(request(3, 12, topics=None))
            finally:
                await client.close()
            assert {b.node_id: (b.host, b.port) for b in metadata.brokers} == {
                node: ("127.0.0.1", port) for node, port in ports.items()
            }
            for node, port in ports.items():
                on_node = await RawClient.connect("127.0.0.1", port)
                try:
                    await on_node.roundtrip(request(60, 1), correlation_id=500 + node)
                finally:
                    await on_node.close()
                assert [s.node_id for s in broker.seen if s.correlation_id == 500 + node] == [node]
        finally:
            await server.close()
    assert not broker.errors
