"""StreamsGroupHeartbeat (88): Kafka 4.3.1's ``handleStreamsGroupHeartbeat`` checks, and the
internal-topic creation check made with the broker's answer (``handlers/streams_heartbeat.py``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.streams_heartbeat import summarize
from kafkaguard.proxy.handlers.support.base import AskFirst, Forward, Respond, Verdict
from tests.support.entities import req
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
GROUP = "app"
CHANGELOG = "app-store-changelog"
REPARTITION = "app-agg-repartition"


def _request_type(*path: str) -> type[Any]:
    entity_type = codec.request_schema(88, 0)
    for name in path:
        entity_type = codec.nested_type(entity_type, name)
    return entity_type


def _topic_info(field: str, name: str) -> Any:
    return codec.make_entity(
        _request_type("topology", "subtopologies", field),
        name=name,
        partitions=0,
        replication_factor=0,
        topic_configs=(),
    )


def _topology(source: str = "in") -> Any:
    sub = codec.make_entity(
        _request_type("topology", "subtopologies"),
        subtopology_id="0",
        source_topics=(source,),
        source_topic_regex=(),
        state_changelog_topics=(_topic_info("state_changelog_topics", CHANGELOG),),
        repartition_sink_topics=(REPARTITION,),
        repartition_source_topics=(_topic_info("repartition_source_topics", REPARTITION),),
        copartition_groups=(),
    )
    return codec.make_entity(_request_type("topology"), epoch=0, subtopologies=(sub,))


def heartbeat(*, epoch: int = 0, topology: Any = None, source: str = "in") -> Any:
    return req(
        88,
        0,
        group_id=GROUP,
        member_id="m1",
        member_epoch=epoch,
        endpoint_information_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=timedelta(milliseconds=30000 if epoch == 0 else -1),
        topology=_topology(source) if epoch == 0 and topology is None else topology,
        active_tasks=() if epoch == 0 else None,
        standby_tasks=() if epoch == 0 else None,
        warmup_tasks=() if epoch == 0 else None,
        process_id="p",
        user_endpoint=None,
        client_tags=None,
        task_offsets=None,
        task_end_offsets=None,
        shutdown_application=False,
    )


def harness(*extra: Any) -> HandlerHarness:
    return HandlerHarness(
        [
            acl(ALICE, "READ", "GROUP", GROUP),
            acl(ALICE, "DESCRIBE", "TOPIC", "in"),
            acl(ALICE, "DESCRIBE", "TOPIC", "app-", pattern="PREFIXED"),
            *extra,
        ]
    )


def _forwarded_unchanged(verdict: Verdict) -> bool:
    return isinstance(verdict, Forward) and verdict.request is None and verdict.rewrite is None


def _error(verdict: Verdict) -> tuple[int, str | None]:
    assert isinstance(verdict, Respond), verdict
    return int(verdict.response.error_code), verdict.response.error_message


def test_allowed_with_create_cluster_is_forwarded_without_asking() -> None:
    h = harness(acl(ALICE, "CREATE", "CLUSTER", "kafka-cluster"))
    assert _forwarded_unchanged(h.send(heartbeat()))
    assert h.checked()[0] == ("READ", "GROUP", GROUP, "ALLOWED")


def test_create_topic_on_each_internal_topic_is_enough() -> None:
    h = harness(acl(ALICE, "CREATE", "TOPIC", "app-", pattern="PREFIXED"))
    assert _forwarded_unchanged(h.send(heartbeat()))


def test_no_read_group() -> None:
    h = HandlerHarness([acl(ALICE, "DESCRIBE", "TOPIC", "*")])
    assert _error(h.send(heartbeat())) == (30, None)


def test_source_topic_not_describable() -> None:
    h = harness(acl(ALICE, "CREATE", "CLUSTER", "kafka-cluster"))
    assert _error(h.send(heartbeat(source="secret"))) == (29, None)
    assert ("DESCRIBE", "TOPIC", "secret", "DENIED") in h.checked()


def test_kafka_internal_and_invalid_topics_are_invalid_topologies() -> None:
    h = harness()
    code, message = _error(h.send(heartbeat(source="__consumer_offsets")))
    assert code == 130
    assert message == (
        "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited."
    )
    code, message = _error(h.send(heartbeat(source="bad topic")))
    assert (code, message) == (130, "Topic names bad topic are not valid topic names.")


def test_existing_internal_topics_need_no_create() -> None:
    h = harness()
    asked = h.send(heartbeat())
    assert isinstance(asked, AskFirst)
    assert sorted(t.name for t in asked.question.topics) == sorted([CHANGELOG, REPARTITION])
    verdict = h.answer_metadata(asked, {uuid4(): CHANGELOG, uuid4(): REPARTITION})
    assert _forwarded_unchanged(verdict)
    # The pre-check is silent: Kafka checks (and logs) CREATE only on topics found missing.
    logged = [a for a, _ in h.checks if a.log_if_allowed or a.log_if_denied]
    assert not [a for a in logged if a.operation.name == "CREATE"]


def test_missing_internal_topics_with_create_topic_are_forwarded() -> None:
    h = harness(acl(ALICE, "CREATE", "TOPIC", CHANGELOG))
    verdict = h.answer_metadata(h.send(heartbeat()), {uuid4(): REPARTITION})
    assert _forwarded_unchanged(verdict)
    assert ("CREATE", "TOPIC", CHANGELOG, "ALLOWED") in h.checked()


def test_missing_internal_topics_without_create_wait() -> None:
    h = harness()
    verdict = h.answer_metadata(h.send(heartbeat()), {})
    assert isinstance(verdict, Respond)
    out = verdict.response
    # epoch 1, as the coordinator answers a join: the next heartbeat is not a second join
    assert int(out.error_code) == 0 and (out.member_id, out.member_epoch) == ("m1", 1)
    assert out.active_tasks == () and out.standby_tasks == ()
    [status] = out.status
    assert status.status_code == 3  # MISSING_INTERNAL_TOPICS
    assert status.status_detail == (
        f"Internal topics are missing: {REPARTITION}, {CHANGELOG}; "
        f"Unauthorized to CREATE on topics {REPARTITION}, {CHANGELOG}."
    )
    assert codec.decode_response(codec.encode_response(out, 7), 88, 0) == out
    checked = h.checked()
    assert ("CREATE", "CLUSTER", "kafka-cluster", "DENIED") in checked
    assert ("CREATE", "TOPIC", CHANGELOG, "DENIED") in checked


def test_a_waiting_member_keeps_waiting_across_heartbeats() -> None:
    """The client's heartbeat after the waiting answer (epoch 1, no topology, no timeout) is
    answered waiting again, never INVALID_REQUEST (which is fatal to a Streams client)."""
    h = harness()
    joined = h.answer_metadata(h.send(heartbeat()), {})
    assert isinstance(joined, Respond) and joined.response.member_epoch == 1
    again = h.answer_metadata(h.send(heartbeat(epoch=1, topology=None)), {})
    assert isinstance(again, Respond)
    out = again.response
    assert (int(out.error_code), out.member_epoch) == (0, 1)
    assert [s.status_code for s in out.status] == [3]


def test_later_heartbeats_check_the_remembered_topology() -> None:
    h = harness()
    assert isinstance(h.answer_metadata(h.send(heartbeat()), {}), Respond)
    asked = h.send(heartbeat(epoch=3, topology=None))
    assert isinstance(asked, AskFirst)
    both = {uuid4(): CHANGELOG, uuid4(): REPARTITION}
    assert _forwarded_unchanged(h.answer_metadata(asked, both))


def test_unknown_member_without_create_cluster_is_fenced() -> None:
    h = harness(acl(ALICE, "CREATE", "TOPIC", "app-", pattern="PREFIXED"))
    assert _error(h.send(heartbeat(epoch=3, topology=None)))[0] == 110
    cluster = harness(acl(ALICE, "CREATE", "CLUSTER", "kafka-cluster"))
    assert _forwarded_unchanged(cluster.send(heartbeat(epoch=3, topology=None)))


def test_leaving_is_forwarded() -> None:
    h = harness()
    assert _forwarded_unchanged(h.send(heartbeat(epoch=-1, topology=None)))


def test_summary_is_kafkas() -> None:
    assert summarize(["d", "a", "c", "b", "e"]) == "a, b, c and 2 additional topics"
    assert summarize([]) == "<none>"


def test_an_answered_join_is_validated_as_the_coordinator_would() -> None:
    h = harness()
    body = heartbeat()
    task = codec.make_entity(_request_type("active_tasks"), subtopology_id="0", partitions=(0,))
    verdict = h.answer_metadata(h.send(codec.replace(body, active_tasks=(task,))), {})
    assert _error(verdict) == (42, "ActiveTasks must be empty when (re-)joining.")
    verdict = h.answer_metadata(h.send(codec.replace(body, member_id=" ")), {})
    assert _error(verdict) == (42, "MemberId can't be empty.")
    verdict = h.answer_metadata(h.send(codec.replace(body, standby_tasks=None)), {})
    assert _error(verdict) == (42, "StandbyTasks must be empty when (re-)joining.")
