"""Responses the proxy rewrites, read by Apache Kafka 4.3.1's own readers (a client's view).

The broker's answer goes through the handler's rewrite exactly as the exchange applies it
(``dispatch.response_transform``); Kafka reads both the broker's bytes and the bytes the
client receives, and the two readings must differ only where the proxy meant them to: every
broker address replaced by the proxy's (``docs/design.md#clients-never-see-a-broker-address``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.core.dispatch import response_transform
from kafkaguard.proxy.handlers.support.base import Forward
from kafkaguard.proxy.handlers.support.responses import entity
from tests.support.exchange_driver import Driver, to_broker, to_client
from tests.support.fuzz import differential
from tests.support.fuzz.frames import record_batch
from tests.support.handler_harness import HandlerHarness, acl
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


# -- through the exchange: Produce/Fetch node_endpoints and a merged partial Produce -----------


def exchanged(driver: Driver, request: Any, answer: Any) -> tuple[bytes, bytes]:
    """(the broker's frame, the bytes the client receives): ``request`` sent by the client,
    ``answer(forwarded body)`` the broker's response to what the proxy forwarded."""
    frame = codec.encode_request(request, 7, "c")
    forwarded = to_broker(driver.client(frame))
    assert len(forwarded) == 1, forwarded
    header = peek_request_header(forwarded[0])
    body = codec.decode_request(forwarded[0], header.api_key, header.api_version)
    broker = codec.encode_response(answer(body), header.correlation_id)
    return broker, to_client(driver.broker(broker))


def endpoints(schema: type[Any]) -> tuple[Any, ...]:
    node_type = codec.nested_type(schema, "node_endpoints")
    return tuple(
        codec.make_entity(node_type, node_id=n, host=BROKER_HOST, port=9092 + n) for n in NODES
    )


@pytest.mark.parametrize(("api_key", "version"), [(0, 10), (0, 11), (0, 12), (1, 16), (1, 17)])
def test_node_endpoints(kafka_reader: KafkaReferee, api_key: int, version: int) -> None:
    driver = Driver(super_users="User:alice")
    driver.connect()
    values: dict[str, Any] = {"acks": 1} if api_key == 0 else {"max_bytes": 1 << 20}
    request = codec.make_entity(codec.request_schema(api_key, version), **values)
    schema = codec.response_schema(api_key, version)
    frames = exchanged(
        driver, request, lambda _: codec.make_entity(schema, node_endpoints=endpoints(schema))
    )
    assert_only_addresses_changed(
        kafka_reader, api_key, version, frames, ("nodeId", "host", "port")
    )


@pytest.mark.parametrize("version", [3, 9, 12])
def test_partial_produce_merges_the_denied_topic(kafka_reader: KafkaReferee, version: int) -> None:
    """A Produce to an allowed and a denied topic: the broker sees the allowed one, the client
    reads the broker's answer for it and TOPIC_AUTHORIZATION_FAILED for the other."""
    driver = Driver([acl("User:alice", "WRITE", "TOPIC", "fuzz-ok")])
    driver.connect()
    schema = codec.request_schema(0, version)
    topic_type = codec.nested_type(schema, "topic_data")
    partition_type = codec.nested_type(topic_type, "partition_data")

    def topic(name: str) -> Any:
        partition = codec.make_entity(partition_type, index=0, records=record_batch())
        return codec.make_entity(topic_type, name=name, partition_data=(partition,))

    request = codec.make_entity(schema, acks=1, topic_data=(topic("fuzz-ok"), topic("guarded")))
    response_schema = codec.response_schema(0, version)
    response_topic = codec.nested_type(response_schema, "responses")
    response_partition = codec.nested_type(response_topic, "partition_responses")

    def answer(forwarded: Any) -> Any:
        assert [t.name for t in forwarded.topic_data] == ["fuzz-ok"]
        partition = codec.make_entity(response_partition, index=0, base_offset=41)
        answered = codec.make_entity(
            response_topic, name="fuzz-ok", partition_responses=(partition,)
        )
        return codec.make_entity(response_schema, responses=(answered,))

    broker_frame, client_frame = exchanged(driver, request, answer)
    broker, client = (kafka_reader.response(0, version, f) for f in (broker_frame, client_frame))
    assert client["ok"] and client["consumed"] == client["size"], client
    by_name = {t["name"]: t for t in client["body"]["responses"]}
    assert by_name["fuzz-ok"] == broker["body"]["responses"][0]
    denied = by_name["guarded"]["partitionResponses"]
    assert [(p["index"], p["errorCode"]) for p in denied] == [(0, 29)]
    rest = {k: v for k, v in client["body"].items() if k != "responses"}
    assert rest == {k: v for k, v in broker["body"].items() if k != "responses"}


def test_every_served_response_reads_and_re_encodes_as_kafka_reads_it(
    kafka_reader: KafkaReferee,
) -> None:
    """Plausible broker responses to every served (api key, version): kio (the rewrites'
    input) reads each field as Kafka's client does, and the proxy's re-encoding of it reads
    the same again (what a rewrite sends for the fields it does not change)."""
    figures = differential.run_responses(kafka_reader, differential.response_frames(24, 4))
    assert figures.disagreements == 0, figures.report()
    assert figures.categories[differential.AGREE_ACCEPT] == figures.frames > 1000


def test_hostile_responses_disagree_only_as_documented(kafka_reader: KafkaReferee) -> None:
    """Broker responses with a length, count, tag section or integer made hostile (and byte
    mutations): kio and Kafka's client read them alike but for the documented deviations."""
    figures = differential.run_responses(kafka_reader, differential.mutated_responses(24, 20_000))
    assert figures.known["UNKNOWN"] == 0, figures.report()
    assert figures.categories[differential.AGREE_ACCEPT] > 5_000
    assert figures.categories[differential.AGREE_REFUSE] > 5_000


def test_an_error_code_newer_than_kafka_4_3_1(kafka_reader: KafkaReferee) -> None:
    """A documented deviation (docs/deviations.md, "An error code outside Kafka 4.3.1's
    ``Errors``"): Kafka's client reads any int16, kio refuses a code it does not define (only
    a newer broker could send one). The suite recognises it as that deviation, nothing else."""
    schema = codec.response_schema(10, 0)
    frame = codec.encode_response(codec.make_entity(schema, node_id=1, host="h", port=1), 7)
    at = 8  # after the size and the correlation id: the error code (v0 has no throttle time)
    assert frame[at : at + 2] == b"\x00\x00"
    frame = frame[:at] + (134).to_bytes(2, "big") + frame[at + 2 :]
    figures = differential.run_responses(kafka_reader, [("find_coordinator v0", 10, 0, frame)])
    assert figures.categories[differential.PROXY_REFUSES] == 1, figures.report()
    assert figures.known == {differential.ERROR_CODE: 1}, figures.report()
