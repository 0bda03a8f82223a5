"""Differential scenarios: CreatePartitions (``ControllerApis.createPartitions``: ALTER per
topic) and DeleteRecords (``KafkaApis.handleDeleteRecordsRequest``: DELETE per topic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    CREATE_PARTITIONS,
    DELETE_RECORDS,
    TIMEOUT,
    acl,
    call,
    codes,
    ensure_topics,
    set_acls,
    sorted_entries,
    wait_for_topics,
)
from tests.support.conformance.harness import Side, ck_admin, differential, scenario_name

pytestmark = pytest.mark.kafka


# -- CreatePartitions ----------------------------------------------------------------------------


def create_partitions(
    user: str,
    version: int,
    counts: dict[str, int] | list[tuple[str, int]],
    validate_only: bool = False,
) -> Callable[[Side], Any]:
    items = list(counts.items()) if isinstance(counts, dict) else counts

    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            CREATE_PARTITIONS,
            version,
            topics=[{"name": n, "count": c, "assignments": None} for n, c in items],
            timeout=TIMEOUT,
            validate_only=validate_only,
        )
        return sorted_entries(response, "results")

    return run


def test_create_partitions(sides: list[Side]) -> None:
    """ALTER per topic (29 whether or not it exists), duplicates 42 before authorization,
    missing topics 3 and invalid counts 37 for who may ALTER them."""
    base = scenario_name("cp")
    grow, locked = f"{base}-grow", f"{base}-locked"
    for side in sides:
        ensure_topics(side, grow, locked)
    set_acls(
        sides,
        [
            acl(ALICE, "ALTER", "TOPIC", grow),
            acl(ALICE, "ALTER", "TOPIC", f"{base}-missing"),
            acl(ALICE, "DESCRIBE", "TOPIC", locked),
        ],
    )
    for version in (0, 3):
        answer = differential(
            sides,
            create_partitions(
                "alice",
                version,
                [(grow, 3), (locked, 3), (f"{base}-missing", 3), (f"{base}-nope", 3)],
                validate_only=True,
            ),
        )
        assert codes(answer, "results") == {
            grow: "none",
            locked: "topic_authorization_failed",
            f"{base}-missing": "unknown_topic_or_partition",
            f"{base}-nope": "topic_authorization_failed",
        }
        answer = differential(
            sides, create_partitions("carol", version, [(grow, 3), (grow, 4), (locked, 3)])
        )
        assert codes(answer, "results") == {
            grow: "invalid_request",
            locked: "topic_authorization_failed",
        }
    answer = differential(sides, create_partitions("alice", 3, {grow: 1}))
    assert codes(answer, "results") == {grow: "invalid_partitions"}
    answer = differential(sides, create_partitions("alice", 3, {grow: 3}))
    assert codes(answer, "results") == {grow: "none"}
    for side in sides:
        wait_for_topics(side, [grow], partitions=3)

    # AdminClient.create_partitions as alice.
    def client(side: Side) -> dict[str, str]:
        admin = side.admin("alice")
        outcome = {}
        new = [ck_admin.NewPartitions(grow, 4), ck_admin.NewPartitions(locked, 4)]
        for name, future in admin.create_partitions(new, operation_timeout=15).items():
            try:
                future.result(15)
                outcome[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                outcome[name] = exc.args[0].name()
        return outcome

    assert differential(sides, client) == {grow: "ok", locked: "TOPIC_AUTHORIZATION_FAILED"}


# -- DeleteRecords -------------------------------------------------------------------------------


def produce(side: Side, topic: str, count: int) -> None:
    """``count`` records to partition 0 of ``topic`` as the super user."""
    from confluent_kafka import Producer

    producer = Producer(side.client_config("admin", **{"linger.ms": 0}))
    for i in range(count):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    assert producer.flush(15) == 0, f"{side.name}: records not delivered"


def delete_records(
    user: str, version: int, offsets: list[tuple[str, list[tuple[int, int]]]]
) -> Callable[[Side], Any]:
    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            DELETE_RECORDS,
            version,
            topics=[
                {"name": n, "partitions": [{"partition_index": p, "offset": o} for p, o in parts]}
                for n, parts in offsets
            ],
            timeout=TIMEOUT,
        )
        topics = tuple(
            dataclasses.replace(
                t, partitions=tuple(sorted(t.partitions, key=lambda p: p.partition_index))
            )
            for t in response.topics
        )  # partitions come in hash order too
        return sorted_entries(dataclasses.replace(response, topics=topics), "topics")

    return run


def test_delete_records(sides: list[Side]) -> None:
    """DELETE per topic (29 on every partition, -1 low watermark, no existence check); for
    who may delete: the new low watermark, 3 for a missing topic or partition, 1 for an
    offset beyond the end."""
    base = scenario_name("dr")
    trimmed, locked = f"{base}-trim", f"{base}-locked"
    for side in sides:
        ensure_topics(side, trimmed, locked, partitions=2)
        produce(side, trimmed, 5)
        produce(side, locked, 2)
    set_acls(
        sides,
        [
            acl(ALICE, "DELETE", "TOPIC", trimmed),
            acl(ALICE, "DELETE", "TOPIC", f"{base}-missing"),
            acl(ALICE, "READ", "TOPIC", locked),
        ],
    )
    for version in (0, 2):
        answer = differential(
            sides,
            delete_records("carol", version, [(trimmed, [(0, 1)]), (f"{base}-nope", [(0, 1)])]),
        )
        assert {p["error_code"] for t in answer["topics"] for p in t["partitions"]} == {
            "topic_authorization_failed"
        }
    answer = differential(
        sides,
        delete_records(
            "alice",
            2,
            [
                (trimmed, [(0, 3), (1, 0), (5, 0)]),
                (locked, [(0, 1)]),
                (f"{base}-missing", [(0, 1)]),
            ],
        ),
    )
    assert {
        t["name"]: [(p["error_code"], p["low_watermark"]) for p in t["partitions"]]
        for t in answer["topics"]
    } == {
        trimmed: [("none", 3), ("none", 0), ("unknown_topic_or_partition", -1)],  # 0, 1, 5
        locked: [("topic_authorization_failed", -1)],
        f"{base}-missing": [("unknown_topic_or_partition", -1)],
    }
    answer = differential(sides, delete_records("alice", 1, [(trimmed, [(0, 99)])]))
    assert answer["topics"][0]["partitions"][0]["error_code"] == "offset_out_of_range"

    # AdminClient.delete_records as alice.
    def client(side: Side) -> Any:
        from confluent_kafka import TopicPartition

        admin = side.admin("alice")
        outcome = {}
        wanted = [TopicPartition(trimmed, 0, 4), TopicPartition(locked, 0, 1)]
        for tp, future in admin.delete_records(wanted, operation_timeout=15).items():
            try:
                outcome[tp.topic] = future.result(15).low_watermark
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                outcome[tp.topic] = exc.args[0].name()
        return outcome

    assert differential(sides, client) == {trimmed: 4, locked: "TOPIC_AUTHORIZATION_FAILED"}
