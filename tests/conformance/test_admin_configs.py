"""Differential scenarios: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on topics
and groups, by authorized and unauthorized principals.

Kafka's behaviour followed: ``ConfigHelper.handleDescribeConfigsRequest`` (DESCRIBE_CONFIGS per
resource; an unknown resource type fails the whole request), ``ConfigAdminManager.preprocess``
(the broker's checks before authorization) and ``ControllerApis`` (ALTER_CONFIGS per
resource). Brokers and broker loggers: test_admin_broker_configs.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.conformance.admin_steps import ALICE, BOB, CAROL, acl, ensure_topics, set_acls
from tests.support.conformance.config_steps import (
    BROKER_LOGGER,
    DELETE,
    GROUP,
    SET,
    TOPIC,
    alter,
    describe,
    incremental,
    resource_codes,
    topic_config,
)
from tests.support.conformance.harness import Side, ck_admin, differential, scenario_name

pytestmark = pytest.mark.kafka


def test_describe_topic_configs(sides: list[Side]) -> None:
    """DESCRIBE_CONFIGS on the topic (ALTER_CONFIGS implies it; DESCRIBE does not): 29 with
    ``Errors.message()`` otherwise, whether the topic exists or not; 3 for a missing topic
    only to who may describe its configs."""
    base = scenario_name("dc")
    topic, other = f"{base}-t", f"{base}-o"
    for side in sides:
        ensure_topics(side, topic, other)
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", other, permission="DENY"),
            acl(BOB, "ALTER_CONFIGS", "TOPIC", topic),
            acl(CAROL, "DESCRIBE", "TOPIC", topic),
            acl(CAROL, "ALTER", "TOPIC", topic),
        ],
    )
    resources = [(TOPIC, topic, None), (TOPIC, f"{base}-missing", None), (TOPIC, other, None)]
    expected = {
        "alice": ["none", "unknown_topic_or_partition", "topic_authorization_failed"],
        "bob": ["none", "topic_authorization_failed", "topic_authorization_failed"],
        "carol": ["topic_authorization_failed"] * 3,
    }
    for version in (1, 4):
        for user, codes in expected.items():
            answer = differential(
                sides, describe(user, version, resources, synonyms=True, documentation=True)
            )
            got = resource_codes(answer)
            assert [got[(TOPIC, n)] for _, n, _ in resources] == codes
    # Chosen keys only (unknown keys are simply absent).
    answer = differential(
        sides, describe("alice", 4, [(TOPIC, topic, ["retention.ms", "no.such.key"])])
    )
    assert [c["name"] for c in answer["results"][0]["configs"]] == ["retention.ms"]

    # AdminClient.describe_configs as carol and as alice.
    for user in ("carol", "alice"):

        def client(side: Side, user: str = user) -> Any:
            admin = side.admin(user)
            (future,) = admin.describe_configs(
                [ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic)]
            ).values()
            try:
                return sorted((k, v.value) for k, v in future.result(15).items())
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                return exc.args[0].name()

        answer = differential(sides, client)
        assert (answer == "TOPIC_AUTHORIZATION_FAILED") == (user == "carol")


def test_describe_configs_unknown_resource_type(sides: list[Side]) -> None:
    """One resource of an unknown type fails the whole request with 42 — resources the
    principal may describe included."""
    base = scenario_name("dcu")
    topic = f"{base}-t"
    for side in sides:
        ensure_topics(side, topic)
    set_acls(sides, [acl(ALICE, "DESCRIBE_CONFIGS", "TOPIC", topic)])
    for version in (1, 4):
        answer = differential(
            sides, describe("alice", version, [(TOPIC, topic, None), (99, "x", None)])
        )
        assert set(resource_codes(answer).values()) == {"invalid_request"}


def test_describe_group_configs(sides: list[Side]) -> None:
    """GROUP resources (KIP-848 group configs): DESCRIBE_CONFIGS on the group, else 30."""
    group = scenario_name("dcg")
    set_acls(sides, [acl(ALICE, "DESCRIBE_CONFIGS", "GROUP", group)])
    for user, code in (("alice", "none"), ("carol", "group_authorization_failed")):
        answer = differential(sides, describe(user, 4, [(GROUP, group, None)]))
        assert resource_codes(answer) == {(GROUP, group): code}


# -- AlterConfigs / IncrementalAlterConfigs ------------------------------------------------------


def test_alter_topic_configs(sides: list[Side]) -> None:
    """ALTER_CONFIGS on the topic (DESCRIBE_CONFIGS is not enough): 29 otherwise, whether the
    topic exists or not; for who may: 3 for a missing topic, 40 for an invalid value,
    validate_only changes nothing. Both APIs, oldest and newest versions."""
    base = scenario_name("ac")
    topic, locked = f"{base}-t", f"{base}-locked"
    for side in sides:
        ensure_topics(side, topic, locked)
    set_acls(
        sides,
        [
            acl(ALICE, "ALTER_CONFIGS", "TOPIC", f"{base}-", pattern="PREFIXED"),
            acl(ALICE, "ALTER_CONFIGS", "TOPIC", locked, permission="DENY"),
            acl(BOB, "DESCRIBE_CONFIGS", "TOPIC", "*"),
        ],
    )
    names = [topic, f"{base}-missing", locked]
    for user, codes in (
        ("alice", ["none", "unknown_topic_or_partition", "topic_authorization_failed"]),
        ("bob", ["topic_authorization_failed"] * 3),
    ):
        for version in (0, 2):
            answer = differential(
                sides,
                alter(
                    user,
                    version,
                    [(TOPIC, n, {"retention.ms": "7200000"}) for n in names],
                    validate_only=True,
                ),
            )
            got = resource_codes(answer, "responses")
            assert [got[(TOPIC, n)] for n in names] == codes
        for version in (0, 1):
            answer = differential(
                sides,
                incremental(
                    user,
                    version,
                    [(TOPIC, n, [("retention.ms", SET, "7200000")]) for n in names],
                    validate_only=True,
                ),
            )
            got = resource_codes(answer, "responses")
            assert [got[(TOPIC, n)] for n in names] == codes
    differential(sides, lambda side: topic_config(side, topic, "retention.ms"), settle_s=10)

    # Invalid values: the broker's answer (40) for who may alter, 29 for who may not.
    for user, code in (("alice", "invalid_config"), ("bob", "topic_authorization_failed")):
        answer = differential(
            sides, incremental(user, 1, [(TOPIC, topic, [("retention.ms", SET, "soon")])])
        )
        assert resource_codes(answer, "responses") == {(TOPIC, topic): code}

    # Real changes, seen alike by the super user afterwards.
    answer = differential(
        sides, incremental("alice", 1, [(TOPIC, topic, [("retention.ms", SET, "7200000")])])
    )
    assert resource_codes(answer, "responses") == {(TOPIC, topic): "none"}
    assert (
        differential(sides, lambda side: topic_config(side, topic, "retention.ms"), settle_s=10)[0]
        == "7200000"
    )
    answer = differential(sides, alter("alice", 2, [(TOPIC, topic, {"cleanup.policy": "compact"})]))
    assert resource_codes(answer, "responses") == {(TOPIC, topic): "none"}
    differential(sides, lambda side: topic_config(side, topic, "retention.ms"), settle_s=10)
    answer = differential(
        sides, incremental("alice", 0, [(TOPIC, topic, [("cleanup.policy", DELETE, None)])])
    )
    assert resource_codes(answer, "responses") == {(TOPIC, topic): "none"}
    differential(sides, lambda side: topic_config(side, topic, "cleanup.policy"), settle_s=10)

    # AdminClient.incremental_alter_configs as bob (denied) and alice.
    for user in ("bob", "alice"):

        def client(side: Side, user: str = user) -> Any:
            admin = side.admin(user)
            resource = ck_admin.ConfigResource(
                ck_admin.ResourceType.TOPIC,
                topic,
                incremental_configs=[
                    ck_admin.ConfigEntry(
                        "retention.ms",
                        "10800000",
                        incremental_operation=ck_admin.AlterConfigOpType.SET,
                    )
                ],
            )
            (future,) = admin.incremental_alter_configs([resource]).values()
            try:
                future.result(15)
                return "ok"
            except Exception as exc:  # noqa: BLE001 - the KafkaException is the result
                return exc.args[0].name()

        assert differential(sides, client) == (
            "ok" if user == "alice" else "TOPIC_AUTHORIZATION_FAILED"
        )


def test_alter_configs_checks_before_authorization(sides: list[Side]) -> None:
    """The broker's pre-checks answer 42 before any authorization, to carol (no ACL) too: a
    resource named twice (every occurrence), a key named twice, a null value (legacy API, or
    an incremental SET), an unknown resource type; BROKER_LOGGER is not alterable through
    the legacy API."""
    base = scenario_name("acp")
    topic = f"{base}-t"
    for side in sides:
        ensure_topics(side, topic)
    set_acls(sides, [acl(ALICE, "ALTER_CONFIGS", "TOPIC", topic)])
    for user in ("carol", "alice"):
        answer = differential(
            sides,
            incremental(
                user,
                1,
                [
                    (TOPIC, topic, [("retention.ms", SET, "1000")]),
                    (TOPIC, topic, [("retention.ms", SET, "2000")]),
                    (
                        TOPIC,
                        f"{base}-keys",
                        [("retention.ms", SET, "1"), ("retention.ms", SET, "2")],
                    ),
                    (TOPIC, f"{base}-null", [("retention.ms", SET, None)]),
                    (99, "x", [("a", SET, "b")]),
                ],
                validate_only=True,
            ),
        )
        assert set(resource_codes(answer, "responses").values()) == {"invalid_request"}
        answer = differential(
            sides,
            alter(
                user,
                2,
                [
                    (TOPIC, f"{base}-null", {"retention.ms": None}),
                    (BROKER_LOGGER, "1", {"root": "INFO"}),
                ],
                validate_only=True,
            ),
        )
        assert set(resource_codes(answer, "responses").values()) == {"invalid_request"}
