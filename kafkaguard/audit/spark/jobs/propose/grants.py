"""``kafkaguard analyze propose``: from observed access to a reviewed least-privilege ACL set.

Spark reduces the window to distinct grants (principal, host, operation, resource) and enforced
refusals; :mod:`kafkaguard.audit.spark.solver.proposal` turns those (few) rows into ACLs on the
driver.

Input rows: every ALLOWED decision except those of super users (they need no ACL), and every
would-deny of a ``log_only`` listener (the access a rollout must keep working). DENIED
decisions of enforcing listeners are not proposed; they block prefix consolidation instead.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from kafkaguard.audit.spark.solver.proposal import (
    Members,
    ObservedGrant,
    ProposedAcl,
    Refusal,
    build_proposal,
    group_proposal,
    principal_roles,
)
from kafkaguard.audit.spark.trail.facts import host_ranks, to_facts
from kafkaguard.policy.model import (
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger("kafkaguard.analyze")

GRANT_KEYS = ("principal", "host", "operation", "resource_type", "resource_name")


def observed_grants(events: DataFrame, *, exact_hosts: bool = False) -> DataFrame:
    """Distinct proposable accesses with their decision counts, from records or, unless
    ``exact_hosts``, hourly or daily facts (:mod:`kafkaguard.audit.spark.trail.facts`: they
    keep no client address but the smallest); unordered (:func:`sorted_grants` for a table).

    Columns: principal, host (``*`` unless ``exact_hosts``), operation, resource_type,
    resource_name, decisions, would_deny, deny_acl (bool), sample_host, first_seen, last_seen.

    One ``HashAggregate`` (issue 36): Spark hashes only fixed-width aggregation buffers, and
    ``min`` of a string is not one, so the smallest client address is taken as the smallest
    *rank* of it in the sorted distinct addresses
    (:func:`kafkaguard.audit.spark.trail.facts.host_ranks`, a small broadcast table) and
    turned back into the address after the aggregation. With ``min(sample_host)``
    Spark planned a ``SortAggregate``, sorting every record on keys whose sort prefix
    (``User:...``) decides nothing.
    """
    rows = to_facts(events)
    if exact_hosts:
        if "client_host" not in events.columns:
            raise ValueError("exact hosts need the records: hourly facts keep no client address")
        rows = rows.withColumn("host", F.col("sample_host"))
    else:
        rows = rows.withColumn("host", F.lit(WILDCARD_HOST))
    proposable = rows.where(
        ((F.col("result") == "ALLOWED") & (F.coalesce(F.col("reason"), F.lit("")) != "SuperUser"))
        | F.col("would_deny")
    )
    ranks = host_ranks(proposable)
    ranked = proposable.join(F.broadcast(ranks), "sample_host", "left")
    grants = ranked.groupBy(*GRANT_KEYS).agg(
        F.sum("count").alias("decisions"),
        F.sum(F.when(F.col("would_deny"), F.col("count")).otherwise(0)).alias("would_deny"),
        F.max(F.col("would_deny") & (F.col("reason") == "DenyAcl")).alias("deny_acl"),
        F.min("host_rank").alias("host_rank"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )
    return grants.join(F.broadcast(ranks), "host_rank", "left").select(
        *GRANT_KEYS,
        "decisions",
        "would_deny",
        "deny_acl",
        "sample_host",
        "first_seen",
        "last_seen",
    )


def sorted_grants(grants: DataFrame) -> DataFrame:
    """:func:`observed_grants` in key order, for the ``observed_grants`` table (a global sort
    in Spark only where a table is written, issue 36)."""
    return grants.orderBy(*GRANT_KEYS)


def _grant_order(row: dict[str, Any]) -> tuple[tuple[bool, str], ...]:
    """Spark's ascending order of the grant keys: nulls first, strings by code point."""
    return tuple((row[k] is not None, row[k] or "") for k in GRANT_KEYS)


def enforced_refusals(events: DataFrame) -> DataFrame:
    """Distinct (principal, operation, resource) an enforcing listener refused (from records
    or hourly or daily facts)."""
    return (
        to_facts(events)
        .where((F.col("result") == "DENIED") & ~F.col("would_deny"))
        .select("principal", "operation", "resource_type", "resource_name")
        .distinct()
    )


def _grant(row: dict[str, Any]) -> ObservedGrant | None:
    """A collected row as a grant, or None (logged) when it cannot be an ACL: a principal
    without ``Type:``, a host that is no IP address, a name outside Kafka's vocabulary."""
    try:
        KafkaPrincipal.parse(row["principal"])
        sample = row["sample_host"] or ""
        ipaddress.ip_address(sample)
        if row["host"] != WILDCARD_HOST:
            ipaddress.ip_address(row["host"])
        grant = ObservedGrant(
            principal=row["principal"],
            host=row["host"],
            operation=AclOperation.parse(row["operation"]),
            resource_type=ResourceType.parse(row["resource_type"]),
            resource_name=row["resource_name"],
            decisions=int(row["decisions"]),
            sample_host=sample,
            deny_acl=bool(row["deny_acl"]),
        )
        entry = AccessControlEntry(
            grant.principal, grant.host, grant.operation, AclPermissionType.ALLOW
        )
        AclBinding(ResourcePattern(grant.resource_type, grant.resource_name), entry).validate()
        return grant
    except (ValueError, TypeError) as exc:
        log.warning("skipping an audit tuple that cannot become an ACL (%s): %s", exc, row)
        return None


def _refusal(row: dict[str, Any]) -> Refusal | None:
    try:
        return Refusal(
            row["principal"],
            AclOperation.parse(row["operation"]),
            ResourceType.parse(row["resource_type"]),
            row["resource_name"],
        )
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class Proposal:
    acls: list[ProposedAcl]
    grants: DataFrame
    skipped: int


def propose(
    events: DataFrame,
    *,
    exact_hosts: bool = False,
    prefix_min_topics: int = 0,
    members: Members | None = None,
) -> Proposal:
    """The proposal from the window's observed grants, streamed to the driver (one partition
    at a time: ``toLocalIterator``) and ordered there, not cached in Spark (issue 36).

    ``members``: the group membership seen in the window
    (:func:`kafkaguard.audit.spark.trail.facts.read_membership`): with it, ``Group:`` ACLs
    where every observed member of a group holds the same ACL
    (:func:`~kafkaguard.audit.spark.solver.proposal.group_proposal`)."""
    grants_df = observed_grants(events, exact_hosts=exact_hosts)
    keyed, skipped = [], 0
    for r in grants_df.toLocalIterator(prefetchPartitions=True):
        row = r.asDict()
        grant = _grant(row)
        if grant is None:
            skipped += 1
        else:
            keyed.append((_grant_order(row), grant))
    keyed.sort(key=lambda pair: pair[0])
    grants = [grant for _, grant in keyed]
    refusals: list[Refusal] = []
    if prefix_min_topics > 0:
        found = (_refusal(r.asDict()) for r in enforced_refusals(events).collect())
        refusals = [r for r in found if r is not None]
    acls = build_proposal(grants, refusals, prefix_min_topics)
    if members is not None:
        acls = group_proposal(acls, grants, members)
    return Proposal(acls, sorted_grants(grants_df), skipped)


PROPOSAL_SCHEMA = StructType(
    [
        StructField("principal", StringType(), False),
        StructField("host", StringType(), False),
        StructField("operation", StringType(), False),
        StructField("permission", StringType(), False),
        StructField("resource_type", StringType(), False),
        StructField("pattern_type", StringType(), False),
        StructField("resource_name", StringType(), False),
        StructField("decisions", LongType(), False),
        StructField("covers", ArrayType(StringType(), False), False),
        StructField("notes", ArrayType(StringType(), False), False),
    ]
)
ROLES_SCHEMA = StructType(
    [
        StructField("principal", StringType(), False),
        StructField("roles", ArrayType(StringType(), False), False),
    ]
)


def proposal_tables(spark: SparkSession, proposal: Proposal) -> dict[str, DataFrame]:
    """The proposal as result tables (the ACL file and commands are written separately)."""
    rows = []
    for a in proposal.acls:
        p, e = a.binding.pattern, a.binding.entry
        rows.append(
            (
                e.principal,
                e.host,
                e.operation.name,
                e.permission_type.name,
                p.resource_type.name,
                p.pattern_type.name,
                p.name,
                a.decisions,
                list(a.covers),
                list(a.notes),
            )
        )
    roles: Sequence[tuple[str, list[str]]] = list(principal_roles(proposal.acls).items())
    return {
        "proposed_acls": spark.createDataFrame(rows, PROPOSAL_SCHEMA),
        "principal_roles": spark.createDataFrame(roles, ROLES_SCHEMA),
        "observed_grants": proposal.grants,
    }
