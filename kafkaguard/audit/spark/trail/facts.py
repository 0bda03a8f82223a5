"""Hourly and daily facts: each compacted hour, and each whole day, summed per distinct decision,
for ``propose`` and ``report``.

Theory of operation: ``propose`` (observed grants, enforced refusals) and ``report`` (the
hourly cube) only ever sum ``count`` and take the first and last time per group of a few
columns, within an hour. :data:`FACT_KEYS` holds every column either groups by, so one row
per (hour, :data:`FACT_KEYS`) with the summed ``count``, the number of ``records``, the
first and last ``event_time`` and the smallest client address (a *fact*) gives both jobs
exactly the results the records give.
A raw record is a fact of its own (:func:`to_facts`): the jobs take facts, from wherever.

``analyze compact`` writes the facts of every compacted hour (:func:`write_facts`) under
``<compacted>/_facts/date=/hour=`` (hidden from the records' listing by its leading ``_``),
each hour with a copy of the hour's compaction marker. Facts are current when their marker
equals the hour's: a run computes them for every hour where it does not (hours just
compacted or merged, hours compacted before facts existed), so runs are incremental and
idempotent like the compaction itself; an hour is moved into place with one rename.

Facts are kept only for an hour they shrink (at most :data:`FACTS_MAX_SHARE` of its
records): where nearly every record is a distinct decision, facts are as many rows as the
records and reading them adds a second listing and a union for nothing (bench/RESULTS.md,
issue 29: 922,055 facts from 1M records made ``propose`` and ``report`` slower). Such an
hour's facts directory holds the marker alone: current, so not computed again, and its
records are read. The compaction's scan estimates the distinct decisions of the hours it
compacts (HyperLogLog, in the same pass, :data:`ESTIMATE_RSD`): when they exceed that share
of the records read, those hours are not summed at all (an hourly run decides per hour; a
backfill of many hours on their average). Otherwise each hour's facts are counted and kept or
dropped.

:func:`read_facts` takes an hour's facts when they are current, stored and the hour lies
wholly inside the window, and the records (Parquet or JSON, :func:`.source.read_audit`) for
the rest: the same results either way (``tests/audit/spark/trail/test_facts.py`` compares them,
also with hours of both kinds in one read).

Group membership (schema version 2's ``groups``) is not a fact key: a principal's groups are
near-constant, and keying every fact by them would repeat them in every row. Each hour that
keeps facts has, beside them, its membership (:data:`MEMBERS_FILE`: principal -> the groups it
was seen with, written from the driver, a few bytes per principal), hidden from Spark's
listing by its leading ``_`` and moved into place with the hour's facts. Facts stored without
it (written before groups were recorded) are not current, so the next ``compact`` writes them
again. :func:`read_membership` takes the stored membership of the fact hours and the records'
for the rest.

**Daily facts.** Where an hour's decisions are nearly all distinct a day's are not (the bench's
varied trail at 10M: ~45k grants a day against ~1.43M records), so ``compact`` also writes
the facts of every *whole day* (all 24 UTC hours compacted: a day that is over) summed over
the day (:func:`write_daily_facts`) under ``<compacted>/_facts_daily/date=`` with the day's
marker (:func:`day_marker`: the digests of its 24 hour markers, so a merged or recompacted
hour makes the day stale and the next run writes it again), its membership and its hours'
totals (:data:`HOUR_TOTALS_FILE`). A daily fact has no hour (``hour_start`` is null): a
reader grouping by the hour takes the day's hours from :func:`stored_hour_totals`
(``report``'s chart), or reads without daily facts (``report --output``'s hourly cube).
:func:`read_facts` takes daily facts for the whole days of the window, hourly facts for the
whole hours of the other days, and the records for the rest (:func:`choose_facts`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Unpack

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from kafkaguard.audit.spark.trail.hours import MARKER, TMP_PREFIX, Hour, Marker, commit
from kafkaguard.audit.spark.trail.schema import AUDIT_SCHEMA, COMPACTED_SCHEMA, EVENT_TIME
from kafkaguard.audit.spark.trail.source import (
    ReadOptions,
    TimeRange,
    compacted_path,
    hour_number,
    hour_number_column,
    hour_overlaps,
    is_kafka_input,
    local_json_hours,
    read_audit,
)

FACTS_DIR: Final = "_facts"
FACT_KEYS: Final = (
    "principal",
    "listener",
    "security_protocol",
    "operation",
    "resource_type",
    "resource_name",
    "result",
    "would_deny",
    "reason",
)
"""Every column ``propose`` and ``report`` group or filter by (besides the hour), except the
client's address: a principal connects from many (every client instance, every pod), and
keeping it would keep nearly every record. ``propose`` only needs its smallest
(``sample_host``); ``propose --hosts exact`` reads the records."""
FACTS_SCHEMA: Final = StructType(
    [
        StructField("hour_start", TimestampType()),
        *(AUDIT_SCHEMA[name] for name in FACT_KEYS),
        StructField("sample_host", StringType()),
        StructField("count", LongType()),
        StructField("records", LongType()),
        StructField("first_seen", TimestampType()),
        StructField("last_seen", TimestampType()),
    ]
)
FACT_COLUMNS: Final = tuple(f.name for f in FACTS_SCHEMA.fields)
MEMBERS_FILE: Final = "_members.json"
"""An hour's group membership beside its facts: ``{"version": 1, "members": {principal:
[groups]}}``, the principals seen with groups only (:func:`membership_rows`)."""
MEMBERS_FORMAT: Final = 1
FACTS_MAX_SHARE: Final = 0.5
"""An hour's facts are kept when they are at most this share of its records. A fact costs a
job about what a record does (fewer columns, but a second tree of files and a union): at 0.92
the jobs were slower with facts than without. Where decisions repeat (producers and consumers
check the same ACL thousands of times an hour; ``audit.allowed: aggregate`` writes one record
per distinct check and window) facts are a small fraction of the records."""
ESTIMATE_RSD: Final = 0.01
"""The relative standard deviation of the compaction's estimate of its hours' facts
(``approx_count_distinct``: HyperLogLog++ with 2^14 registers, 16 KB a task). The hours are
not summed when the estimate exceeds :data:`FACTS_MAX_SHARE` of their records, with no margin:
only hours within a few percent of the share can be misjudged, and for those the facts save
at most about half of the rows either way (their days' facts are written regardless). A margin
for Spark's default 5% (0.1 of the records) made the bench's varied trail, 0.515 facts per
record, sum all its hours and then drop them: 62.5 s of 228 s of task CPU at 10M records
(bench/RESULTS.md, issue 36)."""
DAILY_DIR: Final = "_facts_daily"
"""Where the daily facts are: ``<compacted>/_facts_daily/date=`` (hidden by the ``_``)."""
DAY_MARKER: Final = "_kafkaguard_daily.json"
"""A day's marker beside its daily facts (:func:`day_marker`)."""
DAY_MARKER_FORMAT: Final = 1
HOUR_TOTALS_FILE: Final = "_hours.json"
"""A day's hours beside its daily facts: ``{"version": 1, "hours": {"HH": {"allowed": n,
"denied": n, "would_deny": n}}}``, the hours with decisions only (:func:`outcome_sums`)."""
HOUR_TOTALS_FORMAT: Final = 1
HOUR_TOTALS: Final = ("allowed", "denied", "would_deny")


def to_facts(events: DataFrame) -> DataFrame:
    """Records (:func:`.source.read_audit`) as facts, one each; facts as they are."""
    if "first_seen" in events.columns:
        return events
    return events.select(
        F.date_trunc("hour", F.col(EVENT_TIME)).alias("hour_start"),
        *FACT_KEYS,
        F.col("client_host").alias("sample_host"),
        F.col("count").cast(LongType()).alias("count"),
        F.lit(1).cast(LongType()).alias("records"),
        F.col(EVENT_TIME).alias("first_seen"),
        F.col(EVENT_TIME).alias("last_seen"),
    )


def host_ranks(rows: DataFrame) -> DataFrame:
    """(sample_host, host_rank): the distinct client addresses of ``rows`` numbered in
    Spark's string order (UTF-8 bytes, which is Python's code point order), so that the
    smallest rank is ``min(sample_host)``. Client addresses are few (a fleet's hosts, not
    its records): one narrow scan and a distinct, sorted and numbered on the driver."""
    spark = rows.sparkSession
    hosts = sorted(
        r[0] for r in rows.select("sample_host").distinct().collect() if r[0] is not None
    )
    schema = StructType(
        [StructField("sample_host", StringType(), False), StructField("host_rank", LongType())]
    )
    return spark.createDataFrame([(h, i) for i, h in enumerate(hosts)], schema)


def summed(facts: DataFrame, by: Column | str = "hour_start") -> DataFrame:
    """One fact per hour (or ``by``: the day of :func:`write_daily_facts`) and distinct
    :data:`FACT_KEYS`, in one ``HashAggregate``: the smallest client address is the smallest
    rank of it (:func:`host_ranks`), as ``propose`` takes it; ``min`` of the string made Spark
    sort every record (issue 36). Columns by name, ``sample_host`` last."""
    ranks = host_ranks(facts)
    grouped = (
        facts.join(F.broadcast(ranks), "sample_host", "left")
        .groupBy(by, *FACT_KEYS)
        .agg(
            F.min("host_rank").alias("host_rank"),
            F.sum("count").alias("count"),
            F.sum("records").alias("records"),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
    )
    return grouped.join(F.broadcast(ranks), "host_rank", "left").drop("host_rank")


def outcome_sums() -> list[Column]:
    """Decisions (``count``) allowed, denied and would-deny: what ``report``'s per-hour series
    sums per hour, and what :data:`HOUR_TOTALS_FILE` stores per hour of a day fact."""
    count = F.col("count")
    return [
        F.sum(F.when(F.col("result") == "ALLOWED", count).otherwise(0)).alias("allowed"),
        F.sum(F.when(F.col("result") == "DENIED", count).otherwise(0)).alias("denied"),
        F.sum(F.when(F.col("would_deny"), count).otherwise(0)).alias("would_deny"),
    ]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _marker_text(directory: Path) -> str | None:
    return _text(directory / MARKER)


def _hours(output: Path) -> dict[Hour, str]:
    """The compacted hours under ``output`` with their markers' text."""
    found = {}
    for directory in output.glob("date=*/hour=*"):
        text = _marker_text(directory)
        if text is not None:
            day, hour = directory.parent.name[5:], int(directory.name[5:])
            found[Hour(day, hour)] = text
    return found


def current_facts(output: Path, hours: Mapping[Hour, str] | None = None) -> dict[Hour, bool]:
    """The compacted hours whose facts are current (their marker is the hour's), each with
    whether facts are stored for it (False: they did not shrink it; its records are read);
    ``hours``: :func:`_hours` of ``output``, when the caller has it."""
    facts = output / FACTS_DIR
    current = {}
    for hour, text in (_hours(output) if hours is None else hours).items():
        directory = facts / hour.relative
        if _marker_text(directory) == text:
            stored = any(directory.glob("*.parquet"))
            if stored and not (directory / MEMBERS_FILE).is_file():
                continue  # facts of before groups were recorded: written again
            current[hour] = stored
    return current


def rows_per_hour(spark: SparkSession, root: Path, schema: StructType) -> dict[Hour, int]:
    """The rows of each ``date=/hour=`` partition of the Parquet under ``root`` (counted
    from the files' footers: no column is read)."""
    if not any(root.glob("date=*/hour=*/*.parquet")):
        return {}
    df = spark.read.schema(schema).option("basePath", str(root)).parquet(str(root))
    return _rows_per_hour(df)


def _rows_per_hour(df: DataFrame) -> dict[Hour, int]:
    rows = df.groupBy("date", "hour").count().collect()
    return {Hour(r["date"].isoformat(), int(r["hour"])): int(r["count"]) for r in rows}


def _shrinks(facts: int, marker: Path) -> bool:
    """Whether ``facts`` rows are at most :data:`FACTS_MAX_SHARE` of the hour's records."""
    compacted = Marker.read(marker)
    return compacted is not None and facts <= FACTS_MAX_SHARE * compacted.records


def write_facts(
    session: Callable[[], SparkSession], output: Path, no_facts: Collection[Hour] = ()
) -> tuple[int, int]:
    """Compute and move into place the facts of every compacted hour under ``output`` whose
    facts are not current (call it holding the compaction lock), keeping them only where
    they shrink the hour (:data:`FACTS_MAX_SHARE`); the hours written, and how many of them
    keep facts. ``no_facts``: hours known not to shrink (the compaction's estimate), given
    their marker alone without being read.

    A crash leaves a staging directory (``_tmp-facts-*``, deleted by the next run) and hours
    whose facts are not current, which the next run writes: jobs read their records
    meanwhile.
    """
    hours = _hours(output)
    stale = sorted(set(hours) - set(current_facts(output)))
    if not stale:
        return 0, 0
    stamp = f"{os.getpid()}-{time.time_ns()}"
    staging = output / f"{TMP_PREFIX}facts-{stamp}"
    replaced = output / f"{TMP_PREFIX}facts-replaced-{stamp}"
    kept = 0
    try:
        with_data = [
            h for h in stale if h not in no_facts and any((output / h.relative).glob("*.parquet"))
        ]
        counted: dict[Hour, int] = {}
        members: dict[Hour, dict[str, set[str]]] = {}
        if with_data:
            spark = session()
            records = _hours_of(spark, COMPACTED_SCHEMA, output, with_data)
            facts = summed(to_facts(records)).select(
                *FACT_COLUMNS,
                F.date_format("hour_start", "yyyy-MM-dd").alias("date"),
                F.date_format("hour_start", "HH").alias("hour"),
            )
            # One file per hour, the aggregation left in its shuffle partitions: coalesce(1)
            # would run the final aggregation in one task, which at 10M records (5M facts)
            # spilled and ran out of a 1 GB heap merging its spills (bench/RESULTS.md, issue 36).
            facts.repartition("date", "hour").write.partitionBy("date", "hour").parquet(
                str(staging)
            )
            counted = rows_per_hour(spark, staging, FACTS_SCHEMA)
            members = _members_per_hour(records)
        for hour in stale:
            staged = staging / hour.relative
            staged.mkdir(parents=True, exist_ok=True)
            if hour in counted and _shrinks(counted[hour], output / hour.relative / MARKER):
                kept += 1
                _write_members(staged / MEMBERS_FILE, members.get(hour, {}))
            else:  # the marker alone: current, and the hour's records are read
                for part in staged.iterdir():
                    part.unlink()
            (staged / MARKER).write_text(hours[hour], encoding="utf-8")
            commit(staged, output / FACTS_DIR / hour.relative, replaced)
        return len(stale), kept
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(replaced, ignore_errors=True)


def membership_rows(records: DataFrame) -> DataFrame:
    """(principal, group) of the records' groups, with the hour start: who was seen in which
    group. A super user's decisions are left out: no ACL applies to it, so no group ACL is
    proposed or judged for it (:func:`.solver.proposal.group_proposal`)."""
    return (
        records.where(
            (F.size("groups") > 0) & (F.coalesce(F.col("reason"), F.lit("")) != "SuperUser")
        )
        .select(
            F.date_trunc("hour", F.col(EVENT_TIME)).alias("hour_start"),
            "principal",
            F.explode("groups").alias("group"),
        )
        .distinct()
    )


def _members_per_hour(records: DataFrame) -> dict[Hour, dict[str, set[str]]]:
    found: dict[Hour, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in membership_rows(records).collect():
        start = row["hour_start"].astimezone(UTC)
        found[Hour(start.date().isoformat(), start.hour)][row["principal"]].add(row["group"])
    return found


def _write_members(path: Path, members: Mapping[str, Iterable[str]]) -> None:
    document = {
        "version": MEMBERS_FORMAT,
        "members": {p: sorted(members[p]) for p in sorted(members)},
    }
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _read_members(path: Path) -> dict[str, list[str]]:
    """An hour's stored membership; an unreadable one is an error, not an empty hour (its
    facts were taken as current, so the records that could tell are not read)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("version") != MEMBERS_FORMAT:
            raise ValueError(f"version {document.get('version')!r}, expected {MEMBERS_FORMAT}")
        members = document["members"]
        return {str(p): [str(g) for g in groups] for p, groups in members.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: unreadable group membership ({exc})") from exc


def _hours_of(spark: SparkSession, schema: StructType, root: Path, hours: list[Hour]) -> DataFrame:
    """The Parquet of ``hours`` under ``root``: one root listed on the driver and a partition
    filter (naming each hour's directory would make Spark list them with a job of its own,
    seconds in a fresh process)."""
    numbers = sorted(hour_number(date.fromisoformat(h.date), h.hour) for h in hours)
    df = spark.read.schema(schema).option("basePath", str(root)).parquet(str(root))
    return df.where(hour_number_column().isin(numbers))


def _day_relative(day: str) -> str:
    return f"date={day}"


def day_marker(day: str, hours: Mapping[Hour, str]) -> str | None:
    """The marker a day's facts carry: the digests of its 24 hour markers (``hours``: hour
    -> marker text), or None when not every hour of the day is compacted. A recompacted or
    merged hour has a new marker, so the day's stored marker no longer equals this one."""
    texts = [hours.get(Hour(day, h)) for h in range(24)]
    digests = {}
    for h, text in enumerate(texts):
        if text is None:
            return None
        digests[f"{h:02d}"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    document = {"format": DAY_MARKER_FORMAT, "day": day, "hours": digests}
    return json.dumps(document, indent=1) + "\n"


def _whole_days(hours: Mapping[Hour, str]) -> dict[str, str]:
    """The days all 24 hours of which are compacted, with the marker of their facts. Such a
    day is over (its last hour is closed), so the current day of a live trail is never one."""
    found = {}
    for day in sorted({h.date for h in hours}):
        marker = day_marker(day, hours)
        if marker is not None:
            found[day] = marker
    return found


def current_days(output: Path, hours: Mapping[Hour, str] | None = None) -> dict[str, bool]:
    """The whole days (:func:`day_marker`) whose daily facts are current, each with whether
    facts are stored for it (False: they did not shrink it; its finer data is read)."""
    hours = _hours(output) if hours is None else hours
    current = {}
    for day, marker in _whole_days(hours).items():
        directory = output / DAILY_DIR / _day_relative(day)
        if _text(directory / DAY_MARKER) != marker:
            continue
        stored = any(directory.glob("*.parquet"))
        beside = (directory / MEMBERS_FILE).is_file() and (directory / HOUR_TOTALS_FILE).is_file()
        if not stored or beside:
            current[day] = stored
    return current


@dataclass(slots=True)
class _DayInput:
    """What the daily facts of some days are computed from, and what they are measured
    against: per day, the rows a job reads for it without them."""

    facts: DataFrame
    finer_rows: dict[str, int]
    members: dict[str, dict[str, set[str]]]


def _day_input(
    spark: SparkSession, output: Path, hours: list[Hour], hourly: Mapping[Hour, bool]
) -> _DayInput | None:
    """The hourly facts of ``hours`` where stored (``hourly``: :func:`current_facts`), the
    records of the others, as facts of one DataFrame (None: no rows at all)."""
    from_facts = [h for h in hours if hourly.get(h)]
    from_records = [h for h in hours if not hourly.get(h)]
    from_records = [h for h in from_records if any((output / h.relative).glob("*.parquet"))]
    finer: dict[str, int] = defaultdict(int)
    members: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    parts = []
    if from_facts:
        stored = _hours_of(spark, FACTS_SCHEMA, output / FACTS_DIR, from_facts)
        for hour, rows in _rows_per_hour(stored).items():
            finer[hour.date] += rows
        for hour in from_facts:
            path = output / FACTS_DIR / hour.relative / MEMBERS_FILE
            for principal, groups in _read_members(path).items():
                members[hour.date][principal].update(groups)
        parts.append(stored.select(*FACT_COLUMNS))
    if from_records:
        for hour in from_records:
            compacted = Marker.read(output / hour.relative / MARKER)
            finer[hour.date] += compacted.records if compacted is not None else 0
        records = _hours_of(spark, COMPACTED_SCHEMA, output, from_records)
        for hour, seen in _members_per_hour(records).items():
            for principal, in_groups in seen.items():
                members[hour.date][principal].update(in_groups)
        parts.append(to_facts(records))
    if not parts:
        return None
    facts = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    return _DayInput(facts, dict(finer), members)


def _hour_totals(facts: DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    """Per day and hour (``"HH"``) of ``facts``, :func:`outcome_sums` (a narrow aggregation:
    Parquet reads four columns)."""
    found: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for row in facts.groupBy("hour_start").agg(*outcome_sums()).collect():
        start = row["hour_start"].astimezone(UTC)
        sums = {name: int(row[name]) for name in HOUR_TOTALS}
        found[start.date().isoformat()][f"{start.hour:02d}"] = sums
    return found


def _write_hour_totals(path: Path, totals: Mapping[str, Mapping[str, int]]) -> None:
    document = {"version": HOUR_TOTALS_FORMAT, "hours": dict(sorted(totals.items()))}
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _stage_days(
    spark: SparkSession, output: Path, staging: Path, days: list[str]
) -> tuple[dict[str, int], _DayInput | None, dict[str, dict[str, dict[str, int]]]]:
    """Compute the daily facts of ``days`` into ``staging`` (one job, ``date=`` partitions):
    their rows per day, their input and their hours' totals."""
    hours = [Hour(day, h) for day in days for h in range(24)]
    found = _day_input(spark, output, hours, current_facts(output))
    if found is None:
        return {}, None, {}
    day = F.date_format("hour_start", "yyyy-MM-dd").alias("date")
    daily = summed(found.facts, day).select(
        F.lit(None).cast(TimestampType()).alias("hour_start"), *FACT_COLUMNS[1:], "date"
    )
    daily.repartition("date").write.partitionBy("date").parquet(str(staging))  # as write_facts
    counted: dict[str, int] = {}
    if any(staging.glob("date=*/*.parquet")):
        written = spark.read.schema(FACTS_SCHEMA).option("basePath", str(staging))
        for row in written.parquet(str(staging)).groupBy("date").count().collect():
            counted[row["date"].isoformat()] = int(row["count"])
    return counted, found, _hour_totals(found.facts)


def write_daily_facts(session: Callable[[], SparkSession], output: Path) -> tuple[int, int]:
    """Compute and move into place the daily facts of every whole day under ``output``
    (:func:`_whole_days`) whose daily facts are not current (call it holding the compaction
    lock, after :func:`write_facts`); the days written, and how many of them keep facts.

    Each day is computed from the hourly facts of its hours where they are stored and from
    its records elsewhere, all days in one Spark job, and kept only where the day's facts
    are at most :data:`FACTS_MAX_SHARE` of what a job reads for the day without them (the
    hourly facts where kept, the records elsewhere): that is what they replace, so the
    share is measured against it, not against the records (a day whose hours all keep
    facts gains only what its facts save on those). Beside the facts: the day's membership
    (:data:`MEMBERS_FILE`) and its hours' totals (:data:`HOUR_TOTALS_FILE`).

    A crash leaves a staging directory (``_tmp-daily-*``, deleted by the next run) and days
    whose facts are not current, which the next run writes: jobs read finer data meanwhile.
    """
    hours = _hours(output)
    current = current_days(output, hours)
    stale = {d: m for d, m in _whole_days(hours).items() if d not in current}
    if not stale:
        return 0, 0
    stamp = f"{os.getpid()}-{time.time_ns()}"
    staging = output / f"{TMP_PREFIX}daily-{stamp}"
    replaced = output / f"{TMP_PREFIX}daily-replaced-{stamp}"
    kept = 0
    try:
        with_data = any(
            any((output / Hour(d, h).relative).glob("*.parquet")) for d in stale for h in range(24)
        )
        counted, found, totals = (
            _stage_days(session(), output, staging, sorted(stale)) if with_data else ({}, None, {})
        )
        for day, marker in stale.items():
            staged = staging / _day_relative(day)
            staged.mkdir(parents=True, exist_ok=True)
            finer = found.finer_rows.get(day, 0) if found else 0
            if day in counted and found and counted[day] <= FACTS_MAX_SHARE * finer:
                kept += 1
                _write_members(staged / MEMBERS_FILE, found.members.get(day, {}))
                _write_hour_totals(staged / HOUR_TOTALS_FILE, totals.get(day, {}))
            else:  # the marker alone: current, and the day's finer data is read
                for part in staged.iterdir():
                    part.unlink()
            (staged / DAY_MARKER).write_text(marker, encoding="utf-8")
            commit(staged, output / DAILY_DIR / _day_relative(day), replaced)
        return len(stale), kept
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(replaced, ignore_errors=True)


def _inside(hour: Hour, window: TimeRange) -> bool:
    end = datetime.fromtimestamp(hour.end, UTC)
    start = datetime.fromtimestamp(hour.end - 3600, UTC)
    return (window.since is None or window.since <= start) and (
        window.until is None or end <= window.until
    )


def _day_inside(day: str, window: TimeRange) -> bool:
    start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
    return (window.since is None or window.since <= start) and (
        window.until is None or start + timedelta(days=1) <= window.until
    )


@dataclass(frozen=True, slots=True)
class FactsChoice:
    """What a read of a window takes from facts: ``days`` from daily facts, ``hours`` from
    hourly facts (none of them in those days), from the compacted directory ``output``."""

    output: Path
    days: tuple[str, ...] = ()
    hours: tuple[Hour, ...] = ()

    def covered(self) -> frozenset[int]:
        """Every hour (:func:`.source.hour_number`) read from facts."""
        numbers = {hour_number(date.fromisoformat(h.date), h.hour) for h in self.hours}
        for day in self.days:
            first = hour_number(date.fromisoformat(day), 0)
            numbers.update(range(first, first + 24))
        return frozenset(numbers)


def choose_facts(
    path: str,
    window: TimeRange,
    *,
    compacted: str | None = None,
    json_only: bool = False,
    daily: bool = True,
) -> FactsChoice | None:
    """Where the facts are and what :func:`read_facts` takes from them: the days whose daily
    facts are current, stored and wholly inside ``window`` (unless not ``daily``), then the
    hours of the other days whose hourly facts are (None: no local compacted directory)."""
    location = compacted or (None if is_kafka_input(path) else compacted_path(path))
    if json_only or location is None or "://" in location:
        return None
    output = Path(location)
    hours = _hours(output)
    days = sorted(d for d, stored in current_days(output, hours).items() if stored) if daily else []
    days = [d for d in days if _day_inside(d, window)]
    taken = set(days)
    stored_hours = sorted(
        h
        for h, stored in current_facts(output, hours).items()
        if stored and h.date not in taken and _inside(h, window)
    )
    return FactsChoice(output, tuple(days), tuple(stored_hours))


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def describe_facts(
    path: str,
    window: TimeRange,
    *,
    compacted: str | None = None,
    json_only: bool = False,
    daily: bool = True,
) -> str | None:
    """What :func:`read_facts` takes from where, as one line for a job's summary, e.g.
    ``facts: 7 days from daily facts, 3 hours from hourly facts, 2 hours from records``
    (None when no facts can be read: a URI, the audit topic, ``--json-only``, no compacted
    directory). The hours from records are those the window overlaps with compacted or JSON
    data outside the facts; a partial hour counts as one."""
    choice = choose_facts(path, window, compacted=compacted, json_only=json_only, daily=daily)
    if choice is None or not choice.output.is_dir():
        return None
    known = {hour_number(date.fromisoformat(h.date), h.hour) for h in _hours(choice.output)}
    known |= local_json_hours(path) or frozenset()
    rest = {h for h in known if hour_overlaps(h, window)} - choice.covered()
    parts = [
        f"{_plural(len(choice.days), 'day')} from daily facts",
        f"{_plural(len(choice.hours), 'hour')} from hourly facts",
        f"{_plural(len(rest), 'hour')} from records",
    ]
    line = "facts: " + ", ".join(parts)
    return line if daily else line + " (daily facts not read: the job needs every hour)"


def _split(
    spark: SparkSession, path: str, window: TimeRange, options: ReadOptions, daily: bool
) -> tuple[FactsChoice, DataFrame]:
    """What is taken from facts (:func:`choose_facts`), and the records of everything else
    (:func:`.source.read_audit`, those hours skipped)."""
    found = choose_facts(
        path,
        window,
        compacted=options.get("compacted"),
        json_only=options.get("json_only", False),
        daily=daily,
    )
    choice = found if found is not None else FactsChoice(Path())
    return choice, read_audit(spark, path, window, skip_hours=choice.covered(), **options)


def _days_of(spark: SparkSession, root: Path, days: Collection[str]) -> DataFrame:
    """The daily facts of ``days`` under ``root`` (one root listed, a partition filter)."""
    df = spark.read.schema(FACTS_SCHEMA).option("basePath", str(root)).parquet(str(root))
    return df.where(F.col("date").cast(StringType()).isin(sorted(days)))


def read_facts(
    spark: SparkSession,
    path: str,
    window: TimeRange | None = None,
    *,
    daily: bool = True,
    **options: Unpack[ReadOptions],
) -> DataFrame:
    """The facts of the window: stored daily facts for the whole days inside it whose daily
    facts are current (unless not ``daily``), stored hourly facts for the compacted hours
    wholly inside it whose facts are current (:func:`choose_facts`), :func:`to_facts` of the
    records for everything else (``options`` as :func:`.source.read_audit`'s).

    A daily fact has no hour: its ``hour_start`` is null. A reader that groups by the hour
    takes the hours of those days from :func:`stored_hour_totals`, or reads with ``daily``
    False."""
    choice, records = _split(spark, path, window or TimeRange(), options, daily)
    parts = [to_facts(records)]
    if choice.hours:
        stored = _hours_of(spark, FACTS_SCHEMA, choice.output / FACTS_DIR, list(choice.hours))
        parts.insert(0, stored.select(*FACT_COLUMNS))
    if choice.days:
        days = _days_of(spark, choice.output / DAILY_DIR, choice.days)
        parts.insert(0, days.select(*FACT_COLUMNS))
    facts = parts[0]
    for part in parts[1:]:
        facts = facts.unionByName(part)
    return facts


def _read_hour_totals(path: Path, day: str) -> list[dict[str, Any]]:
    """A day's stored hour totals as rows of ``hour_start`` (aware UTC) and
    :data:`HOUR_TOTALS`; an unreadable file is an error, not an empty day."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("version") != HOUR_TOTALS_FORMAT:
            raise ValueError(f"version {document.get('version')!r}, expected {HOUR_TOTALS_FORMAT}")
        start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
        return [
            {"hour_start": start + timedelta(hours=int(hour))}
            | {name: int(sums[name]) for name in HOUR_TOTALS}
            for hour, sums in sorted(document["hours"].items())
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: unreadable hour totals ({exc})") from exc


def stored_hour_totals(
    path: str,
    window: TimeRange | None = None,
    *,
    daily: bool = True,
    **options: Unpack[ReadOptions],
) -> list[dict[str, Any]]:
    """The per-hour totals (:func:`outcome_sums`) of the days :func:`read_facts` takes from
    daily facts, from the files beside them (no Spark): with the hours of the rest, what a
    per-hour series of the window needs. Only hours with decisions have a row."""
    choice = choose_facts(
        path,
        window or TimeRange(),
        compacted=options.get("compacted"),
        json_only=options.get("json_only", False),
        daily=daily,
    )
    if choice is None:
        return []
    root = choice.output / DAILY_DIR
    return [
        row
        for day in choice.days
        for row in _read_hour_totals(root / _day_relative(day) / HOUR_TOTALS_FILE, day)
    ]


def read_membership(
    spark: SparkSession,
    path: str,
    window: TimeRange | None = None,
    *,
    daily: bool = True,
    **options: Unpack[ReadOptions],
) -> dict[str, frozenset[str]]:
    """Who was seen in which groups in the window (principal -> groups; principals seen
    without groups absent): the stored membership of the days and hours :func:`read_facts`
    takes from facts, and the records' (:func:`membership_rows`) for the rest, so it covers
    exactly the decisions :func:`read_facts` does (``options`` as
    :func:`.source.read_audit`'s)."""
    choice, records = _split(spark, path, window or TimeRange(), options, daily)
    members: dict[str, set[str]] = defaultdict(set)
    files = [choice.output / FACTS_DIR / hour.relative / MEMBERS_FILE for hour in choice.hours]
    files += [choice.output / DAILY_DIR / _day_relative(d) / MEMBERS_FILE for d in choice.days]
    for file in files:
        for principal, groups in _read_members(file).items():
            members[principal].update(groups)
    rows = membership_rows(records).select("principal", "group").distinct().collect()
    for row in rows:
        members[row["principal"]].add(row["group"])
    return {p: frozenset(g) for p, g in members.items()}
