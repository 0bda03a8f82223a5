"""``unused`` and ``whatif``: replay with the proxy's authorizer, asserted exactly."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.spark.replay import AuthorizerSpec, Policy, decision_tuples, evaluate
from kafkaguard.audit.spark.source import read_audit
from kafkaguard.audit.spark.unused import acl_usage, unused_acls
from kafkaguard.audit.spark.whatif import FlipCount, flips, replay, summarize
from kafkaguard.policy.config import AuthorizerConfig, ListenerPolicy
from kafkaguard.policy.model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_binding,
)
from tests.support.analyze_data import rec, write_audit

pytestmark = pytest.mark.spark

Op, R = AclOperation, ResourceType
DENY = AclPermissionType.DENY
CURRENT = [
    acl_binding(R.TOPIC, "ord", "User:bob", Op.READ, pattern_type=PatternType.PREFIXED),
    acl_binding(R.TOPIC, "orders", "User:alice", Op.READ, DENY),  # never asked: alice only writes
    acl_binding(R.TOPIC, "orders", "User:alice", Op.WRITE),  # also covers DESCRIBE (implied)
    acl_binding(R.TOPIC, "orders", "User:bob", Op.READ, DENY, host="10.0.0.9"),  # other host
    acl_binding(R.TOPIC, "z", "User:zed", Op.READ),
    acl_binding(R.GROUP, "*", "User:*", Op.DESCRIBE),
]
T = "2026-11-22T10:{:02d}:00.000Z"
TRAIL = [
    rec(T.format(1), "User:alice", "WRITE", "TOPIC", "orders", count=3),
    rec(T.format(2), "User:alice", "DESCRIBE", "TOPIC", "orders"),
    rec(T.format(3), "User:bob", "READ", "TOPIC", "orders", count=2),
    rec(T.format(4), "User:carol", "DESCRIBE", "GROUP", "g"),
    rec(T.format(5), "User:dave", "READ", "TOPIC", "orders", "DENIED"),
    rec(T.format(6), "User:dave", "READ", "TOPIC", "orders", "DENIED", count=3),
    rec(T.format(7), "User:admin", "ALTER", "CLUSTER", "kafka-cluster", "DENIED"),
    rec(T.format(8), "User:eve", "READ", "TOPIC", "orders", host="not-an-ip"),
]


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_audit(tmp_path_factory.mktemp("trail"), TRAIL))


def test_decision_tuples_sum_counts(spark: SparkSession, trail: str) -> None:
    tuples = decision_tuples(read_audit(spark, trail), with_result=True).where(
        "principal = 'User:dave'"
    )
    assertDataFrameEqual(
        tuples.select("principal", "client_host", "operation", "result", "count"),
        [Row("User:dave", "10.0.0.1", "READ", "DENIED", 4)],
    )


def test_unused_acls(spark: SparkSession, trail: str) -> None:
    policy = Policy.of(CURRENT, AuthorizerSpec(), "test")
    usage = acl_usage(read_audit(spark, trail), policy)
    assertDataFrameEqual(
        usage.select(
            "principal", "host", "operation", "permission", "pattern_type", "resource_name",
            "matched_decisions", "matched_tuples", "decided_decisions",
        ),
        [
            Row("User:bob", "*", "READ", "ALLOW", "PREFIXED", "ord", 2, 1, 2),
            Row("User:alice", "*", "READ", "DENY", "LITERAL", "orders", 0, 0, 0),
            Row("User:alice", "*", "WRITE", "ALLOW", "LITERAL", "orders", 4, 2, 4),
            Row("User:bob", "10.0.0.9", "READ", "DENY", "LITERAL", "orders", 0, 0, 0),
            Row("User:zed", "*", "READ", "ALLOW", "LITERAL", "z", 0, 0, 0),
            Row("User:*", "*", "DESCRIBE", "ALLOW", "LITERAL", "*", 1, 1, 1),
        ],
        checkRowOrder=True,
    )  # fmt: skip
    assert [r.acl_index for r in unused_acls(usage).collect()] == [1, 3, 4]


def test_whatif_flips_both_ways_with_counts(spark: SparkSession, trail: str) -> None:
    proposed = [b for b in CURRENT if b.entry.operation != Op.WRITE] + [
        acl_binding(R.TOPIC, "orders", "User:dave", Op.READ)
    ]
    spec = AuthorizerSpec.of(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    replayed = replay(read_audit(spark, trail), Policy.of(proposed, spec, "test")).cache()
    flipped = flips(replayed)
    assertDataFrameEqual(
        flipped.select("direction", "principal", "operation", "resource_name", "count", "reason"),
        [
            Row("ALLOWED->DENIED", "User:alice", "DESCRIBE", "orders", 1, "DefaultDeny"),
            Row("ALLOWED->DENIED", "User:alice", "WRITE", "orders", 3, "DefaultDeny"),
            Row("DENIED->ALLOWED", "User:admin", "ALTER", "kafka-cluster", 1, "SuperUser"),
            Row("DENIED->ALLOWED", "User:dave", "READ", "orders", 4, "AllowAcl"),
        ],
        checkRowOrder=True,
    )
    assert summarize(flipped) == [
        FlipCount("ALLOWED->DENIED", 2, 4),
        FlipCount("DENIED->ALLOWED", 2, 5),
    ]
    dave = replayed.where("principal = 'User:dave'").collect()[0]
    assert dave.deciding_acl == "ALLOW READ on Topic:LITERAL:orders for User:dave from host *"
    # A tuple Kafka could not have decided is reported, never guessed.
    [eve] = replayed.where("principal = 'User:eve'").collect()
    assert eve.predicted is None and eve.error.startswith("ValueError")


def test_listener_settings_apply_per_listener(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    trail = write_audit(
        tmp_path_factory.mktemp("listeners"),
        [
            rec(T.format(1), "User:x", "READ", "TOPIC", "free", "DENIED", listener="INTERNAL"),
            rec(T.format(2), "User:x", "READ", "TOPIC", "free", "DENIED", listener="EXTERNAL"),
        ],
    )
    config = AuthorizerConfig(
        listeners=MappingProxyType(
            {"INTERNAL": ListenerPolicy(allow_everyone_if_no_acl_found=True)}
        )
    )
    replayed = evaluate(
        decision_tuples(read_audit(spark, str(trail)), with_result=False),
        Policy.of([], AuthorizerSpec.of(config), "test"),
    )
    assertDataFrameEqual(
        replayed.select("listener", "predicted", "reason"),
        [Row("EXTERNAL", "DENIED", "DefaultDeny"), Row("INTERNAL", "ALLOWED", "DefaultAllow")],
    )


def test_a_pluggable_authorizer_class_is_refused() -> None:
    with pytest.raises(ValueError, match="StandardAuthorizer"):
        AuthorizerSpec.of(AuthorizerConfig(class_path="my.module:Authorizer"))
