"""Hourly facts: each compacted hour summed per distinct decision, for ``propose`` and ``report``.

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
compacts (HyperLogLog, in the same pass): when they clearly exceed that share of the records
read (:data:`ESTIMATE_MARGIN`), those hours are not summed at all (an hourly run decides per
hour; a backfill of many hours on their average). Otherwise each hour's facts are counted
and kept or dropped.

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
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Final, Unpack

from pyspark.sql import DataFrame, SparkSession
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
    is_kafka_input,
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
ESTIMATE_MARGIN: Final = 0.1
"""The compaction skips summing its hours only when its estimate of their facts exceeds
:data:`FACTS_MAX_SHARE` + this share of their records: HyperLogLog's estimate is within a
few percent (5% relative standard deviation), and the count of each summed hour decides
exactly."""


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


def summed(facts: DataFrame) -> DataFrame:
    """One fact per hour and distinct :data:`FACT_KEYS`."""
    return facts.groupBy("hour_start", *FACT_KEYS).agg(
        F.min("sample_host").alias("sample_host"),
        F.sum("count").alias("count"),
        F.sum("records").alias("records"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def _marker_text(directory: Path) -> str | None:
    try:
        return (directory / MARKER).read_text(encoding="utf-8")
    except OSError:
        return None


def _hours(output: Path) -> dict[Hour, str]:
    """The compacted hours under ``output`` with their markers' text."""
    found = {}
    for directory in output.glob("date=*/hour=*"):
        text = _marker_text(directory)
        if text is not None:
            day, hour = directory.parent.name[5:], int(directory.name[5:])
            found[Hour(day, hour)] = text
    return found


def current_facts(output: Path) -> dict[Hour, bool]:
    """The compacted hours whose facts are current (their marker is the hour's), each with
    whether facts are stored for it (False: they did not shrink it; its records are read)."""
    facts = output / FACTS_DIR
    current = {}
    for hour, text in _hours(output).items():
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
            facts.coalesce(1).write.partitionBy("date", "hour").parquet(str(staging))
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


def _inside(hour: Hour, window: TimeRange) -> bool:
    end = datetime.fromtimestamp(hour.end, UTC)
    start = datetime.fromtimestamp(hour.end - 3600, UTC)
    return (window.since is None or window.since <= start) and (
        window.until is None or end <= window.until
    )


def fact_hours(
    path: str, window: TimeRange, *, compacted: str | None = None, json_only: bool = False
) -> tuple[Path, list[Hour]] | None:
    """Where the facts are and the hours :func:`read_facts` takes from them: current,
    stored, and wholly inside ``window`` (None: no local compacted directory)."""
    location = compacted or (None if is_kafka_input(path) else compacted_path(path))
    if json_only or location is None or "://" in location:
        return None
    output = Path(location)
    current = current_facts(output)
    return output, sorted(h for h, stored in current.items() if stored and _inside(h, window))


def _split(
    spark: SparkSession, path: str, window: TimeRange, options: ReadOptions
) -> tuple[Path, list[Hour], DataFrame]:
    """Where the facts are, the hours taken from them (:func:`fact_hours`), and the records
    of everything else (:func:`.source.read_audit`, those hours skipped)."""
    found = fact_hours(
        path,
        window,
        compacted=options.get("compacted"),
        json_only=options.get("json_only", False),
    )
    output, stored = found if found is not None else (Path(), [])
    skip = frozenset(hour_number(date.fromisoformat(h.date), h.hour) for h in stored)
    return output, stored, read_audit(spark, path, window, skip_hours=skip, **options)


def read_facts(
    spark: SparkSession, path: str, window: TimeRange | None = None, **options: Unpack[ReadOptions]
) -> DataFrame:
    """The facts of the window: stored ones for the compacted hours wholly inside it whose
    facts are current (:func:`fact_hours`), :func:`to_facts` of the records for everything
    else (``options`` as :func:`.source.read_audit`'s)."""
    output, stored, records = _split(spark, path, window or TimeRange(), options)
    if not stored:
        return to_facts(records)
    facts = _hours_of(spark, FACTS_SCHEMA, output / FACTS_DIR, stored).select(*FACT_COLUMNS)
    return facts.unionByName(to_facts(records))


def read_membership(
    spark: SparkSession, path: str, window: TimeRange | None = None, **options: Unpack[ReadOptions]
) -> dict[str, frozenset[str]]:
    """Who was seen in which groups in the window (principal -> groups; principals seen
    without groups absent): the stored membership of the hours :func:`read_facts` takes from
    facts, and the records' (:func:`membership_rows`) for the rest, so it covers exactly the
    decisions :func:`read_facts` does (``options`` as :func:`.source.read_audit`'s)."""
    output, stored, records = _split(spark, path, window or TimeRange(), options)
    members: dict[str, set[str]] = defaultdict(set)
    for hour in stored:
        for principal, groups in _read_members(
            output / FACTS_DIR / hour.relative / MEMBERS_FILE
        ).items():
            members[principal].update(groups)
    rows = membership_rows(records).select("principal", "group").distinct().collect()
    for row in rows:
        members[row["principal"]].add(row["group"])
    return {p: frozenset(g) for p, g in members.items()}
