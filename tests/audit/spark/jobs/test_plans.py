"""The physical plans of ``propose`` and ``report`` (issue 36): hash aggregations only, no
global sort and nothing cached, read from Spark's own ``QueryExecution``."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import DataFrame, SparkSession

from kafkaguard.audit.spark.jobs.propose.grants import observed_grants, propose
from kafkaguard.audit.spark.jobs.report.cube import build_report, hourly_totals, window_cube
from kafkaguard.audit.spark.trail.source import TimeRange, read_audit
from tests.support.analyze_data import rec, write_audit

pytestmark = pytest.mark.spark

T = "2026-11-22T{:02d}:10:00.000Z"
TRAIL = [
    rec(T.format(10), "User:alice", "WRITE", "TOPIC", "orders", count=5, host="10.0.0.9"),
    rec(T.format(10), "User:alice", "WRITE", "TOPIC", "orders", host="10.0.0.10"),
    rec(T.format(11), "User:bob", "READ", "TOPIC", "orders", "DENIED", mode="log_only"),
    rec(T.format(12), "User:carol", "READ", "GROUP", "g1"),
]


@pytest.fixture(scope="module")
def events(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> DataFrame:
    return read_audit(spark, str(write_audit(tmp_path_factory.mktemp("trail"), TRAIL)))


def _plan(df: DataFrame) -> str:
    """The executed physical plan, as ``explain`` prints it."""
    return str(df._jdf.queryExecution().executedPlan().toString())


def _operators(plan: str) -> set[str]:
    return set(re.findall(r"^[\s:+\-*()0-9]*([A-Z][A-Za-z]+)", plan, re.MULTILINE))


@pytest.mark.parametrize("exact_hosts", [False, True])
def test_propose_hashes_and_does_not_sort(events: DataFrame, exact_hosts: bool) -> None:
    operators = _operators(_plan(observed_grants(events, exact_hosts=exact_hosts)))
    assert "HashAggregate" in operators
    assert "SortAggregate" not in operators  # min(sample_host) made Spark sort every record
    assert "Sort" not in operators


def test_propose_keeps_the_smallest_host_and_caches_nothing(
    spark: SparkSession, events: DataFrame
) -> None:
    spark.catalog.clearCache()  # what other tests of the session cached is not this job's
    grants = {r["principal"]: r["sample_host"] for r in observed_grants(events).collect()}
    assert grants["User:alice"] == "10.0.0.10"  # Spark's string order, as min() had it
    made = propose(events)
    principals = [a.binding.entry.principal for a in made.acls]
    assert principals == ["User:alice", "User:bob", "User:carol"]
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_report_is_two_hash_aggregations(spark: SparkSession, events: DataFrame) -> None:
    spark.catalog.clearCache()  # what other tests of the session cached is not this job's
    for df in (window_cube(events), hourly_totals(events)):
        operators = _operators(_plan(df))
        assert "HashAggregate" in operators
        assert not operators & {"SortAggregate", "Sort", "InMemoryTableScan"}
    built = build_report(events, TimeRange())
    assert built.summary.records == len(TRAIL)
    assert [r["principal"] for r in built.rows["by_principal"]][0] == "User:alice"
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()
