"""Metadata (KafkaApis.handleTopicMetadataRequest) and DescribeTopicPartitions, without sockets."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, cast

import pytest
from kio.schema.describe_topic_partitions.v0 import request as dtp_req
from kio.schema.describe_topic_partitions.v0 import response as dtp_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0 import request as req0
from kio.schema.metadata.v0 import response as resp0
from kio.schema.metadata.v3 import request as req3
from kio.schema.metadata.v10 import request as req10
from kio.schema.metadata.v10 import response as resp10
from kio.schema.metadata.v12 import request as req12
from kio.schema.metadata.v12 import response as resp12

from kafkaguard.protocol import codec
from kafkaguard.protocol.header import RequestHeaderInfo
from kafkaguard.protocol.skim.metadata import walk_metadata_response
from kafkaguard.proxy.core.dispatch import response_transform
from kafkaguard.proxy.handlers.support.base import AskFirst, Forward, Respond
from kafkaguard.proxy.handlers.support.responses import entity
from tests.support.data_path import nested
from tests.support.handler_harness import HandlerHarness, acl

ZERO = uuid.UUID(int=0)
MIN = -2147483648
IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in ("a", "b", "c", "__consumer_offsets")}


def v12(
    *names: str | None, ids: tuple[uuid.UUID, ...] = (), auto: bool = True, ops: bool = False
) -> Any:
    topics: Any = None
    if names or ids:
        topics = tuple(req12.MetadataRequestTopic(topic_id=None, name=n) for n in names) + tuple(
            req12.MetadataRequestTopic(topic_id=i, name=None) for i in ids
        )
    return req12.MetadataRequest(
        topics=topics, allow_auto_topic_creation=auto, include_topic_authorized_operations=ops
    )


def reply12(*topics: tuple[str | None, int] | tuple[str | None, int, uuid.UUID]) -> Any:
    return resp12.MetadataResponse(
        throttle_time=timedelta(0),
        brokers=(resp12.MetadataResponseBroker(node_id=1, host="broker-1.internal", port=9092),),
        cluster_id="c",
        controller_id=1,
        topics=tuple(
            resp12.MetadataResponseTopic(
                error_code=ErrorCode(t[1]),
                name=t[0],
                topic_id=t[2] if len(t) > 2 else IDS.get(t[0] or "", ZERO),  # type: ignore[misc]
                partitions=(),
                topic_authorized_operations=12345,  # whatever an authorizer-less broker says
            )
            for t in topics
        ),
    )


def summary(response: Any) -> list[tuple[Any, int, Any]]:
    """(name, error code, topic id); kio decodes the zero id on the wire as None."""
    return [(t.name, int(t.error_code), t.topic_id or ZERO) for t in response.topics]


def test_all_topics_forwarded_unchanged_and_filtered_silently() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(v12())
    assert isinstance(verdict, Forward) and verdict.request is None
    out = h.complete(verdict, reply12(("a", 0), ("b", 0), ("__consumer_offsets", 0)))
    assert summary(out) == [("a", 0, IDS["a"])]
    assert out.topics[0].topic_authorized_operations == MIN  # not requested → sentinel
    assert out.brokers[0].host == "proxy.test"
    # FILTER-style: denials are not logged (logIfDenied = !isAllTopics)
    assert [(a.resource_pattern.name, a.log_if_denied) for a, _ in h.checks] == [
        ("a", False),
        ("b", False),
        ("__consumer_offsets", False),
    ]
    assert h.topic_names[IDS["b"]] == "b"  # ids learned even for topics filtered out


def test_named_denied_topic_is_29_with_zero_id_and_never_forwarded() -> None:
    h = HandlerHarness(
        [
            acl("User:alice", "DESCRIBE", "TOPIC", "a"),
            acl("User:alice", "CREATE", "CLUSTER", "kafka-cluster"),
        ]
    )
    verdict = h.send(v12("b", "a"))
    assert h.checked() == [
        ("DESCRIBE", "TOPIC", "b", "DENIED"),
        ("DESCRIBE", "TOPIC", "a", "ALLOWED"),
        ("CREATE", "CLUSTER", "kafka-cluster", "ALLOWED"),
    ]
    sent = h.forwarded_body(verdict, None)
    assert [t.name for t in sent.topics] == ["a"] and sent.allow_auto_topic_creation
    out = h.complete(verdict, reply12(("a", 0)))
    assert summary(out) == [("b", 29, ZERO), ("a", 0, IDS["a"])]
    assert out.topics[0].is_internal is False and out.topics[0].topic_authorized_operations == MIN


def test_denied_answer_identical_whether_topic_exists_or_not() -> None:
    h = HandlerHarness()
    verdict = h.send(v12("exists", "missing"))
    assert h.forwarded_body(verdict, None).topics == ()  # brokers/cluster id still come upstream
    out = h.complete(verdict, reply12())
    assert summary(out) == [("exists", 29, ZERO), ("missing", 29, ZERO)]


def test_auto_creation_turned_off_without_create_and_missing_names_become_29() -> None:
    h = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "*"), acl("User:alice", "READ", "TOPIC", "a")]
    )
    verdict = h.send(v12("a", "new"))
    assert h.checked() == [
        ("DESCRIBE", "TOPIC", "a", "ALLOWED"),
        ("DESCRIBE", "TOPIC", "new", "ALLOWED"),
        ("CREATE", "CLUSTER", "kafka-cluster", "DENIED"),
        ("CREATE", "TOPIC", "a", "DENIED"),
        ("CREATE", "TOPIC", "new", "DENIED"),
    ]
    assert all(not a.log_if_denied for a, _ in h.checks[2:])  # speculative: no Denied lines
    sent = h.forwarded_body(verdict, None)
    assert [t.name for t in sent.topics] == ["a", "new"]
    assert sent.allow_auto_topic_creation is False
    out = h.complete(verdict, reply12(("a", 0), ("new", 3)))
    assert summary(out) == [("a", 0, IDS["a"]), ("new", 29, ZERO)]


def test_create_on_every_name_forwards_the_request_as_sent() -> None:
    h = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "a"), acl("User:alice", "CREATE", "TOPIC", "a")]
    )
    verdict = h.send(v12("a"))
    assert isinstance(verdict, Forward) and verdict.request is None


def test_mixed_create_rights_ask_about_the_uncreatable_names_first() -> None:
    """Kafka creates the missing names the principal may create, answers 29 for missing ones
    it may not create and describes the existing ones: the uncreatable names are looked up
    with auto-creation off first, the creatable ones forwarded with creation on."""
    h = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "*"), acl("User:alice", "CREATE", "TOPIC", "new")]
    )
    asked = h.send(v12("a", "new", "gone"))
    assert isinstance(asked, AskFirst)
    question: Any = asked.question
    assert [t.name for t in question.topics] == ["a", "gone"]
    assert question.__version__ == 12 and question.allow_auto_topic_creation is False
    verdict = h.answer_metadata(asked, {IDS["a"]: "a"})
    sent = h.forwarded_body(verdict, None)
    assert [t.name for t in sent.topics] == ["new"] and sent.allow_auto_topic_creation
    out = h.complete(verdict, reply12(("new", 3)))  # Kafka 4: 3 while it creates the topic
    assert summary(out) == [("a", 0, IDS["a"]), ("new", 3, ZERO), ("gone", 29, ZERO)]


def test_old_versions_ask_about_uncreatable_names_with_v4() -> None:
    """v0–3 cannot switch auto-creation off: the names lacking CREATE are looked up with a v4
    question (auto-creation off) and never forwarded; existing ones are described."""
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "*")])
    body = req3.MetadataRequest(
        topics=(req3.MetadataRequestTopic(name="a"), req3.MetadataRequestTopic(name="b"))
    )
    asked = h.send(body)
    assert isinstance(asked, AskFirst) and cast(Any, asked.question).__version__ == 4
    out = h.complete(h.answer_metadata(asked, {IDS["a"]: "b"}), None)
    assert [(t.name, int(t.error_code)) for t in out.topics] == [("a", 29), ("b", 0)]
    assert [(b.host, b.port) for b in out.brokers] == []


def test_old_version_without_a_v4_broker_keeps_uncreatable_names_local() -> None:
    h = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "*")], broker_api_versions={3: range(0, 4)}
    )
    verdict = h.send(req3.MetadataRequest(topics=(req3.MetadataRequestTopic(name="a"),)))
    assert h.forwarded_body(verdict, None).topics == ()
    out = h.complete(verdict, _reply_v3())
    assert [(t.name, int(t.error_code)) for t in out.topics] == [("a", 29)]


def _reply_v3() -> Any:
    from kio.schema.metadata.v3 import response as resp3

    return resp3.MetadataResponse(
        throttle_time=timedelta(0),
        brokers=(resp3.MetadataResponseBroker(node_id=1, host="b", port=9092),),
        topics=(),
    )


def test_v0_empty_list_means_all_topics() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "b")])
    verdict = h.send(req0.MetadataRequest(topics=()))
    assert isinstance(verdict, Forward) and verdict.request is None
    reply = resp0.MetadataResponse(
        brokers=(resp0.MetadataResponseBroker(node_id=1, host="b", port=1),),
        topics=tuple(
            resp0.MetadataResponseTopic(error_code=ErrorCode.none, name=n, partitions=())
            for n in "ab"
        ),
    )
    assert [t.name for t in h.complete(verdict, reply).topics] == ["b"]


def test_v0_with_every_name_denied_drops_the_all_topics_answer() -> None:
    h = HandlerHarness()
    verdict = h.send(req0.MetadataRequest(topics=(req0.MetadataRequestTopic(name="a"),)))
    assert h.forwarded_body(verdict, None).topics == ()
    reply = resp0.MetadataResponse(
        brokers=(),
        topics=(resp0.MetadataResponseTopic(error_code=ErrorCode.none, name="z", partitions=()),),
    )
    assert [(t.name, int(t.error_code)) for t in h.complete(verdict, reply).topics] == [("a", 29)]


def test_by_id_withholds_the_name_without_describe_and_keeps_unknown_ids() -> None:
    unknown = uuid.uuid4()
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(v12(ids=(IDS["a"], IDS["b"], unknown)))
    sent = h.forwarded_body(verdict, None)
    assert [t.topic_id for t in sent.topics] == [IDS["a"], IDS["b"], unknown]
    assert sent.allow_auto_topic_creation is False
    out = h.complete(verdict, reply12(("a", 0), ("b", 0), (None, 100, unknown)))
    assert summary(out) == [("a", 0, IDS["a"]), (None, 29, IDS["b"]), (None, 100, unknown)]


def test_topic_ids_before_v12_are_an_invalid_request() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "*")])
    request = req10.MetadataRequest(
        topics=(req10.MetadataRequestTopic(topic_id=IDS["a"], name="a"),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    verdict = h.send(request)
    assert isinstance(verdict, Respond)
    assert [(t.name, int(t.error_code)) for t in verdict.response.topics] == [("a", 42)]
    assert h.checks == []


def test_kip430_cluster_and_topic_operations_when_requested() -> None:
    h = HandlerHarness(
        [
            acl("User:alice", "DESCRIBE", "TOPIC", "a"),
            acl("User:alice", "WRITE", "TOPIC", "a"),
            acl("User:alice", "DESCRIBE", "CLUSTER", "kafka-cluster"),
            acl("User:alice", "ALTER", "CLUSTER", "kafka-cluster"),
        ]
    )
    request = req10.MetadataRequest(
        topics=(
            req10.MetadataRequestTopic(topic_id=None, name="a"),
            req10.MetadataRequestTopic(topic_id=None, name="b"),
        ),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    verdict = h.send(request)
    reply = resp10.MetadataResponse(
        throttle_time=timedelta(0),
        brokers=(),
        topics=(
            resp10.MetadataResponseTopic(
                error_code=ErrorCode.none, name="a", topic_id=IDS["a"], partitions=()
            ),
        ),
        cluster_authorized_operations=7,
    )
    out = h.complete(verdict, reply)
    assert out.cluster_authorized_operations == (1 << 8) | (1 << 7)  # 384
    ops = {t.name: t.topic_authorized_operations for t in out.topics}
    # WRITE(4) + DESCRIBE(8) — WRITE implies DESCRIBE, both were allowed anyway
    assert ops == {"a": (1 << 4) | (1 << 8), "b": MIN}


def test_cluster_operations_zero_without_describe_cluster() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    request = req10.MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=False,
    )
    verdict = h.send(request)
    reply = resp10.MetadataResponse(throttle_time=timedelta(0), brokers=(), topics=())
    assert h.complete(verdict, reply).cluster_authorized_operations == 0


# -- DescribeTopicPartitions (75) ------------------------------------------------------------


def dtp(*names: str, cursor: tuple[str, int] | None = None) -> Any:
    return dtp_req.DescribeTopicPartitionsRequest(
        topics=tuple(dtp_req.TopicRequest(name=n) for n in names),
        cursor=dtp_req.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None,
    )


def dtp_reply(*names: str, next_cursor: str | None = None) -> Any:
    return dtp_resp.DescribeTopicPartitionsResponse(
        throttle_time=timedelta(0),
        topics=tuple(
            dtp_resp.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.none, name=n, topic_id=IDS[n], partitions=()
            )
            for n in names
        ),
        next_cursor=dtp_resp.Cursor(topic_name=next_cursor, partition_index=3)
        if next_cursor
        else None,
    )


def test_describe_topic_partitions_named_partial() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(dtp("b", "a"))
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["a"]
    out = h.complete(verdict, dtp_reply("a"))
    assert summary(out) == [
        ("a", 0, IDS["a"]),
        ("b", 29, ZERO),
    ]
    assert out.topics[0].topic_authorized_operations == 1 << 8  # always set
    assert out.topics[1].topic_authorized_operations == MIN
    assert h.topic_names[IDS["a"]] == "a"


def test_describe_topic_partitions_all_denied_is_answered_locally() -> None:
    h = HandlerHarness()
    verdict = h.send(dtp("a", "b"))
    assert isinstance(verdict, Respond)
    assert [(t.name, int(t.error_code)) for t in verdict.response.topics] == [("a", 29), ("b", 29)]


def test_describe_topic_partitions_listing_all_filters_and_hides_denied_cursor() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(dtp())
    assert isinstance(verdict, Forward) and verdict.request is None
    out = h.complete(verdict, dtp_reply("a", "b", next_cursor="c"))
    assert [t.name for t in out.topics] == ["a"]
    assert out.next_cursor is None  # "c" must not leak
    # listing all still logs denials (logIfDenied=true), unlike Metadata
    assert [(a.resource_pattern.name, a.log_if_denied) for a, _ in h.checks[:2]] == [
        ("a", True),
        ("b", True),
    ]


def test_describe_topic_partitions_cursor_must_be_listed() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "*")])
    verdict = h.send(dtp("a", cursor=("b", 0)))
    assert isinstance(verdict, Respond)
    assert [(t.name, int(t.error_code)) for t in verdict.response.topics] == [("a", 42)]
    assert h.checks == []


def test_describe_topic_partitions_denied_cursor_restarts_at_partition_zero() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "c")])
    verdict = h.send(dtp("a", "b", "c", cursor=("b", 5)))
    sent = h.forwarded_body(verdict, None)
    assert [t.name for t in sent.topics] == ["c"] and sent.cursor is None
    out = h.complete(verdict, dtp_reply("c"))
    assert [(t.name, int(t.error_code)) for t in out.topics] == [("c", 0), ("b", 29)]


def test_unrequested_broker_topics_never_reach_the_client() -> None:
    # Tansu reads an empty list as "all topics" even on v12: the answer must still be 29 only.
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(v12("secret"))
    out = h.complete(verdict, reply12(("a", 0), ("secret", 0)))
    assert summary(out) == [("secret", 29, ZERO)]


# -- the answer rewritten on its bytes (protocol/skim/metadata.py) ---------------------------
#
# Where the proxy adds no entry of its own, the transform splices the broker's frame; the
# client must receive exactly the bytes the decoded rewrite would send, after the same checks.

SKIMMED_VERSIONS = (1, 4, 8, 9, 10, 12, 13)
EVERYTHING = [acl("User:alice", "ALL", "TOPIC", "*"), acl("User:alice", "ALL", "CLUSTER", "*")]


def request_for(version: int, names: tuple[str, ...] | None, **flags: bool) -> Any:
    schema = codec.request_schema(3, version)
    topics = (
        None if names is None else tuple(entity(nested(schema, "topics"), name=n) for n in names)
    )
    return entity(schema, topics=topics, **flags)


def answer_for(version: int, *names: str) -> Any:
    schema = codec.response_schema(3, version)
    topic_t = nested(schema, "topics")
    partition = entity(
        nested(topic_t, "partitions"), leader_id=1, replica_nodes=(1,), isr_nodes=(1,)
    )
    return entity(
        schema,
        brokers=(
            entity(nested(schema, "brokers"), node_id=1, host="broker-1.internal", port=9092),
        ),
        cluster_id="c",
        controller_id=1,
        topics=tuple(
            entity(
                topic_t,
                name=n,
                topic_id=IDS.get(n, ZERO),
                partitions=(partition,),
                topic_authorized_operations=12345,  # whatever an authorizer-less broker says
            )
            for n in names
        ),
        cluster_authorized_operations=7,
    )


def spliced_and_decoded(
    h: HandlerHarness, verdict: Any, answer: Any
) -> tuple[bytes, bytes, list[Any], list[Any]]:
    """(the transform's frame, the decoded rewrite's frame, the checks each made)."""
    assert isinstance(verdict, Forward) and verdict.transform is not None, verdict
    assert verdict.rewrite is not None
    version = int(answer.__version__)
    frame = codec.encode_response(answer, 7)
    assert walk_metadata_response(frame, version) is not None  # spliced, not decoded
    h.checks.clear()
    spliced = bytes(verdict.transform(frame))
    spliced_checks = list(h.checks)
    h.checks.clear()
    header = RequestHeaderInfo(3, version, 7, "", 0)
    decoded = bytes(response_transform(verdict.rewrite, header)(frame))
    return spliced, decoded, spliced_checks, list(h.checks)


@pytest.mark.parametrize("version", SKIMMED_VERSIONS)
def test_an_allowed_by_name_answer_is_spliced_as_the_decoded_path_encodes_it(version: int) -> None:
    h = HandlerHarness(EVERYTHING)
    verdict = h.send(request_for(version, ("a", "b", "a"), allow_auto_topic_creation=True))
    # The broker answers in its own order, once per name, and with a topic never asked for.
    spliced, decoded, *_ = spliced_and_decoded(h, verdict, answer_for(version, "b", "c", "a"))
    assert spliced == decoded
    out = codec.decode_response(spliced, 3, version)
    assert [t.name for t in out.topics] == ["a", "b"]
    assert [(b.host, b.port) for b in out.brokers] == [("proxy.test", 30001)]
    assert h.advertised == {1: ("proxy.test", 30001)}
    if version >= 8:
        assert {t.topic_authorized_operations for t in out.topics} == {MIN}
    if version >= 10:  # ids learned, the unrequested topic's too (as the decoded path does)
        assert h.topic_names == {IDS["a"]: "a", IDS["b"]: "b", IDS["c"]: "c"}


@pytest.mark.parametrize("version", [8, 9, 10, 12])
def test_kip430_operations_are_spliced_as_the_decoded_path_computes_them(version: int) -> None:
    h = HandlerHarness(
        [
            acl("User:alice", "DESCRIBE", "TOPIC", "a"),
            acl("User:alice", "WRITE", "TOPIC", "a"),
            acl("User:alice", "DESCRIBE", "CLUSTER", "kafka-cluster"),
        ]
    )
    flags = {
        "include_topic_authorized_operations": True,
        "include_cluster_authorized_operations": True,
    }
    verdict = h.send(request_for(version, ("a",), allow_auto_topic_creation=False, **flags))
    spliced, decoded, spliced_checks, decoded_checks = spliced_and_decoded(
        h, verdict, answer_for(version, "a")
    )
    assert spliced == decoded and spliced_checks == decoded_checks
    out = codec.decode_response(spliced, 3, version)
    assert out.topics[0].topic_authorized_operations == (1 << 4) | (1 << 8)


@pytest.mark.parametrize("version", SKIMMED_VERSIONS)
def test_all_topics_are_filtered_on_the_splice_as_on_the_decoded_path(version: int) -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(request_for(version, None, allow_auto_topic_creation=False))
    spliced, decoded, spliced_checks, decoded_checks = spliced_and_decoded(
        h, verdict, answer_for(version, "secret", "a", "b")
    )
    assert spliced == decoded and spliced_checks == decoded_checks
    assert [t.name for t in codec.decode_response(spliced, 3, version).topics] == ["a"]
    assert [(a.resource_pattern.name, a.log_if_denied) for a, _ in spliced_checks] == [
        ("secret", False),
        ("a", False),
        ("b", False),
    ]


def test_a_frame_the_walk_does_not_take_on_is_decoded() -> None:
    """An unknown tagged field on a broker entry: the decoded path's answer (which drops it)."""
    h = HandlerHarness(EVERYTHING)
    verdict = h.send(request_for(12, ("a",)))
    assert isinstance(verdict, Forward) and verdict.transform is not None
    frame = codec.encode_response(answer_for(12, "a"), 7)
    broker_end = frame.index(b"broker-1.internal") + len("broker-1.internal") + 4 + 1
    assert frame[broker_end] == 0  # the broker entry's tagged fields (after port, null rack)
    body = frame[4:broker_end] + b"\x01\x05\x00" + frame[broker_end + 1 :]
    tagged = len(body).to_bytes(4, "big") + body
    assert walk_metadata_response(tagged, 12) is None
    header = RequestHeaderInfo(3, 12, 7, "", 0)
    assert verdict.rewrite is not None
    assert bytes(verdict.transform(tagged)) == bytes(
        response_transform(verdict.rewrite, header)(tagged)
    )
    assert b"broker-1" not in bytes(verdict.transform(tagged))


def test_the_decoded_path_is_kept_wherever_the_proxy_adds_entries() -> None:
    """A denied name, a name lacking CREATE, a lookup by id, an answer merged with the
    proxy's question: each answer is decoded (no transform)."""
    denied = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    no_create = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "*")])
    by_id = HandlerHarness(EVERYTHING, topic_ids={IDS["a"]: "a"})
    asked = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "*"), acl("User:alice", "CREATE", "TOPIC", "a")]
    )
    verdicts = [
        denied.send(v12("a", "b")),
        no_create.send(v12("a")),
        by_id.send(v12(ids=(IDS["a"],))),
        asked.answer_metadata(asked.send(v12("a", "new")), {}),
    ]
    for verdict in verdicts:
        assert isinstance(verdict, Forward) and verdict.rewrite is not None, verdict
        assert verdict.transform is None, verdict
