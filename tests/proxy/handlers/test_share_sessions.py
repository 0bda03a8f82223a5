"""ShareFetch / ShareAcknowledge (KIP-932) through the exchange core, without sockets: Kafka's
checks (``KafkaApis.handleShareFetchRequest`` / ``handleShareAcknowledgeRequest``) and the
per-connection share-session mirror (``share_sessions.py``)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers import REGISTRY, share_sessions
from kafkaguard.proxy.handlers.support.base import AskFirst, Close, Forward, Respond
from tests.support.entities import item, req, resp
from tests.support.handler_harness import HandlerHarness, acl

A = uuid.UUID("00000000-0000-4000-8000-00000000000a")
B = uuid.UUID("00000000-0000-4000-8000-00000000000b")
C = uuid.UUID("00000000-0000-4000-8000-00000000000c")
NAMES = {A: "a", B: "b", C: "c"}
GROUP, MEMBER = "g", "bWVtYmVyLWlkLW9mLXRlc3Q"
ALICE = "User:alice"
READ_GROUP = acl(ALICE, "READ", "GROUP", GROUP)
READ_A, READ_C = acl(ALICE, "READ", "TOPIC", "a"), acl(ALICE, "READ", "TOPIC", "c")

Part = tuple[uuid.UUID, int]
ACCEPT = ((0, 1, (1,)),)
"""One acknowledgement batch: offsets 0–1 accepted."""


def harness(*acls: Any) -> HandlerHarness:
    return HandlerHarness([READ_GROUP, *acls], topic_ids=NAMES)


def share_fetch(
    epoch: int,
    *parts: Part,
    forget: tuple[Part, ...] = (),
    acks: dict[Part, tuple[tuple[int, int, tuple[int, ...]], ...]] | None = None,
    version: int = 1,
    **fields: Any,
) -> Any:
    """A ShareFetch naming ``parts`` (their acknowledgement batches from ``acks``)."""
    schema = codec.request_schema(78, version)
    topic_type = codec.nested_type(schema, "topics")
    partition_type = codec.nested_type(topic_type, "partitions")
    batch_type = codec.nested_type(partition_type, "acknowledgement_batches")
    grouped: dict[uuid.UUID, list[Any]] = {}
    for topic_id, index in parts:
        batches = tuple(
            batch_type(first_offset=f, last_offset=last, acknowledge_types=types)
            for f, last, types in (acks or {}).get((topic_id, index), ())
        )
        grouped.setdefault(topic_id, []).append(
            partition_type(partition_index=index, acknowledgement_batches=batches)
        )
    forgotten_type = codec.nested_type(schema, "forgotten_topics_data")
    values: dict[str, Any] = {
        "group_id": GROUP,
        "member_id": MEMBER,
        "share_session_epoch": epoch,
        "max_wait": timedelta(milliseconds=500),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 500,
        "batch_size": 500,
        "topics": tuple(topic_type(topic_id=t, partitions=tuple(p)) for t, p in grouped.items()),
        "forgotten_topics_data": tuple(
            forgotten_type(topic_id=t, partitions=(i,)) for t, i in forget
        ),
    } | fields
    return codec.make_entity(schema, **values)


def share_acknowledge(epoch: int, acks: dict[Part, Any], version: int = 1, **fields: Any) -> Any:
    schema = codec.request_schema(79, version)
    topic_type = codec.nested_type(schema, "topics")
    partition_type = codec.nested_type(topic_type, "partitions")
    batch_type = codec.nested_type(partition_type, "acknowledgement_batches")
    grouped: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, index), batches in acks.items():
        grouped.setdefault(topic_id, []).append(
            partition_type(
                partition_index=index,
                acknowledgement_batches=tuple(
                    batch_type(first_offset=f, last_offset=last, acknowledge_types=types)
                    for f, last, types in batches
                ),
            )
        )
    values: dict[str, Any] = {
        "group_id": GROUP,
        "member_id": MEMBER,
        "share_session_epoch": epoch,
        "topics": tuple(topic_type(topic_id=t, partitions=tuple(p)) for t, p in grouped.items()),
    } | fields
    return codec.make_entity(schema, **values)


def fetched(*parts: Part, version: int = 1, error: ErrorCode = ErrorCode.none, **top: Any) -> Any:
    """The broker's ShareFetch answer: one record batch for each of ``parts``."""
    partition_type = (78, version, "responses", "partitions")
    grouped: dict[uuid.UUID, list[Any]] = {}
    for topic_id, index in parts:
        grouped.setdefault(topic_id, []).append(
            item(*partition_type, partition_index=index, records=b"batch")
        )
    return resp(
        78,
        version,
        error_code=error,
        acquisition_lock_timeout=timedelta(seconds=30),
        responses=tuple(
            item(78, version, "responses", topic_id=t, partitions=tuple(p))
            for t, p in grouped.items()
        ),
        **top,
    )


def acknowledged(*parts: Part, version: int = 1, error: ErrorCode = ErrorCode.none) -> Any:
    grouped: dict[uuid.UUID, list[Any]] = {}
    for topic_id, index in parts:
        grouped.setdefault(topic_id, []).append(
            item(79, version, "responses", "partitions", partition_index=index)
        )
    return resp(
        79,
        version,
        error_code=error,
        responses=tuple(
            item(79, version, "responses", topic_id=t, partitions=tuple(p))
            for t, p in grouped.items()
        ),
    )


def sent(verdict: Any, original: Any) -> list[Part]:
    body = HandlerHarness.forwarded_body(verdict, original)
    return [(t.topic_id, int(p.partition_index)) for t in body.topics for p in t.partitions]


def forgotten(verdict: Any, original: Any) -> list[Part]:
    body = HandlerHarness.forwarded_body(verdict, original)
    return [(t.topic_id, int(i)) for t in body.forgotten_topics_data for i in t.partitions]


def answer(response: Any) -> list[tuple[str, int, int, int]]:
    """(topic name, partition, error code, acknowledge error code) of every entry."""
    return [
        (
            NAMES.get(t.topic_id, str(t.topic_id)),
            int(p.partition_index),
            int(p.error_code),
            int(getattr(p, "acknowledge_error_code", 0)),
        )
        for t in response.responses
        for p in t.partitions
    ]


def test_registered_with_the_versions_kio_and_kafka_share() -> None:
    assert REGISTRY[78].versions == range(1, 3)
    assert REGISTRY[79].versions == range(1, 3)
    assert {type(h).__name__ for h in share_sessions.HANDLERS} == {
        "ShareFetchHandler",
        "ShareAcknowledgeHandler",
    }


def test_allowed_session_is_forwarded_as_sent() -> None:
    h = harness(READ_A)
    body = share_fetch(0, (A, 0), (A, 1))
    verdict = h.send(body)
    assert isinstance(verdict, Forward) and verdict.request is None
    # READ GROUP, then READ TOPIC once per topic, one reference per partition (filterByAuthorized)
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED"), ("READ", "TOPIC", "a", "ALLOWED")]
    assert h.checks[1][0].resource_reference_count == 2
    assert all(a.log_if_allowed and a.log_if_denied for a, _ in h.checks)
    broker = fetched((A, 0), (A, 1))
    assert h.complete(verdict, broker) is broker  # unchanged: the broker's own bytes go back


@pytest.mark.parametrize("version", [1, 2])
def test_whole_request_answers_in_kafkas_order(version: int) -> None:
    h = HandlerHarness([READ_A], topic_ids=NAMES)
    verdict = h.send(share_fetch(0, (A, 0), version=version))
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.group_authorization_failed
    assert verdict.response.responses == () and verdict.response.error_message is None
    assert h.checked() == [("READ", "GROUP", "g", "DENIED")]  # no topic check after it

    h = harness(READ_A)
    null_group = h.send(share_fetch(0, (A, 0), version=version, group_id=None))
    assert isinstance(null_group, Respond) and h.checked() == []  # before any check
    assert null_group.response.error_code == ErrorCode.invalid_request
    for member in ("", "x" * 37, None):
        bad = h.send(share_fetch(0, (A, 0), version=version, member_id=member))
        assert isinstance(bad, Respond) and bad.response.error_code == ErrorCode.invalid_request
        assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]
    assert isinstance(h.send(share_fetch(0, (A, 0), member_id="é" * 36)), Forward)
    with_acks = h.send(share_fetch(0, (A, 0), version=version, acks={(A, 0): ACCEPT}))
    assert isinstance(with_acks, Respond)  # newContext: acknowledgements in an initial request
    assert with_acks.response.error_code == ErrorCode.invalid_request


def test_renew_acknowledgement_must_fetch_nothing() -> None:
    h = harness(READ_A)
    renew = {"is_renew_ack": True, "max_wait": timedelta(0), "min_bytes": 0, "max_bytes": 0}
    assert isinstance(h.send(share_fetch(0, (A, 0), version=2, **renew)), Respond)  # max_records
    verdict = h.send(share_fetch(0, (A, 0), version=2, **renew, max_records=0))
    assert isinstance(verdict, Forward)


def test_partially_denied_open_never_sends_the_denied_partition() -> None:
    h = harness(READ_A)
    body = share_fetch(0, (B, 0), (A, 0), (A, 1))
    verdict = h.send(body)
    assert sent(verdict, body) == [(A, 0), (A, 1)]
    assert h.checked() == [
        ("READ", "GROUP", "g", "ALLOWED"),
        ("READ", "TOPIC", "b", "DENIED"),
        ("READ", "TOPIC", "a", "ALLOWED"),
    ]
    out = h.complete(verdict, fetched((A, 0), (A, 1)))
    assert answer(out) == [("a", 0, 0, 0), ("a", 1, 0, 0), ("b", 0, 29, 0)]
    denied = out.responses[1].partitions[0]
    # ShareFetchResponse.partitionResponse: empty records, no message, default leader
    assert denied.records == b"" and denied.error_message is None
    assert (denied.current_leader.leader_id, denied.current_leader.leader_epoch) == (0, 0)
    assert denied.acquired_records == ()
    assert out.acquisition_lock_timeout == timedelta(seconds=30)


def test_all_denied_open_still_opens_the_session_upstream() -> None:
    h = harness()
    body = share_fetch(0, (B, 0))
    verdict = h.send(body)
    assert isinstance(verdict, Forward) and sent(verdict, body) == []
    assert answer(h.complete(verdict, fetched())) == [("b", 0, 29, 0)]


def test_later_requests_authorize_the_whole_session() -> None:
    """Partitions named only in earlier requests are authorized (and answered) on each one."""
    h = harness(READ_A, READ_C)
    h.complete(h.send(share_fetch(0, (A, 0), (B, 0))), fetched((A, 0)))
    body = share_fetch(1, (C, 0))  # names only a new partition
    verdict = h.send(body)
    assert isinstance(verdict, Forward) and verdict.request is None  # nothing to strip
    assert sorted(h.checked()) == [
        ("READ", "GROUP", "g", "ALLOWED"),
        ("READ", "TOPIC", "a", "ALLOWED"),
        ("READ", "TOPIC", "b", "DENIED"),
        ("READ", "TOPIC", "c", "ALLOWED"),
    ]
    assert answer(h.complete(verdict, fetched((A, 0), (C, 0)))) == [
        ("a", 0, 0, 0),
        ("c", 0, 0, 0),
        ("b", 0, 29, 0),
    ]
    empty = h.send(share_fetch(2))
    assert [a.resource_pattern.name for a, _ in h.checks[1:]] == ["a", "b", "c"]
    assert answer(h.complete(empty, fetched())) == [("b", 0, 29, 0)]


def test_revoked_partition_is_forgotten_upstream_and_readded_when_granted() -> None:
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (A, 1))), fetched((A, 0), (A, 1)))
    h.authorizer.load_snapshot([READ_GROUP])  # READ on a revoked mid-session
    body = share_fetch(1)
    verdict = h.send(body)
    assert forgotten(verdict, body) == [(A, 0), (A, 1)]
    # whatever the broker still returns for them is dropped; the client gets 29
    out = h.complete(verdict, fetched((A, 0)))
    assert answer(out) == [("a", 0, 29, 0), ("a", 1, 29, 0)]
    assert not any(p.records for t in out.responses for p in t.partitions)
    again = share_fetch(2)
    verdict = h.send(again)
    assert isinstance(verdict, Forward) and verdict.request is None  # already forgotten
    h.authorizer.load_snapshot([READ_GROUP, READ_A])
    regranted = share_fetch(3)
    verdict = h.send(regranted)
    assert sent(verdict, regranted) == [(A, 0), (A, 1)]  # re-added with no batches
    assert forgotten(verdict, regranted) == []
    assert answer(h.complete(verdict, fetched((A, 1)))) == [("a", 1, 0, 0)]


def test_topic_checks_come_before_the_brokers_session_check() -> None:
    """deviation: Kafka checks the session (122/123) before READ TOPIC; kafkaguard must decide
    what to send before the broker answers, so the topic decisions are made (and logged) for a
    request the broker then refuses; the answer is the broker's (docs/deviations.md)."""
    h = harness(READ_A)
    h.send(share_fetch(0, (A, 0)))
    verdict = h.send(share_fetch(9))
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED"), ("READ", "TOPIC", "a", "ALLOWED")]
    refused = h.complete(verdict, fetched(error=ErrorCode.invalid_share_session_epoch))
    assert refused.error_code == ErrorCode.invalid_share_session_epoch and refused.responses == ()


def test_forget_refused_for_its_epoch_is_sent_again() -> None:
    """A request the broker refuses (wrong epoch) changes nothing in the broker's session, so
    what it forgot may still be there: the proxy keeps forgetting it until an answer without
    error confirms it left."""
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (A, 1))), fetched((A, 0), (A, 1)))
    stale = share_fetch(7, forget=((A, 1),))
    verdict = h.send(stale)
    assert isinstance(verdict, Forward) and verdict.request is None
    refused = h.complete(verdict, fetched(error=ErrorCode.invalid_share_session_epoch))
    assert refused.error_code == ErrorCode.invalid_share_session_epoch  # passed as it is
    retry = share_fetch(1)
    verdict = h.send(retry)
    assert forgotten(verdict, retry) == [(A, 1)]
    h.complete(verdict, fetched((A, 0)))
    assert h.forwarded_body(h.send(share_fetch(2)), None) is None  # confirmed: gone


def test_addition_refused_for_its_epoch_still_counts_as_held() -> None:
    """Issue 24: what a request adds counts as held by the broker from the moment it is sent,
    and what it forgets only once an error-free answer confirms it — a refused request cannot
    open a hole either way: the partition is checked and forgotten upstream once READ is
    revoked, and none of its records pass."""
    h = harness(READ_A, READ_C)
    h.complete(h.send(share_fetch(0, (A, 0))), fetched((A, 0)))
    stale = share_fetch(7, (C, 0))
    h.complete(h.send(stale), fetched(error=ErrorCode.invalid_share_session_epoch))
    h.authorizer.load_snapshot([READ_GROUP, READ_A])
    body = share_fetch(1)
    verdict = h.send(body)
    assert ("READ", "TOPIC", "c", "DENIED") in h.checked()
    assert forgotten(verdict, body) == [(C, 0)]
    out = h.complete(verdict, fetched((A, 0), (C, 0)))
    assert answer(out) == [("a", 0, 0, 0), ("c", 0, 29, 0)]
    assert [p.partition_index for t in out.responses for p in t.partitions if p.records] == [0]
    assert [t.topic_id for t in out.responses if any(p.records for p in t.partitions)] == [A]


def test_forgotten_partitions_leave_the_context() -> None:
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (B, 0))), fetched((A, 0)))
    body = share_fetch(1, forget=((B, 0),))
    verdict = h.send(body)
    assert verdict.request is None  # type: ignore[union-attr]
    assert h.checked()[1:] == [("READ", "TOPIC", "a", "ALLOWED")]
    assert answer(h.complete(verdict, fetched())) == []
    # a partition named and forgotten in one request: checked (Kafka's context includes what
    # the request names), sent as the client sent it, and not answered as part of the session
    both = share_fetch(2, (B, 0), forget=((B, 0),))
    verdict = h.send(both)
    assert ("READ", "TOPIC", "b", "DENIED") in h.checked()
    assert sent(verdict, both) == [] and forgotten(verdict, both) == [(B, 0)]
    assert answer(h.complete(verdict, fetched())) == []


def test_acknowledgements_for_denied_partitions_never_reach_the_broker() -> None:
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (B, 0))), fetched((A, 0)))
    bad = ((1, 0, (1,)),)  # first offset above last: INVALID_REQUEST before the topic check
    body = share_fetch(
        1, (A, 0), (B, 0), (B, 1), acks={(A, 0): ACCEPT, (B, 0): ACCEPT, (B, 1): bad}
    )
    verdict = h.send(body)
    upstream = h.forwarded_body(verdict, body)
    assert sent(verdict, body) == [(A, 0)]
    assert upstream.topics[0].partitions[0].acknowledgement_batches  # a's batches kept
    out = h.complete(verdict, fetched())
    # b-0 is in the session: its fetch 29 carries the acknowledgement's 29; b-1 was only named
    assert answer(out) == [("b", 0, 29, 29), ("b", 1, 29, 42)]


def test_acknowledgement_only_entries_when_closing() -> None:
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (B, 0))), fetched((A, 0)))
    body = share_fetch(-1, (A, 0), (B, 0), acks={(A, 0): ACCEPT, (B, 0): ACCEPT})
    verdict = h.send(body)
    assert sent(verdict, body) == [(A, 0)]
    broker = resp(
        78,
        1,
        responses=(
            item(
                78,
                1,
                "responses",
                topic_id=A,
                partitions=(
                    item(78, 1, "responses", "partitions", partition_index=0, records=b""),
                ),
            ),
        ),
    )
    # FinalContext fetches nothing: b-0 gets only its acknowledgement error (error code 0)
    assert answer(h.complete(verdict, broker)) == [("a", 0, 0, 0), ("b", 0, 0, 29)]
    # the session is closed: continuing it is refused without reaching the broker
    after = h.send(share_fetch(1))
    assert isinstance(after, Respond)
    assert after.response.error_code == ErrorCode.share_session_not_found


def test_closing_without_acknowledgements_answers_no_partition() -> None:
    h = harness(READ_A)
    body = share_fetch(-1, (A, 0), (B, 0))
    verdict = h.send(body)
    assert ("READ", "TOPIC", "b", "DENIED") in h.checked()
    assert sent(verdict, body) == [(A, 0)]
    assert answer(h.complete(verdict, fetched())) == []


def test_session_not_opened_on_this_connection_is_not_continued() -> None:
    """deviation: Kafka continues a session from any connection (sessions are keyed by group
    and member id); kafkaguard answers 122 for one not opened on this connection, without
    reaching the broker (docs/deviations.md)."""
    h = harness(READ_A)
    verdict = h.send(share_fetch(3, (A, 0)))
    assert isinstance(verdict, Respond)
    assert verdict.response.error_code == ErrorCode.share_session_not_found
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]
    other = harness(READ_A)  # another connection opened it
    other.send(share_fetch(0, (A, 0)))
    assert isinstance(h.send(share_fetch(1)), Respond)


def test_oldest_session_mirror_is_evicted() -> None:
    """deviation: at most 8 share-session mirrors per connection (docs/deviations.md)."""
    h = harness(READ_A)
    limit = share_sessions.MAX_SHARE_SESSIONS_PER_CONNECTION
    for n in range(limit + 1):
        h.send(share_fetch(0, (A, 0), member_id=f"member-{n}"))
    assert isinstance(h.send(share_fetch(1, member_id="member-0")), Respond)
    assert isinstance(h.send(share_fetch(1, member_id=f"member-{limit}")), Forward)


def test_session_mirror_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """deviation: a session past the partition bound closes the connection
    (docs/deviations.md; Kafka has no such limit)."""
    monkeypatch.setattr(share_sessions, "MAX_SHARE_SESSION_PARTITIONS", 3)
    h = harness(READ_A)
    too_many = h.send(share_fetch(0, *((A, i) for i in range(4))))
    assert isinstance(too_many, Close) and "limit" in too_many.reason
    h.send(share_fetch(0, (A, 0), (A, 1)))
    assert isinstance(h.send(share_fetch(1, (A, 2))), Forward)
    grown = h.send(share_fetch(2, (A, 3)))
    assert isinstance(grown, Close) and "3 partitions" in grown.reason
    assert isinstance(h.send(share_fetch(3)), Respond)  # the mirror went with it


def test_unknown_topic_id_is_answered_100_and_never_sent() -> None:
    h = harness(READ_A)
    unknown = uuid.uuid4()
    body = share_fetch(0, (unknown, 0), (A, 0))
    asked = h.send(body)
    assert isinstance(asked, AskFirst)  # the proxy asks the broker for the id's name first
    verdict = h.answer_metadata(asked, {A: "a"})
    assert sent(verdict, body) == [(A, 0)]
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED"), ("READ", "TOPIC", "a", "ALLOWED")]
    out = h.complete(verdict, fetched((A, 0)))
    assert answer(out) == [("a", 0, 0, 0), (str(unknown), 0, 100, 0)]


def test_broker_entries_outside_the_authorized_context_are_dropped() -> None:
    """E.g. a partition another connection added to the same broker session (sessions are
    keyed by group and member id): never passed to this client."""
    h = harness(READ_A, READ_C)
    verdict = h.send(share_fetch(0, (A, 0)))
    assert answer(h.complete(verdict, fetched((A, 0), (C, 0), (B, 0)))) == [("a", 0, 0, 0)]


def test_node_endpoints_are_rewritten() -> None:
    h = harness(READ_A)
    endpoint = item(78, 1, "node_endpoints", node_id=1, host="10.9.9.9", port=9092, rack=None)
    verdict = h.send(share_fetch(0, (A, 0)))
    out = h.complete(verdict, fetched((A, 0), node_endpoints=(endpoint,)))
    assert [(e.node_id, e.host, e.port) for e in out.node_endpoints] == [(1, "proxy.test", 30001)]


def test_renew_acknowledgement_fetch_answers_acknowledgements_only() -> None:
    h = harness(READ_A)
    h.complete(h.send(share_fetch(0, (A, 0), (B, 0), version=2)), fetched((A, 0), version=2))
    renew = {"is_renew_ack": True, "max_wait": timedelta(0), "min_bytes": 0, "max_bytes": 0}
    body = share_fetch(1, (B, 0), acks={(B, 0): ((0, 0, (4,)),)}, version=2, max_records=0, **renew)
    verdict = h.send(body)
    assert sent(verdict, body) == []
    assert answer(h.complete(verdict, fetched(version=2))) == [("b", 0, 0, 29)]
    # RENEW (4) is a valid type in v2 only with IsRenewAck
    plain = share_fetch(2, (B, 0), acks={(B, 0): ((0, 0, (4,)),)}, version=2)
    assert answer(h.complete(h.send(plain), fetched(version=2))) == [("b", 0, 29, 42)]


# -- ShareAcknowledge ----------------------------------------------------------------------


def test_share_acknowledge_strips_denied_partitions() -> None:
    h = harness(READ_A)
    body = share_acknowledge(1, {(A, 0): ACCEPT, (B, 0): ACCEPT, (B, 1): ((0, 1, (5,)),)})
    verdict = h.send(body)
    assert sent(verdict, body) == [(A, 0)]
    assert h.checked() == [
        ("READ", "GROUP", "g", "ALLOWED"),
        ("READ", "TOPIC", "a", "ALLOWED"),
        ("READ", "TOPIC", "b", "DENIED"),
    ]
    assert h.checks[2][0].resource_reference_count == 2
    out = h.complete(verdict, acknowledged((A, 0)))
    assert answer(out) == [("a", 0, 0, 0), ("b", 0, 29, 0), ("b", 1, 42, 0)]
    assert out.responses[1].partitions[0].error_message is None


def test_share_acknowledge_with_nothing_allowed_still_moves_the_epoch() -> None:
    h = harness()
    body = share_acknowledge(1, {(B, 0): ACCEPT})
    verdict = h.send(body)
    assert isinstance(verdict, Forward) and sent(verdict, body) == []
    assert answer(h.complete(verdict, acknowledged())) == [("b", 0, 29, 0)]
    # a session error is passed as the broker gave it, with no partition (Kafka's order)
    refused = h.complete(h.send(body), acknowledged(error=ErrorCode.share_session_not_found))
    assert refused.error_code == ErrorCode.share_session_not_found and refused.responses == ()


def test_share_acknowledge_checks_the_group_first_and_closes_the_session() -> None:
    denied = HandlerHarness([READ_A], topic_ids=NAMES).send(share_acknowledge(1, {(A, 0): ACCEPT}))
    assert isinstance(denied, Respond)
    assert denied.response.error_code == ErrorCode.group_authorization_failed
    h = harness(READ_A)
    h.send(share_fetch(0, (A, 0)))
    assert isinstance(h.send(share_acknowledge(-1, {(A, 0): ACCEPT})), Forward)
    assert isinstance(h.send(share_fetch(1)), Respond)  # closed by the acknowledgement


def test_share_acknowledge_v2_renew() -> None:
    h = harness(READ_A)
    body = share_acknowledge(
        1, {(A, 0): ((0, 0, (4,)),), (B, 0): ((0, 0, (4,)),)}, version=2, is_renew_ack=True
    )
    verdict = h.send(body)
    assert sent(verdict, body) == [(A, 0)]
    assert answer(h.complete(verdict, acknowledged((A, 0), version=2)))[1] == ("b", 0, 29, 0)


def test_requests_with_nulls_reach_no_broker_uncontrolled() -> None:
    """The null sweep's shapes for these two APIs: answered or forwarded, never raising."""
    for api in (78, 79):
        for version in (1, 2):
            body = req(api, version, group_id=None, member_id=None)
            verdict = harness().send(body)
            assert isinstance(verdict, Respond)
            assert verdict.response.error_code == ErrorCode.invalid_request
