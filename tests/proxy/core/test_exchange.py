"""The sans-I/O exchange core, driven in memory: ordering, pipelining, AskFirst holds, acks=0,
the SASL gate, cut-through, flow control, every close reason and hostile input.

Every test feeds bytes and events in and asserts the commands that come out
(``tests/support/exchange_driver.py``); no socket and no event loop, except to run an
:class:`Await`'s coroutine.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import uuid
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.protocol.header import peek_request_header
from kafkaguard.proxy.config import LimitsConfig
from kafkaguard.proxy.core.commands import (
    CloseCause,
    CloseConnection,
    OpenBroker,
    PauseClient,
    ResumeClient,
    SendClient,
)
from kafkaguard.proxy.core.exchange import CUT_THROUGH_MIN
from tests.support.entities import req, resp
from tests.support.exchange_driver import (
    PASSWORD,
    Driver,
    awaited,
    closed,
    request,
    response,
    split_frames,
    to_broker,
    to_client,
)
from tests.support.fuzz.frames import FrameGenerator
from tests.support.handler_harness import acl, described_topics
from tests.support.injected_handlers import faulty, registered

ALICE_WRITES_ORDERS = [acl("User:alice", "WRITE", "TOPIC", "orders")]


def nested(api: int, version: int, field: str, *path: str, **values: Any) -> Any:
    """A nested request entity."""
    entity_type = codec.nested_type(codec.request_schema(api, version), field)
    for name in path:
        entity_type = codec.nested_type(entity_type, name)
    return codec.make_entity(entity_type, **values)


def produce(topic: str, correlation_id: int, *, acks: int = 1) -> bytes:
    partition = nested(0, 9, "topic_data", "partition_data", index=0, records=None)
    topic_data = nested(0, 9, "topic_data", name=topic, partition_data=(partition,))
    return request(
        req(0, 9, acks=acks, timeout=datetime.timedelta(seconds=1), topic_data=(topic_data,)),
        correlation_id,
    )


def produce_response(
    topic: str, correlation_id: int, error_message: str | None = None, record_errors: int = 0
) -> bytes:
    """``record_errors``: that many batch errors of 30,000 characters each (a string may hold
    at most 32,767 bytes, as ``ProduceResponseData.read`` reads them), to make it large."""
    schema = codec.response_schema(0, 9)
    partition_type = codec.nested_type(
        codec.nested_type(schema, "responses"), "partition_responses"
    )
    error_type = codec.nested_type(partition_type, "record_errors")
    errors = tuple(
        codec.make_entity(error_type, batch_index=i, batch_index_error_message="x" * 30_000)
        for i in range(record_errors)
    )
    partition = codec.make_entity(
        partition_type,
        index=0,
        base_offset=42,
        error_message=error_message,
        record_errors=errors,
    )
    topic_response = codec.make_entity(
        codec.nested_type(schema, "responses"), name=topic, partition_responses=(partition,)
    )
    return response(resp(0, 9, responses=(topic_response,)), correlation_id)


def decoded(frame: bytes, api_key: int, version: int) -> Any:
    return codec.decode_response(frame, api_key, version)


def raw_response(correlation_id: int, size: int) -> bytes:
    """An opaque broker response of ``size`` bytes after the size prefix."""
    return struct.pack(">ii", size, correlation_id) + bytes(size - 4)


# -- ordering and pipelining ---------------------------------------------------------------------
def test_original_bytes_forwarded_and_local_answers_wait_their_turn() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    a, b, c = produce("orders", 1), produce("secret", 2), produce("orders", 3)
    out = d.client(a, b, c)  # one read, three requests
    assert to_broker(out) == [a, c]  # byte for byte; the denied one never leaves
    assert to_client(out) == b""  # B is answered, but not before A
    out = d.broker(produce_response("orders", 1))
    frames = split_frames(to_client(out))
    assert frames[0] == produce_response("orders", 1)  # the broker's own bytes
    denied = decoded(frames[1], 0, 9)
    assert denied.responses[0].partition_responses[0].error_code == (
        ErrorCode.topic_authorization_failed
    )
    assert len(frames) == 2
    assert split_frames(to_client(d.broker(produce_response("orders", 3)))) == [
        produce_response("orders", 3)
    ]
    assert not d.exchange.busy
    stats = d.exchange.stats  # what /metrics reports
    assert stats.requests == {0: 3}
    assert (stats.responses_from_broker, stats.responses_from_proxy) == ({0: 2}, {0: 1})
    assert stats.bytes_to_broker == len(a) + len(c)
    assert sum(stats.request_latency[0].counts) == 3
    assert sum(stats.upstream_latency[0].counts) == 2


def test_a_response_out_of_order_closes_as_upstream() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    d.client(produce("orders", 1), produce("orders", 2))
    out = d.broker(produce_response("orders", 2))
    close = closed(out)
    assert close is not None and close.cause is CloseCause.UPSTREAM
    assert close.reason is not None and "correlation id 2, expected 1" in close.reason


def test_requests_before_the_broker_connection_wait_and_leave_in_order() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    out = d.exchange.client_connected()
    assert out == [PauseClient(), OpenBroker()]
    a, b = produce("orders", 1), produce("orders", 2)
    assert to_broker(d.client(a)) == []
    assert to_broker(d.client(b)) == []
    out = d.exchange.broker_connected()
    assert to_broker(out) == [a, b]
    assert out[-1] == ResumeClient()


def test_inflight_cap_holds_requests_and_pauses_reading() -> None:
    d = Driver(ALICE_WRITES_ORDERS, limits=LimitsConfig(max_inflight_requests=2))
    d.connect()
    frames = [produce("orders", i) for i in range(1, 5)]
    out = d.client(*frames)
    assert to_broker(out) == frames[:2]
    assert PauseClient() in out
    assert d.exchange.unanswered == 4
    out = d.broker(produce_response("orders", 1))
    assert to_broker(out) == [frames[2]]  # one slot freed: one more request leaves
    out = d.broker(produce_response("orders", 2))
    assert to_broker(out) == [frames[3]]
    assert ResumeClient() not in out  # two in flight again: the cap
    out = d.broker(produce_response("orders", 3))
    assert out[-1] == ResumeClient()


def test_broker_write_buffer_full_pauses_client_reading() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    assert d.exchange.broker_write_full(True) == [PauseClient()]
    assert d.exchange.broker_write_full(False) == [ResumeClient()]


# -- acks=0 --------------------------------------------------------------------------------------
def test_acks_zero_takes_no_slot_and_a_denied_one_closes() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    allowed = produce("orders", 1, acks=0)
    out = d.client(allowed)
    assert to_broker(out) == [allowed]
    assert not d.exchange.busy  # the broker never answers acks=0
    close = closed(d.client(produce("secret", 2, acks=0)))
    assert close is not None and close.cause is CloseCause.BAD_REQUEST  # Kafka closes too


# -- AskFirst ------------------------------------------------------------------------------------
def test_ask_first_holds_later_requests_until_the_answer() -> None:
    topic_id = uuid.uuid4()
    acls = [*ALICE_WRITES_ORDERS, acl("User:alice", "READ", "TOPIC", "orders")]
    d = Driver(acls)
    d.connect()
    partition = nested(1, 13, "topics", "partitions", partition=0)
    fetch = request(
        req(1, 13, topics=(nested(1, 13, "topics", topic_id=topic_id, partitions=(partition,)),)),
        1,
    )
    later = produce("orders", 2)
    out = d.client(fetch, later)
    (question,) = to_broker(out)  # the proxy's Metadata question, nothing else
    header = peek_request_header(question)
    assert header.api_key == 3 and header.correlation_id == 1
    asked = codec.decode_request(question, 3, header.api_version)
    schema = codec.response_schema(3, header.api_version)
    answer = codec.make_entity(
        schema, topics=described_topics(schema, asked.topics, {topic_id: "orders"})
    )
    out = d.broker(response(answer, 1))
    assert to_broker(out) == [fetch, later]  # now, in order; the answer never reaches the client
    assert to_client(out) == b""
    fetch_response = response(resp(1, 13), 1)
    assert to_client(d.broker(fetch_response)) == fetch_response


# -- cut-through ---------------------------------------------------------------------------------
def test_a_large_response_next_in_line_streams_as_it_arrives() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    d.client(produce("orders", 1), produce("secret", 2))
    big = raw_response(1, CUT_THROUGH_MIN + 1000)
    out = d.broker(big[:1000])
    assert to_client(out) == big[:1000]  # before its last byte
    assert d.exchange.busy
    out = d.broker(big[1000:5000])
    assert to_client(out) == big[1000:5000]
    out = d.broker(big[5000:])
    data = to_client(out)
    assert d.exchange.stats.bytes_to_client == len(big) + len(data) - (len(big) - 5000)
    assert data.startswith(big[5000:])  # then the local answer that waited behind it
    denied = decoded(split_frames(data[len(big) - 5000 :])[0], 0, 9)
    assert denied.responses[0].partition_responses[0].error_code == (
        ErrorCode.topic_authorization_failed
    )


def test_a_large_response_that_needs_a_rewrite_is_buffered_whole() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    partition = nested(0, 9, "topic_data", "partition_data", index=0, records=None)
    both = tuple(
        nested(0, 9, "topic_data", name=name, partition_data=(partition,))
        for name in ("orders", "secret")
    )
    timeout = datetime.timedelta(seconds=1)
    (sent,) = to_broker(d.client(request(req(0, 9, acks=1, timeout=timeout, topic_data=both), 1)))
    assert [t.name for t in codec.decode_request(sent, 0, 9).topic_data] == ["orders"]
    big = produce_response("orders", 1, record_errors=CUT_THROUGH_MIN // 30_000 + 1)
    assert len(big) > CUT_THROUGH_MIN
    assert to_client(d.broker(big[:1000])) == b""  # not streamed: it must be merged first
    merged = decoded(to_client(d.broker(big[1000:])), 0, 9)
    assert [(t.name, t.partition_responses[0].error_code) for t in merged.responses] == [
        ("orders", ErrorCode.none),
        ("secret", ErrorCode.topic_authorization_failed),
    ]


# -- the SASL gate -------------------------------------------------------------------------------
def sasl_handshake(correlation_id: int) -> bytes:
    return request(req(17, 1, mechanism="PLAIN"), correlation_id)


def sasl_authenticate(correlation_id: int, password: str) -> bytes:
    return request(req(36, 2, auth_bytes=f"\0alice\0{password}".encode()), correlation_id)


def answer_all(d: Driver, out: list[Any]) -> list[Any]:
    """Run every awaited answer as the shell does; return the commands that follow."""
    commands: list[Any] = []
    for command in awaited(out):
        verdict = asyncio.run(command.answer())
        commands += d.exchange.answered(command.slot, verdict)
    return commands


def test_sasl_gate_refuses_anything_but_sasl_before_authentication() -> None:
    d = Driver(sasl=True)
    assert d.connect() == []  # no broker connection for an anonymous client
    close = closed(d.client(produce("orders", 1)))
    assert close is not None and close.cause is CloseCause.AUTHENTICATION_FAILED


def test_sasl_login_then_the_broker_connection_opens() -> None:
    d = Driver(ALICE_WRITES_ORDERS, sasl=True)
    d.connect()
    out = d.client(sasl_handshake(1))
    handshake = decoded(to_client(out), 17, 1)
    assert handshake.error_code == ErrorCode.none and handshake.mechanisms == ("PLAIN",)
    later = produce("orders", 3)
    out = d.client(sasl_authenticate(2, PASSWORD), later)  # pipelined behind the token
    assert len(awaited(out)) == 1 and to_broker(out) == [] and closed(out) is None
    out = answer_all(d, out)
    assert decoded(split_frames(to_client(out))[0], 36, 2).error_code == ErrorCode.none
    assert OpenBroker() in out  # only now, for the first authenticated request
    assert to_broker(d.exchange.broker_connected()) == [later]


def test_sasl_failure_is_answered_then_closed_after_a_grace_period() -> None:
    d = Driver(sasl=True)
    d.connect()
    d.client(sasl_handshake(1))
    out = answer_all(d, d.client(sasl_authenticate(2, "wrong"), produce("orders", 3)))
    failed = decoded(split_frames(to_client(out))[0], 36, 2)
    assert failed.error_code == ErrorCode.sasl_authentication_failed
    assert len(split_frames(to_client(out))) == 1  # the held request is dropped, unanswered
    close = closed(out)
    assert close == CloseConnection(
        close.reason if close else None, CloseCause.AUTHENTICATION_FAILED, logging.INFO, 0.5
    )
    assert d.exchange.receive_client(produce("orders", 4)) == []  # closed: ignored


def test_an_oversized_request_before_authentication_is_refused_unbuffered() -> None:
    d = Driver(sasl=True)
    d.connect()
    out = d.client(struct.pack(">i", 10_000_000) + b"\0" * 100)
    close = closed(out)
    assert close is not None and close.cause is CloseCause.BAD_REQUEST
    assert close.reason is not None and "max_receive_size" in close.reason


# -- close reasons -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (struct.pack(">i", -1), "bad request"),
        (struct.pack(">i", 200 * 1024 * 1024), "bad request"),
        (struct.pack(">ihhi", 8, 9999, 0, 1), "api key 9999 is not served"),
    ],
)
def test_bad_requests_close_as_bad_request(data: bytes, fragment: str) -> None:
    d = Driver()
    d.connect()
    close = closed(d.client(data))
    assert close is not None and close.cause is CloseCause.BAD_REQUEST
    assert close.reason is not None and fragment in close.reason


def test_a_handler_fault_closes_as_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    registered(monkeypatch, faulty(0, "bug"))
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    out = d.client(produce("orders", 1))
    close = closed(out)
    assert close is not None and close.cause is CloseCause.INTERNAL_ERROR
    assert to_broker(out) == []  # never forwarded


def test_garbage_from_the_broker_closes_as_upstream() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    d.client(produce("orders", 1))
    close = closed(d.broker(struct.pack(">i", -5)))
    assert close is not None and close.cause is CloseCause.UPSTREAM


def test_client_and_broker_closing() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    d.client(produce("orders", 1)[:10])
    close = closed(d.exchange.client_closed())
    assert close is not None and close.cause is CloseCause.CLIENT_CLOSED
    assert close.reason is not None and "mid-request" in close.reason

    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    d.client(produce("orders", 1))
    close = closed(d.exchange.client_closed())
    assert close is not None and close.level == logging.INFO  # a consumer's long poll
    assert close.reason == "client disconnected with requests unanswered"

    d = Driver()
    d.connect()
    assert closed(d.exchange.client_closed()) == CloseConnection(None, CloseCause.CLIENT_CLOSED)

    d = Driver()
    d.connect()
    close = closed(d.exchange.broker_closed("reset"))
    assert close is not None and close.cause is CloseCause.UPSTREAM
    assert close.reason == "the broker closed the connection: reset"


def delete_acls(correlation_id: int) -> bytes:
    """DeleteAcls v3 of every TOPIC ACL: the proxy answers it itself, once its store wrote."""
    matching = nested(
        31,
        3,
        "filters",
        resource_type_filter=2,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    return request(req(31, 3, filters=(matching,)), correlation_id)


def test_an_answer_the_proxy_owes_is_written_before_a_broker_close_closes() -> None:
    """Issue 35: a DeleteAcls applied to the store while the broker connection died is
    answered, then the connection closes; the client would retry a transport error."""
    d = Driver([acl("User:bob", "READ", "TOPIC", "t")], super_users="User:alice")
    d.connect()
    out = d.client(delete_acls(1))
    assert len(awaited(out)) == 1
    gone = d.exchange.broker_closed("reset")
    assert closed(gone) is None and PauseClient() in gone
    assert d.client(produce("orders", 2)) == []  # nothing more is read or sent
    out = answer_all(d, out)
    (frame,) = split_frames(to_client(out))
    answer = decoded(frame, 31, 3)
    assert [len(r.matching_acls) for r in answer.filter_results] == [1]
    close = closed(out)
    assert close is not None and close.cause is CloseCause.UPSTREAM
    assert close.reason == "the broker closed the connection: reset"


def test_a_broker_close_with_a_forwarded_request_first_closes_at_once() -> None:
    """Responses go in request order: behind a request the broker never answers, the
    proxy's own answer could not be written anyway."""
    d = Driver(ALICE_WRITES_ORDERS, super_users="User:alice")
    d.connect()
    out = d.client(produce("orders", 1), delete_acls(2))
    assert len(awaited(out)) == 1
    close = closed(d.exchange.broker_closed("reset"))
    assert close is not None and close.cause is CloseCause.UPSTREAM


def test_idle_and_authentication_deadlines() -> None:
    limits = LimitsConfig(connections_max_idle_ms=10_000, authentication_timeout_ms=3_000)
    d = Driver(ALICE_WRITES_ORDERS, limits=limits)
    d.connect()
    d.client(produce("orders", 1))
    assert d.exchange.clock(d.now + 1) == []
    assert d.exchange.clock(d.now + 60) == []  # a request in flight is not idle
    d.broker(produce_response("orders", 1))
    assert d.exchange.clock(d.now + 61) == []  # activity since the last sweep
    close = closed(d.exchange.clock(d.now + 72))
    assert close is not None and close.cause is CloseCause.IDLE

    d = Driver(sasl=True, limits=limits)
    d.connect()
    close = closed(d.exchange.clock(d.now + 3))
    assert close is not None and close.cause is CloseCause.AUTHENTICATION_TIMEOUT


def test_drain_answers_what_is_in_flight_then_closes() -> None:
    d = Driver(ALICE_WRITES_ORDERS, limits=LimitsConfig(max_inflight_requests=1))
    d.connect()
    d.client(produce("orders", 1), produce("orders", 2))
    waiting, dropped, out = d.exchange.drain()
    assert (waiting, dropped) == (1, 1)
    assert closed(out) is None
    assert d.exchange.receive_client(produce("orders", 3)) == []  # nothing new starts
    out = d.broker(produce_response("orders", 1))
    assert to_client(out) == produce_response("orders", 1)
    assert closed(out) == CloseConnection(None, CloseCause.SHUTDOWN)


# -- hostile input -------------------------------------------------------------------------------
def test_hostile_frames_get_an_answer_or_a_close_never_an_exception() -> None:
    """The fuzz corpus's first frames, each on a fresh exchange: every outcome is a response
    to the client, a forward to the broker or a close with a cause."""
    generator = FrameGenerator(seed=3)
    outcomes: dict[str, int] = {}
    for index in range(400):
        d = Driver(super_users="User:alice")
        d.connect()
        out = d.client(generator.frame(index).data)
        close = closed(out)
        if close is not None:
            assert close.cause is CloseCause.BAD_REQUEST, (index, close.reason)
            kind = "closed"
        elif to_broker(out) or any(isinstance(c, SendClient) for c in out):
            kind = "handled"
        else:
            kind = "incomplete"  # a truncated frame: waits for more bytes
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert outcomes.get("closed", 0) > 50 and outcomes.get("handled", 0) > 50, outcomes
