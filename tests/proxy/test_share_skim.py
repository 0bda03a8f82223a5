"""ShareFetch / ShareAcknowledge responses on the raw path (issue 13): the exchange applies the
handler's raw transform, which passes the broker's bytes on undecoded when a skim shows the
decoded completion would change nothing, and otherwise completes them as the decoded path
does. Each case compares the two paths on the same broker answer."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.skim.share import skim_share_response
from kafkaguard.proxy.handlers.support.base import Forward
from tests.support.entities import item, resp
from tests.support.handler_harness import HandlerHarness, acl

A = uuid.UUID("00000000-0000-4000-8000-00000000000a")
C = uuid.UUID("00000000-0000-4000-8000-00000000000c")
NAMES = {A: "a", C: "c"}
GROUP, MEMBER = "g", "bWVtYmVyLWlkLW9mLXRlc3Q"
ALICE = "User:alice"
READ_GROUP = acl(ALICE, "READ", "GROUP", GROUP)
READ_A = acl(ALICE, "READ", "TOPIC", "a")
Part = tuple[uuid.UUID, int]


def share_fetch(version: int, epoch: int, *parts: Part) -> Any:
    schema = codec.request_schema(78, version)
    topic_type = codec.nested_type(schema, "topics")
    partition_type = codec.nested_type(topic_type, "partitions")
    grouped: dict[uuid.UUID, list[Any]] = {}
    for topic_id, index in parts:
        grouped.setdefault(topic_id, []).append(
            partition_type(partition_index=index, acknowledgement_batches=())
        )
    return codec.make_entity(
        schema,
        group_id=GROUP,
        member_id=MEMBER,
        share_session_epoch=epoch,
        max_wait=timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=500,
        batch_size=500,
        topics=tuple(topic_type(topic_id=t, partitions=tuple(p)) for t, p in grouped.items()),
        forgotten_topics_data=(),
    )


def share_acknowledge(version: int, *parts: Part) -> Any:
    schema = codec.request_schema(79, version)
    topic_type = codec.nested_type(schema, "topics")
    partition_type = codec.nested_type(topic_type, "partitions")
    batch_type = codec.nested_type(partition_type, "acknowledgement_batches")
    batch = batch_type(first_offset=0, last_offset=1, acknowledge_types=(1,))
    return codec.make_entity(
        schema,
        group_id=GROUP,
        member_id=MEMBER,
        share_session_epoch=1,
        topics=tuple(
            topic_type(
                topic_id=t,
                partitions=(partition_type(partition_index=i, acknowledgement_batches=(batch,)),),
            )
            for t, i in parts
        ),
    )


def answer(
    api_key: int,
    version: int,
    *parts: Part,
    endpoints: bool = False,
    error: ErrorCode = ErrorCode.none,
) -> Any:
    extra: dict[str, Any] = {}
    partition: dict[str, Any] = {}
    if api_key == 78:
        extra["acquisition_lock_timeout"] = timedelta(seconds=30)
        partition["records"] = b"batch" * 100
    elif version >= 2:
        extra["acquisition_lock_timeout"] = timedelta(seconds=30)
    if endpoints:
        extra["node_endpoints"] = (
            item(
                api_key, version, "node_endpoints", node_id=1, host="10.9.9.9", port=9092, rack=None
            ),
        )
    return resp(
        api_key,
        version,
        error_code=error,
        responses=tuple(
            item(
                api_key,
                version,
                "responses",
                topic_id=t,
                partitions=(
                    item(
                        api_key, version, "responses", "partitions", partition_index=i, **partition
                    ),
                ),
            )
            for t, i in parts
        ),
        **extra,
    )


def both_paths(verdict: Any, broker: Any) -> tuple[bytes, Any]:
    """(what the exchange's raw transform sends, what the decoded completion gives)."""
    assert isinstance(verdict, Forward) and verdict.transform is not None
    frame = codec.encode_response(broker, 1)
    raw = bytes(verdict.transform(frame))
    return raw, HandlerHarness.complete(verdict, broker)


def request_for(api_key: int, version: int) -> Any:
    if api_key == 78:
        return share_fetch(version, 0, (A, 0))
    return share_acknowledge(version, (A, 0))


@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
def test_an_answer_that_needs_nothing_is_passed_on_as_the_brokers_bytes(
    api_key: int, version: int
) -> None:
    h = HandlerHarness([READ_GROUP, READ_A], topic_ids=NAMES)
    broker = answer(api_key, version, (A, 0))
    raw, decoded = both_paths(h.send(request_for(api_key, version)), broker)
    assert raw == codec.encode_response(broker, 1)
    assert codec.decode_response(raw, api_key, version) == decoded


@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
@pytest.mark.parametrize("case", ["endpoints", "outside", "denied"])
def test_an_answer_that_needs_a_change_gets_the_decoded_completion(
    api_key: int, version: int, case: str
) -> None:
    h = HandlerHarness([READ_GROUP, READ_A], topic_ids=NAMES)
    if case == "denied":  # the proxy answers for c, denied: its entry is merged in
        request = (
            share_fetch(version, 0, (A, 0), (C, 0))
            if api_key == 78
            else share_acknowledge(version, (A, 0), (C, 0))
        )
        broker = answer(api_key, version, (A, 0))
    else:
        request = request_for(api_key, version)
        broker = (
            answer(api_key, version, (A, 0), endpoints=True)
            if case == "endpoints"
            else answer(api_key, version, (A, 0), (C, 0))  # c: not this client's to see
        )
    raw, decoded = both_paths(h.send(request), broker)
    assert raw != codec.encode_response(broker, 1)
    assert b"10.9.9.9" not in raw
    assert codec.decode_response(raw, api_key, version) == decoded


@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
def test_the_skim_reads_what_kio_reads(api_key: int, version: int) -> None:
    for parts, endpoints, error in (
        ((), False, ErrorCode.none),
        (((A, 0), (C, 3)), True, ErrorCode.none),
        (((A, 7),), False, ErrorCode.invalid_request),
    ):
        frame = codec.encode_response(
            answer(api_key, version, *parts, endpoints=endpoints, error=error), 5
        )
        skim = skim_share_response(frame, api_key, version)
        assert skim is not None
        assert (skim.error_code, skim.partitions, skim.has_node_endpoints) == (
            error,
            list(parts),
            endpoints,
        )
        assert skim_share_response(frame + b"\x00", api_key, version) is None
        assert skim_share_response(frame[:-1], api_key, version) is None
