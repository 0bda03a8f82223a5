"""The Metadata request skim and response walk and splice (kafkaguard/protocol/skim/metadata.py)
against kio's reading and writing of the same messages and against Kafka 4.3.1's own readers,
every version; and each frame they must not take on (the caller then decodes it)."""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.protocol.skim.metadata import (
    NOT_REQUESTED,
    MetadataWalk,
    skim_metadata_request,
    walk_metadata_response,
)
from kafkaguard.proxy.handlers.support.responses import entity
from tests.support.data_path import nested
from tests.support.kafka_referee import KafkaReferee

VERSIONS = range(0, 14)
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
OPS = 0x0BEE
CLUSTER_OPS = 0x0CAF


def proxy_address(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "proxy.test", 30000 + node_id


def same_address(node_id: int, host: str, port: int) -> tuple[str, int]:
    return host, port


def response(version: int, *, host: str = "broker-1.internal") -> Any:
    """Two brokers (one with a rack), two topics (one with partitions and an id, one missing)
    and, from v12, an unknown id's entry without a name; KIP-430 fields set (as an
    authorizer-less broker may set them)."""
    schema = codec.response_schema(3, version)
    broker_t, topic_t = nested(schema, "brokers"), nested(schema, "topics")
    partition_t = nested(topic_t, "partitions")
    partitions = tuple(
        entity(
            partition_t,
            partition_index=i,
            leader_id=1,
            leader_epoch=7,
            replica_nodes=(1, 2),
            isr_nodes=(1,),
            offline_replicas=(2,),
        )
        for i in range(2)
    )
    topics = [
        entity(
            topic_t,
            name="orders",
            topic_id=TOPIC_ID,
            is_internal=False,
            partitions=partitions,
            topic_authorized_operations=OPS,
        ),
        entity(
            topic_t,
            ErrorCode.unknown_topic_or_partition,
            name="missing",
            topic_id=None,
            partitions=(),
            topic_authorized_operations=OPS,
        ),
    ]
    if version >= 12:
        topics.append(
            entity(
                topic_t,
                ErrorCode.unknown_topic_id,
                name=None,
                topic_id=uuid.uuid4(),
                partitions=(),
                topic_authorized_operations=OPS,
            )
        )
    return entity(
        schema,
        throttle_time=timedelta(milliseconds=5),
        brokers=(
            entity(broker_t, node_id=1, host=host, port=9092, rack="rack-a"),
            entity(broker_t, node_id=2, host="broker-2.internal", port=9093, rack=None),
        ),
        cluster_id="cluster",
        controller_id=2,
        topics=tuple(topics),
        cluster_authorized_operations=CLUSTER_OPS,
    )


def walked(frame: bytes, version: int) -> MetadataWalk:
    walk = walk_metadata_response(frame, version)
    assert walk is not None
    return walk


@pytest.mark.parametrize("version", VERSIONS)
def test_the_walk_reads_what_kio_reads(version: int) -> None:
    body = response(version)
    walk = walked(codec.encode_response(body, 7), version)
    assert [(b.node_id, b.host, b.port) for b in walk.brokers] == [
        (b.node_id, b.host, b.port) for b in body.brokers
    ]
    assert [(t.error_code, t.name, t.topic_id) for t in walk.topics] == [
        (t.error_code, t.name, getattr(t, "topic_id", None)) for t in body.topics
    ]
    assert all((t.ops_at >= 0) == (version >= 8) for t in walk.topics)
    assert (walk.cluster_ops_at >= 0) == (8 <= version <= 10)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unchanged_splice_is_the_brokers_frame(version: int) -> None:
    frame = codec.encode_response(response(version), 7)
    walk = walked(frame, version)
    ops = [OPS] * len(walk.topics)
    assert walk.splice(frame, same_address, walk.topics, ops, CLUSTER_OPS) == frame


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("host", ["b", "a-broker-name-longer-than-the-proxy-s.example.com"])
def test_the_splice_is_what_kio_encodes_for_the_rewritten_response(version: int, host: str) -> None:
    """Addresses, a subset of the topics in another order and the KIP-430 fields changed:
    byte for byte the frame the decoded path would encode."""
    body = response(version, host=host)
    frame = memoryview(codec.encode_response(body, 7))
    walk = walked(frame, version)
    chosen = [walk.topics[1], walk.topics[0]]
    sent = walk.splice(frame, proxy_address, chosen, [NOT_REQUESTED, 5], 0)
    brokers = tuple(replace(b, host="proxy.test", port=30000 + b.node_id) for b in body.brokers)
    topics = (body.topics[1], body.topics[0])
    if version >= 8:
        topics = (
            replace(topics[0], topic_authorized_operations=NOT_REQUESTED),
            replace(topics[1], topic_authorized_operations=5),
        )
    expected = replace(body, brokers=brokers, topics=topics)
    if 8 <= version <= 10:
        expected = replace(expected, cluster_authorized_operations=0)
    assert sent == codec.encode_response(expected, 7)
    no_topics = walk.splice(frame, proxy_address, [], [], NOT_REQUESTED)
    assert codec.decode_response(no_topics, 3, version).topics == ()


def framed(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def edited(frame: bytes, at: int, old: bytes, new: bytes) -> bytes:
    """``frame`` with ``old`` at ``at`` replaced by ``new``, its size prefix corrected."""
    assert frame[at : at + len(old)] == old
    return framed(frame[4:at] + new + frame[at + len(old) :])


def _null_host(frame: bytes, walk: MetadataWalk) -> bytes:
    raw = walk.brokers[0].host.encode()
    if walk.version >= 9:
        return edited(frame, walk.brokers_start + 4, bytes([len(raw) + 1]) + raw, b"\x00")
    return edited(frame, walk.brokers_start + 4, len(raw).to_bytes(2, "big") + raw, b"\xff\xff")


def _tagged_broker(frame: bytes, walk: MetadataWalk) -> bytes:
    return edited(frame, walk.brokers[0].end - 1, b"\x00", b"\x01\x05\x00")


def _tagged_top_level(frame: bytes, walk: MetadataWalk) -> bytes:
    return edited(frame, len(frame) - 1, b"\x00", b"\x01\x05\x01\x00")


def _bad_utf8(frame: bytes, walk: MetadataWalk) -> bytes:
    at = bytes(frame).index(b"orders")
    return edited(frame, at, b"o", b"\xff")


def _trailing(frame: bytes, walk: MetadataWalk) -> bytes:
    return framed(frame[4:] + b"\x00")


def _hostile_count(frame: bytes, walk: MetadataWalk) -> bytes:
    at = walk.topics_count_at
    flexible = walk.version >= 9
    old = bytes(frame[at : at + (1 if flexible else 4)])
    return edited(frame, at, old, b"\xff\xff\xff\x7f" if flexible else b"\x7f\xff\xff\xff")


def _null_topics(frame: bytes, walk: MetadataWalk) -> bytes:
    at = walk.topics_count_at
    flexible = walk.version >= 9
    old = bytes(frame[at : at + (1 if flexible else 4)])
    return edited(frame, at, old, b"\x00" if flexible else b"\xff\xff\xff\xff")


REFUSED: dict[str, tuple[Callable[[bytes, MetadataWalk], bytes], range]] = {
    "null host": (_null_host, VERSIONS),
    "tagged field on a broker": (_tagged_broker, range(9, 14)),
    "top-level tagged field": (_tagged_top_level, range(9, 14)),
    "topic name not UTF-8": (_bad_utf8, VERSIONS),
    "bytes after the body": (_trailing, VERSIONS),
    "a count larger than the frame": (_hostile_count, VERSIONS),
    "null topics": (_null_topics, VERSIONS),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_frames_the_walk_does_not_take_on(case: str) -> None:
    make, versions = REFUSED[case]
    for version in versions:
        frame = codec.encode_response(response(version), 7)
        assert walk_metadata_response(make(frame, walked(frame, version)), version) is None, version


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_refused(version: int) -> None:
    frame = codec.encode_response(response(version), 7)
    for end in range(8, len(frame)):
        assert walk_metadata_response(framed(frame[4:end]), version) is None, end


def test_versions_it_does_not_know_are_refused() -> None:
    frame = codec.encode_response(response(13), 7)
    assert walk_metadata_response(frame, 14) is None
    assert walk_metadata_response(frame, -1) is None


# -- Kafka 4.3.1's own reader (MetadataResponseData, the client's) ---------------------------


def kafka_uuid(value: uuid.UUID | None) -> str:
    """``Uuid.toString``: URL-safe base64 without padding (the zero id for ``None``)."""
    raw = (value or uuid.UUID(int=0)).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def assert_kafka_reads_the_walk(answer: dict[str, Any], walk: MetadataWalk) -> None:
    assert answer["ok"], answer
    body = answer["body"]
    assert [(b["nodeId"], b["host"], b["port"]) for b in body["brokers"]] == [
        (b.node_id, b.host, b.port) for b in walk.brokers
    ]
    assert [(t["errorCode"], t["name"]) for t in body["topics"]] == [
        (t.error_code, t.name) for t in walk.topics
    ]
    if walk.version >= 10:
        assert [t["topicId"] for t in body["topics"]] == [
            kafka_uuid(t.topic_id) for t in walk.topics
        ]


@pytest.mark.kafka
def test_kafkas_reader_reads_the_splice_as_the_intended_change(kafka_reader: KafkaReferee) -> None:
    """Every version: Kafka reads the broker's frame as the walk does, and reads the spliced
    frame as the broker's with exactly the proxy's changes (addresses, the topics chosen, the
    KIP-430 fields), the whole frame consumed."""
    ops, walks = [], []
    for version in VERSIONS:
        frame = codec.encode_response(response(version), 7)
        walk = walked(frame, version)
        sent = walk.splice(frame, proxy_address, [walk.topics[-1], walk.topics[0]], [5, 6], 0)
        ops += [kafka_reader.response_op(3, version, f) for f in (frame, sent)]
        walks.append(walk)
    answers = kafka_reader.batch(ops)
    for walk, broker, client in zip(walks, answers[::2], answers[1::2], strict=True):
        assert_kafka_reads_the_walk(broker, walk)
        assert client["ok"] and client["consumed"] == client["size"], client
        expected = copy.deepcopy(broker["body"])
        for node in expected["brokers"]:
            node["host"], node["port"] = proxy_address(node["nodeId"], "", 0)
        expected["topics"] = [expected["topics"][-1], expected["topics"][0]]
        if walk.version >= 8:
            expected["topics"][0]["topicAuthorizedOperations"] = 5
            expected["topics"][1]["topicAuthorizedOperations"] = 6
        if 8 <= walk.version <= 10:
            expected["clusterAuthorizedOperations"] = 0
        assert client["body"] == expected, walk.version


@pytest.mark.kafka
@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_what_the_walk_takes_on_kafka_reads_alike(kafka_reader: KafkaReferee, version: int) -> None:
    """Every one-byte change of a frame and every refused case: a frame the walk takes on is
    one Kafka's reader reads whole, to the same brokers and topics (the walk never accepts
    what Kafka refuses); the walk may refuse more (the caller decodes those)."""
    frame = codec.encode_response(response(version), 7)
    walk = walked(frame, version)
    frames = [
        frame[:at] + bytes([frame[at] ^ flip]) + frame[at + 1 :]
        for at in range(8, len(frame))
        for flip in (0x01, 0x80)
    ]
    frames += [make(frame, walk) for make, versions in REFUSED.values() if version in versions]
    taken = [(f, w) for f in frames if (w := walk_metadata_response(f, version)) is not None]
    assert taken  # names, hosts, ports, counts of int32 lists: changes the walk reads through
    answers = kafka_reader.batch([kafka_reader.response_op(3, version, f) for f, _ in taken])
    for (_, w), answer in zip(taken, answers, strict=True):
        assert answer.get("consumed") == answer.get("size"), answer
        assert_kafka_reads_the_walk(answer, w)


# -- requests ----------------------------------------------------------------------------------


def metadata_request(version: int, names: tuple[str | None, ...] | None, **flags: bool) -> bytes:
    """A client's MetadataRequest frame: ``names`` (a ``None`` name with a topic id, v10+)."""
    schema = codec.request_schema(3, version)
    topic_t = nested(schema, "topics")
    topics = None
    if names is not None:
        topics = tuple(
            entity(topic_t, name=n, topic_id=None if n is not None else TOPIC_ID) for n in names
        )
    return codec.encode_request(entity(schema, topics=topics, **flags), 7, "client")


def request_cases(version: int) -> list[bytes]:
    cases = [metadata_request(version, ("orders", "b", "orders")), metadata_request(version, ())]
    if version >= 1:
        cases.append(metadata_request(version, None))
    if version >= 10:
        cases.append(metadata_request(version, ("orders", None)))
    for auto, cluster, topics in ((False, True, False), (True, False, True)):
        flags = {
            "allow_auto_topic_creation": auto,
            "include_cluster_authorized_operations": cluster,
            "include_topic_authorized_operations": topics,
        }
        cases.append(metadata_request(version, ("orders",), **flags))
    return cases


def skimmed(frame: bytes, version: int) -> Any:
    return skim_metadata_request(frame, version, peek_request_header(frame).client_id_end)


def read_by_kio(frame: bytes, version: int) -> tuple[Any, ...]:
    body: Any = codec.decode_request(frame, 3, version)
    return (
        None
        if body.topics is None
        else [(t.name, getattr(t, "topic_id", None)) for t in body.topics],
        getattr(body, "allow_auto_topic_creation", True),
        getattr(body, "include_cluster_authorized_operations", False),
        getattr(body, "include_topic_authorized_operations", False),
    )


def read_by_skim(skim: Any) -> tuple[Any, ...]:
    return (
        None if skim.topics is None else [(t.name, t.topic_id) for t in skim.topics],
        skim.allow_auto_topic_creation,
        skim.include_cluster_authorized_operations,
        skim.include_topic_authorized_operations,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_request_skim_reads_what_kio_reads(version: int) -> None:
    for frame in request_cases(version):
        skim = skimmed(frame, version)
        assert skim is not None
        assert read_by_skim(skim) == read_by_kio(frame, version)


def test_the_request_skim_skips_unknown_tagged_fields_and_what_follows_the_body() -> None:
    frame = metadata_request(12, ("orders",))
    tagged = framed(frame[4:-1] + b"\x01\x07\x02ab")  # the body's tagged fields: one unknown
    assert read_by_skim(skimmed(tagged, 12)) == read_by_kio(frame, 12)
    trailing = framed(frame[4:] + b"\xff\xff")
    assert read_by_skim(skimmed(trailing, 12)) == read_by_kio(frame, 12)


def test_requests_the_skim_does_not_take_on() -> None:
    v12 = metadata_request(12, ("orders",), allow_auto_topic_creation=True)
    assert v12[-3:] == b"\x01\x00\x00"  # allow_auto_topic_creation, include_topic_…, tags
    assert skimmed(framed(v12[4:-3] + b"\x02\x00\x00"), 12) is None  # a boolean byte of 2
    v0 = metadata_request(0, ())
    assert skimmed(framed(v0[4:-4] + b"\xff\xff\xff\xff"), 0) is None  # null topics in v0
    bad = bytes(v12).replace(b"orders", b"\xffrders")
    assert skimmed(bad, 12) is None  # not UTF-8: kio's decode reads it as Kafka does
    for end in range(peek_request_header(v12).client_id_end, len(v12)):
        assert skimmed(framed(v12[4:end]), 12) is None, end
    assert skim_metadata_request(v12, 14, peek_request_header(v12).client_id_end) is None


@pytest.mark.kafka
def test_kafkas_reader_reads_requests_as_the_skim_does(kafka_reader: KafkaReferee) -> None:
    """``RequestContext.parseRequest``'s reading of every case of every version agrees with
    the skim's (topic ids in Kafka's text, the zero id where none was sent)."""
    frames = [(v, f) for v in VERSIONS for f in request_cases(v)]
    answers = kafka_reader.requests([f for _, f in frames])
    for (version, frame), answer in zip(frames, answers, strict=True):
        assert answer["ok"], answer
        body = answer["body"]
        skim = skimmed(frame, version)
        topics = body["topics"]
        expected = (
            None
            if skim.topics is None
            else [(t.name, kafka_uuid(t.topic_id) if version >= 10 else None) for t in skim.topics]
        )
        assert expected == (
            None if topics is None else [(t["name"], t.get("topicId")) for t in topics]
        ), (version, body)
        assert body.get("allowAutoTopicCreation", True) == skim.allow_auto_topic_creation
        assert (
            body.get("includeClusterAuthorizedOperations", False)
            == skim.include_cluster_authorized_operations
        )
        assert (
            body.get("includeTopicAuthorizedOperations", False)
            == skim.include_topic_authorized_operations
        )
