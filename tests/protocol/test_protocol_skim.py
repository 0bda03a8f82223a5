"""The skims against kio: the Fetch response walk finds ``node_endpoints`` exactly when kio
does, for every FetchResponse version it claims, and says "decode it" for anything it cannot
walk; the tail rewrite (buffered or streamed) changes ``node_endpoints`` and nothing else; the
Produce request skim reads what kio reads and refuses what kio refuses."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.errors import MalformedFrame
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.protocol.skim.produce import skim_produce_request
from kafkaguard.protocol.skim.share import skim_share_response
from kafkaguard.protocol.skim.tails import (
    FIRST_SKIMMABLE_VERSION,
    LAST_PRODUCE_RESPONSE_VERSION,
    LAST_SKIMMABLE_VERSION,
    PAD_TAG,
    NodeEndpointsTail,
    _encode_tags,
    _parse_tags,
    fetch_response_has_node_endpoints,
    fetch_response_tail,
    fit_tail,
    produce_response_tail,
)
from kafkaguard.proxy.handlers.support.authz import topic_key

VERSIONS = range(FIRST_SKIMMABLE_VERSION, LAST_SKIMMABLE_VERSION + 1)


def fetch_response(draw: Any, version: int, with_endpoints: bool) -> Any:
    schema = codec.response_schema(1, version)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partitions")
    aborted_t = codec.nested_type(part_t, "aborted_transactions")
    leader_t = type(part_t.__dataclass_fields__["current_leader"].default)
    ints = st.integers(0, 2**31 - 1)

    def partition(index: int) -> Any:
        values: dict[str, Any] = {
            "partition_index": index,
            "high_watermark": draw(st.integers(-1, 2**40)),
            "records": draw(st.one_of(st.none(), st.binary(max_size=300))),
            "aborted_transactions": draw(
                st.one_of(
                    st.none(),
                    st.lists(
                        st.builds(
                            lambda p, o: codec.make_entity(
                                aborted_t, producer_id=p, first_offset=o
                            ),
                            ints,
                            ints,
                        ),
                        max_size=3,
                    ).map(tuple),
                )
            ),
        }
        if draw(st.booleans()):  # a tagged field of the partition (KIP-951 current leader)
            values["current_leader"] = codec.make_entity(leader_t, leader_id=3, leader_epoch=7)
        return codec.make_entity(part_t, **values)

    topics = []
    for _ in range(draw(st.integers(0, 3))):
        name_or_id = (
            {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": draw(st.text(max_size=20))}
        )
        parts = tuple(partition(i) for i in range(draw(st.integers(0, 3))))
        topics.append(codec.make_entity(topic_t, partitions=parts, **name_or_id))
    extra: dict[str, Any] = {}
    if version >= 16:  # KIP-951
        node_t = codec.nested_type(schema, "node_endpoints")
        node = codec.make_entity(node_t, node_id=2, host="broker-2.internal", port=9092)
        extra["node_endpoints"] = (node,) if with_endpoints else ()
    return codec.make_entity(
        schema, throttle_time=timedelta(0), session_id=draw(ints), responses=tuple(topics), **extra
    )


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(VERSIONS), st.booleans())
def test_skim_agrees_with_kio(data: st.DataObject, version: int, with_endpoints: bool) -> None:
    with_endpoints = with_endpoints and version >= 16
    response = fetch_response(data.draw, version, with_endpoints)
    frame = codec.encode_response(response, 42)
    decoded = codec.decode_response(frame, 1, version)
    assert bool(getattr(decoded, "node_endpoints", ())) == with_endpoints
    assert fetch_response_has_node_endpoints(frame, version) is with_endpoints


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from(VERSIONS))
def test_anything_it_cannot_walk_is_decoded(data: st.DataObject, version: int) -> None:
    frame = codec.encode_response(fetch_response(data.draw, version, False), 42)
    cut = data.draw(st.integers(8, len(frame) - 1))
    assert fetch_response_has_node_endpoints(frame[:cut], version)  # truncated
    assert fetch_response_has_node_endpoints(frame + b"\x00", version)  # bytes left over


def test_versions_outside_the_walked_layout_are_decoded() -> None:
    frame = codec.encode_response(
        codec.make_entity(codec.response_schema(1, 11), throttle_time=timedelta(0)), 1
    )
    assert fetch_response_has_node_endpoints(frame, 11)


# -- the tail rewrite (issue 13): buffered, and as the response streams -----------------------


def advertise_short(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "proxy.test", 30000 + node_id


def advertise_long(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "a-much-longer-proxy-hostname.example.com", 30000 + node_id


def not_decoded(frame: bytes | memoryview) -> bytes | memoryview:
    raise AssertionError("a walkable response was decoded")


def fetch_tail(version: int, advertise: Any = advertise_short) -> NodeEndpointsTail:
    return NodeEndpointsTail(1, version, advertise, not_decoded)


def stream_through(tail: NodeEndpointsTail, frame: bytes, cuts: list[int]) -> bytes:
    """What a client receives when ``frame`` reaches the proxy in pieces cut at ``cuts``."""
    stream = tail.stream(len(frame))
    bounds = [0, *sorted(set(cuts)), len(frame)]
    out = []
    for start, stop in itertools.pairwise(bounds):
        out += stream.feed(frame[start:stop], stop == len(frame))
    return b"".join(bytes(part) for part in out)


def without_pads(frame: bytes, version: int) -> bytes:
    """``frame`` without its padding fields: kio, unlike Kafka's clients (KIP-482), refuses
    unknown tagged fields."""
    tail_at = fetch_response_tail(frame, version)
    assert tail_at is not None
    fields = _parse_tags(frame[tail_at:])
    assert fields is not None
    tail = _encode_tags([(tag, data) for tag, data in fields if tag < PAD_TAG])
    return (tail_at - 4 + len(tail)).to_bytes(4, "big") + frame[4:tail_at] + tail


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from(range(16, LAST_SKIMMABLE_VERSION + 1)), st.booleans())
def test_the_tail_rewrite_changes_only_node_endpoints(
    data: st.DataObject, version: int, with_endpoints: bool
) -> None:
    response = fetch_response(data.draw, version, with_endpoints)
    frame = codec.encode_response(response, 42)
    cuts = data.draw(st.lists(st.integers(1, len(frame) - 1), max_size=6))
    for advertise in (advertise_short, advertise_long):
        buffered = fetch_tail(version, advertise)(frame)
        streamed = stream_through(fetch_tail(version, advertise), frame, cuts)
        if not with_endpoints:  # the broker's own bytes, both ways
            assert bytes(buffered) == frame and streamed == frame
            continue
        assert b"broker-2.internal" not in bytes(buffered) and b"broker-2.internal" not in streamed
        host, _ = advertise(2, "", 0)
        expected = codec.replace(
            response,
            node_endpoints=(codec.replace(response.node_endpoints[0], host=host, port=30002),),
        )
        assert codec.decode_response(buffered, 1, version) == expected
        # Streamed: the size went out first, so the tail keeps its length. A shorter rewrite
        # is padded with unknown tagged fields; one that cannot fit drops node_endpoints.
        assert len(streamed) == len(frame)
        decoded = codec.decode_response(without_pads(streamed, version), 1, version)
        if advertise is advertise_short:
            assert decoded == expected
        else:
            assert decoded == codec.replace(response, node_endpoints=())
        # Records and every other field are the broker's bytes.
        tail_at = fetch_response_tail(frame, version)
        assert tail_at is not None and streamed[4:tail_at] == frame[4:tail_at]


@pytest.mark.parametrize("version", range(10, LAST_PRODUCE_RESPONSE_VERSION + 1))
def test_produce_response_node_endpoints_are_rewritten_in_the_tail(version: int) -> None:
    schema = codec.response_schema(0, version)
    topic_t = codec.nested_type(schema, "responses")
    part_t = codec.nested_type(topic_t, "partition_responses")
    node_t = codec.nested_type(schema, "node_endpoints")
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"name": "orders"}
    partition = codec.make_entity(part_t, ErrorCode.not_leader_or_follower, index=0)
    response = codec.make_entity(
        schema,
        responses=(codec.make_entity(topic_t, partition_responses=(partition,), **key),),
        node_endpoints=(
            codec.make_entity(node_t, node_id=2, host="broker-2.internal", port=9092, rack="r"),
        ),
    )
    frame = codec.encode_response(response, 7)
    tail = NodeEndpointsTail(0, version, advertise_long, not_decoded)
    sent = codec.decode_response(tail(frame), 0, version)
    (node,) = sent.node_endpoints
    assert (node.host, node.port, node.rack) == (
        "a-much-longer-proxy-hostname.example.com",
        30002,
        "r",
    )
    assert sent.responses == response.responses
    without = codec.encode_response(codec.replace(response, node_endpoints=()), 7)
    assert tail(without) is without


def test_a_response_the_walk_cannot_follow_is_decoded_when_buffered() -> None:
    decoded: list[bytes | memoryview] = []

    def fallback(frame: bytes | memoryview) -> bytes | memoryview:
        decoded.append(frame)
        return frame

    frame = codec.encode_response(
        codec.make_entity(codec.response_schema(1, 16), throttle_time=timedelta(0)), 1
    )
    NodeEndpointsTail(1, 16, advertise_short, fallback)(frame + b"\x00")
    assert decoded == [frame + b"\x00"]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_streamed_response_the_walk_cannot_follow_never_releases_its_tail(
    data: st.DataObject,
) -> None:
    version = data.draw(st.sampled_from(range(16, LAST_SKIMMABLE_VERSION + 1)))
    frame = codec.encode_response(fetch_response(data.draw, version, True), 42)
    # A frame whose size says more than its structure holds (bytes left over), or less
    # (truncated): the walk refuses it before the tail (the addresses) leaves.
    for bad in (
        frame[:4] + frame[4:] + b"\x01\x02",
        frame[: data.draw(st.integers(9, len(frame) - 1))],
    ):
        size = len(bad) if len(bad) > len(frame) else len(frame)
        stream = fetch_tail(version).stream(size)
        sent: list[bytes | memoryview] = []
        with pytest.raises(MalformedFrame):
            sent += stream.feed(bad, len(bad) == size)
            if len(bad) < size:
                stream.feed(b"\xff" * (size - len(bad)), True)
        assert b"broker-2.internal" not in b"".join(bytes(p) for p in sent)


@pytest.mark.parametrize("length", [*range(0, 140), 16_386, 16_387, 16_388, 16_389, 40_000])
def test_padding_fills_a_tail_exactly(length: int) -> None:
    fields = [(5, b"kept")]
    base = 1 + 1 + 1 + 4
    if length < base:
        return
    if length - base in (1, 2):
        with pytest.raises(MalformedFrame):
            fit_tail(fields, length)
        return
    tail = fit_tail(fields, length)
    assert len(tail) == length
    parsed = _parse_tags(tail)
    assert parsed is not None and parsed[0] == (5, b"kept")
    assert all(tag >= PAD_TAG and not any(data) for tag, data in parsed[1:])


# -- Produce requests: the skim reads what kio reads ------------------------------------------


def produce_request(draw: Any, version: int) -> Any:
    schema = codec.request_schema(0, version)
    topic_t = codec.nested_type(schema, "topic_data")
    part_t = codec.nested_type(topic_t, "partition_data")
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        key = (
            {"topic_id": draw(st.sampled_from([uuid.uuid4(), uuid.UUID(int=0)]))}
            if version >= 13
            else {"name": draw(st.text(min_size=1, max_size=20))}
        )
        parts = tuple(
            codec.make_entity(
                part_t,
                index=draw(st.integers(0, 9)),
                records=draw(st.none() | st.binary(max_size=200)),
            )
            for _ in range(draw(st.integers(0, 3)))
        )
        topics.append(codec.make_entity(topic_t, partition_data=parts, **key))
    return codec.make_entity(
        schema,
        transactional_id=draw(st.none() | st.text(max_size=10)),
        acks=draw(st.sampled_from([-1, 0, 1])),
        timeout=timedelta(seconds=30),
        topic_data=tuple(topics),
    )


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(range(3, 14)), st.none() | st.text(max_size=12))
def test_produce_skim_agrees_with_kio(
    data: st.DataObject, version: int, client_id: str | None
) -> None:
    body = produce_request(data.draw, version)
    frame = codec.encode_request(body, 9, client_id)
    header = peek_request_header(frame)
    # Bytes after the body are ignored, by both (RequestContext.parseRequest ignores them).
    longer = (len(frame) + 1).to_bytes(4, "big") + frame[4:] + bytes(5)
    for whole in (frame, longer):
        skim = skim_produce_request(whole, version, header.client_id_end)
        decoded: Any = codec.decode_request(whole, 0, version)
        assert skim is not None
        assert (skim.transactional_id, skim.acks) == (decoded.transactional_id, decoded.acks)
        assert [
            (
                topic_key(t),
                [
                    (p.index, None if p.records is None else bytes(p.records))
                    for p in t.partition_data
                ],
            )
            for t in skim.topic_data
        ] == [
            (topic_key(t), [(p.index, p.records) for p in t.partition_data])
            for t in decoded.topic_data
        ]
    # A frame cut short is refused, as Kafka refuses it.
    cut = data.draw(st.integers(header.client_id_end, len(frame) - 1))
    short = len(frame[4:cut]).to_bytes(4, "big") + frame[4:cut]
    with pytest.raises(MalformedFrame):
        skim_produce_request(short, version, header.client_id_end)


# -- hostile bytes: the skims refuse, they never fail otherwise -------------------------------


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 14), st.integers(0, 20))
def test_arbitrary_bytes_are_refused_cleanly(data: bytes, version: int, start: int) -> None:
    frame = len(data).to_bytes(4, "big") + data
    for skim_version in (version, 3, 9, 13):
        with contextlib.suppress(MalformedFrame):
            skim_produce_request(frame, skim_version, min(start, len(frame)))
    for fetch_version in (12, 13, 16, 18):
        tail = fetch_response_tail(frame, fetch_version)
        assert tail is None or tail <= len(frame)
        try:
            stream = fetch_tail(fetch_version).stream(len(frame))
            sent = b"".join(bytes(p) for p in stream.feed(frame, True))
        except MalformedFrame:
            continue
        assert len(sent) == len(frame)
    for api_key in (78, 79):
        for share_version in (1, 2):
            skim_share_response(frame, api_key, share_version)
    tail = produce_response_tail(frame, 11)
    assert tail is None or tail <= len(frame)


@pytest.mark.parametrize("version", [16, LAST_SKIMMABLE_VERSION])
def test_varints_are_read_as_java_ints_in_a_streamed_tail(version: int) -> None:
    """A Fetch response ending with tagged-field count 8080808010, 2^32 unbounded and 0 as
    ``ByteUtils.readUnsignedVarint``'s ``int`` (bits beyond 32 dropped): no field, as a Kafka
    client reads it; passed on unchanged, streamed or buffered."""
    frame = codec.encode_response(
        codec.make_entity(codec.response_schema(1, version), throttle_time=timedelta(0)), 1
    )
    assert frame.endswith(b"\x00")
    padded = frame[:-1] + bytes.fromhex("8080808010")
    padded = (len(padded) - 4).to_bytes(4, "big") + padded[4:]
    assert stream_through(fetch_tail(version), padded, [len(padded) - 3]) == padded
    assert bytes(fetch_tail(version)(padded)) == padded
