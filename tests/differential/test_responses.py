"""Responses the proxy rewrites, read by Apache Kafka 4.3.1's own readers (a client's view).

The broker's answer goes through the handler's rewrite exactly as the exchange applies it
(``exchange.response_transform``); Kafka reads both the broker's bytes and the bytes the
client receives, and the two readings must differ only where the proxy meant them to: every
broker address replaced by the proxy's (``docs/design.md#clients-never-see-a-broker-address``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.proxy.exchange import response_transform
from kafkaguard.proxy.handlers.base import Forward
from kafkaguard.proxy.handlers.responses import entity
from tests.support.handler_harness import HandlerHarness
from tests.support.kafka_referee import KafkaReferee

pytestmark = pytest.mark.kafka

BROKER_HOST = "broker-7.internal"
NODES = (1, 2, 3)


def proxy_address(node_id: int) -> tuple[str, int]:
    """What ``HandlerHarness.advertise_node`` hands out."""
    return "proxy.test", 30000 + node_id


def client_bytes(harness: HandlerHarness, request: Any, response: Any) -> tuple[bytes, bytes]:
    """(the broker's frame, the frame the client receives) for ``request``'s ``response``."""
    verdict = harness.send(request)
    assert isinstance(verdict, Forward), verdict
    broker = codec.encode_response(response, 7)
    if verdict.rewrite is None:
        return broker, broker
    header = harness_header(request)
    return broker, bytes(response_transform(verdict.rewrite, header, verdict.decode_if)(broker))


def harness_header(request: Any) -> Any:
    from kafkaguard.protocol.header import peek_request_header

    return peek_request_header(codec.encode_request(request, 7, "test"))


def rewritten(node: Any, keys: tuple[str, str, str]) -> Any:
    """Kafka's reading of the broker's answer with the proxy's intended change: every node
    (``keys``: its id, host and port fields) at the proxy's address."""
    node_key, host_key, port_key = keys
    if isinstance(node, list):
        return [rewritten(n, keys) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: rewritten(v, keys) for k, v in node.items()}
    if host_key in out and port_key in out and node_key in out and out[node_key] >= 0:
        out[host_key], out[port_key] = proxy_address(out[node_key])
    return out


def assert_only_addresses_changed(
    referee: KafkaReferee, api_key: int, version: int, frames: tuple[bytes, bytes], keys: Any
) -> None:
    broker, client = (referee.response(api_key, version, f) for f in frames)
    assert broker["ok"] and client["ok"], (broker, client)
    assert client["consumed"] == client["size"]
    assert client["body"] == rewritten(broker["body"], keys)
    assert BROKER_HOST not in str(client["body"])


def brokers(schema: type[Any], field: str = "brokers") -> tuple[Any, ...]:
    node_type = codec.nested_type(schema, field)
    return tuple(entity(node_type, node_id=n, host=BROKER_HOST, port=9092 + n) for n in NODES)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata(kafka_reader: KafkaReferee, version: int) -> None:
    harness = HandlerHarness(super_users="User:alice")
    request = codec.make_entity(codec.request_schema(3, version), topics=())
    schema = codec.response_schema(3, version)
    response = codec.make_entity(schema, brokers=brokers(schema))
    frames = client_bytes(harness, request, response)
    assert_only_addresses_changed(kafka_reader, 3, version, frames, ("nodeId", "host", "port"))


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(kafka_reader: KafkaReferee, version: int) -> None:
    harness = HandlerHarness(super_users="User:alice")
    request = codec.make_entity(codec.request_schema(60, version))
    schema = codec.response_schema(60, version)
    response = codec.make_entity(schema, brokers=brokers(schema))
    frames = client_bytes(harness, request, response)
    assert_only_addresses_changed(kafka_reader, 60, version, frames, ("brokerId", "host", "port"))


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator(kafka_reader: KafkaReferee, version: int) -> None:
    harness = HandlerHarness(super_users="User:alice")
    schema = codec.response_schema(10, version)
    if version < 4:
        request = codec.make_entity(codec.request_schema(10, version), key="g")
        response = codec.make_entity(schema, node_id=2, host=BROKER_HOST, port=9094)
    else:
        request = codec.make_entity(codec.request_schema(10, version), coordinator_keys=("g",))
        coordinator = codec.nested_type(schema, "coordinators")
        response = codec.make_entity(
            schema,
            coordinators=(entity(coordinator, key="g", node_id=2, host=BROKER_HOST, port=9094),),
        )
    frames = client_bytes(harness, request, response)
    assert_only_addresses_changed(kafka_reader, 10, version, frames, ("nodeId", "host", "port"))
