"""The replay ``unused`` and ``whatif`` share: decision tuples decided by the proxy's own
authorizer, asserted exactly (the jobs' own results: jobs/unused/, jobs/whatif/)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.spark.runtime.replay import AuthorizerSpec, Policy, decision_tuples, evaluate
from kafkaguard.audit.spark.trail.source import read_audit
from kafkaguard.policy.config import AuthorizerConfig, ListenerPolicy
from tests.support.analyze_data import rec, write_audit
from tests.support.replay_data import T

pytestmark = pytest.mark.spark


def test_decision_tuples_sum_counts(spark: SparkSession, replay_trail: str) -> None:
    tuples = decision_tuples(read_audit(spark, replay_trail), with_result=True).where(
        "principal = 'User:dave'"
    )
    assertDataFrameEqual(
        tuples.select("principal", "client_host", "operation", "result", "count"),
        [Row("User:dave", "10.0.0.1", "READ", "DENIED", 4)],
    )


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
