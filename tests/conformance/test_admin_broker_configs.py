"""Differential scenarios: configs of BROKER and BROKER_LOGGER resources (DESCRIBE_CONFIGS /
ALTER_CONFIGS on the cluster), and the broker's validation that precedes authorization.

The two brokers differ in their security settings (the referee has SASL listeners and an
authorizer, the upstream has neither), so steps compare error codes and a chosen set of keys
both brokers share, never the security ones. Changes are validate-only: the session's brokers
stay as they are.
"""

from __future__ import annotations

import pytest

from tests.support.conformance.admin_steps import (
    ALICE,
    BOB,
    CAROL,
    CLUSTER,
    acl,
    ensure_topics,
    per_side,
    set_acls,
)
from tests.support.conformance.config_steps import (
    BROKER,
    BROKER_LOGGER,
    SET,
    SHARED_BROKER_KEYS,
    TOPIC,
    alter,
    broker_config,
    describe,
    incremental,
    resource_codes,
    topic_config,
)
from tests.support.conformance.harness import Side, differential, scenario_name

pytestmark = pytest.mark.kafka


def test_describe_broker_configs(sides: list[Side]) -> None:
    """BROKER and BROKER_LOGGER resources need DESCRIBE_CONFIGS on the cluster (31 with
    ``Errors.message()`` otherwise); the broker's shared keys read the same on both sides."""
    set_acls(
        sides,
        [
            acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER),
            acl(BOB, "ALTER_CONFIGS", "CLUSTER", CLUSTER),
            acl(CAROL, "DESCRIBE", "CLUSTER", CLUSTER),
        ],
    )
    resources = [
        (BROKER, "1", SHARED_BROKER_KEYS),
        (BROKER, "", SHARED_BROKER_KEYS),
        (BROKER_LOGGER, "1", ["root"]),
    ]
    for version in (1, 4):
        for user in ("alice", "bob", "carol"):
            answer = differential(sides, describe(user, version, resources, synonyms=True))
            expected = "cluster_authorization_failed" if user == "carol" else "none"
            assert set(resource_codes(answer).values()) == {expected}
            if user == "alice":
                broker = answer["results"][1]  # "1"; the cluster default "" has none set
                assert sorted(c["name"] for c in broker["configs"]) == sorted(SHARED_BROKER_KEYS)


def test_describe_broker_address_configs(sides: list[Side]) -> None:
    """deviation: broker configs that carry broker addresses (``listeners``,
    ``advertised.listeners``, ``controller.quorum.voters``, …). Kafka returns their values
    to any principal with DESCRIBE_CONFIGS on the cluster; kafkaguard returns them as Kafka
    returns a sensitive config — value null, ``is_sensitive`` true, synonyms' values null —
    because clients never see a real broker address through it."""
    set_acls(sides, [acl(ALICE, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER)])
    keys = ["listeners", "advertised.listeners", "controller.quorum.voters"]
    answers = per_side(sides, describe("alice", 4, [(BROKER, "1", keys)], synonyms=True))
    for name, answer in answers.items():
        (result,) = answer["results"]
        assert result["error_code"] == "none"
        configs = {c["name"]: c for c in result["configs"]}
        assert sorted(configs) == sorted(keys), name
        for config in configs.values():
            if name == "referee":
                assert "127.0.0.1:" in config["value"] and not config["is_sensitive"]
            else:
                assert config["value"] is None and config["is_sensitive"]
                assert all(s["value"] is None for s in config["synonyms"])


def test_alter_broker_configs(sides: list[Side]) -> None:
    """BROKER (one broker, or the cluster default ``""``) and BROKER_LOGGER need ALTER_CONFIGS
    on the cluster; 31 otherwise. validate_only, so the shared brokers stay as they are."""
    set_acls(
        sides,
        [
            acl(ALICE, "ALTER_CONFIGS", "CLUSTER", CLUSTER),
            acl(BOB, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER),
        ],
    )
    setting = [("log.cleaner.threads", SET, "1")]
    for user, code in (("alice", "none"), ("bob", "cluster_authorization_failed")):
        answer = differential(
            sides,
            incremental(
                user,
                1,
                [
                    (BROKER, "1", setting),
                    (BROKER, "", setting),
                    (BROKER_LOGGER, "1", [("kafka.server.KafkaApis", SET, "INFO")]),
                ],
                validate_only=True,
            ),
        )
        assert set(resource_codes(answer, "responses").values()) == {code}
        answer = differential(
            sides,
            # Legacy: replaces every dynamic config of the resource; for the cluster default
            # that would drop min.insync.replicas, which Kafka refuses (40) while ELR is on.
            alter(user, 0, [(BROKER, "1", {"log.cleaner.threads": "1"})], validate_only=True),
        )
        assert set(resource_codes(answer, "responses").values()) == {code}
    # An unknown logger or an invalid level: the broker's answer for alice, 31 for bob.
    for user in ("alice", "bob"):
        differential(
            sides,
            incremental(
                user,
                0,
                [(BROKER_LOGGER, "1", [("kafka.server.KafkaApis", SET, "LOUD")])],
                validate_only=True,
            ),
        )


def test_alter_broker_configs_validated_before_authorization(sides: list[Side]) -> None:
    """The broker validates a BROKER resource (its node id, the change itself) before the
    controller authorizes it: a principal without ALTER_CONFIGS on the cluster gets the 42
    of an invalid one, and 31 for a valid one — which changes nothing, validate-only or not."""
    set_acls(sides, [])
    for validate_only in (True, False):
        for resources in (
            [(BROKER, "7", [("log.cleaner.threads", SET, "1")])],
            [(BROKER, "1", [("log.cleaner.threads", SET, "many")])],
            [(BROKER, "not-a-number", [("log.cleaner.threads", SET, "1")])],
            [(BROKER, "1", [("log.cleaner.threads", 9, "1")])],
            [(BROKER, "1", [("log.cleaner.threads", SET, "1")])],
            [(BROKER, "", [("log.cleaner.threads", SET, "1")])],
        ):
            answer = differential(
                sides, incremental("carol", 1, resources, validate_only=validate_only)
            )
            (result,) = answer["responses"]
            valid = resources[0][1] in ("1", "") and resources[0][2][0][1:] == (SET, "1")
            assert result["error_code"] == (
                "cluster_authorization_failed" if valid else "invalid_request"
            )
        answer = differential(
            sides,
            alter(
                "carol",
                2,
                [(BROKER, "7", {"log.cleaner.threads": "1"})],
                validate_only=validate_only,
            ),
        )
        assert resource_codes(answer, "responses") == {(BROKER, "7"): "invalid_request"}
    differential(sides, lambda side: broker_config(side, "log.cleaner.threads"))


def test_alter_broker_configs_mixed_with_applied_changes(sides: list[Side]) -> None:
    """A request that applies an authorized change (a topic config) and also names a BROKER
    resource the principal may not alter: Kafka validates that resource before authorizing
    it (42 for a wrong node id, else 31) and applies the topic change. kafkaguard has the
    broker validate the BROKER resource in a validate-only question of its own first, then
    forwards the topic change."""
    base = scenario_name("acm")
    topic = f"{base}-t"
    for side in sides:
        ensure_topics(side, topic)
    set_acls(sides, [acl(ALICE, "ALTER_CONFIGS", "TOPIC", topic)])
    resources = [
        (TOPIC, topic, [("retention.ms", SET, "7200000")]),
        (BROKER, "7", [("log.cleaner.threads", SET, "1")]),
    ]
    answer = differential(sides, incremental("alice", 1, resources, validate_only=True))
    assert resource_codes(answer, "responses") == {
        (TOPIC, topic): "none",
        (BROKER, "7"): "invalid_request",
    }
    answer = differential(sides, incremental("alice", 1, resources))
    assert resource_codes(answer, "responses") == {
        (TOPIC, topic): "none",
        (BROKER, "7"): "invalid_request",
    }
    valid_broker = [resources[0], (BROKER, "1", [("log.cleaner.threads", SET, "1")])]
    answer = differential(sides, incremental("alice", 1, valid_broker))
    assert resource_codes(answer, "responses") == {
        (TOPIC, topic): "none",
        (BROKER, "1"): "cluster_authorization_failed",
    }
    value = differential(sides, lambda side: topic_config(side, topic, "retention.ms"), settle_s=10)
    assert value[0] == "7200000"
