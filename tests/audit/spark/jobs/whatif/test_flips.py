"""``whatif``: the flips of a proposed ACL set both ways, with counts, asserted exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.jobs.whatif.flips import FlipCount, flips, replay, summarize
from kafkaguard.audit.spark.runtime.replay import AuthorizerSpec, Policy
from kafkaguard.audit.spark.trail.source import read_audit
from kafkaguard.policy.config import AuthorizerConfig
from kafkaguard.policy.model import acl_binding
from tests.support.analyze_data import GROUPS_TRAIL, write_audit
from tests.support.replay_data import CURRENT, Op, R

pytestmark = pytest.mark.spark


def test_whatif_flips_both_ways_with_counts(spark: SparkSession, replay_trail: str) -> None:
    proposed = [b for b in CURRENT if b.entry.operation != Op.WRITE] + [
        acl_binding(R.TOPIC, "orders", "User:dave", Op.READ)
    ]
    spec = AuthorizerSpec.of(AuthorizerConfig(super_users=frozenset({"User:admin"})))
    replayed = replay(read_audit(spark, replay_trail), Policy.of(proposed, spec, "test")).cache()
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


def test_a_group_acl_set_is_judged_with_each_members_groups(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The current ACLs are the users' (all allowed); the candidate grants ``orders`` to
    Group:eng alone: its members' writes stay allowed, carol (in no group) and alice's READ
    of ``audit`` would break."""
    trail = write_audit(tmp_path, GROUPS_TRAIL)
    proposed = [acl_binding(R.TOPIC, "orders", "Group:eng", Op.WRITE)]
    spec = AuthorizerSpec.of(AuthorizerConfig(super_users=frozenset({"User:root"})))
    replayed = replay(read_audit(spark, str(trail)), Policy.of(proposed, spec, "test"))
    assertDataFrameEqual(
        flips(replayed).select("direction", "principal", "groups", "resource_name", "count"),
        [
            Row("ALLOWED->DENIED", "User:alice", ["Group:eng"], "audit", 1),
            Row("ALLOWED->DENIED", "User:carol", [], "orders", 1),
        ],
        checkRowOrder=True,
    )
    kept = replayed.where("resource_name = 'orders' AND principal != 'User:carol'")
    assert {(r.principal, r.predicted, r.deciding_acl) for r in kept.collect()} == {
        (p, "ALLOWED", "ALLOW WRITE on Topic:LITERAL:orders for Group:eng from host *")
        for p in ("User:alice", "User:bob")
    }


def test_a_printed_flip_names_the_members_groups(spark: SparkSession, tmp_path: Path) -> None:
    """The printed flips, as the groups test's tables: a member's flip names its groups (its
    request is another one than the same principal's without them), one without groups none."""
    trail = write_audit(tmp_path / "trail", GROUPS_TRAIL)
    acls = tmp_path / "proposed.yaml"
    acls.write_text(
        "version: 1\nacls:\n"
        '- {"principal": "Group:eng", "host": "*", "operation": "WRITE", "permission": "ALLOW",'
        ' "resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders"}\n',
        encoding="utf-8",
    )
    lines: list[str] = []
    args = cli.build_parser().parse_args(
        ["analyze", "whatif", "--input", str(trail), "--acls", str(acls)]
    )
    assert analyze_main.run(args, spark, lines.append) == 0
    assert "  ALLOWED->DENIED x1: User:alice [Group:eng] READ TOPIC:audit" in "\n".join(lines)
    assert "  ALLOWED->DENIED x1: User:carol WRITE TOPIC:orders" in "\n".join(lines)
