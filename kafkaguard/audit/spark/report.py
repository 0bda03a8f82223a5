"""``kafkaguard analyze report``: who was allowed and denied what, when, through which listener.

Theory of operation: one scan of the audit records builds the *hourly cube* (decisions summed
per hour × principal × listener × operation × resource, split into allowed / denied /
would-deny, with first and last time seen); every other table is a roll-up of the cube, so
10 million records are read once. Counts always sum the records' ``count`` (an aggregate line
stands for ``count`` decisions), never count rows.

Time resolution: the over-time chart draws at most :data:`CHART_BARS` bars, so a long window
is shown per 2, 3, 4, 6, 8, 12 or 24 hours, or per days (:func:`bucket_hours`, from the first
and last record). ``decisions_over_time`` and the written cube (table ``hourly``) are kept at
that resolution (column ``hours``: the bucket's width; ``hour_start``: where it starts, in
UTC): a finer cube is more rows to write than anyone looking at the chart reads — for a
quarter, charted per 12 hours, up to 12 times as many.

Fixed costs: each table is computed once. The tables the HTML page shows are small and
cached, so writing them (``--output``) and collecting them for the page share one
computation; the cube table is written as it is, in parallel and unsorted (a global sort of
the one table that grows with the input would be a shuffle that no Parquet reader needs).

Columns: ``allowed`` and ``denied`` are the authorizer's results; ``would_deny`` is the part
of ``denied`` that a ``log_only`` listener forwarded anyway (so ``denied - would_deny`` were
really refused).

"New principals" are those whose first decision in the window is at or after a cut-off; the
*baseline* is the window's start up to the cut-off (:class:`Baseline`). The cut-off is
``--baseline-until``, or ``--baseline-days`` after the window's start, else the middle of the
window (``--since``/``--until``, or the first and last record when those are open). A principal
first seen after the baseline did not appear during it, which is the best a single window can
tell; the page states the baseline, so an empty list is an answer, not a silence.

The report records what it cost: the events (records) it read, and the seconds of each step
(:attr:`Report.timings`), shown on the page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kafkaguard.audit.spark.cache import cached
from kafkaguard.audit.spark.facts import to_facts
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
CHART_BARS: Final = 200
"""Most bars of the over-time chart (830 px wide: at least 4 px a bar). A week of hours is
168 bars, so up to about eight days keep one bar per hour."""
_BUCKETS: Final = (1, 2, 3, 4, 6, 8, 12, 24)
"""Bucket widths in hours up to a day: each divides 24, so buckets start at fixed UTC hours."""


def _outcome_sums() -> list[Column]:
    count = F.col("count")
    return [
        F.sum(F.when(F.col("result") == "ALLOWED", count).otherwise(0)).alias("allowed"),
        F.sum(F.when(F.col("result") == "DENIED", count).otherwise(0)).alias("denied"),
        F.sum(F.when(F.col("would_deny"), count).otherwise(0)).alias("would_deny"),
    ]


def hourly_cube(events: DataFrame) -> DataFrame:
    """Decisions per hour and per (principal, listener, protocol, operation, resource), from
    records or hourly facts (:mod:`.facts`)."""
    return (
        to_facts(events)
        .groupBy("hour_start", *CUBE_DIMENSIONS)
        .agg(
            *_outcome_sums(),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
            F.sum("records").alias("records"),  # events read (:attr:`WindowSummary.records`)
        )
    )


def _rollup(cube: DataFrame, keys: Sequence[str]) -> DataFrame:
    return cube.groupBy(*keys).agg(
        *(F.sum(name).alias(name) for name in OUTCOMES),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def _buckets_between(first_hour: int, last_hour: int, width: int) -> int:
    return last_hour // width - first_hour // width + 1


def bucket_hours(first: datetime | None, last: datetime | None, bars: int = CHART_BARS) -> int:
    """The chart's bucket width in hours: the finest of :data:`_BUCKETS`, then whole days,
    that spans ``first`` .. ``last`` in at most ``bars`` buckets (aligned to the epoch).

    >>> day = datetime(2026, 11, 1, tzinfo=UTC)
    >>> [bucket_hours(day, day + timedelta(days=n)) for n in (7, 8.4, 30, 92, 365)]
    [1, 2, 4, 12, 48]
    """
    if first is None or last is None:
        return 1
    first_hour = math.floor(first.timestamp() / 3600)
    last_hour = math.floor(last.timestamp() / 3600)
    for width in _BUCKETS:
        if _buckets_between(first_hour, last_hour, width) <= bars:
            return width
    days = max(2, math.ceil((last_hour - first_hour) / 24 / (bars - 1)))
    while _buckets_between(first_hour, last_hour, 24 * days) > bars:
        days += 1
    return 24 * days


def at_resolution(cube: DataFrame, hours: int) -> DataFrame:
    """The hourly cube rolled up to buckets of ``hours`` (``hour_start`` becomes the
    bucket's start), with the bucket width as column ``hours``."""
    if hours > 1:
        seconds = 3600 * hours
        start = F.timestamp_seconds(F.floor(F.unix_seconds("hour_start") / seconds) * seconds)
        cube = cube.groupBy(start.alias("hour_start"), *CUBE_DIMENSIONS).agg(
            *(F.sum(name).alias(name) for name in OUTCOMES),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
    return cube.select(
        "hour_start",
        F.lit(hours).alias("hours"),
        *CUBE_DIMENSIONS,
        *OUTCOMES,
        "first_seen",
        "last_seen",
    )


def decisions_over_time(cube: DataFrame) -> DataFrame:
    """Per bucket of :func:`at_resolution`'s cube: allowed, denied, would_deny (buckets
    without decisions have no row)."""
    return (
        cube.groupBy("hour_start", "hours")
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
    records: int = 0
    """Audit records read (an aggregate line is one record standing for ``count`` decisions)."""


def summarize(cube: DataFrame) -> WindowSummary:
    row = cube.agg(
        F.min("first_seen").alias("first"),
        F.max("last_seen").alias("last"),
        *(F.coalesce(F.sum(name), F.lit(0)).alias(name) for name in (*OUTCOMES, "records")),
        F.countDistinct("principal").alias("principals"),
    ).collect()[0]
    return WindowSummary(
        _utc(row["first"]),
        _utc(row["last"]),
        int(row["allowed"]),
        int(row["denied"]),
        int(row["would_deny"]),
        int(row["principals"]),
        int(row["records"]),
    )


def _utc(value: Any) -> datetime | None:
    """Collected timestamps are naive in the driver's zone; make them aware UTC."""
    if value is None:
        return None
    assert isinstance(value, datetime)
    return value.astimezone(UTC) if value.tzinfo is None else value


DEFAULT_BASELINE = "default: the first half of the window; set --baseline-days or --baseline-until"


@dataclass(frozen=True, slots=True)
class Baseline:
    """What "new" is measured against: decisions from ``start`` up to ``cutoff`` (the
    baseline), new principals from ``cutoff`` to ``end``; ``basis`` says, for the page, how
    the cut-off was chosen. All None for an empty window."""

    start: datetime | None
    cutoff: datetime | None
    end: datetime | None
    basis: str


def baseline_window(
    window: TimeRange,
    summary: WindowSummary,
    until: datetime | None = None,
    days: float | None = None,
) -> Baseline:
    """The baseline: up to ``until``, or the first ``days`` of the window, else its first
    half (the window is ``--since``/``--until``, or the first and last record when open)."""
    if until is not None and days is not None:
        raise ValueError("give --baseline-until or --baseline-days, not both")
    if days is not None and not days > 0:
        raise ValueError(f"--baseline-days must be positive, got {days}")
    start = window.since or summary.first_event
    end = window.until or summary.last_event
    if until is not None:
        return Baseline(start, until, end, f"--baseline-until {iso(until)}")
    if start is None or end is None:
        return Baseline(start, None, end, DEFAULT_BASELINE)
    if days is not None:
        return Baseline(start, start + timedelta(days=days), end, f"--baseline-days {days:g}")
    return Baseline(start, start + (end - start) / 2, end, DEFAULT_BASELINE)


LARGE_TABLES = ("hourly",)
"""Tables that grow with the input (written in parallel, not as one file)."""
HTML_TABLES = (
    "decisions_over_time",
    "top_denied_principals",
    "top_denied_resources",
    "principal_topic",
    "new_principals",
    "by_operation",
    "by_listener",
)
"""The tables :func:`report_data` collects (cached: see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Report:
    tables: dict[str, DataFrame]
    summary: WindowSummary
    cutoff: datetime | None
    hours: int = 1
    """The time resolution of ``decisions_over_time`` and ``hourly`` (:func:`bucket_hours`)."""
    baseline: Baseline | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per step, in order; the caller adds its own (writing the tables), and
    :func:`report_data` the collection of the page's tables."""
    started: float = field(default_factory=time.perf_counter)
    """When :func:`build_report` started (``time.perf_counter``): the job's total."""


def build_report(
    events: DataFrame,
    window: TimeRange,
    *,
    top_n: int = 10,
    baseline_until: datetime | None = None,
    baseline_days: float | None = None,
) -> Report:
    """Every report table, lazily, from one cached cube."""
    started = time.perf_counter()
    cube = cached(hourly_cube(events))
    summary = summarize(cube)  # the one scan of the trail: it fills the cached cube
    read = time.perf_counter() - started
    baseline = baseline_window(window, summary, baseline_until, baseline_days)
    cutoff = baseline.cutoff
    hours = bucket_hours(summary.first_event, summary.last_event)
    charted = at_resolution(cube, hours)
    tables = {
        "decisions_over_time": decisions_over_time(charted),
        "by_principal": by_dimension(cube, ["principal"]),
        "by_resource": by_dimension(cube, ["resource_type", "resource_name"]),
        "by_operation": by_dimension(cube, ["operation"]),
        "by_listener": by_dimension(cube, ["listener", "security_protocol"]),
        "top_denied_principals": top_denied(cube, ["principal"], top_n),
        "top_denied_resources": top_denied(cube, ["resource_type", "resource_name"], top_n),
        "principal_topic": principal_topic(cube),
        "new_principals": new_principals(cube, cutoff),
        "hourly": charted,
    }
    for name in HTML_TABLES:
        tables[name] = cached(tables[name])
    timings = {"read the trail, build the hourly cube": read}
    return Report(tables, summary, cutoff, hours, baseline, timings, started)


HEATMAP_LIMIT = 25
"""Principals and topics shown in the heatmap (the busiest); the table has them all."""


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


def _filled(rows: list[dict[str, Any]], hours: int) -> list[dict[str, Any]]:
    """Buckets without decisions as zero rows, so the time axis is linear (at most
    :data:`CHART_BARS` of them: :func:`bucket_hours`)."""
    if not rows:
        return rows
    by_start = {r["hour_start"]: r for r in rows}
    first = datetime.fromisoformat(rows[0]["hour_start"])
    last = datetime.fromisoformat(rows[-1]["hour_start"])
    buckets = int((last - first).total_seconds() // (3600 * hours)) + 1
    out = []
    for i in range(buckets):
        key = iso(first + timedelta(hours=i * hours))
        empty = {"hour_start": key, "hours": hours, **dict.fromkeys(OUTCOMES, 0)}
        out.append(by_start.get(key) or empty)
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
    collecting = time.perf_counter()
    t = report.tables
    s = report.summary
    b = report.baseline or baseline_window(window, s, report.cutoff)
    resources = _rows(t["top_denied_resources"])
    for r in resources:
        r["resource"] = f"{r['resource_type']}:{r['resource_name']}"
    data = {
        "generated_at": iso(generated_at),
        "window": {
            "since": iso(window.since),
            "until": iso(window.until),
            "first_event": iso(s.first_event),
            "last_event": iso(s.last_event),
            "new_principal_cutoff": iso(report.cutoff),
            "baseline": {
                "start": iso(b.start),
                "cutoff": iso(b.cutoff),
                "end": iso(b.end),
                "basis": b.basis,
            },
        },
        "totals": {
            "allowed": s.allowed,
            "denied": s.denied,
            "would_deny": s.would_deny,
            "principals": s.principals,
        },
        "hours_per_bar": report.hours,
        "decisions_over_time": _filled(_rows(t["decisions_over_time"]), report.hours),
        "top_denied_principals": _rows(t["top_denied_principals"]),
        "top_denied_resources": resources,
        "heatmap": _heatmap(_rows(t["principal_topic"])),
        "new_principals": _rows(t["new_principals"]),
        "by_operation": _rows(t["by_operation"]),
        "by_listener": _rows(t["by_listener"]),
    }
    now = time.perf_counter()
    steps = {**report.timings, "collect the page's tables": now - collecting}
    data["run"] = {
        "records": s.records,
        "decisions": s.allowed + s.denied,
        "steps": [[name, round(seconds, 3)] for name, seconds in steps.items()],
        "seconds": round(now - report.started, 3),
    }
    return data
