"""Reading the audit trail: partition discovery, time-range pruning, and dropping bad lines.

Owns how a job turns ``--input``/``--since``/``--until`` into a DataFrame of valid records
with an ``event_time`` column. It must not aggregate; jobs do that. Only ``*.jsonl`` files are
read: the writer's ``*.jsonl.inprogress`` files may end in half a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegerType

from kafkaguard.audit.spark.schema import AUDIT_SCHEMA, EVENT_TIME, SCHEMA_VERSION

RESULTS = ("ALLOWED", "DENIED")


def parse_time(text: str) -> datetime:
    """An ISO-8601 date or timestamp as an aware UTC datetime; naive values are UTC.

    >>> parse_time("2026-11-22").isoformat()
    '2026-11-22T00:00:00+00:00'
    >>> parse_time("2026-11-22T11:15:03+01:00").isoformat()
    '2026-11-22T10:15:03+00:00'
    """
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 date or timestamp: {text!r}") from exc
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """The analysis window: ``since`` inclusive, ``until`` exclusive, either open."""

    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(f"--since {self.since} is not before --until {self.until}")

    def partition_filter(self) -> Column | None:
        """A predicate on ``date``/``hour`` only, so Spark prunes whole directories.

        It keeps every hour that overlaps the window; :meth:`time_filter` then cuts exactly.
        """
        conditions: list[Column] = []
        if self.since is not None:
            day, hour = _lit_date(self.since.date()), self.since.hour
            conditions.append(
                (F.col("date") > day) | ((F.col("date") == day) & (F.col("hour") >= hour))
            )
        if self.until is not None:
            last = self.until - timedelta(microseconds=1)
            day, hour = _lit_date(last.date()), last.hour
            conditions.append(
                (F.col("date") < day) | ((F.col("date") == day) & (F.col("hour") <= hour))
            )
        return _and(conditions)

    def time_filter(self) -> Column | None:
        conditions: list[Column] = []
        if self.since is not None:
            conditions.append(F.col(EVENT_TIME) >= F.lit(self.since))
        if self.until is not None:
            conditions.append(F.col(EVENT_TIME) < F.lit(self.until))
        return _and(conditions)


def _lit_date(day: date) -> Column:
    return F.lit(day).cast(DateType())


def _and(conditions: list[Column]) -> Column | None:
    if not conditions:
        return None
    combined = conditions[0]
    for condition in conditions[1:]:
        combined = combined & condition
    return combined


def valid_records(df: DataFrame) -> DataFrame:
    """Drop what a reader cannot trust (malformed lines parse to nulls; other schema
    versions may mean other things), add ``event_time``, and make ``would_deny`` total."""
    checked = df.where(
        (F.col("schema_version") == SCHEMA_VERSION)
        & F.col("count").isNotNull()
        & (F.col("count") > 0)
        & F.col("principal").isNotNull()
        & F.col("operation").isNotNull()
        & F.col("resource_type").isNotNull()
        & F.col("resource_name").isNotNull()
        & F.col("result").isin(*RESULTS)
    )
    return (
        # try_to_timestamp: Spark 4 runs in ANSI mode, where a cast of one bad time fails
        # the whole job instead of dropping that line.
        checked.withColumn(EVENT_TIME, F.try_to_timestamp(F.col("time")))
        .where(F.col(EVENT_TIME).isNotNull())
        .withColumn("would_deny", F.coalesce(F.col("would_deny"), F.lit(False)))
    )


def read_audit(spark: SparkSession, path: str, window: TimeRange | None = None) -> DataFrame:
    """The valid records under ``path`` (a local path or any Hadoop URI) inside ``window``.

    The partition predicate is applied before anything else so that it reaches the file scan
    as ``PartitionFilters`` (see ``bench/analyze_bench.py`` for the plan).
    """
    window = window or TimeRange()
    if "://" not in path and not Path(path).is_dir():
        raise ValueError(f"{path}: no such audit directory")
    df = (
        spark.read.schema(AUDIT_SCHEMA)
        .option("basePath", path)
        .option("pathGlobFilter", "*.jsonl")
        .option("mode", "PERMISSIVE")
        .json(path)
    )
    partitioned = "date" in df.columns and "hour" in df.columns
    if partitioned:
        pruning = window.partition_filter()
        if pruning is not None:
            df = df.where(pruning)
    else:  # files directly under path: no pruning possible, keep the columns for callers
        df = df.withColumn("date", F.lit(None).cast(DateType())).withColumn(
            "hour", F.lit(None).cast(IntegerType())
        )
    df = valid_records(df)
    exact = window.time_filter()
    return df.where(exact) if exact is not None else df


def partition_filters(df: DataFrame) -> list[str]:
    """The ``PartitionFilters`` of every file scan in ``df``'s physical plan (diagnostics:
    the benchmark and tests show that a time range prunes directories). Spark shortens
    long filter lists to ``spark.sql.maxMetadataStringLength`` characters."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    out = []
    for line in plan.splitlines():
        if "FileScan" in line and "PartitionFilters: [" in line:
            rest = line.split("PartitionFilters: [", 1)[1]
            out.append(rest.split("], PushedFilters:", 1)[0].split("], ReadSchema:", 1)[0])
    return out


def scan_statistics(df: DataFrame) -> dict[str, int]:
    """Execute ``df``'s plan and return its file scan's metrics: ``numPartitions`` (hour
    directories read), ``numFiles``, ``filesSize``, ``numOutputRows``."""
    plan = df._jdf.queryExecution().executedPlan()
    plan.execute().count()  # runs the scan in the JVM; nothing is collected
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        node = leaves.apply(i)
        metrics = node.metrics()
        if metrics.contains("numPartitions") and metrics.contains("numFiles"):
            names = ("numPartitions", "numFiles", "filesSize", "numOutputRows")
            return {n: int(metrics.apply(n).value()) for n in names if metrics.contains(n)}
    raise ValueError("the plan has no file scan")
