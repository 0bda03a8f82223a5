"""Differential scenarios: StreamsGroupHeartbeat (KIP-1071) and its internal-topic creation.

Kafka 4.3.1 serves streams groups by default (``group.coordinator.rebalance.protocols``
includes ``streams`` and ``streams.version`` 1 is finalized when the storage is formatted).
Each joining heartbeat names a topology with one source topic, one changelog topic and no
repartition topic, so the coordinator's "missing" summary and KafkaApis' "Unauthorized to
CREATE" list hold one name each (their order is a hash map's). After the answers, both
clusters are asked whether the changelog topic was created.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest

from tests.support.conformance.datapath import (
    METADATA,
    acl,
    call,
    call_retrying,
    compare,
    coordinator_ready,
    create_topics,
    entities,
)
from tests.support.conformance.harness import Side, scenario_name

pytestmark = pytest.mark.kafka

HEARTBEAT = 88
CREATION_WAIT_S = 5.0


def join(group: str, source: str, changelog: str) -> dict[str, Any]:
    """A first heartbeat (epoch 0) with a one-subtopology topology."""
    mod = entities(HEARTBEAT, 0)
    topic = mod.TopicInfo(name=changelog, partitions=0, replication_factor=0, topic_configs=())
    sub = mod.Subtopology(
        subtopology_id="0",
        source_topics=(source,),
        source_topic_regex=(),
        state_changelog_topics=(topic,),
        repartition_sink_topics=(),
        repartition_source_topics=(),
        copartition_groups=(),
    )
    return {
        "group_id": group,
        "member_id": str(uuid.uuid4()),
        "member_epoch": 0,
        "endpoint_information_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": timedelta(milliseconds=30000),
        "topology": mod.Topology(epoch=0, subtopologies=(sub,)),
        "active_tasks": (),
        "standby_tasks": (),
        "warmup_tasks": (),
        "process_id": str(uuid.uuid4()),
        "user_endpoint": None,
        "client_tags": None,
        "task_offsets": None,
        "task_end_offsets": None,
        "shutdown_application": False,
    }


ASSIGNMENT_DELAYED = 5


def outcome(response: Any) -> tuple[str, str | None, list[tuple[int, str]]]:
    """What the proxy keeps from Kafka's answer: error, message, status (the member epoch, the
    assignment and the coordinator's ASSIGNMENT_DELAYED status of a new group are the measured
    deviation, docs/deviations.md)."""
    status = [
        (int(s.status_code), str(s.status_detail))
        for s in response.status or ()
        if s.status_code != ASSIGNMENT_DELAYED
    ]
    return response.error_code.name, response.error_message, status


def exists(side: Side, topic: str) -> bool:
    """Whether ``topic`` shows up within :data:`CREATION_WAIT_S` (creation is asynchronous:
    ``AutoTopicCreationManager`` sends CreateTopics to the controller after the answer)."""
    deadline = time.monotonic() + CREATION_WAIT_S
    while not _described(side, topic):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _described(side: Side, topic: str) -> bool:
    mod = entities(METADATA, 12)
    response = call(
        side,
        "admin",
        METADATA,
        12,
        topics=(mod.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return any(t.error_code == 0 for t in response.topics)


def scenario(
    sides: list[Side],
    acls: list[Any],
    user: str,
    *,
    source_ok: bool = True,
    group_ok: bool = True,
    source: str | None = None,
    **overrides: Any,
) -> Any:
    group = scenario_name("st-g")
    source = source or scenario_name("st-in")
    changelog = f"{group}-store-changelog"
    principal = f"User:{user}"
    for side in sides:
        side.set_acls(
            [
                *([acl(principal, "READ", "GROUP", group)] if group_ok else []),
                acl(principal, "DESCRIBE", "TOPIC", group, pattern="PREFIXED"),
                *([acl(principal, "DESCRIBE", "TOPIC", source)] if source_ok else []),
                *acls,
            ]
        )
        if not source.startswith("__"):
            create_topics(side, source)
        coordinator_ready(side, group, 0)
    fields = join(group, source, changelog) | overrides
    answer = compare(sides, lambda side: outcome(call_retrying(side, user, HEARTBEAT, 0, **fields)))
    created = compare(sides, lambda side: exists(side, changelog))
    return answer, created


def test_source_topic_not_describable(sides: list[Side]) -> None:
    answer, created = scenario(sides, [], "alice", source_ok=False)
    assert answer[0] == "topic_authorization_failed" and not created


def test_missing_changelog_without_create_waits(sides: list[Side]) -> None:
    answer, created = scenario(sides, [], "alice")
    code, _, status = answer
    assert code == "none" and not created
    assert [s[0] for s in status] == [3]  # MISSING_INTERNAL_TOPICS
    assert "Unauthorized to CREATE on topics" in status[0][1]


def test_missing_changelog_with_create_topic_is_created(sides: list[Side]) -> None:
    answer, created = scenario(
        sides, [acl("User:alice", "CREATE", "TOPIC", "st-g", pattern="PREFIXED")], "alice"
    )
    assert answer[0] == "none" and created


def test_no_read_group(sides: list[Side]) -> None:
    answer, created = scenario(sides, [], "alice", group_ok=False)
    assert answer[0] == "group_authorization_failed" and not created


def test_kafka_internal_topic_is_an_invalid_topology(sides: list[Side]) -> None:
    answer, _ = scenario(sides, [], "alice", source="__consumer_offsets")
    assert answer[0] == "streams_invalid_topology"


def test_invalid_join_without_create_is_refused_as_the_coordinator_does(
    sides: list[Side],
) -> None:
    """The proxy answers this join itself (a missing changelog it may not create), so it runs
    the coordinator's request validation first."""
    answer, created = scenario(sides, [], "alice", active_tasks=None)
    assert answer[:2] == ["invalid_request", "ActiveTasks must be empty when (re-)joining."]
    assert not created
