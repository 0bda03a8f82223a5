"""ListOffsets, DeleteRecords, OffsetForLeaderEpoch, DescribeProducers, without sockets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.delete_records.v2 import request as dr_req
from kio.schema.delete_records.v2 import response as dr_resp
from kio.schema.describe_producers.v0 import request as dp_req
from kio.schema.describe_producers.v0 import response as dp_resp
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v1 import request as lo1_req
from kio.schema.list_offsets.v11 import request as lo_req
from kio.schema.list_offsets.v11 import response as lo_resp
from kio.schema.offset_for_leader_epoch.v4 import request as ole_req
from kio.schema.offset_for_leader_epoch.v4 import response as ole_resp

from kafkaguard.proxy.handlers.partitions import topic_name_error
from kafkaguard.proxy.handlers.support.base import Forward, Respond
from tests.support.handler_harness import HandlerHarness, acl


def list_offsets(*topics: str) -> Any:
    return lo_req.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        timeout=timedelta(seconds=1),
        topics=tuple(
            lo_req.ListOffsetsTopic(
                name=t,
                partitions=tuple(
                    lo_req.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in (0, 1)
                ),
            )
            for t in topics
        ),
    )


def lo_reply(*topics: str) -> Any:
    return lo_resp.ListOffsetsResponse(
        throttle_time=timedelta(0),
        topics=tuple(
            lo_resp.ListOffsetsTopicResponse(
                name=t,
                partitions=tuple(
                    lo_resp.ListOffsetsPartitionResponse(
                        partition_index=p, error_code=ErrorCode.none, timestamp=5, offset=42
                    )
                    for p in (0, 1)
                ),
            )
            for t in topics
        ),
    )


def errors(response: Any, name: str = "name", index: str = "partition_index") -> list[Any]:
    return [
        (getattr(t, name), getattr(p, index), int(p.error_code))
        for t in response.topics
        for p in t.partitions
    ]


def test_list_offsets_allowed_forwards_original_bytes() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(list_offsets("a"))
    assert isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None


def test_list_offsets_partial_appends_29_after_the_broker_answer() -> None:
    """``sendResponseCallback``: ``response ++ unauthorizedResponseStatus``."""
    h = HandlerHarness([acl("User:alice", "READ", "TOPIC", "a")])  # READ implies DESCRIBE
    verdict = h.send(list_offsets("b", "a", "c"))
    assert h.checked() == [
        ("DESCRIBE", "TOPIC", "b", "DENIED"),
        ("DESCRIBE", "TOPIC", "a", "ALLOWED"),
        ("DESCRIBE", "TOPIC", "c", "DENIED"),
    ]
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["a"]
    out = h.complete(verdict, lo_reply("a"))
    assert errors(out) == [
        ("a", 0, 0),
        ("a", 1, 0),
        ("b", 0, 29),
        ("b", 1, 29),
        ("c", 0, 29),
        ("c", 1, 29),
    ]
    denied = out.topics[1].partitions[0]
    assert (denied.timestamp, denied.offset) == (-1, -1)


def test_list_offsets_all_denied_answered_locally_even_for_missing_topics() -> None:
    h = HandlerHarness()
    verdict = h.send(
        lo1_req.ListOffsetsRequest(
            replica_id=-1,
            topics=(
                lo1_req.ListOffsetsTopic(
                    name="missing",
                    partitions=(lo1_req.ListOffsetsPartition(partition_index=0, timestamp=-1),),
                ),
            ),
        )
    )
    assert isinstance(verdict, Respond)
    assert errors(verdict.response) == [("missing", 0, 29)]
    assert verdict.response.topics[0].partitions[0].offset == -1


def ole(*topics: str) -> Any:
    return ole_req.OffsetForLeaderEpochRequest(
        topics=tuple(
            ole_req.OffsetForLeaderTopic(
                topic=t, partitions=(ole_req.OffsetForLeaderPartition(partition=0, leader_epoch=1),)
            )
            for t in topics
        )
    )


def test_offset_for_leader_epoch_cluster_action_authorizes_everything() -> None:
    h = HandlerHarness([acl("User:alice", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")])
    verdict = h.send(ole("a", "b"))
    assert isinstance(verdict, Forward) and verdict.request is None
    assert h.checked() == [("CLUSTER_ACTION", "CLUSTER", "kafka-cluster", "ALLOWED")]


def test_offset_for_leader_epoch_falls_back_to_describe_per_topic() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "a")])
    verdict = h.send(ole("a", "b"))
    assert h.checked() == [
        ("CLUSTER_ACTION", "CLUSTER", "kafka-cluster", "DENIED"),
        ("DESCRIBE", "TOPIC", "a", "ALLOWED"),
        ("DESCRIBE", "TOPIC", "b", "DENIED"),
    ]
    assert h.checks[0][0].log_if_denied is False
    assert [t.topic for t in h.forwarded_body(verdict, None).topics] == ["a"]
    reply = ole_resp.OffsetForLeaderEpochResponse(
        throttle_time=timedelta(0),
        topics=(
            ole_resp.OffsetForLeaderTopicResult(
                topic="a",
                partitions=(
                    ole_resp.EpochEndOffset(
                        error_code=ErrorCode.none, partition=0, leader_epoch=1, end_offset=9
                    ),
                ),
            ),
        ),
    )
    out = h.complete(verdict, reply)
    assert errors(out, "topic", "partition") == [("a", 0, 0), ("b", 0, 29)]
    assert (out.topics[1].partitions[0].leader_epoch, out.topics[1].partitions[0].end_offset) == (
        -1,
        -1,
    )


def test_delete_records_needs_delete_per_topic() -> None:
    h = HandlerHarness([acl("User:alice", "DELETE", "TOPIC", "a")])
    body = dr_req.DeleteRecordsRequest(
        timeout=timedelta(seconds=1),
        topics=tuple(
            dr_req.DeleteRecordsTopic(
                name=t, partitions=(dr_req.DeleteRecordsPartition(partition_index=0, offset=3),)
            )
            for t in ("a", "b")
        ),
    )
    verdict = h.send(body)
    assert h.checked() == [("DELETE", "TOPIC", "a", "ALLOWED"), ("DELETE", "TOPIC", "b", "DENIED")]
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["a"]
    reply = dr_resp.DeleteRecordsResponse(
        throttle_time=timedelta(0),
        topics=(
            dr_resp.DeleteRecordsTopicResult(
                name="a",
                partitions=(
                    dr_resp.DeleteRecordsPartitionResult(
                        partition_index=0, low_watermark=3, error_code=ErrorCode.none
                    ),
                ),
            ),
        ),
    )
    out = h.complete(verdict, reply)
    assert errors(out) == [("a", 0, 0), ("b", 0, 29)]
    assert out.topics[1].partitions[0].low_watermark == -1


def describe_producers(*topics: str) -> Any:
    return dp_req.DescribeProducersRequest(
        topics=tuple(dp_req.TopicRequest(name=t, partition_indexes=(0, 2)) for t in topics)
    )


def test_describe_producers_needs_read_not_describe() -> None:
    h = HandlerHarness(
        [acl("User:alice", "DESCRIBE", "TOPIC", "a"), acl("User:alice", "READ", "TOPIC", "b")]
    )
    verdict = h.send(describe_producers("a", "b"))
    assert h.checked() == [("READ", "TOPIC", "a", "DENIED"), ("READ", "TOPIC", "b", "ALLOWED")]
    assert [t.name for t in h.forwarded_body(verdict, None).topics] == ["b"]
    reply = dp_resp.DescribeProducersResponse(
        throttle_time=timedelta(0),
        topics=(
            dp_resp.TopicResponse(
                name="b",
                partitions=(
                    dp_resp.PartitionResponse(
                        partition_index=0, error_code=ErrorCode.none, active_producers=()
                    ),
                ),
            ),
        ),
    )
    out = h.complete(verdict, reply)
    assert errors(out) == [("a", 0, 29), ("a", 2, 29), ("b", 0, 0)]
    assert out.topics[0].partitions[0].error_message == "Topic authorization failed."


def test_describe_producers_invalid_name_is_17_before_authorization() -> None:
    h = HandlerHarness()
    verdict = h.send(describe_producers("bad name", "a"))
    assert h.checked() == [("READ", "TOPIC", "a", "DENIED")]  # no check for the invalid name
    assert isinstance(verdict, Respond)
    assert errors(verdict.response) == [
        ("bad name", 0, 17),
        ("bad name", 2, 17),
        ("a", 0, 29),
        ("a", 2, 29),
    ]
    assert verdict.response.topics[0].partitions[0].error_message == topic_name_error("bad name")


def test_topic_name_validation_matches_kafka() -> None:
    assert topic_name_error("ok.name_-1") is None
    assert topic_name_error("") == "Topic name is illegal, it can't be empty"
    assert topic_name_error("..") == 'Topic name cannot be "." or ".."'
    assert topic_name_error("x" * 250) is not None and topic_name_error("x" * 249) is None


def test_per_topic_merge_drops_broker_topics_that_were_not_sent() -> None:
    h = HandlerHarness([acl("User:alice", "DESCRIBE", "TOPIC", "ok")])
    verdict = h.send(list_offsets("secret", "ok"))
    assert isinstance(verdict, Forward)
    out = h.complete(verdict, lo_reply("ok", "secret", "other", "ok"))
    assert [(t.name, int(t.partitions[0].error_code)) for t in out.topics] == [
        ("ok", 0),
        ("secret", 29),
    ]
    assert [p.offset for p in out.topics[1].partitions] == [-1, -1]
