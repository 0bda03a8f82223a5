"""Differential scenarios: CreateTopics and DeleteTopics (``ControllerApis.createTopics`` /
``deleteTopics``), with and without CREATE / DELETE on the cluster.

Each step runs on Kafka with its own StandardAuthorizer and on kafkaguard in front of an
unsecured Kafka and must answer the same; topic ids differ between the two clusters and are
blanked by ``normalize``, entry order is compared by name (``admin_steps.sorted_entries``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    BOB,
    CLUSTER,
    CREATE_TOPICS,
    DELETE_TOPICS,
    NO_ID,
    TIMEOUT,
    UNKNOWN_ID,
    acl,
    call,
    codes,
    ensure_topics,
    set_acls,
    sorted_entries,
    topic_ids,
    wait_for_topics,
    wait_until_gone,
)
from tests.support.conformance.datapath import ids_behind, ids_to_names
from tests.support.conformance.harness import Side, ck_admin, differential, scenario_name
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.kafka


# -- CreateTopics --------------------------------------------------------------------------------


def create_topics(
    user: str, version: int, names: Iterable[str], *, validate_only: bool = False
) -> Callable[[Side], Any]:
    topics = [
        {
            "name": n,
            "num_partitions": 2,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": "retention.ms", "value": "3600000"}],
        }
        for n in names
    ]

    def run(side: Side) -> Any:
        response = call(
            side,
            user,
            CREATE_TOPICS,
            version,
            topics=topics,
            timeout=TIMEOUT,
            validate_only=validate_only,
        )
        return sorted_entries(response, "topics")

    return run


def test_create_topics(sides: list[Side]) -> None:
    """CREATE on the cluster or per topic; without it 29 "Authorization failed." whether the
    topic exists or not (never 36); authorized without DESCRIBE_CONFIGS the topic is created
    but its configs are withheld (``topicConfigErrorCode`` 29); duplicates and
    ``__cluster_metadata`` are 42 before any check."""
    base = scenario_name("ct")
    full, bare, other = f"{base}-full", f"{base}-bare", f"{base}-other"
    cluster_made = f"{base}-bob"
    set_acls(
        sides,
        [
            acl(ALICE, "CREATE", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", full),
            acl(ALICE, "CREATE", "TOPIC", other, permission="DENY"),
            acl(BOB, "CREATE", "CLUSTER", CLUSTER),
            acl(BOB, "ALTER_CONFIGS", "TOPIC", "*"),
        ],
    )
    for version in (2, 5, 7):
        for user in ("carol", "alice"):
            answer = differential(sides, create_topics(user, version, [other], validate_only=True))
            assert codes(answer, "topics") == {other: "topic_authorization_failed"}

    answer = differential(sides, create_topics("alice", 7, [full, bare, other]))
    assert codes(answer, "topics") == {
        full: "none",
        bare: "none",
        other: "topic_authorization_failed",
    }
    by_name = {t["name"]: t for t in answer["topics"]}
    assert by_name[bare]["topic_config_error_code"] == 29
    assert by_name[bare]["configs"] == [] and by_name[full]["configs"] != []
    for side in sides:
        wait_for_topics(side, [full, bare])

    # Existing topics: 36 for who may create them, 29 (not 36) for who may not.
    for version in (2, 7):
        answer = differential(sides, create_topics("alice", version, [full, bare]))
        assert set(codes(answer, "topics").values()) == {"topic_already_exists"}
        answer = differential(sides, create_topics("carol", version, [full]))
        assert codes(answer, "topics") == {full: "topic_authorization_failed"}

    # Before any check: duplicates and the metadata log's name (42), even for carol.
    for user in ("carol", "bob"):
        answer = differential(
            sides, create_topics(user, 7, [f"{base}-dup", f"{base}-dup", "__cluster_metadata"])
        )
        assert set(codes(answer, "topics").values()) == {"invalid_request"}

    # CREATE on the cluster: any name; validate_only creates nothing.
    answer = differential(sides, create_topics("bob", 7, [cluster_made], validate_only=True))
    assert codes(answer, "topics") == {cluster_made: "none"}
    answer = differential(sides, create_topics("bob", 5, [cluster_made, full]))
    assert codes(answer, "topics") == {cluster_made: "none", full: "topic_already_exists"}

    # AdminClient.create_topics: what a client reports per topic.
    def client(side: Side) -> dict[str, str]:
        admin = side.admin("alice")
        futures = admin.create_topics(
            [ck_admin.NewTopic(n, 1, 1) for n in (f"{base}-client", other, full)],
            operation_timeout=15,
        )
        outcome = {}
        for name, future in futures.items():
            try:
                future.result(15)
                outcome[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                outcome[name] = exc.args[0].name()
        return outcome

    assert differential(sides, client) == {
        f"{base}-client": "ok",
        other: "TOPIC_AUTHORIZATION_FAILED",
        full: "TOPIC_ALREADY_EXISTS",
    }


def test_create_topics_invalid_for_who_may_create(sides: list[Side]) -> None:
    """Validation comes after authorization: an illegal name or config is the broker's
    17/40/37 for who may create the topic, 29 for who may not."""
    base = scenario_name("cti")
    set_acls(sides, [acl(BOB, "CREATE", "CLUSTER", CLUSTER)])
    bad_config = {
        "name": f"{base}-cfg",
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": "retention.ms", "value": "soon"}],
    }
    bad_count = dict(bad_config, name=f"{base}-count", num_partitions=0, configs=[])
    bad_name = dict(bad_config, name="no spaces allowed", configs=[])
    for user, expected in (
        ("bob", ["invalid_config", "invalid_partitions", "invalid_topic_exception"]),
        ("carol", ["topic_authorization_failed"] * 3),
    ):

        def run(side: Side, user: str = user) -> Any:
            response = call(
                side,
                user,
                CREATE_TOPICS,
                7,
                topics=[bad_config, bad_count, bad_name],
                timeout=TIMEOUT,
                validate_only=False,
            )
            return sorted_entries(response, "topics")

        answer = differential(sides, run)
        got = codes(answer, "topics")
        assert [got[t["name"]] for t in (bad_config, bad_count, bad_name)] == expected


# -- DeleteTopics --------------------------------------------------------------------------------


def delete_topics(
    user: str, version: int, names: Iterable[str] = (), ids: dict[str, UUID] | None = None
) -> Callable[[Side], Any]:
    """DeleteTopics by name (v1–6) or, with ``ids`` (v6), by the side's topic id of each name
    (a name missing from a side's ids stands for a random, unknown id)."""

    def run(side: Side) -> Any:
        if ids is None and version >= 6:
            topics = [{"name": n, "topic_id": NO_ID} for n in names]
        elif ids is None:
            topics = []
        else:
            side_ids = ids_by_side[side.name]
            topics = [{"name": None, "topic_id": side_ids.get(n, UNKNOWN_ID)} for n in names]
        response = call(
            side,
            user,
            DELETE_TOPICS,
            version,
            topics=topics,
            topic_names=list(names),
            timeout=TIMEOUT,
        )
        return sorted_entries(response, "responses")

    return run


ids_by_side: dict[str, dict[str, UUID]] = {}


def test_delete_topics(sides: list[Side]) -> None:
    """By name: no DESCRIBE → 29 without existence check; DESCRIBE + DELETE → deleted (3 when
    missing); DELETE on the cluster → everything. By id (v6): an unknown id → 100, a known
    one without DELETE → 29 with the name withheld unless DESCRIBE."""
    base = scenario_name("dt")
    gone, kept_visible, kept_hidden, by_id, by_id_hidden, bobs = (
        f"{base}-{s}" for s in ("gone", "vis", "hid", "id", "idhid", "bob")
    )
    names = [gone, kept_visible, kept_hidden, by_id, by_id_hidden, bobs]
    for side in sides:
        ensure_topics(side, *names)
        ids_by_side[side.name] = topic_ids(side, *names)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "TOPIC", kept_visible),
            acl(ALICE, "DELETE", "TOPIC", gone),
            acl(ALICE, "DELETE", "TOPIC", by_id),
            acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-missing"),
            acl(ALICE, "DELETE", "TOPIC", f"{base}-missing"),
            acl(ALICE, "DESCRIBE", "TOPIC", by_id_hidden, permission="DENY"),
            acl(BOB, "DELETE", "CLUSTER", CLUSTER),
        ],
    )
    for version in (1, 4, 6):
        answer = differential(sides, delete_topics("carol", version, [gone, f"{base}-nope"]))
        assert set(codes(answer, "responses").values()) == {"topic_authorization_failed"}
        answer = differential(sides, delete_topics("alice", version, [kept_visible, kept_hidden]))
        assert set(codes(answer, "responses").values()) == {"topic_authorization_failed"}
        answer = differential(sides, delete_topics("alice", version, [f"{base}-missing"]))
        assert codes(answer, "responses") == {f"{base}-missing": "unknown_topic_or_partition"}

    # By id: unknown id 100; known ids without DELETE 29 (name only with DESCRIBE).
    answer = differential(
        sides,
        delete_topics("alice", 6, [kept_visible, kept_hidden, by_id_hidden, "unknown"], ids={}),
    )
    assert [(r["name"], r["error_code"]) for r in answer["responses"]] == [
        (None, "topic_authorization_failed"),
        (None, "topic_authorization_failed"),
        (None, "unknown_topic_id"),
        (kept_visible, "topic_authorization_failed"),
    ]

    # Deletions: by name (v4), by id (v6), and anything with DELETE on the cluster.
    answer = differential(sides, delete_topics("alice", 4, [gone]))
    assert codes(answer, "responses") == {gone: "none"}
    answer = differential(sides, delete_topics("alice", 6, [by_id], ids={}))
    assert [(r["name"], r["error_code"]) for r in answer["responses"]] == [(by_id, "none")]
    answer = differential(sides, delete_topics("bob", 6, [bobs, f"{base}-never"]))
    assert codes(answer, "responses") == {
        bobs: "none",
        f"{base}-never": "unknown_topic_or_partition",
    }
    for side in sides:
        wait_until_gone(side, [gone, by_id, bobs])
    answer = differential(sides, delete_topics("alice", 6, [gone]))
    assert codes(answer, "responses") == {gone: "unknown_topic_or_partition"}

    # Malformed entries (42 before any check): name and id together, neither, twice.
    def malformed(side: Side) -> Any:
        known = ids_by_side[side.name][kept_visible]
        response = call(
            side,
            "carol",
            DELETE_TOPICS,
            6,
            topics=[
                {"name": kept_visible, "topic_id": known},
                {"name": None, "topic_id": NO_ID},
                {"name": f"{base}-twice", "topic_id": NO_ID},
                {"name": f"{base}-twice", "topic_id": NO_ID},
                {"name": None, "topic_id": UNKNOWN_ID},
                {"name": None, "topic_id": UNKNOWN_ID},
            ],
            timeout=TIMEOUT,
        )
        return sorted_entries(response, "responses")

    answer = differential(sides, malformed)
    assert {r["error_code"] for r in answer["responses"]} == {"invalid_request"}

    # AdminClient.delete_topics as alice.
    def client(side: Side) -> dict[str, str]:
        admin = side.admin("alice")
        outcome = {}
        for name, future in admin.delete_topics([kept_hidden, kept_visible]).items():
            try:
                future.result(15)
                outcome[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                outcome[name] = exc.args[0].name()
        return outcome

    assert set(differential(sides, client).values()) == {"TOPIC_AUTHORIZATION_FAILED"}


def test_delete_topics_describe_without_delete_missing(sides: list[Side]) -> None:
    """DESCRIBE but no DELETE: Kafka checks existence between its two authorization checks
    (3 for a missing topic, 29 for an existing one); kafkaguard asks the broker which exist."""
    base = scenario_name("dtm")
    existing, missing = f"{base}-exists", f"{base}-missing"
    for side in sides:
        ensure_topics(side, existing)
    set_acls(sides, [acl(ALICE, "DESCRIBE", "TOPIC", f"{base}-", pattern="PREFIXED")])
    for version in (4, 6):
        answer = differential(sides, delete_topics("alice", version, [existing, missing]))
        assert codes(answer, "responses") == {
            existing: "topic_authorization_failed",
            missing: "unknown_topic_or_partition",
        }


def test_delete_topics_by_an_id_kafkaguard_never_saw(
    sides: list[Side], kafka_upstream: KafkaBroker
) -> None:
    """DeleteTopics v6 by the id of a topic whose id never passed through kafkaguard (created
    on the cluster directly, never described through the proxy), by a principal with DELETE
    on the topic but not on the cluster: kafkaguard asks the broker for the name, then checks
    as Kafka does, and the topic is deleted on both sides."""
    name = scenario_name("dtu")
    referee, _ = sides
    ensure_topics(referee, name)
    upstream = ck_admin.AdminClient(kafka_upstream.admin_config())
    for future in upstream.create_topics([ck_admin.NewTopic(name, 1, 1)]).values():
        future.result(15)
    ids = {
        "referee": topic_ids(referee, name)[name],
        "kafkaguard": ids_behind(kafka_upstream.bootstrap, name)[name],
    }
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE", "TOPIC", name),
            acl(ALICE, "DELETE", "TOPIC", name),
        ],
    )

    def by_id(side: Side) -> Any:
        topics = [{"name": None, "topic_id": ids[side.name]}]
        answer = call(side, "alice", DELETE_TOPICS, 6, topics=topics, timeout=TIMEOUT)
        return ids_to_names(answer, {ids[side.name]: name})

    answer = differential(sides, by_id)
    assert [(r["name"], r["error_code"]) for r in answer["responses"]] == [(name, "none")]
    for side in sides:
        wait_until_gone(side, [name])
