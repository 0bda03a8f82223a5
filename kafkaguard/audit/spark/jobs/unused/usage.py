"""``kafkaguard analyze unused``: ACL bindings in the current store that matched no decision.

"Matched" is :attr:`kafkaguard.policy.explain.Explanation.matching_acls`: the ACL applies to the
decision's principal, host and resource and its operation covers the requested one (DENY and ALLOW
alike), evaluated by :mod:`kafkaguard.audit.spark.runtime.replay` with the proxy's own authorizer.
A ``Group:`` ACL is matched by a member's request (each decision is replayed holding the groups its
record names), and is used too where a record names it as the deciding ACL (``acl``), whatever the
replay's settings say: the trail shows it decided.
An unused ACL is a candidate for removal, not proof: it may serve a monthly job outside the window,
a super user's request (super users never consult ACLs), or a decision that is not audited (KIP-430
probes, "list all" filtering) unless the proxy ran with ``audit.include_unlogged``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from kafkaguard.audit.spark.runtime.cache import cached
from kafkaguard.audit.spark.runtime.replay import Policy, decision_tuples, evaluate

ACL_COLUMNS = (
    "principal",
    "host",
    "operation",
    "permission",
    "resource_type",
    "pattern_type",
    "resource_name",
)
ACL_TABLE_SCHEMA = StructType(
    [StructField("acl_index", IntegerType(), False)]
    + [StructField(c, StringType(), False) for c in ACL_COLUMNS]
)


def acl_table(events: DataFrame, policy: Policy) -> DataFrame:
    rows = [
        (
            i,
            b.entry.principal,
            b.entry.host,
            b.entry.operation.name,
            b.entry.permission_type.name,
            b.pattern.resource_type.name,
            b.pattern.pattern_type.name,
            b.pattern.name,
        )
        for i, b in enumerate(policy.acls)
    ]
    return events.sparkSession.createDataFrame(rows, ACL_TABLE_SCHEMA)


GROUP_PREFIX = "Group:"


def recorded_group_acls(events: DataFrame, acls: DataFrame) -> DataFrame:
    """(acl_index, recorded_decisions): the decisions whose record names a ``Group:`` ACL of
    ``acls`` (:func:`acl_table`) as the deciding one."""
    recorded = (
        events.where(F.col("acl.principal").startswith(GROUP_PREFIX))
        .groupBy(*(F.col(f"acl.{key}").alias(key) for key in _RECORD_ACL_KEYS))
        .agg(F.sum("count").alias("recorded_decisions"))
    )
    named = recorded.withColumnRenamed("permission_type", "permission")
    return acls.join(named, list(ACL_COLUMNS)).select("acl_index", "recorded_decisions")


_RECORD_ACL_KEYS = (
    "principal",
    "host",
    "operation",
    "permission_type",
    "resource_type",
    "pattern_type",
    "resource_name",
)
"""The keys of a record's ``acl`` (:data:`kafkaguard.audit.events.ACL_FIELDS`) in
:data:`ACL_COLUMNS`' order."""


def acl_usage(events: DataFrame, policy: Policy) -> DataFrame:
    """Every ACL with the decisions (and distinct tuples) it matched and it decided, and for a
    ``Group:`` ACL the decisions whose record names it (``recorded_decisions``; null for a
    user ACL, whose records are not counted)."""
    replayed = cached(evaluate(decision_tuples(events, with_result=False), policy))
    matched = (
        replayed.select(F.explode("matching_acl_indexes").alias("acl_index"), "count")
        .groupBy("acl_index")
        .agg(F.sum("count").alias("matched_decisions"), F.count("*").alias("matched_tuples"))
    )
    decided = (
        replayed.where(F.col("deciding_acl_index").isNotNull())
        .groupBy(F.col("deciding_acl_index").alias("acl_index"))
        .agg(F.sum("count").alias("decided_decisions"))
    )
    acls = acl_table(events, policy)
    usage = acls.join(matched, "acl_index", "left").join(decided, "acl_index", "left")
    counts = ["matched_decisions", "matched_tuples", "decided_decisions"]
    usage = usage.fillna(0, counts)
    if any(b.entry.principal.startswith(GROUP_PREFIX) for b in policy.acls):
        recorded = usage.join(recorded_group_acls(events, acls), "acl_index", "left")
        # Counted for Group: ACLs only: a user ACL's is null (not counted), never a 0 that
        # would say no record names it.
        usage = recorded.withColumn(
            "recorded_decisions",
            F.when(
                F.col("principal").startswith(GROUP_PREFIX),
                F.coalesce(F.col("recorded_decisions"), F.lit(0).cast(LongType())),
            ),
        )
    else:  # no Group: ACL: no pass over the records for it
        usage = usage.withColumn("recorded_decisions", F.lit(None).cast(LongType()))
    return usage.orderBy("acl_index")


def unused_acls(usage: DataFrame) -> DataFrame:
    return (
        usage.where(
            (F.col("matched_decisions") == 0)
            & (F.coalesce(F.col("recorded_decisions"), F.lit(0)) == 0)
        )
        .select("acl_index", *ACL_COLUMNS)
        .orderBy("acl_index")
    )
