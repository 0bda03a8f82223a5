"""Fetch authorization (KafkaApis.handleFetchRequest) and KIP-227 sessions, without sockets."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as req12
from kio.schema.fetch.v12 import response as resp12
from kio.schema.fetch.v13 import request as req13
from kio.schema.fetch.v13 import response as resp13
from kio.schema.fetch.v15 import request as req15
from kio.schema.fetch.v16 import request as req16
from kio.schema.fetch.v16 import response as resp16

from kafkaguard.policy.model import AclOperation
from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers import fetch
from kafkaguard.proxy.handlers.support.base import AskFirst, Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl

READ_A = acl("User:alice", "READ", "TOPIC", "a")


def fetch12(
    *topics: str, session: int = 0, epoch: int = -1, forget: tuple[str, ...] = (), offset: int = 0
) -> Any:
    return req12.FetchRequest(
        max_wait=timedelta(milliseconds=500),
        min_bytes=1,
        session_id=session,
        session_epoch=epoch,
        topics=tuple(
            req12.FetchTopic(
                topic=t,
                partitions=tuple(
                    req12.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1024)
                    for p in (0, 1)
                ),
            )
            for t in topics
        ),
        forgotten_topics_data=tuple(
            req12.ForgottenTopic(topic=t, partitions=(0, 1)) for t in forget
        ),
    )


def reply12(*topics: str, session: int = 0) -> Any:
    return resp12.FetchResponse(
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        session_id=session,
        responses=tuple(
            resp12.FetchableTopicResponse(
                topic=t,
                partitions=tuple(
                    resp12.PartitionData(
                        partition_index=p,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        aborted_transactions=None,
                        records=b"data",
                    )
                    for p in (0, 1)
                ),
            )
            for t in topics
        ),
    )


def fetch_by_id(schema: Any, *topic_ids: uuid.UUID, **fields: Any) -> Any:
    """A v13+ FetchRequest of ``schema`` (a kio request module) for partition 0 of each id."""
    partition = schema.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)
    return schema.FetchRequest(
        max_wait=timedelta(0),
        min_bytes=1,
        topics=tuple(schema.FetchTopic(topic_id=i, partitions=(partition,)) for i in topic_ids),
        forgotten_topics_data=(),
        **fields,
    )


def parts(response: Any) -> list[tuple[Any, int, int]]:
    return [
        (getattr(t, "topic", None) or t.topic_id, p.partition_index, int(p.error_code))
        for t in response.responses
        for p in t.partitions
    ]


def sent_parts(body: Any) -> list[tuple[Any, int]]:
    return [
        (getattr(t, "topic", None) or t.topic_id, p.partition)
        for t in body.topics
        for p in t.partitions
    ]


def test_allowed_sessionless_fetch_is_zero_copy_both_ways() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12("a"))
    assert isinstance(verdict, Forward)
    assert verdict.request is None and verdict.rewrite is None  # response never decoded
    assert h.checked() == [("READ", "TOPIC", "a", "ALLOWED")]
    assert h.checks[0][0].resource_reference_count == 2  # one per partition, as Kafka counts


def test_partially_allowed_fetch_strips_and_merges_29_per_partition() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12("b", "a"))
    assert sent_parts(h.forwarded_body(verdict, None)) == [("a", 0), ("a", 1)]
    out = h.complete(verdict, reply12("a"))
    # Kafka's order: partitions read from the log first, then the erroneous ones.
    assert parts(out) == [("a", 0, 0), ("a", 1, 0), ("b", 0, 29), ("b", 1, 29)]
    denied = out.responses[1].partitions[0]
    assert denied.high_watermark == -1 and denied.records == b"" and denied.last_stable_offset == -1


def test_merged_response_follows_kafkas_order_data_first_then_erroneous() -> None:
    # KafkaApis.handleFetchRequest: partitions read from the log, then ``erroneous`` (denied,
    # unknown partition) in the request's order; a topic split by that gets two entries.
    h = HandlerHarness([READ_A, acl("User:alice", "READ", "TOPIC", "c")])
    verdict = h.send(fetch12("c", "b", "a"))
    assert sent_parts(h.forwarded_body(verdict, None)) == [("c", 0), ("c", 1), ("a", 0), ("a", 1)]
    broker = reply12("a")
    missing = replace(
        broker.responses[0],
        topic="c",
        partitions=tuple(
            replace(p, error_code=ErrorCode.unknown_topic_or_partition, records=b"")
            for p in broker.responses[0].partitions
        ),
    )
    out = h.complete(verdict, replace(broker, responses=(missing, *broker.responses)))
    assert parts(out) == [
        ("a", 0, 0),
        ("a", 1, 0),
        ("c", 0, 3),
        ("c", 1, 3),
        ("b", 0, 29),
        ("b", 1, 29),
    ]
    assert [t.topic for t in out.responses] == ["a", "c", "b"]


def test_nothing_allowed_is_answered_without_the_broker() -> None:
    h = HandlerHarness()
    verdict = h.send(fetch12("a", session=0, epoch=0))
    assert isinstance(verdict, Respond)
    assert parts(verdict.response) == [("a", 0, 29), ("a", 1, 29)]
    assert verdict.response.session_id == 0


def test_unseen_topic_ids_are_resolved_by_the_broker_first() -> None:
    """Kafka resolves ids before it authorizes: an id the proxy has not seen yet is looked up
    with Metadata (nothing authorized or forwarded before the answer), then READ is checked
    by name."""
    known, unseen, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    h = HandlerHarness([READ_A], topic_ids={known: "a"})
    verdict = h.send(fetch_by_id(req13, unseen, known))
    assert isinstance(verdict, AskFirst) and h.checked() == []
    assert [(t.topic_id, t.name) for t in cast(Any, verdict.question).topics] == [(unseen, None)]
    decided = h.answer_metadata(verdict, {unseen: "b", known: "a", other: "c"})
    assert h.checked() == [("READ", "TOPIC", "b", "DENIED"), ("READ", "TOPIC", "a", "ALLOWED")]
    assert sent_parts(h.forwarded_body(decided, None)) == [(known, 0)]
    assert h.topic_name(unseen) == "b" and h.topic_name(other) is None
    assert not isinstance(h.send(fetch_by_id(req13, unseen)), AskFirst)  # learned: asked once


def test_topic_ids_unknown_to_the_broker_are_100_and_never_forwarded() -> None:
    known, denied, unknown = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    h = HandlerHarness([READ_A], topic_ids={known: "a", denied: "b"})
    body = fetch_by_id(req13, unknown, denied, known)
    verdict = h.answer_metadata(h.send(body), {known: "a", denied: "b"})
    assert h.checked() == [("READ", "TOPIC", "b", "DENIED"), ("READ", "TOPIC", "a", "ALLOWED")]
    assert sent_parts(h.forwarded_body(verdict, None)) == [(known, 0)]
    broker = resp13.FetchResponse(
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        responses=(
            resp13.FetchableTopicResponse(
                topic_id=known,
                partitions=(
                    resp13.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.none,
                        high_watermark=1,
                        aborted_transactions=None,
                        records=b"x",
                    ),
                ),
            ),
        ),
    )
    assert parts(h.complete(verdict, broker)) == [(known, 0, 0), (unknown, 0, 100), (denied, 0, 29)]
    # Unknown ids come before denied topics whatever the request order (Kafka resolves ids
    # before it authorizes).
    verdict = h.answer_metadata(h.send(fetch_by_id(req13, denied, unknown, known)), {})
    assert parts(h.complete(verdict, broker)) == [(known, 0, 0), (unknown, 0, 100), (denied, 0, 29)]


def _follower(replica_id: int) -> Any:
    return fetch_by_id(
        req15, uuid.UUID(int=5), replica_state=req15.ReplicaState(replica_id=replica_id)
    )


def test_denied_follower_fetch_gets_29_not_31() -> None:
    h = HandlerHarness([READ_A], topic_ids={uuid.UUID(int=5): "a"})
    verdict = h.send(_follower(3))
    assert h.checked() == [("CLUSTER_ACTION", "CLUSTER", "kafka-cluster", "DENIED")]
    assert isinstance(verdict, Respond)
    assert parts(verdict.response) == [(uuid.UUID(int=5), 0, 29)]


def test_follower_with_cluster_action_is_forwarded_unchanged() -> None:
    h = HandlerHarness(
        [acl("User:alice", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")],
        topic_ids={uuid.UUID(int=5): "a"},
    )
    verdict = h.send(_follower(3))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_v16_keeps_rewriting_node_endpoints() -> None:
    h = HandlerHarness([READ_A], topic_ids={uuid.UUID(int=1): "a"})
    body = fetch_by_id(req16, uuid.UUID(int=1))
    verdict = h.send(body)
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite
    reply = resp16.FetchResponse(
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        responses=(),
        node_endpoints=(resp16.NodeEndpoint(node_id=2, host="broker-2.internal", port=9092),),
    )
    assert h.complete(verdict, reply).node_endpoints[0].host == "proxy.test"


def test_v16_response_without_node_endpoints_is_not_decoded() -> None:
    h = HandlerHarness([READ_A], topic_ids={uuid.UUID(int=1): "a"})
    verdict = h.send(fetch_by_id(req16, uuid.UUID(int=1)))
    assert isinstance(verdict, Forward) and verdict.decode_if is not None
    reply = resp16.FetchResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, responses=(), node_endpoints=()
    )
    assert not verdict.decode_if(codec.encode_response(reply, 7))


# -- incremental fetch sessions (KIP-227) ---------------------------------------------------


def test_unknown_session_is_refused_with_70_without_reaching_the_broker() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12(session=1234, epoch=3))
    assert isinstance(verdict, Respond)
    assert int(verdict.response.error_code) == ErrorCode.fetch_session_id_not_found
    assert verdict.response.responses == ()


def test_session_revocation_forgets_upstream_and_reports_29_until_regranted() -> None:
    read_b = acl("User:alice", "READ", "TOPIC", "b")
    h = HandlerHarness([READ_A, read_b])
    # full fetch creating the session: forwarded as sent, the response's session id is read
    # from its raw bytes (never decoded)
    verdict = h.send(fetch12("a", "b", epoch=0, offset=5))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None
    assert verdict.transform is not None
    h.complete(verdict, reply12("a", "b", session=77))

    # incremental, nothing changed, everything allowed: the bytes go up as they are
    verdict = h.send(fetch12(session=77, epoch=1))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None
    assert h.checked() == [("READ", "TOPIC", "a", "ALLOWED"), ("READ", "TOPIC", "b", "ALLOWED")]
    h.complete(verdict, reply12("a", "b", session=77))

    # READ on b revoked mid-session: b leaves the broker's session, the client sees 29
    h.authorizer.load_snapshot([READ_A])
    verdict = h.send(fetch12(session=77, epoch=2))
    sent = h.forwarded_body(verdict, None)
    assert sent.topics == ()
    assert [(f.topic, f.partitions) for f in sent.forgotten_topics_data] == [("b", (0, 1))]
    out = h.complete(verdict, reply12("a", session=77))
    assert parts(out) == [("a", 0, 0), ("a", 1, 0), ("b", 0, 29), ("b", 1, 29)]

    # still denied: nothing more to forget, 29 again (Kafka repeats erroneous partitions)
    verdict = h.send(fetch12(session=77, epoch=3))
    sent = h.forwarded_body(verdict, None)
    assert sent.topics == () and sent.forgotten_topics_data == ()
    assert parts(h.complete(verdict, reply12(session=77))) == [("b", 0, 29), ("b", 1, 29)]

    # a denied partition the client re-sends is stripped, never forwarded
    verdict = h.send(fetch12("b", session=77, epoch=4, offset=9))
    assert h.forwarded_body(verdict, None).topics == ()
    h.complete(verdict, reply12(session=77))

    # READ granted again: b goes back upstream at the position the client last sent
    h.authorizer.load_snapshot([READ_A, read_b])
    verdict = h.send(fetch12(session=77, epoch=5))
    sent = h.forwarded_body(verdict, None)
    assert sent_parts(sent) == [("b", 0), ("b", 1)]
    assert [p.fetch_offset for t in sent.topics for p in t.partitions] == [9, 9]
    assert parts(h.complete(verdict, reply12("b", session=77))) == [("b", 0, 0), ("b", 1, 0)]

    # and the session is clean again: zero-copy
    verdict = h.send(fetch12(session=77, epoch=6))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_partition_denied_at_session_creation_is_withheld_from_the_broker_session() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12("a", "b", epoch=0))
    assert sent_parts(h.forwarded_body(verdict, None)) == [("a", 0), ("a", 1)]
    h.complete(verdict, reply12("a", session=9))
    verdict = h.send(fetch12(session=9, epoch=1))
    sent = h.forwarded_body(verdict, None)
    assert sent.topics == () and sent.forgotten_topics_data == ()  # broker never had b
    assert parts(h.complete(verdict, reply12(session=9))) == [("b", 0, 29), ("b", 1, 29)]


def test_forgotten_partitions_leave_the_mirror() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12("a", "b", epoch=0))
    h.complete(verdict, reply12("a", session=9))
    verdict = h.send(fetch12(session=9, epoch=1, forget=("b",)))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None
    assert [a.operation for a, _ in h.checks] == [AclOperation.READ]


def test_closing_full_fetch_drops_the_mirror() -> None:
    h = HandlerHarness([READ_A])
    verdict = h.send(fetch12("a", epoch=0))
    h.complete(verdict, reply12("a", session=9))
    h.send(fetch12("a", session=9, epoch=-1))  # close session 9, sessionless fetch
    verdict = h.send(fetch12(session=9, epoch=1))
    assert isinstance(verdict, Respond)


# -- review regressions: bounded mirrors, everything sent is authorized -------------------------


def incremental12(
    session: int, epoch: int, topics: dict[str, range], forget: dict[str, range] | None = None
) -> Any:
    return req12.FetchRequest(
        max_wait=timedelta(0),
        min_bytes=1,
        session_id=session,
        session_epoch=epoch,
        topics=tuple(
            req12.FetchTopic(
                topic=t,
                partitions=tuple(
                    req12.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1)
                    for p in ps
                ),
            )
            for t, ps in topics.items()
        ),
        forgotten_topics_data=tuple(
            req12.ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in (forget or {}).items()
        ),
    )


def test_session_mirror_past_the_cap_is_dropped_and_answered_70(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fetch, "MAX_SESSION_PARTITIONS", 6)
    h = HandlerHarness([READ_A])
    h.complete(h.send(fetch12("a", epoch=0)), reply12("a", session=77))  # 2 partitions
    # denied partitions never reach the broker but do grow the mirror: up to the cap, fine
    verdict = h.send(incremental12(77, 1, {"secret": range(4)}))
    assert isinstance(verdict, Forward)
    assert len(fetch.connection_sessions(h).by_id[77].partitions) == 6
    # one more: the mirror is dropped and the client told to start over
    verdict = h.send(incremental12(77, 2, {"secret": range(4, 5)}))
    assert isinstance(verdict, Respond)
    assert int(verdict.response.error_code) == ErrorCode.fetch_session_id_not_found
    assert 77 not in fetch.connection_sessions(h).by_id
    assert isinstance(h.send(incremental12(77, 3, {})), Respond)  # the session is gone


def test_full_fetch_past_the_cap_is_forwarded_sessionless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "MAX_SESSION_PARTITIONS", 3)
    h = HandlerHarness([READ_A])
    body = fetch12("a", "b", session=0, epoch=0)  # 4 partitions, b denied
    verdict = h.send(body)
    sent = h.forwarded_body(verdict, body)
    assert sent.session_epoch == -1 and sent_parts(sent) == [("a", 0), ("a", 1)]
    h.complete(verdict, reply12("a"))
    assert not fetch.connection_sessions(h).by_id
    allowed = h.send(fetch12("a", epoch=0))  # 2 partitions: a session as usual
    assert h.forwarded_body(allowed, None) is None
    big = HandlerHarness([READ_A, acl("User:alice", "READ", "TOPIC", "b")])
    verdict = big.send(body)
    assert big.forwarded_body(verdict, body).session_epoch == -1
    big.complete(verdict, reply12("a", "b"))
    assert not fetch.connection_sessions(big).by_id


def test_partition_named_and_forgotten_in_one_request_is_authorized_before_forwarding() -> None:
    h = HandlerHarness([READ_A])
    h.complete(h.send(fetch12("a", epoch=0)), reply12("a", session=77))
    body = incremental12(77, 1, {"secret": range(1)}, forget={"secret": range(1)})
    verdict = h.send(body)
    assert ("READ", "TOPIC", "secret", "DENIED") in h.checked()
    sent = h.forwarded_body(verdict, body)
    assert verdict.request is not None and sent.topics == ()
    assert [(f.topic, f.partitions) for f in sent.forgotten_topics_data] == [("secret", (0,))]
    out = h.complete(verdict, reply12("a", "secret", session=77))
    assert parts(out) == [("a", 0, 0), ("a", 1, 0)]  # nothing of secret, not even a 29
    assert ("secret", 0) not in fetch.connection_sessions(h).by_id[77].partitions
    # an authorized one named and forgotten at once goes up as the client sent it
    ok = incremental12(77, 2, {"a": range(1)}, forget={"a": range(1)})
    verdict = h.send(ok)
    assert isinstance(verdict, Forward) and verdict.request is None


# -- issue 24: the mirror follows the broker's answer, never the client's request ---------------


def test_wrong_epoch_is_answered_71_without_the_broker_and_changes_nothing() -> None:
    h = HandlerHarness([READ_A])
    h.complete(h.send(fetch12("a", epoch=0)), reply12("a", session=77))
    verdict = h.send(incremental12(77, 5, {}, forget={"a": range(2)}))
    assert isinstance(verdict, Respond)
    # SessionErrorContext: FetchResponse.of(INVALID_FETCH_SESSION_EPOCH, 0, INVALID_SESSION_ID)
    assert int(verdict.response.error_code) == ErrorCode.invalid_fetch_session_epoch
    assert verdict.response.session_id == 0 and verdict.response.responses == ()
    mirror = fetch.connection_sessions(h).by_id[77]
    assert list(mirror.partitions) == [("a", 0), ("a", 1)] and mirror.epoch == 1
    # READ revoked: the right epoch naming nothing still has a-0 and a-1 checked and forgotten
    h.authorizer.load_snapshot([])
    verdict = h.send(incremental12(77, 1, {}))
    assert h.checked() == [("READ", "TOPIC", "a", "DENIED")]
    sent = h.forwarded_body(verdict, None)
    assert [(f.topic, f.partitions) for f in sent.forgotten_topics_data] == [("a", (0, 1))]
    assert parts(h.complete(verdict, reply12("a", session=77))) == [("a", 0, 29), ("a", 1, 29)]


def test_topic_id_use_changed_within_a_session_is_answered_106() -> None:
    known = uuid.uuid4()
    h = HandlerHarness([READ_A], topic_ids={known: "a"})
    h.complete(h.send(fetch12("a", epoch=0)), reply12("a", session=77))
    verdict = h.send(fetch_by_id(req13, known, session_id=77, session_epoch=1))
    assert isinstance(verdict, Respond)
    assert int(verdict.response.error_code) == ErrorCode.fetch_session_topic_id_error
    assert 77 in fetch.connection_sessions(h).by_id


@pytest.mark.parametrize(
    ("code", "session"),
    [
        (ErrorCode.fetch_session_id_not_found, 0),  # the broker evicted the session
        (ErrorCode.invalid_fetch_session_epoch, 0),
        (ErrorCode.unknown_server_error, 77),
        (ErrorCode.none, 0),  # throttled, or the session became empty and was closed
    ],
)
def test_an_unconfirmed_answer_drops_the_mirror(code: ErrorCode, session: int) -> None:
    h = HandlerHarness([READ_A])
    h.complete(h.send(fetch12("a", epoch=0)), reply12("a", session=77))
    verdict = h.send(incremental12(77, 1, {}, forget={"a": range(1)}))
    h.complete(verdict, replace(reply12(session=session), error_code=code))
    assert 77 not in fetch.connection_sessions(h).by_id
    assert isinstance(h.send(incremental12(77, 2, {})), Respond)  # 70: start over


def test_a_forgotten_partition_counts_as_held_until_the_broker_confirms() -> None:
    read_b = acl("User:alice", "READ", "TOPIC", "b")
    h = HandlerHarness([READ_A, read_b])
    h.complete(h.send(fetch12("a", "b", epoch=0)), reply12("a", "b", session=77))
    forgetting = h.send(incremental12(77, 1, {}, forget={"b": range(2)}))
    assert isinstance(forgetting, Forward) and forgetting.request is None
    # pipelined before its answer, READ on b revoked: b may still be held, so it is checked
    # and forgotten upstream again, but it is not the client's any more (no 29 for it)
    h.authorizer.load_snapshot([READ_A])
    pipelined = h.send(incremental12(77, 2, {}))
    assert h.checked() == [("READ", "TOPIC", "a", "ALLOWED"), ("READ", "TOPIC", "b", "DENIED")]
    sent = h.forwarded_body(pipelined, None)
    assert [(f.topic, f.partitions) for f in sent.forgotten_topics_data] == [("b", (0, 1))]
    h.complete(forgetting, reply12("a", session=77))
    out = h.complete(pipelined, reply12("a", "b", session=77))
    assert parts(out) == [("a", 0, 0), ("a", 1, 0)]
    # both confirmed: b is neither held nor checked any more
    h.complete(h.send(incremental12(77, 3, {})), reply12("a", session=77))
    assert h.checked() == [("READ", "TOPIC", "a", "ALLOWED")]


def test_epochs_follow_fetch_metadata_next_epoch() -> None:
    assert fetch.next_epoch(1) == 2
    assert fetch.next_epoch(2**31 - 1) == 1  # wraps to 1, never 0 (a full fetch)
    assert fetch.next_epoch(-1) == -1
