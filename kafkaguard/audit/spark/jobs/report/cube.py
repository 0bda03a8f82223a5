"""``kafkaguard analyze report``: who was allowed and denied what, when, through which listener.

Theory of operation: two aggregations of the audit records, each one ``HashAggregate``, each
collected once (issue 36): the *window's cube* (decisions summed per principal × listener ×
operation × resource, split into allowed / denied / would-deny, with first and last time seen)
and the *hourly totals* (decisions per hour). Every table the page shows is a roll-up of one of
them, made on the driver: the window's cube is as many rows as distinct accesses (tens of
thousands), the hourly totals one per hour. The fine hourly cube (table ``hourly``) is
computed only where ``--output`` writes it: measured at 3M records, an hourly cube is 0.91 rows
per record, and caching it and rolling it up in Spark took 37 jobs and 68 s where the two
aggregations take 26 s. Counts always sum the records' ``count`` (an aggregate line stands for
``count`` decisions), never count rows.

Time resolution: the over-time chart draws at most :data:`CHART_BARS` bars, so a long window
is shown per 2, 3, 4, 6, 8, 12 or 24 hours, or per days (:func:`bucket_hours`, from the first
and last record). ``decisions_over_time`` and the written cube (table ``hourly``) are kept at
that resolution (column ``hours``: the bucket's width; ``hour_start``: where it starts, in
UTC): a finer cube is more rows to write than anyone looking at the chart reads — for a
quarter, charted per 12 hours, up to 12 times as many.

Fixed costs: the tables are Python rows until a caller asks for them as DataFrames
(:attr:`Report.tables`, for ``--output``); the cube table is then computed from the records,
in parallel and unsorted (a global sort of the one table that grows with the input would be a
shuffle that no Parquet reader needs).

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
from functools import cached_property
from typing import Any, Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkaguard.audit.spark.trail.facts import outcome_sums, to_facts
from kafkaguard.audit.spark.trail.schema import AUDIT_SCHEMA
from kafkaguard.audit.spark.trail.source import TimeRange

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


def hourly_cube(events: DataFrame) -> DataFrame:
    """Decisions per hour and per (principal, listener, protocol, operation, resource), from records
    or hourly facts (:mod:`kafkaguard.audit.spark.trail.facts`): the ``hourly`` table, only for
    ``--output``. A daily fact (no hour) fails the job: its hours are not there to split it."""
    hour = F.col("hour_start")
    no_hour = F.raise_error(F.lit("the hourly table needs every hour: read without daily facts"))
    return (
        to_facts(events)
        .groupBy(
            F.when(hour.isNull(), no_hour).otherwise(hour).alias("hour_start"), *CUBE_DIMENSIONS
        )
        .agg(
            *outcome_sums(),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
    )


def window_cube(events: DataFrame) -> DataFrame:
    """Decisions over the whole window per (principal, listener, protocol, operation,
    resource), with the records read: the first of the report's two aggregations."""
    return (
        to_facts(events)
        .groupBy(*CUBE_DIMENSIONS)
        .agg(
            *outcome_sums(),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
            F.sum("records").alias("records"),  # events read (:attr:`WindowSummary.records`)
        )
    )


def hourly_totals(events: DataFrame) -> DataFrame:
    """Decisions per hour (the chart's series): the second aggregation. Daily facts (no hour)
    are left out: their hours come from beside them (:func:`build_report`'s ``hour_totals``)."""
    hourly = to_facts(events).where(F.col("hour_start").isNotNull())
    return hourly.groupBy("hour_start").agg(*outcome_sums())


Cell = dict[str, Any]


def _collected(df: DataFrame) -> list[Cell]:
    """``df``'s rows as dicts, timestamps made aware UTC (:func:`_utc`)."""
    return [
        {k: _utc(v) if isinstance(v, datetime) else v for k, v in row.asDict().items()}
        for row in df.toLocalIterator(prefetchPartitions=True)
    ]


def _plus(a: int | None, b: int | None) -> int | None:
    """SQL's ``sum``: nulls ignored, null when every value is."""
    return a if b is None else b if a is None else a + b


def _least(a: datetime | None, b: datetime | None) -> datetime | None:
    return a if b is None else b if a is None else min(a, b)


def _greatest(a: datetime | None, b: datetime | None) -> datetime | None:
    return a if b is None else b if a is None else max(a, b)


def _asc(value: Any) -> tuple[bool, Any]:
    """Spark's ascending order: nulls first (strings compare by code point, as Spark's by
    UTF-8 bytes)."""
    return (value is not None, value if value is not None else 0)


def _desc(value: int | None) -> tuple[bool, int]:
    """Spark's descending order: nulls last."""
    return (value is None, -(value or 0))


def _rollup(cells: Sequence[Cell], keys: Sequence[str], times: bool = True) -> list[Cell]:
    """The cells summed per ``keys`` (outcomes, and first/last seen with ``times``)."""
    groups: dict[tuple[Any, ...], Cell] = {}
    for cell in cells:
        key = tuple(cell[k] for k in keys)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {k: cell[k] for k in keys} | dict.fromkeys(OUTCOMES)
            if times:
                group |= {"first_seen": None, "last_seen": None}
        for name in OUTCOMES:
            group[name] = _plus(group[name], cell[name])
        if times:
            group["first_seen"] = _least(group["first_seen"], cell["first_seen"])
            group["last_seen"] = _greatest(group["last_seen"], cell["last_seen"])
    return list(groups.values())


def _total(cell: Cell) -> int | None:
    """``allowed + denied`` as SQL adds (null if either is)."""
    allowed, denied = cell["allowed"], cell["denied"]
    return None if allowed is None or denied is None else int(allowed) + int(denied)


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


def decisions_over_time(totals: Sequence[Cell], hours: int) -> list[Cell]:
    """Per bucket of ``hours`` (aligned to the epoch, as :func:`at_resolution`'s): allowed,
    denied, would_deny, in time order (buckets without decisions have no row)."""
    seconds = 3600 * hours
    bucketed = []
    for cell in totals:
        start = cell["hour_start"]
        epoch = math.floor(start.timestamp() / seconds) * seconds
        bucketed.append(cell | {"hour_start": datetime.fromtimestamp(epoch, UTC)})
    rows = _rollup(bucketed, ["hour_start"], times=False)
    rows.sort(key=lambda r: _asc(r["hour_start"]))
    return [{"hour_start": r["hour_start"], "hours": hours} | r for r in rows]


def by_dimension(cube: Sequence[Cell], keys: Sequence[str]) -> list[Cell]:
    """Totals over the window per ``keys``, with ``total`` and first/last seen, the busiest
    first (ties by key)."""
    rows = [
        {k: r[k] for k in keys}
        | {name: r[name] for name in OUTCOMES}
        | {"total": _total(r), "first_seen": r["first_seen"], "last_seen": r["last_seen"]}
        for r in _rollup(cube, keys)
    ]
    rows.sort(key=lambda r: (_desc(r["total"]), *(_asc(r[k]) for k in keys)))
    return rows


def top_denied(cube: Sequence[Cell], keys: Sequence[str], n: int) -> list[Cell]:
    """The ``n`` keys with the most denied decisions (ties by key, so output is stable)."""
    rows = [
        {k: r[k] for k in keys} | {"denied": r["denied"], "would_deny": r["would_deny"]}
        for r in _rollup(cube, keys, times=False)
        if r["denied"] is not None and r["denied"] > 0
    ]
    rows.sort(key=lambda r: (_desc(r["denied"]), *(_asc(r[k]) for k in keys)))
    return rows[:n]


def new_principals(cube: Sequence[Cell], cutoff: datetime | None) -> list[Cell]:
    """Principals whose first decision in the window is at or after ``cutoff`` (none when
    there is no cut-off, i.e. an empty window)."""
    if cutoff is None:
        return []
    rows = [
        {
            "principal": r["principal"],
            "first_seen": r["first_seen"],
            "total": _total(r),
            "denied": r["denied"],
        }
        for r in _rollup(cube, ["principal"])
        if r["first_seen"] is not None and r["first_seen"] >= cutoff
    ]
    rows.sort(key=lambda r: (_asc(r["first_seen"]), _asc(r["principal"])))
    return rows


def principal_topic(cube: Sequence[Cell]) -> list[Cell]:
    """The principal × topic matrix behind the heatmap (topics only)."""
    topics = [c | {"topic": c["resource_name"]} for c in cube if c["resource_type"] == "TOPIC"]
    rows = [
        {"principal": r["principal"], "topic": r["topic"]} | {n: r[n] for n in OUTCOMES}
        for r in _rollup(topics, ["principal", "topic"], times=False)
    ]
    rows.sort(key=lambda r: (_asc(r["principal"]), _asc(r["topic"])))
    return rows


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


def summarize(cube: Sequence[Cell]) -> WindowSummary:
    """The window's totals from its cube (:func:`window_cube`'s rows)."""
    first = last = None
    sums = dict.fromkeys((*OUTCOMES, "records"), 0)
    for cell in cube:
        first, last = _least(first, cell["first_seen"]), _greatest(last, cell["last_seen"])
        for name in sums:
            sums[name] += cell[name] or 0
    principals = {c["principal"] for c in cube if c["principal"] is not None}
    return WindowSummary(
        first,
        last,
        sums["allowed"],
        sums["denied"],
        sums["would_deny"],
        len(principals),
        sums["records"],
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
_DIMENSION_TYPES: Final = {name: AUDIT_SCHEMA[name].dataType for name in CUBE_DIMENSIONS}


def _schema(columns: Sequence[str]) -> StructType:
    """The Spark types of a table's columns (as the SQL roll-ups typed them)."""
    types: dict[str, DataType] = {
        **_DIMENSION_TYPES,
        "topic": StringType(),
        "hour_start": TimestampType(),
        "hours": IntegerType(),
        "first_seen": TimestampType(),
        "last_seen": TimestampType(),
    }
    return StructType([StructField(c, types.get(c, LongType())) for c in columns])


_COLUMNS: Final = {
    "decisions_over_time": ("hour_start", "hours", *OUTCOMES),
    "by_principal": ("principal",),
    "by_resource": ("resource_type", "resource_name"),
    "by_operation": ("operation",),
    "by_listener": ("listener", "security_protocol"),
    "top_denied_principals": ("principal", "denied", "would_deny"),
    "top_denied_resources": ("resource_type", "resource_name", "denied", "would_deny"),
    "principal_topic": ("principal", "topic", *OUTCOMES),
    "new_principals": ("principal", "first_seen", "total", "denied"),
}
"""Each table's columns (``by_*``: their keys, then :data:`_TOTALS`)."""
_TOTALS: Final = (*OUTCOMES, "total", "first_seen", "last_seen")


def _columns(name: str) -> tuple[str, ...]:
    keys = _COLUMNS[name]
    return (*keys, *_TOTALS) if name.startswith("by_") else keys


@dataclass(frozen=True)
class Report:
    rows: dict[str, list[Cell]]
    """Every table but ``hourly``, as the driver rolled it up (timestamps aware UTC)."""
    summary: WindowSummary
    cutoff: datetime | None
    hours: int = 1
    """The time resolution of ``decisions_over_time`` and ``hourly`` (:func:`bucket_hours`)."""
    baseline: Baseline | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per step, in order; the caller adds its own (writing the tables), and
    :func:`report_data` the page's."""
    started: float = field(default_factory=time.perf_counter)
    """When :func:`build_report` started (``time.perf_counter``): the job's total."""
    events: DataFrame | None = None
    """What the report read: the ``hourly`` table is computed from it when asked for."""

    @cached_property
    def tables(self) -> dict[str, DataFrame]:
        """Every table as a DataFrame (for ``--output`` and tests): the rolled-up rows as
        they are, and ``hourly`` computed from the records (:func:`hourly_cube`)."""
        if self.events is None:
            raise ValueError("a report built without its events has no hourly table")
        spark = self.events.sparkSession
        tables = {
            name: spark.createDataFrame(
                [tuple(r[c] for c in _columns(name)) for r in rows], _schema(_columns(name))
            )
            for name, rows in self.rows.items()
        }
        tables["hourly"] = at_resolution(hourly_cube(self.events), self.hours)
        return tables


def build_report(
    events: DataFrame,
    window: TimeRange,
    *,
    top_n: int = 10,
    baseline_until: datetime | None = None,
    baseline_days: float | None = None,
    hour_totals: Sequence[Cell] = (),
) -> Report:
    """Every report table from two aggregations collected once (the module's docstring).

    ``hour_totals``: the hours of the days ``events`` has as daily facts
    (:func:`kafkaguard.audit.spark.trail.facts.stored_hour_totals`); the series must add up
    to the window's decisions, or the report is refused rather than drawn short."""
    started = time.perf_counter()
    cube = _collected(window_cube(events))
    totals = _collected(hourly_totals(events)) + list(hour_totals)
    read = time.perf_counter() - started
    summary = summarize(cube)
    _check_series(totals, summary)
    baseline = baseline_window(window, summary, baseline_until, baseline_days)
    cutoff = baseline.cutoff
    hours = bucket_hours(summary.first_event, summary.last_event)
    rows = {
        "decisions_over_time": decisions_over_time(totals, hours),
        "by_principal": by_dimension(cube, ["principal"]),
        "by_resource": by_dimension(cube, ["resource_type", "resource_name"]),
        "by_operation": by_dimension(cube, ["operation"]),
        "by_listener": by_dimension(cube, ["listener", "security_protocol"]),
        "top_denied_principals": top_denied(cube, ["principal"], top_n),
        "top_denied_resources": top_denied(cube, ["resource_type", "resource_name"], top_n),
        "principal_topic": principal_topic(cube),
        "new_principals": new_principals(cube, cutoff),
    }
    timings = {
        "read the trail (the window's cube, the hourly totals)": read,
        "roll up the tables": time.perf_counter() - started - read,
    }
    return Report(rows, summary, cutoff, hours, baseline, timings, started, events)


def _check_series(totals: Sequence[Cell], summary: WindowSummary) -> None:
    """The per-hour series holds every decision of the window's cube: daily facts whose hours
    were not given (or given twice) would draw a chart that does not match the totals."""
    series = [sum(int(t[name] or 0) for t in totals) for name in OUTCOMES]
    window = [summary.allowed, summary.denied, summary.would_deny]
    if series != window:
        raise ValueError(
            f"the hourly series sums to {series} (allowed, denied, would-deny) but the"
            f" window's decisions to {window}: daily facts read without their hours"
            " (the trail compacted during the read? run the job again)"
        )


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


def _rows(rows: list[Cell]) -> list[Cell]:
    """Rows for the page: timestamps in the trail's format (:func:`iso`)."""
    return [{k: iso(v) if isinstance(v, datetime) else v for k, v in r.items()} for r in rows]


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
    t = report.rows
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
    steps = {**report.timings, "render the page's tables": now - collecting}
    data["run"] = {
        "records": s.records,
        "decisions": s.allowed + s.denied,
        "steps": [[name, round(seconds, 3)] for name, seconds in steps.items()],
        "seconds": round(now - report.started, 3),
    }
    return data
