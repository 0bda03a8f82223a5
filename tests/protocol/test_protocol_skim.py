"""The Fetch response skimmer against kio: it finds ``node_endpoints`` exactly when kio does,
for every FetchResponse version it claims, and says "decode it" for anything it cannot walk."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaguard.protocol import codec
from kafkaguard.protocol.skim import (
    FIRST_SKIMMABLE_VERSION,
    LAST_SKIMMABLE_VERSION,
    fetch_response_has_node_endpoints,
)

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
