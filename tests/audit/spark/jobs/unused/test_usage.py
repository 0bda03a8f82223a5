"""``unused``: which ACLs of the current set matched the window's decisions, asserted exactly."""

from __future__ import annotations

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.spark.jobs.unused.usage import acl_usage, unused_acls
from kafkaguard.audit.spark.runtime.replay import AuthorizerSpec, Policy
from kafkaguard.audit.spark.trail.source import read_audit
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
