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
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.streams_heartbeat import MISSING_INTERNAL_TOPICS
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
from tests.support.raw_client import build_request

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


def topic_created(sides: list[Side], topic: str) -> bool:
    """:func:`exists` compared across the sides, asked of all of them at once: a topic that is
    never created costs one :data:`CREATION_WAIT_S`, not one per side."""
    with ThreadPoolExecutor(len(sides)) as pool:
        answers = pool.map(lambda side: exists(side, topic), sides)
        found = dict(zip([side.name for side in sides], answers, strict=True))
    return bool(compare(sides, lambda side: found[side.name]))


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
    created = topic_created(sides, changelog)
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


def _negative_topology_marker(frame: bytes, body: Any) -> bytes:
    """``frame`` (a heartbeat without topology, user endpoint or tasks) with its topology
    marker -1 replaced by -128 followed by 6 bytes. StreamsGroupHeartbeatRequestData.read
    takes -128 for null too, then reads the 6 bytes and the 4 after them as the three task
    arrays (null) and a 6-byte process id; a reader taking only -1 for null would see instead
    a topology of epoch 7 with no subtopology, nothing for the coordinator to create."""
    tail = bytes.fromhex("00 00 00 00 ff 00 00 00 00 00".replace(" ", ""))  # tasks … tags
    assert body.topology is None and frame.endswith(b"\xff" + tail)
    crafted = frame[: -len(tail) - 1] + bytes.fromhex("80 00000007 01 00".replace(" ", "")) + tail
    return (len(crafted) - 4).to_bytes(4, "big") + crafted[4:]


REFRESH_WAIT_S = 30.0


def _heartbeat_without_topology(client: Any, fields: dict[str, Any], epoch: int) -> Any:
    """A member's heartbeat, its topology marker -128 (:func:`_negative_topology_marker`)."""
    body = build_request(
        HEARTBEAT,
        0,
        **fields
        | {
            "member_epoch": epoch,
            "rebalance_timeout": timedelta(milliseconds=-1),
            "topology": None,
            "active_tasks": None,
            "standby_tasks": None,
            "warmup_tasks": None,
            "process_id": None,
        },
    )
    client.sock.sendall(_negative_topology_marker(codec.encode_request(body, 99, "c"), body))
    return codec.decode_response(client.read_frame(), HEARTBEAT, 0)


def test_a_negative_topology_marker_is_null_as_the_coordinator_reads_it(sides: list[Side]) -> None:
    """A member (READ on the group, no CREATE) whose changelog topic was deleted heartbeats
    with topology marker 0x80: Kafka's coordinator reads no topology, finds its stored
    topology's changelog missing, and a secured Kafka answers "Unauthorized to CREATE" and
    creates nothing. The proxy must read the same null topology and check CREATE on the
    member's remembered internal topics (not a harmless topology read from the next bytes)."""
    group = scenario_name("st-g")
    source = scenario_name("st-in")
    changelog = f"{group}-store-changelog"
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", group),
                acl("User:alice", "DESCRIBE", "TOPIC", group, pattern="PREFIXED"),
                acl("User:alice", "DESCRIBE", "TOPIC", source),
            ]
        )
        create_topics(side, source, changelog)
        coordinator_ready(side, group, 0)

    def run(side: Side) -> Any:
        with side.raw("alice") as client:
            fields = join(group, source, changelog)
            _, joined = client.request(build_request(HEARTBEAT, 0, **fields))
            assert joined.error_code == 0, joined
            admin = side.admin()
            for future in admin.delete_topics([changelog]).values():
                future.result(15)
            deadline = time.monotonic() + CREATION_WAIT_S
            while _described(side, changelog):
                assert time.monotonic() < deadline, f"{side.name}: {changelog} not deleted"
                time.sleep(0.2)
            epoch = joined.member_epoch
            deadline = time.monotonic() + REFRESH_WAIT_S
            while True:  # until the coordinator has seen the deletion
                response = _heartbeat_without_topology(client, fields, epoch)
                epoch = response.member_epoch
                if outcome(response)[2] or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        return outcome(response)

    code, _, status = compare(sides, run)
    assert code == "none"
    assert [s[0] for s in status] == [MISSING_INTERNAL_TOPICS]
    assert f"Unauthorized to CREATE on topics {changelog}." in status[0][1]
    assert topic_created(sides, changelog) is False
