"""Differential scenarios: consuming — Fetch, ListOffsets, OffsetForLeaderEpoch, classic groups,
KIP-848 consumer groups, committed offsets.

Each test is one scenario run against Kafka's own authorizer (the referee) and against
kafkaguard in front of an unsecured Kafka, every step compared (:func:`compare`). Raw requests
pin per-partition codes (records are written with a fixed timestamp, so fetched batches are
byte-identical on both sides); real confluent-kafka consumers, classic and
``group.protocol=consumer``, check what a client sees.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.conformance.datapath import (
    CONSUMER_GROUP_HEARTBEAT,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    SYNC_GROUP,
    TIMEOUT_S,
    acl,
    build,
    call,
    compare,
    coordinator_ready,
    create_topics,
    entities,
    ids_behind,
    ids_to_names,
    kafka_error,
    record_batch,
    seed,
    sorted_head,
    topic_ids,
)
from tests.support.conformance.harness import Side, scenario_name
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.kafka


def fetch(side: Side, user: str, version: int, partitions: list[tuple[Any, int]]) -> Any:
    """A sessionless Fetch from offset 0 of each (topic name or id, partition), one topic
    entry per pair, in order."""
    mod = entities(FETCH, version)
    key = "topic_id" if version >= 13 else "topic"
    topics = tuple(
        build(
            mod.FetchTopic,
            **{key: topic},
            partitions=(
                build(
                    mod.FetchPartition,
                    partition=index,
                    current_leader_epoch=-1,
                    fetch_offset=0,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=1 << 20,
                ),
            ),
        )
        for topic, index in partitions
    )
    return call(
        side,
        user,
        FETCH,
        version,
        replica_id=-1,
        max_wait=timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def poll_values(consumer: Consumer, want: int, timeout_s: float = 2 * TIMEOUT_S) -> dict[str, Any]:
    """Values until ``want`` arrived or the first error; what a client sees. The bound is
    generous (a loaded 2-core machine runs both clusters): only a failing step waits it out."""
    values: list[bytes] = []
    errors: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(values) < want and not errors:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            errors.append(message.error().name())
        else:
            values.append(message.value())
    return {"values": values, "errors": errors}


def test_fetch_needs_read_per_topic(sides: list[Side]) -> None:
    """READ TOPIC per topic: 29 for denied (DESCRIBE is not enough, existence never revealed),
    3 for an authorized topic or partition that does not exist, v13+ ids: 100 for an id nobody
    knows. Kafka lists partitions read from the log first, then the erroneous ones."""
    t, u, d = scenario_name("cf-t"), scenario_name("cf-u"), scenario_name("cf-d")
    miss = scenario_name("cf-miss")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "READ", "TOPIC", "cf-miss", pattern="PREFIXED"),
                acl("User:alice", "DESCRIBE", "TOPIC", d),
                acl("User:alice", "READ", "GROUP", "cf-g", pattern="PREFIXED"),
            ]
        )
        create_topics(side, t, u, d)
        seed(
            side,
            {t: record_batch(b"one", b"two"), u: record_batch(b"secret"), d: record_batch(b"d")},
        )
    by_name = [(u, 0), (t, 3), (miss, 0), (t, 0), (d, 0)]
    for version in (4, 12):
        compare(sides, lambda s, v=version: fetch(s, "alice", v, by_name))
    unknown = uuid.uuid4()

    def by_id(side: Side, version: int) -> Any:
        ids = topic_ids(side, [t, u, d])
        partitions = [(ids[u], 0), (unknown, 0), (ids[t], 0), (ids[d], 0)]
        names = {v: k for k, v in ids.items()}
        return ids_to_names(fetch(side, "alice", version, partitions), names)

    for version in (13, 18):
        compare(sides, partial(by_id, version=version))

    def assigned(side: Side, topic: str) -> dict[str, Any]:
        consumer = Consumer(side.client_config("alice", **{"group.id": scenario_name("cf-g")}))
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            return poll_values(consumer, 2)
        finally:
            consumer.close()

    assert compare(sides, lambda s: assigned(s, t)) == {"values": [b"one", b"two"], "errors": []}
    # DESCRIBE without READ: metadata answers, the fetch is refused. (Without DESCRIBE an
    # assigned consumer only retries its metadata, silently, on either side.)
    assert compare(sides, lambda s: assigned(s, d)) == {
        "values": [],
        "errors": ["TOPIC_AUTHORIZATION_FAILED"],
    }


def test_fetch_by_topic_ids_the_proxy_never_saw(
    sides: list[Side], kafka_upstream: KafkaBroker
) -> None:
    """A v13+ Fetch naming topic ids that never passed through the proxy (the topics were
    created behind it, and nobody asked for their metadata through it): the proxy asks the
    broker for the names first (Kafka resolves ids before it authorizes), then answers as
    Kafka does — served with READ, 29 without, 100 for an id nobody knows."""
    t, u = scenario_name("cf-hidden"), scenario_name("cf-hidden-u")
    referee, _ = sides
    for side in sides:
        side.set_acls([acl("User:alice", "READ", "TOPIC", t)])
    create_topics(referee, t, u)
    behind = AdminClient({"bootstrap.servers": kafka_upstream.bootstrap})
    for future in behind.create_topics([NewTopic(t, 1, 1), NewTopic(u, 1, 1)]).values():
        future.result(TIMEOUT_S)
    ids = {
        "referee": topic_ids(referee, [t, u]),
        "kafkaguard": ids_behind(kafka_upstream.bootstrap, t, u),
    }
    unknown = uuid.uuid4()

    def run(side: Side) -> Any:
        side_ids = ids[side.name]
        partitions = [(side_ids[u], 0), (unknown, 0), (side_ids[t], 0)]
        names = {v: k for k, v in side_ids.items()}
        return ids_to_names(fetch(side, "alice", 13, partitions), names)

    answer = compare(sides, run)
    assert [(r["topic_id"], r["partitions"][0]["error_code"]) for r in answer["responses"]] == [
        (f"id:{t}", "none"),
        ("<uuid>", "unknown_topic_id"),
        (f"id:{u}", "topic_authorization_failed"),
    ]


def test_list_offsets_and_leader_epochs_need_describe(sides: list[Side]) -> None:
    """ListOffsets and OffsetForLeaderEpoch: DESCRIBE TOPIC per topic (READ implies it), 29
    otherwise, 3 for an authorized missing topic. Kafka lists the ReplicaManager's answer (a
    hash map, so compared sorted) and then the denied topics, in request order (compared as
    is): kafkaguard appends its denied entries after the broker's the same way."""
    t, u, d = scenario_name("co-t"), scenario_name("co-u"), scenario_name("co-d")
    miss = scenario_name("co-miss")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "DESCRIBE", "TOPIC", d),
                acl("User:alice", "DESCRIBE", "TOPIC", "co-miss", pattern="PREFIXED"),
            ]
        )
        create_topics(side, t, u, d)
        seed(side, {t: record_batch(b"one", b"two"), u: record_batch(b"x"), d: record_batch(b"d")})
    names = [t, u, d, miss]

    def list_offsets(side: Side, version: int, timestamp: int) -> Any:
        mod = entities(LIST_OFFSETS, version)
        partition = partial(
            build,
            mod.ListOffsetsPartition,
            partition_index=0,
            current_leader_epoch=-1,
            timestamp=timestamp,
            max_num_offsets=1,
        )
        response = call(
            side,
            "alice",
            LIST_OFFSETS,
            version,
            replica_id=-1,
            isolation_level=0,
            timeout=timedelta(seconds=5),
            topics=tuple(mod.ListOffsetsTopic(name=n, partitions=(partition(),)) for n in names),
        )
        return sorted_head(response, "topics", "name", denied=1)

    for version in (1, 5, 10):
        for timestamp in (-1, -2):
            compare(sides, partial(list_offsets, version=version, timestamp=timestamp))

    def leader_epochs(side: Side, version: int) -> Any:
        mod = entities(OFFSET_FOR_LEADER_EPOCH, version)
        partition = build(
            mod.OffsetForLeaderPartition, partition=0, current_leader_epoch=-1, leader_epoch=0
        )
        response = call(
            side,
            "alice",
            OFFSET_FOR_LEADER_EPOCH,
            version,
            replica_id=-1,
            topics=tuple(mod.OffsetForLeaderTopic(topic=n, partitions=(partition,)) for n in names),
        )
        return sorted_head(response, "topics", "topic", denied=1)

    for version in (2, 4):
        compare(sides, partial(leader_epochs, version=version))

    def watermarks(side: Side, topic: str) -> Any:
        consumer = Consumer(side.client_config("alice", **{"group.id": scenario_name("co-g")}))
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        except KafkaException as exc:
            return kafka_error(exc)
        finally:
            consumer.close()

    assert compare(sides, lambda s: watermarks(s, t)) == [0, 2]
    compare(sides, lambda s: watermarks(s, u))


def join(side: Side, user: str, group: str, version: int, member_id: str = "") -> Any:
    mod = entities(JOIN_GROUP, version)
    return call(
        side,
        user,
        JOIN_GROUP,
        version,
        group_id=group,
        session_timeout=timedelta(seconds=6),
        rebalance_timeout=timedelta(seconds=6),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
        reason=None,
    )


def test_classic_group_protocol_needs_group_read(sides: list[Side]) -> None:  # noqa: C901 - one protocol walk; nested request builders
    """FindCoordinator: DESCRIBE GROUP per key (30). JoinGroup, SyncGroup, Heartbeat,
    LeaveGroup: READ GROUP, 30 otherwise (DESCRIBE is not enough); SyncGroup v5 without
    protocol type/name is 23 before any check. A member with READ walks the whole protocol:
    member id required, join, sync, heartbeat, leave."""
    g, described = scenario_name("cg-g"), scenario_name("cg-d")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "DESCRIBE", "GROUP", described),
            ]
        )
        coordinator_ready(side, g, 0)
    for user in ("alice", "bob"):  # FindCoordinator: DESCRIBE GROUP per key (30)
        for version in (3, 4, 6):
            keys = {"key": g, "coordinator_keys": (g, described, "other-" + g)}
            compare(
                sides,
                lambda s, u=user, v=version, k=keys: call(
                    s, u, FIND_COORDINATOR, v, key_type=0, **k
                ),
            )
    for version in (0, 5, 9):
        compare(sides, partial(join, user="alice", group=described, version=version))
    member: dict[str, str] = {}
    generation: dict[str, int] = {}

    def first_join(side: Side) -> Any:
        response = join(side, "alice", g, 9)
        member[side.name] = str(response.member_id)
        return response

    assert compare(sides, first_join)["error_code"] == "member_id_required"

    def second_join(side: Side) -> Any:
        response = join(side, "alice", g, 9, member[side.name])
        generation[side.name] = int(response.generation_id)
        return response

    assert compare(sides, second_join)["error_code"] == "none"

    def sync(side: Side, user: str, version: int = 5, protocol: str | None = "range") -> Any:
        mod = entities(SYNC_GROUP, version)
        mid = member[side.name]
        return call(
            side,
            user,
            SYNC_GROUP,
            version,
            group_id=g,
            generation_id=generation[side.name],
            member_id=mid,
            group_instance_id=None,
            protocol_type="consumer" if protocol else None,
            protocol_name=protocol,
            assignments=(mod.SyncGroupRequestAssignment(member_id=mid, assignment=b"abc"),),
        )

    compare(sides, partial(sync, user="bob"))
    compare(sides, partial(sync, user="bob", protocol=None))
    assert compare(sides, partial(sync, user="alice"))["assignment"] == b"abc"

    def heartbeat(side: Side, user: str, version: int) -> Any:
        return call(
            side,
            user,
            HEARTBEAT,
            version,
            group_id=g,
            generation_id=generation[side.name],
            member_id=member[side.name],
            group_instance_id=None,
        )

    for user in ("bob", "alice"):
        for version in (0, 4):
            compare(sides, partial(heartbeat, user=user, version=version))

    def leave(side: Side, user: str, version: int) -> Any:
        if version < 3:
            return call(side, user, LEAVE_GROUP, version, group_id=g, member_id=member[side.name])
        mod = entities(LEAVE_GROUP, version)
        identity = build(
            mod.MemberIdentity, member_id=member[side.name], group_instance_id=None, reason=None
        )
        return call(side, user, LEAVE_GROUP, version, group_id=g, members=(identity,))

    compare(sides, partial(leave, user="bob", version=0))
    compare(sides, partial(leave, user="bob", version=5))
    compare(sides, partial(leave, user="alice", version=5))


def consume(side: Side, user: str, group: str, topic: str, protocol: str, want: int) -> Any:
    """subscribe → poll until ``want`` values or an error → commit: what a consumer sees."""
    config: dict[str, Any] = {
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config |= {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500}
    else:
        config |= {"group.protocol": "consumer"}
    consumer = Consumer(side.client_config(user, **config))
    try:
        consumer.subscribe([topic])
        seen = poll_values(consumer, want)
        if seen["values"]:
            try:
                consumer.commit(asynchronous=False)
                seen["commit"] = "ok"
            except KafkaException as exc:
                seen["commit"] = kafka_error(exc)
        return seen
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_consumer(sides: list[Side], protocol: str) -> None:
    """A subscribing consumer, classic and KIP-848 (librdkafka ``group.protocol=consumer``,
    ConsumerGroupHeartbeat v1): READ on the group and the topic consumes and commits;
    without READ GROUP the client gets 30, without DESCRIBE on the topic 29."""
    t, u = scenario_name("cc-t"), scenario_name("cc-u")
    g, g2 = scenario_name("cc-g"), scenario_name("cc-h")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "READ", "GROUP", g2),
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:bob", "READ", "TOPIC", t),
            ]
        )
        create_topics(side, t, u)
        seed(side, {t: record_batch(b"one", b"two"), u: record_batch(b"x")})
        coordinator_ready(side, g, 0)
    run = partial(consume, protocol=protocol)
    assert compare(sides, partial(run, user="alice", group=g, topic=t, want=2)) == {
        "values": [b"one", b"two"],
        "errors": [],
        "commit": "ok",
    }
    compare(sides, partial(run, user="bob", group=g, topic=t, want=2))
    compare(sides, partial(run, user="alice", group=g2, topic=u, want=1))


def test_consumer_group_heartbeat(sides: list[Side]) -> None:
    """ConsumerGroupHeartbeat request by request: READ GROUP (30), then DESCRIBE on every
    subscribed topic name (29; a name listed twice counts once). A v1 heartbeat subscribing with
    a regular expression joins on both sides (the proxy resolves it: regex_subscriptions.py)."""
    t, u, g = scenario_name("ch-t"), scenario_name("ch-u"), scenario_name("ch-g")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "DESCRIBE", "TOPIC", t),
                acl("User:bob", "DESCRIBE", "TOPIC", t),
            ]
        )
        create_topics(side, t, u)
        coordinator_ready(side, g, 0)

    def heartbeat(side: Side, user: str, version: int, topics: Any, regex: str | None) -> Any:
        return call(
            side,
            user,
            CONSUMER_GROUP_HEARTBEAT,
            version,
            group_id=g,
            member_id=str(uuid.uuid4()) if version >= 1 else "",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=timedelta(seconds=10),
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=None,
            topic_partitions=(),
        )

    def leave(side: Side, response: Any) -> None:
        call(
            side,
            "alice",
            CONSUMER_GROUP_HEARTBEAT,
            1,
            group_id=g,
            member_id=response.member_id,
            member_epoch=-1,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=timedelta(milliseconds=-1),
            subscribed_topic_names=None,
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=None,
        )

    for version in (0, 1):
        run = partial(heartbeat, version=version, regex=None)
        compare(sides, partial(run, user="bob", topics=(t,)))
        compare(sides, partial(run, user="alice", topics=(t, u)))

        def joined(side: Side, run: Any = run) -> Any:
            response = run(side, user="alice", topics=(t, t))
            leave(side, response)
            return response.error_code, response.member_epoch > 0

        assert compare(sides, joined) == ["none", True]
    compare(sides, partial(heartbeat, user="bob", version=1, topics=None, regex="ch-.*"))

    def regex_joined(side: Side) -> Any:
        response = heartbeat(side, user="alice", version=1, topics=None, regex="ch-t.*")
        leave(side, response)
        return response.error_code, response.member_epoch > 0

    assert compare(sides, regex_joined) == ["none", True]


def commit(side: Side, user: str, group: str, version: int, topics: Any, generation: int) -> Any:
    mod = entities(OFFSET_COMMIT, version)
    return call(
        side,
        user,
        OFFSET_COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id="",
        group_instance_id=None,
        retention_time=timedelta(milliseconds=-1),
        topics=tuple(
            build(
                mod.OffsetCommitRequestTopic,
                name=n,
                partitions=tuple(
                    build(
                        mod.OffsetCommitRequestPartition,
                        partition_index=i,
                        committed_offset=1,
                        committed_leader_epoch=-1,
                        commit_timestamp=None,
                        committed_metadata="md",
                    )
                    for i in p
                ),
            )
            for n, p in topics
        ),
    )


def offset_fetch(side: Side, user: str, group: str, version: int, topics: Any) -> Any:
    mod = entities(OFFSET_FETCH, version)
    if version < 8:
        return call(
            side,
            user,
            OFFSET_FETCH,
            version,
            group_id=group,
            require_stable=False,
            topics=None
            if topics is None
            else tuple(
                mod.OffsetFetchRequestTopic(name=n, partition_indexes=tuple(p)) for n, p in topics
            ),
        )
    wanted = build(
        mod.OffsetFetchRequestGroup,
        group_id=group,
        member_id=None,
        member_epoch=-1,
        topics=None
        if topics is None
        else tuple(
            mod.OffsetFetchRequestTopics(name=n, partition_indexes=tuple(p)) for n, p in topics
        ),
    )
    return call(side, user, OFFSET_FETCH, version, require_stable=False, groups=(wanted,))


def offset_delete(side: Side, user: str, group: str, topics: Any) -> Any:
    mod = entities(OFFSET_DELETE, 0)
    return call(
        side,
        user,
        OFFSET_DELETE,
        0,
        group_id=group,
        topics=tuple(
            mod.OffsetDeleteRequestTopic(
                name=n,
                partitions=tuple(mod.OffsetDeleteRequestPartition(partition_index=i) for i in p),
            )
            for n, p in topics
        ),
    )


def test_committed_offsets(sides: list[Side]) -> None:
    """OffsetCommit (READ GROUP → 30 on every partition; READ TOPIC → 29; 3 for a missing
    topic or partition), OffsetFetch (DESCRIBE GROUP → 30; DESCRIBE TOPIC → 29, silently
    filtered when asking for all), OffsetDelete (DELETE GROUP → 30; READ TOPIC → 29). When
    every topic is denied Kafka still asks the coordinator, whose group-level error (e.g.
    GROUP_ID_NOT_FOUND) wins."""
    t, u = scenario_name("cm-t"), scenario_name("cm-u")
    miss = scenario_name("cm-miss")
    g, g2, gx = scenario_name("cm-g"), scenario_name("cm-h"), scenario_name("cm-x")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "DELETE", "GROUP", g),
                acl("User:alice", "DESCRIBE", "GROUP", g2),
                acl("User:alice", "READ", "GROUP", gx),
                acl("User:alice", "DELETE", "GROUP", gx),
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "READ", "TOPIC", "cm-miss", pattern="PREFIXED"),
            ]
        )
        create_topics(side, t, u)
        coordinator_ready(side, g, 0)
    mixed = [(t, [0]), (u, [0]), (miss, [0]), (t, [4])]
    for version in (2, 9):
        for user, group, topics, generation in (
            ("bob", g, mixed, -1),
            ("alice", g, mixed, -1),
            ("alice", g, [(u, [0])], -1),
            ("alice", g, [(t, [0]), (u, [0])], 7),
        ):
            step = partial(commit, user=user, group=group, version=version, topics=topics)
            compare(sides, partial(step, generation=generation))
    for version in (1, 7, 9):
        for user, group, topics in (
            ("alice", g, mixed),
            ("alice", g, None),
            ("bob", g, mixed),
            ("alice", g2, [(u, [0])]),
            ("alice", "other-" + g, [(t, [0])]),
            ("alice", g, []),
        ):
            if topics is None and version < 2:
                continue
            step = partial(offset_fetch, user=user, group=group, version=version)
            compare(sides, partial(step, topics=topics))
    for user, group, topics in (
        ("bob", g, mixed),
        ("alice", g, mixed),
        ("alice", g, [(u, [0])]),
        ("alice", gx, [(u, [0])]),
        ("alice", gx, [(t, [0])]),
    ):
        compare(sides, partial(offset_delete, user=user, group=group, topics=topics))
