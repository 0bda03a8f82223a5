"""Differential scenarios: topic visibility — Metadata for all topics, for named topics
existing and not, by topic id, with and without auto-creation
(``KafkaApis.handleTopicMetadataRequest``), and DescribeTopicPartitions
(``DescribeTopicPartitionsRequestHandler``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from uuid import UUID

import confluent_kafka
import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    BOB,
    CAROL,
    CLUSTER,
    DESCRIBE_TOPIC_PARTITIONS,
    UNKNOWN_ID,
    acl,
    call,
    ensure_topics,
    metadata,
    set_acls,
    step,
    topic_codes,
    topic_ids,
    wait_for_topics,
)
from tests.support.conformance.datapath import coordinator_ready
from tests.support.conformance.harness import Side, differential, scenario_name

pytestmark = pytest.mark.kafka


# -- Metadata ------------------------------------------------------------------------------------


def test_metadata_named_and_all_topics(sides: list[Side]) -> None:
    """DESCRIBE per named topic (29 before any existence check), missing describable topics
    3 without auto-creation, all-topics requests silently filtered, internal topics shown only
    with DESCRIBE."""
    base = scenario_name("md")
    visible, hidden, denied = f"{base}-vis", f"{base}-hid", f"{base}-den"
    missing_visible, missing_hidden = f"{base}-mvis", f"{base}-mhid"
    for side in sides:
        ensure_topics(side, visible, hidden, denied, partitions=2)
        # __consumer_offsets, shown to bob below, on both sides: the upstream is shared with
        # the session's other tests, the referee may not have used a group yet.
        coordinator_ready(side, "conformance-metadata", 0)
    set_acls(
        sides,
        [
            acl(ALICE, "READ", "TOPIC", visible),
            acl(ALICE, "DESCRIBE", "TOPIC", missing_visible),
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "DESCRIBE", "TOPIC", denied, permission="DENY"),
            acl(ALICE, "DESCRIBE", "TOPIC", hidden, permission="DENY"),
            acl(BOB, "DESCRIBE", "TOPIC", "__consumer_offsets"),
        ],
    )
    named = [visible, hidden, denied, missing_visible, missing_hidden, visible]
    scenario = [visible, hidden, denied, "__consumer_offsets"]
    for version in (4, 9, 12, 13):
        answer = differential(sides, step(metadata, "alice", version, named))
        assert topic_codes(answer) == {
            visible: "none",
            hidden: "topic_authorization_failed",
            denied: "topic_authorization_failed",
            missing_visible: "unknown_topic_or_partition",
            missing_hidden: "unknown_topic_or_partition",
        }
        assert len(answer["topics"]) == 5  # one entry for the name asked twice
        for user in ("alice", "bob", "carol"):
            answer = differential(sides, step(metadata, user, version, None, only=scenario))
        answer = differential(sides, step(metadata, "carol", version, [visible, missing_visible]))
        assert set(topic_codes(answer).values()) == {"topic_authorization_failed"}
    # v0 reads an empty list as "all topics"; v1+ as "none".
    for version in (0, 1):
        differential(sides, step(metadata, "alice", version, [], only=scenario))


def test_metadata_by_topic_id(sides: list[Side]) -> None:
    """v12+ by id: ids are not secret (unknown → 100, known without DESCRIBE → 29 with the
    name withheld), described topics in full."""
    base = scenario_name("mid")
    visible, hidden = f"{base}-vis", f"{base}-hid"
    ids: dict[str, dict[str, UUID]] = {}
    for side in sides:
        ensure_topics(side, visible, hidden)
        ids[side.name] = topic_ids(side, visible, hidden)
    set_acls(sides, [acl(ALICE, "WRITE", "TOPIC", visible)])
    for version in (12, 13):

        def run(side: Side, version: int = version) -> Any:
            mine = ids[side.name]
            return metadata(
                side,
                "alice",
                version,
                None,
                topic_ops=True,
                ids=[mine[visible], mine[hidden], UNKNOWN_ID],
            )

        answer = differential(sides, run)
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
            (None, "topic_authorization_failed"),
            (None, "unknown_topic_id"),
            (visible, "none"),
        ]


def test_metadata_auto_create(sides: list[Side]) -> None:
    """Auto-creation (the broker's ``auto.create.topics.enable=true``) of describable missing
    topics needs CREATE on the cluster or on the topic, else (29, isInternal); without the
    request's flag missing topics are 3; a topic that exists needs no CREATE (but see
    test_metadata_auto_create_mixed_create_rights)."""
    base = scenario_name("mac")
    existing, alices = f"{base}-exists", f"{base}-a-exists"
    for side in sides:
        ensure_topics(side, existing, alices)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "CREATE", "TOPIC", f"{base}-a-", pattern="PREFIXED"),
            acl(BOB, "DESCRIBE", "TOPIC", "*"),
            acl(BOB, "CREATE", "CLUSTER", CLUSTER),
            acl(CAROL, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
        ],
    )
    # Auto-creation off: 3 for every missing topic whatever CREATE says.
    answer = differential(
        sides, step(metadata, "alice", 9, [f"{base}-a-1", f"{base}-n-1", existing])
    )
    assert topic_codes(answer) == {
        f"{base}-a-1": "unknown_topic_or_partition",
        f"{base}-n-1": "unknown_topic_or_partition",
        existing: "none",
    }
    # CREATE on the topic (alice), on the cluster (bob); none (carol): 29, existing topics fine.
    steps = [
        ("alice", 4, [f"{base}-a-4", alices]),
        ("alice", 12, [f"{base}-a-12"]),
        ("bob", 9, [f"{base}-b-9", existing]),
        ("carol", 9, [f"{base}-c-9", existing]),
        ("carol", 12, [f"{base}-c-12"]),
    ]
    for user, version, names in steps:
        answer = differential(sides, step(metadata, user, version, names, auto_create=True))
        got = topic_codes(answer)
        if user == "carol":
            assert got[names[0]] == "topic_authorization_failed"
        else:  # Kafka 4 creates asynchronously: 3 now, the topic shortly after
            assert got[names[0]] == "unknown_topic_or_partition"
        if len(names) > 1:
            assert got[names[1]] == "none"
    for side in sides:
        wait_for_topics(side, [f"{base}-a-4", f"{base}-a-12", f"{base}-b-9"])


def test_metadata_auto_create_old_versions(sides: list[Side]) -> None:
    """v0–3 have no auto-creation flag: the broker auto-creates every missing topic the
    principal may CREATE (answering 3 while it creates it, as v4+ does); a describable topic
    the principal may not CREATE is described when it exists, 29 when missing. kafkaguard
    never forwards such a name on these versions (they cannot switch creation off): it asks
    the broker about it with a v4 question first."""
    base = scenario_name("maco")
    existing = f"{base}-exists"
    for side in sides:
        ensure_topics(side, existing)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "CREATE", "TOPIC", f"{base}-a-", pattern="PREFIXED"),
            acl(BOB, "ALL", "TOPIC", f"{base}-", pattern="PREFIXED"),
        ],
    )
    created = []
    for version in (1, 3):
        name = f"{base}-a-{version}"
        answer = differential(sides, step(metadata, "alice", version, [name]))
        assert topic_codes(answer) == {name: "unknown_topic_or_partition"}
        created.append(name)
        answer = differential(sides, step(metadata, "bob", version, [existing]))
        assert topic_codes(answer) == {existing: "none"}
        missing = f"{base}-n-{version}"
        answer = differential(sides, step(metadata, "alice", version, [missing]))
        assert topic_codes(answer) == {missing: "topic_authorization_failed"}

        answer = differential(sides, step(metadata, "alice", version, [existing]))
        assert topic_codes(answer) == {existing: "none"}
        mixed = [f"{base}-a-m{version}", existing, f"{base}-n-m{version}"]
        answer = differential(sides, step(metadata, "alice", version, mixed))
        assert topic_codes(answer) == {
            mixed[0]: "unknown_topic_or_partition",
            existing: "none",
            mixed[2]: "topic_authorization_failed",
        }
        created.append(mixed[0])
    for side in sides:
        wait_for_topics(side, created)


def test_metadata_auto_create_mixed_create_rights(sides: list[Side]) -> None:
    """One v4+ request with auto-creation naming a missing topic alice may create and another
    describable topic she may not create — missing or existing: 3 for the topic being
    created (and it is created), 29 for the missing one, the existing one described.
    kafkaguard asks the broker about the uncreatable name first (auto-creation off), then
    forwards the creatable one with creation on."""
    base = scenario_name("macm")
    existing = f"{base}-exists"
    for side in sides:
        ensure_topics(side, existing)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "CREATE", "TOPIC", f"{base}-a-", pattern="PREFIXED"),
        ],
    )
    for creatable, other in ((f"{base}-a-1", f"{base}-n-1"), (f"{base}-a-2", existing)):
        answer = differential(
            sides, step(metadata, "alice", 9, [creatable, other], auto_create=True)
        )
        assert topic_codes(answer) == {
            creatable: "unknown_topic_or_partition",
            other: "none" if other == existing else "topic_authorization_failed",
        }
        for side in sides:
            wait_for_topics(side, [creatable])
        answer = differential(sides, step(metadata, "admin", 9, [creatable, other]))
        assert topic_codes(answer) == {
            creatable: "none",
            other: "none" if other == existing else "unknown_topic_or_partition",
        }


# -- DescribeTopicPartitions ---------------------------------------------------------------------


def describe_topic_partitions(
    user: str,
    names: list[str],
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
    only: list[str] | None = None,
) -> Callable[[Side], Any]:
    """DescribeTopicPartitions v0 of ``names`` (empty: all topics; then only those in
    ``only`` are compared). Kafka sorts the described topics by name and puts denied ones
    last, in hash-set order among themselves (docs/deviations.md); with at most one denied
    name per request the answer is compared as it is."""

    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            DESCRIBE_TOPIC_PARTITIONS,
            0,
            topics=[{"name": n} for n in names],
            response_partition_limit=limit,
            cursor=None
            if cursor is None
            else {"topic_name": cursor[0], "partition_index": cursor[1]},
        )
        if only is None:
            return response
        kept = tuple(t for t in response.topics if t.name in only)
        return dataclasses.replace(response, topics=kept)

    return run


def test_describe_topic_partitions(sides: list[Side]) -> None:
    """DescribeTopicPartitions (what newer AdminClients use to describe topics): DESCRIBE per
    topic, (29, zero id) for named denied topics, silently filtered when listing all,
    ``topicAuthorizedOperations`` always filled; paging with a cursor."""
    base = scenario_name("dtp")
    visible, hidden = f"{base}-vis", f"{base}-hid"
    for side in sides:
        ensure_topics(side, visible, hidden, partitions=3)
    set_acls(
        sides,
        [
            acl(ALICE, "WRITE", "TOPIC", visible),
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-missing"),
            acl(BOB, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED"),
        ],
    )
    answer = differential(
        sides, describe_topic_partitions("alice", [visible, hidden, f"{base}-missing"])
    )
    assert topic_codes(answer) == {
        visible: "none",
        hidden: "topic_authorization_failed",
        f"{base}-missing": "unknown_topic_or_partition",
    }
    for user in ("alice", "bob", "carol"):
        differential(sides, describe_topic_partitions(user, [], only=[visible, hidden]))
    # Paging: two partitions per answer, from a cursor.
    answer = differential(sides, describe_topic_partitions("bob", [hidden, visible], limit=2))
    assert answer["next_cursor"] == {"topic_name": hidden, "partition_index": 2}
    differential(
        sides, describe_topic_partitions("bob", [hidden, visible], limit=2, cursor=(hidden, 2))
    )

    # AdminClient.describe_topics with authorized operations, as alice.
    def client(side: Side) -> Any:
        admin = side.admin("alice")
        request = confluent_kafka.TopicCollection([visible, hidden])
        outcome = {}
        for name, future in admin.describe_topics(
            request, include_authorized_operations=True
        ).items():
            try:
                described = future.result(15)
                outcome[name] = (
                    len(described.partitions),
                    sorted(op.name for op in described.authorized_operations),
                )
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                outcome[name] = exc.args[0].name()
        return outcome

    assert differential(sides, client) == {
        visible: [3, ["DESCRIBE", "WRITE"]],
        hidden: "TOPIC_AUTHORIZATION_FAILED",
    }
