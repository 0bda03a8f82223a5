"""``unused``: which ACLs of the current set matched the window's decisions, asserted exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.events import AuditEvent
from kafkaguard.audit.spark.jobs.unused.usage import acl_usage, unused_acls
from kafkaguard.audit.spark.runtime.replay import AuthorizerSpec, Policy
from kafkaguard.audit.spark.trail.source import read_audit
from kafkaguard.policy.explain import acl_json
from kafkaguard.policy.model import AclOperation as Op
from kafkaguard.policy.model import ResourceType as R
from kafkaguard.policy.model import acl_binding
from tests.support.analyze_data import GROUPS_TRAIL, rec, write_audit
from tests.support.replay_data import CURRENT

pytestmark = pytest.mark.spark


def test_unused_acls(spark: SparkSession, replay_trail: str) -> None:
    policy = Policy.of(CURRENT, AuthorizerSpec(), "test")
    usage = acl_usage(read_audit(spark, replay_trail), policy)
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
    # No Group: ACL: nothing counted, and no count claimed.
    assert {r.recorded_decisions for r in usage.select("recorded_decisions").collect()} == {None}


def test_group_acls_used_by_a_members_request_or_named_as_deciding(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A Group: ACL is matched by a member's request (replayed holding the groups its record
    names) or used where a record names it as the deciding ACL; the others are unused, like
    user ACLs."""
    legacy = acl_binding(R.TOPIC, "old", "Group:legacy", Op.READ)
    named = rec("2026-11-22T12:00:00.000Z", "User:dave", "READ", "TOPIC", "old")
    named = AuditEvent(**{**named.to_dict(), "acl": acl_json(legacy)})  # type: ignore[arg-type]
    trail = write_audit(tmp_path, [*GROUPS_TRAIL, named])
    acls = [
        acl_binding(R.TOPIC, "orders", "Group:eng", Op.WRITE),  # alice's and bob's writes
        acl_binding(R.TOPIC, "audit", "Group:oncall", Op.READ),  # alice is no oncall member
        acl_binding(R.TOPIC, "orders", "Group:ops", Op.WRITE),  # nobody is in ops
        legacy,  # no member's request matches it, but a record names it
        acl_binding(R.TOPIC, "orders", "User:carol", Op.WRITE),
    ]
    policy = Policy.of(acls, AuthorizerSpec(), "test")
    usage = acl_usage(read_audit(spark, str(trail)), policy)
    assertDataFrameEqual(
        usage.select("principal", "resource_name", "matched_decisions", "decided_decisions",
                     "recorded_decisions"),
        [
            Row("Group:eng", "orders", 5, 5, 0),
            Row("Group:legacy", "old", 0, 0, 1),
            Row("Group:oncall", "audit", 0, 0, 0),
            Row("Group:ops", "orders", 0, 0, 0),
            Row("User:carol", "orders", 1, 1, None),  # counted for Group: ACLs only
        ],
    )  # fmt: skip
    unused = [policy.acls[r.acl_index].entry.principal for r in unused_acls(usage).collect()]
    assert sorted(unused) == ["Group:oncall", "Group:ops"]
