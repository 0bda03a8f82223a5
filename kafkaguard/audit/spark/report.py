"""``kafkaguard analyze report``: who was allowed and denied what, when, through which listener.

Theory of operation: one scan of the audit records builds the *hourly cube* (decisions summed
per hour × principal × listener × operation × resource, split into allowed / denied /
would-deny, with first and last time seen); every other table is a roll-up of the cube, so
10 million records are read once. Counts always sum the records' ``count`` (an aggregate line
stands for ``count`` decisions), never count rows.

Columns: ``allowed`` and ``denied`` are the authorizer's results; ``would_deny`` is the part
of ``denied`` that a ``log_only`` listener forwarded anyway (so ``denied - would_deny`` were
really refused).

"New principals" are those whose first decision in the window is at or after a cut-off:
``--baseline-until`` when given, else the middle of the window (``--since``/``--until``, or the
first and last record when those are open). A principal first seen in the second half of the
window did not appear during the first half, which is the best a single window can tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kafkaguard.audit.spark.schema import EVENT_TIME
from kafkaguard.audit.spark.source import TimeRange

CUBE_DIMENSIONS = (
    "principal",
    "listener",
    "security_protocol",
    "operation",
    "resource_type",
    "resource_name",
)
OUTCOMES = ("allowed", "denied", "would_deny")


def _outcome_sums() -> list[Column]:
    count = F.col("count")
    return [
        F.sum(F.when(F.col("result") == "ALLOWED", count).otherwise(0)).alias("allowed"),
        F.sum(F.when(F.col("result") == "DENIED", count).otherwise(0)).alias("denied"),
        F.sum(F.when(F.col("would_deny"), count).otherwise(0)).alias("would_deny"),
    ]


def hourly_cube(events: DataFrame) -> DataFrame:
    """Decisions per hour and per (principal, listener, protocol, operation, resource)."""
    return events.groupBy(
        F.date_trunc("hour", F.col(EVENT_TIME)).alias("hour_start"), *CUBE_DIMENSIONS
    ).agg(
        *_outcome_sums(),
        F.min(EVENT_TIME).alias("first_seen"),
        F.max(EVENT_TIME).alias("last_seen"),
    )


def _rollup(cube: DataFrame, keys: Sequence[str]) -> DataFrame:
    return cube.groupBy(*keys).agg(
        *(F.sum(name).alias(name) for name in OUTCOMES),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def decisions_over_time(cube: DataFrame) -> DataFrame:
    """Per hour: allowed, denied, would_deny (hours without decisions have no row)."""
    return (
        cube.groupBy("hour_start")
        .agg(*(F.sum(name).alias(name) for name in OUTCOMES))
        .orderBy("hour_start")
    )


def by_dimension(cube: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Totals over the window per ``keys``, with ``total`` and first/last seen."""
    return (
        _rollup(cube, keys)
        .withColumn("total", F.col("allowed") + F.col("denied"))
        .select(*keys, *OUTCOMES, "total", "first_seen", "last_seen")
        .orderBy(F.col("total").desc(), *keys)
    )


def top_denied(cube: DataFrame, keys: Sequence[str], n: int) -> DataFrame:
    """The ``n`` keys with the most denied decisions (ties by key, so output is stable)."""
    return (
        cube.groupBy(*keys)
        .agg(F.sum("denied").alias("denied"), F.sum("would_deny").alias("would_deny"))
        .where(F.col("denied") > 0)
        .orderBy(F.col("denied").desc(), *keys)
        .limit(n)
    )


def new_principals(cube: DataFrame, cutoff: datetime | None) -> DataFrame:
    """Principals whose first decision in the window is at or after ``cutoff`` (none when
    there is no cut-off, i.e. an empty window)."""
    is_new = F.col("first_seen") >= F.lit(cutoff) if cutoff is not None else F.lit(False)
    return (
        _rollup(cube, ["principal"])
        .where(is_new)
        .select(
            "principal",
            "first_seen",
            (F.col("allowed") + F.col("denied")).alias("total"),
            "denied",
        )
        .orderBy("first_seen", "principal")
    )


def principal_topic(cube: DataFrame) -> DataFrame:
    """The principal × topic matrix behind the heatmap (topics only)."""
    return (
        cube.where(F.col("resource_type") == "TOPIC")
        .groupBy("principal", F.col("resource_name").alias("topic"))
        .agg(*(F.sum(name).alias(name) for name in OUTCOMES))
        .orderBy("principal", "topic")
    )


@dataclass(frozen=True, slots=True)
class WindowSummary:
    first_event: datetime | None
    last_event: datetime | None
    allowed: int
    denied: int
    would_deny: int
    principals: int


def summarize(cube: DataFrame) -> WindowSummary:
    row = cube.agg(
        F.min("first_seen").alias("first"),
        F.max("last_seen").alias("last"),
        *(F.coalesce(F.sum(name), F.lit(0)).alias(name) for name in OUTCOMES),
        F.countDistinct("principal").alias("principals"),
    ).collect()[0]
    return WindowSummary(
        _utc(row["first"]),
        _utc(row["last"]),
        int(row["allowed"]),
        int(row["denied"]),
        int(row["would_deny"]),
        int(row["principals"]),
    )


def _utc(value: Any) -> datetime | None:
    """Collected timestamps are naive in the driver's zone; make them aware UTC."""
    if value is None:
        return None
    assert isinstance(value, datetime)
    return value.astimezone(UTC) if value.tzinfo is None else value


def new_principal_cutoff(
    window: TimeRange, summary: WindowSummary, baseline_until: datetime | None
) -> datetime | None:
    if baseline_until is not None:
        return baseline_until
    start = window.since or summary.first_event
    end = window.until or summary.last_event
    if start is None or end is None:
        return None
    return start + (end - start) / 2


LARGE_TABLES = ("hourly",)
"""Tables that grow with the input (written in parallel, not as one file)."""


@dataclass(frozen=True, slots=True)
class Report:
    tables: dict[str, DataFrame]
    summary: WindowSummary
    cutoff: datetime | None


def build_report(
    events: DataFrame,
    window: TimeRange,
    *,
    top_n: int = 10,
    baseline_until: datetime | None = None,
) -> Report:
    """Every report table, lazily, from one cached cube."""
    cube = hourly_cube(events).cache()
    summary = summarize(cube)
    cutoff = new_principal_cutoff(window, summary, baseline_until)
    tables = {
        "decisions_over_time": decisions_over_time(cube),
        "by_principal": by_dimension(cube, ["principal"]),
        "by_resource": by_dimension(cube, ["resource_type", "resource_name"]),
        "by_operation": by_dimension(cube, ["operation"]),
        "by_listener": by_dimension(cube, ["listener", "security_protocol"]),
        "top_denied_principals": top_denied(cube, ["principal"], top_n),
        "top_denied_resources": top_denied(cube, ["resource_type", "resource_name"], top_n),
        "principal_topic": principal_topic(cube),
        "new_principals": new_principals(cube, cutoff),
        "hourly": cube.orderBy("hour_start", *CUBE_DIMENSIONS),
    }
    return Report(tables, summary, cutoff)


HEATMAP_LIMIT = 25
"""Principals and topics shown in the heatmap (the busiest); the table has them all."""
_MAX_FILLED_HOURS = 24 * 92


def iso(value: datetime | None) -> str | None:
    """The audit trail's own time format: UTC, milliseconds, ``Z``."""
    utc = _utc(value)
    return (
        None
        if utc is None
        else utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    )


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in df.collect():
        out.append({k: iso(v) if isinstance(v, datetime) else v for k, v in row.asDict().items()})
    return out


def _filled_hours(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hours without decisions as zero rows, so the time axis is linear."""
    if not rows:
        return rows
    by_hour = {r["hour_start"]: r for r in rows}
    first = datetime.fromisoformat(rows[0]["hour_start"])
    last = datetime.fromisoformat(rows[-1]["hour_start"])
    hours = int((last - first).total_seconds() // 3600) + 1
    if hours > _MAX_FILLED_HOURS:
        return rows
    out = []
    for i in range(hours):
        key = iso(first + timedelta(hours=i))
        out.append(by_hour.get(key) or {"hour_start": key, **dict.fromkeys(OUTCOMES, 0)})
    return out


def _heatmap(cells: list[dict[str, Any]]) -> dict[str, Any]:
    def busiest(key: str) -> list[str]:
        totals: dict[str, int] = {}
        for c in cells:
            totals[c[key]] = totals.get(c[key], 0) + c["allowed"] + c["denied"]
        ranked = sorted(totals, key=lambda k: (-totals[k], k))[:HEATMAP_LIMIT]
        return sorted(ranked)

    principals, topics = busiest("principal"), busiest("topic")
    keep_p, keep_t = set(principals), set(topics)
    return {
        "principals": principals,
        "topics": topics,
        "cells": [c for c in cells if c["principal"] in keep_p and c["topic"] in keep_t],
    }


def report_data(report: Report, window: TimeRange, generated_at: datetime) -> dict[str, Any]:
    """What the HTML page shows, as JSON-ready Python values (collected to the driver)."""
    t = report.tables
    s = report.summary
    resources = _rows(t["top_denied_resources"])
    for r in resources:
        r["resource"] = f"{r['resource_type']}:{r['resource_name']}"
    return {
        "generated_at": iso(generated_at),
        "window": {
            "since": iso(window.since),
            "until": iso(window.until),
            "first_event": iso(s.first_event),
            "last_event": iso(s.last_event),
            "new_principal_cutoff": iso(report.cutoff),
        },
        "totals": {
            "allowed": s.allowed,
            "denied": s.denied,
            "would_deny": s.would_deny,
            "principals": s.principals,
        },
        "decisions_over_time": _filled_hours(_rows(t["decisions_over_time"])),
        "top_denied_principals": _rows(t["top_denied_principals"]),
        "top_denied_resources": resources,
        "heatmap": _heatmap(_rows(t["principal_topic"])),
        "new_principals": _rows(t["new_principals"]),
        "by_operation": _rows(t["by_operation"]),
        "by_listener": _rows(t["by_listener"]),
    }
