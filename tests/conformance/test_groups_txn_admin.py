"""Differential scenarios: group and transaction administration — DescribeGroups, ListGroups,
DeleteGroups, ConsumerGroupDescribe, DescribeProducers, DescribeTransactions,
ListTransactions — for authorized and unauthorized principals.

Both clusters are shared by the whole session, so "list everything" answers are compared only
for the scenario's own groups and transactional ids. Ids two clusters assign differently
(member, producer and topic ids, client hosts, epochs of a live group, transaction start
times) are blanked; everything authorization decides — which entries, which codes, which
fields are withheld — is compared.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.support.conformance.datapath import (
    BLANK,
    CONSUMER_GROUP_DESCRIBE,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_GROUPS,
    LIST_TRANSACTIONS,
    OFFSET_COMMIT,
    TIMEOUT_S,
    acl,
    call,
    compare,
    coordinator_ready,
    create_topics,
    entities,
    sorted_entries,
)
from tests.support.conformance.harness import Side, normalize, scenario_name

pytestmark = pytest.mark.kafka


def simple_commit(side: Side, group: str, topic: str) -> None:
    """Create ``group`` (classic, Empty) the way a simple consumer does: commit an offset."""
    mod = entities(OFFSET_COMMIT, 8)
    partition = mod.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
    )
    response = call(
        side,
        "admin",
        OFFSET_COMMIT,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(mod.OffsetCommitRequestTopic(name=topic, partitions=(partition,)),),
    )
    assert [p.error_code for t in response.topics for p in t.partitions] == [0], response


def test_describe_list_delete_groups(sides: list[Side]) -> None:
    """DescribeGroups: DESCRIBE GROUP per group (30, listed first), KIP-430 operations for the
    rest. ListGroups: everything with DESCRIBE CLUSTER, else only DESCRIBE-able groups, never
    an error. DeleteGroups: DELETE GROUP per distinct group (30, listed after the
    coordinator's results)."""
    t = scenario_name("ga-t")
    g, g2, g3 = scenario_name("ga-g"), scenario_name("ga-h"), scenario_name("ga-i")
    missing = "ga-none-" + g
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "DESCRIBE", "GROUP", g),
                acl("User:alice", "DESCRIBE", "GROUP", g3),
                acl("User:alice", "DELETE", "GROUP", g3),
                acl("User:alice", "DELETE", "GROUP", "ga-none-", pattern="PREFIXED"),
                acl("User:carol", "DESCRIBE", "CLUSTER", "kafka-cluster"),
            ]
        )
        create_topics(side, t)
        for group in (g, g2, g3):
            coordinator_ready(side, group, 0)
            simple_commit(side, group, t)
    for version in (0, 3, 5):
        compare(
            sides,
            lambda s, v=version: call(
                s,
                "alice",
                DESCRIBE_GROUPS,
                v,
                groups=(g, g2, g3, missing, g),
                include_authorized_operations=True,
            ),
        )

    def list_groups(side: Side, user: str, version: int) -> Any:
        response = normalize(
            call(side, user, LIST_GROUPS, version, states_filter=(), types_filter=()), BLANK
        )
        mine = [e for e in response["groups"] if e["group_id"] in (g, g2, g3)]
        return response["error_code"], sorted(mine, key=lambda e: e["group_id"])

    for user in ("alice", "bob", "carol"):
        for version in (0, 5):
            compare(sides, partial(list_groups, user=user, version=version))
    for version in (0, 2):
        compare(
            sides,
            lambda s, v=version: call(
                s, "alice", DELETE_GROUPS, v, groups_names=(g, g2, g3, missing, g2)
            ),
        )


def test_consumer_group_describe(sides: list[Side]) -> None:
    """ConsumerGroupDescribe of a live KIP-848 group: DESCRIBE GROUP per group (30, listed
    first); a group whose member assignments name a topic the caller may not DESCRIBE is
    replaced by a 29 entry without members."""
    t, g = scenario_name("gd-t"), scenario_name("gd-g")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "GROUP", g),
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:bob", "DESCRIBE", "GROUP", g),
            ]
        )
        create_topics(side, t)
        coordinator_ready(side, g, 0)
    consumers: list[Consumer] = []
    try:
        for side in sides:
            consumer = Consumer(
                side.client_config("alice", **{"group.id": g, "group.protocol": "consumer"})
            )
            consumers.append(consumer)
            consumer.subscribe([t])
            deadline = time.monotonic() + TIMEOUT_S
            while not consumer.assignment():
                assert time.monotonic() < deadline, f"{side.name}: no assignment"
                consumer.poll(0.2)
        live = {
            "member_id": "<member>",
            "client_id": "<client>",
            "client_host": "<host>",
            "topic_id": "<topic-id>",
            "member_epoch": 0,
            "group_epoch": 0,
            "assignment_epoch": 0,
        }
        for user in ("alice", "bob", "carol"):
            for version in (0, 1):
                compare(
                    sides,
                    lambda s, u=user, v=version: call(
                        s,
                        u,
                        CONSUMER_GROUP_DESCRIBE,
                        v,
                        group_ids=("gd-none-" + g, g),
                        include_authorized_operations=True,
                    ),
                    **live,
                )
    finally:
        for consumer in consumers:
            consumer.close()


def test_producers_and_transactions(sides: list[Side]) -> None:
    """DescribeProducers: READ TOPIC per topic (29 with a message); DescribeTransactions:
    DESCRIBE TRANSACTIONAL_ID per id (53), each described topic kept only with DESCRIBE TOPIC;
    ListTransactions: filtered by DESCRIBE TRANSACTIONAL_ID, never an error."""
    t, u = scenario_name("gt-t"), scenario_name("gt-u")
    tx1, tx2 = scenario_name("gt-tx1"), scenario_name("gt-tx2")
    for side in sides:
        side.set_acls(
            [
                acl("User:alice", "READ", "TOPIC", t),
                acl("User:alice", "DESCRIBE", "TRANSACTIONAL_ID", tx1),
                acl("User:bob", "DESCRIBE", "TOPIC", t),
            ]
        )
        create_topics(side, t, u)
        coordinator_ready(side, tx1, 1)
    producers: list[Producer] = []
    try:
        for side in sides:
            for txn in (tx1, tx2):  # transactions left open across both topics
                producer = Producer(
                    side.client_config(
                        "admin", **{"transactional.id": txn, "transaction.timeout.ms": 60000}
                    )
                )
                producers.append(producer)
                producer.init_transactions(TIMEOUT_S)
                producer.begin_transaction()
                producer.produce(t, b"x")
                producer.produce(u, b"y")
                producer.flush(25)
        volatile = {
            "producer_id": "<pid>",
            "producer_epoch": 0,
            "last_timestamp": 0,
            "coordinator_epoch": 0,
            "current_txn_start_offset": 0,
            "transaction_start_time": 0,
        }
        names = (t, u, "gt-none-" + t)
        for user in ("alice", "bob"):

            def describe_producers(side: Side, user: str = user) -> Any:
                mod = entities(DESCRIBE_PRODUCERS, 0)
                topics = tuple(mod.TopicRequest(name=n, partition_indexes=(0, 3)) for n in names)
                response = call(side, user, DESCRIBE_PRODUCERS, 0, topics=topics)
                return sorted_entries(response, "topics", "name")

            compare(sides, describe_producers, **volatile)
            compare(
                sides,
                lambda s, user=user: call(
                    s, user, DESCRIBE_TRANSACTIONS, 0, transactional_ids=(tx1, tx2, "gt-none")
                ),
                **volatile,
            )

            def list_transactions(side: Side, version: int, user: str = user) -> Any:
                response = normalize(
                    call(
                        side,
                        user,
                        LIST_TRANSACTIONS,
                        version,
                        state_filters=(),
                        producer_id_filters=(),
                        duration_filter=-1,
                    ),
                    BLANK | volatile,
                )
                mine = [
                    s for s in response["transaction_states"] if s["transactional_id"] in (tx1, tx2)
                ]
                response["transaction_states"] = sorted(mine, key=lambda s: s["transactional_id"])
                return response

            for version in (0, 1):
                compare(sides, partial(list_transactions, version=version))
    finally:
        for producer in producers:
            producer.abort_transaction(TIMEOUT_S)


def test_describe_empty_transaction(sides: list[Side]) -> None:
    """DescribeTransactions of an Empty transactional id (its producer only called
    init_transactions): Kafka answers transaction_start_time_ms = -1, which kafkaguard must
    relay (and merge with a denied id) instead of closing the connection."""
    tx = scenario_name("gt-empty")
    for side in sides:
        side.set_acls([acl("User:alice", "DESCRIBE", "TRANSACTIONAL_ID", tx)])
        coordinator_ready(side, tx, 1)
    for side in sides:
        producer = Producer(
            side.client_config("admin", **{"transactional.id": tx, "transaction.timeout.ms": 60000})
        )
        producer.init_transactions(TIMEOUT_S)
    for ids in ((tx,), ("gt-none-" + tx, tx)):
        answer = compare(
            sides,
            lambda s, ids=ids: call(s, "alice", DESCRIBE_TRANSACTIONS, 0, transactional_ids=ids),
            producer_id="<pid>",
            producer_epoch=0,
        )
        empty = next(s for s in answer["transaction_states"] if s["transactional_id"] == tx)
        assert empty["transaction_state"] == "Empty"
        assert empty["transaction_start_time"] == datetime.fromtimestamp(-0.001, UTC)
