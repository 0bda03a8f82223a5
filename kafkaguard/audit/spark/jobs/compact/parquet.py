"""``kafkaguard analyze compact``: the closed hours of the audit trail, as Parquet.

Theory of operation: a run takes the output's lock (a second run, e.g. an overlapping cron job,
reports and does nothing), lists the input and plans from the listing alone
(:mod:`kafkaguard.audit.spark.trail.hours`: the closed-hour rule, markers, the commit), then reads
every closed hour not compacted yet with **one** Spark job and writes it, partitioned by
``date``/``hour``, into a staging directory under the output. Each staged hour gets its marker and
is moved into place with one rename; readers
(:func:`kafkaguard.audit.spark.trail.source.read_audit`) take the hours present from Parquet and the
others from JSON. Runs are incremental (compacted hours are skipped) and idempotent (a second run
finds nothing to do); then the hourly facts ``propose`` and ``report`` read are written for every
compacted hour that lacks current ones, and the daily facts of every whole day (all 24 hours
compacted) that lacks them (:mod:`kafkaguard.audit.spark.trail.facts`). A crash leaves a
staging directory that the next run deletes, and the hours it had not moved are compacted again.

The Parquet holds the records :func:`kafkaguard.audit.spark.trail.source.valid_records` keeps,
``event_time`` included (parsed once, here); every other line (malformed, cut short, another schema
version) is counted during the same scan (a Spark ``Observation``) and reported, never fatal.

**Late files.** A ``.jsonl`` file its hour's marker does not name reached the hour after the
hour was compacted (under the closed-hour rule: a writer stalled, or an aggregation window
ran, for longer than the grace). Jobs do not read it while the hour is read from Parquet;
once the hour is closed again, the next run merges it: only the late files are read, and the
new version of the hour is their Parquet plus hard links to the hour's existing files (same
names, so a job that listed them still reads them), swapped in like any hour. The hour's
earlier JSON files are not needed: they may have been deleted (retention).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from kafkaguard.audit.spark.trail.facts import (
    ESTIMATE_RSD,
    FACT_KEYS,
    FACTS_MAX_SHARE,
    rows_per_hour,
    write_daily_facts,
    write_facts,
)
from kafkaguard.audit.spark.trail.hours import (
    DEFAULT_GRACE_S,
    MARKER,
    Hour,
    Marker,
    Outcome,
    Plan,
    clean_up,
    commit,
    exclusive,
    link_parquet,
    now_iso,
    plan_compaction,
    run_directories,
    summary,
)
from kafkaguard.audit.spark.trail.schema import (
    COMPACTED_SCHEMA,
    EVENT_TIME,
    FIELD_NAMES,
    READ_SCHEMA,
)
from kafkaguard.audit.spark.trail.source import (
    is_valid,
    local_json_hours,
    normalized,
    with_event_time,
)

_PARTITIONS: Final = StructType(
    [StructField("date", StringType()), StructField("hour", StringType())]
)
"""``date``/``hour`` read as the directory names spell them: a user-given type for a
partition column is used as it is, so the strings come from each file's path once, not
from a ``date_format``/``lpad`` of every record (issue 36)."""
_UNIQUE_COLUMNS: Final = ("time", EVENT_TIME, "correlation_id")
"""Columns whose every value is new (a record's time, its request's correlation id): Parquet's
dictionary encoding hashes each into a dictionary until it outgrows its page, then re-encodes
the chunk plainly, a fifth of the records' write at 10M (issue 36); written plainly from the
start. The other columns repeat (principals, resources, operations, hosts) and keep it."""
_SPARK_SAFE: Final = re.compile(r"[A-Za-z0-9/._=+-]+")
"""Paths whose ``file:`` URI is the path itself (no character Hadoop's ``Path`` escapes)."""


def _hour_label(day: Column, hour: Column) -> Column:
    return F.concat(day, F.lit("T"), hour)


def _as_partition_strings(df: DataFrame) -> DataFrame:
    """``date``/``hour`` as the directory names spell them (``hour=07``, not ``hour=7``:
    :mod:`kafkaguard.audit.spark.trail.hours` plans only such directories)."""
    return df.select(*FIELD_NAMES, EVENT_TIME, "date", "hour")


def read_lines(spark: SparkSession, input_dir: Path, files: list[Path]) -> DataFrame:
    """The lines of ``files``: the input's root read with a filter on each file's path,
    which Spark applies to its listing (``_metadata.file_path``: the other files are never
    opened), instead of one path per file, which Spark lists with a job of its own above
    ``spark.sql.sources.parallelPartitionDiscovery.threshold`` (32) paths, a 216-task job
    for 216 files (issue 36). The list is kept where the filter could miss or the root
    could not be read whole: a path Hadoop would escape in its URI, ``.jsonl`` files
    outside ``date=/hour=`` directories."""
    reader = (
        spark.read.schema(StructType([*READ_SCHEMA.fields, *_PARTITIONS.fields]))
        .option("basePath", str(input_dir))
        .option("mode", "PERMISSIVE")
    )
    paths = [str(f) for f in files]
    safe = all(_SPARK_SAFE.fullmatch(p) for p in [str(input_dir), *paths])
    if not safe or local_json_hours(str(input_dir)) is None:  # stray .jsonl: Spark's
        return reader.json(paths)  # partition discovery of the root would refuse them
    wanted = F.col("_metadata.file_path").isin([f"file:{p}" for p in paths])
    return reader.option("pathGlobFilter", "*.jsonl").json(str(input_dir)).where(wanted)


def _json_part(
    spark: SparkSession, input_dir: Path, files: list[Path], observed: Observation
) -> DataFrame:
    """The valid records of ``files``, counting the lines and the bad ones on the way.

    The estimate of distinct decisions hashes them to one long (``xxhash64``) before
    HyperLogLog: the struct it took before cost 2.4 µs a record (issue 36)."""
    parsed = with_event_time(normalized(read_lines(spark, input_dir, files)))
    bad = ~is_valid()
    label = _hour_label(F.col("date"), F.col("hour"))
    counted = parsed.observe(
        observed,
        F.count(F.lit(1)).alias("lines"),
        F.count_if(bad).alias("bad_lines"),
        F.collect_set(F.when(bad, label)).alias("bad_hours"),
        F.approx_count_distinct(
            F.when(~bad, F.xxhash64(label, *FACT_KEYS)), rsd=ESTIMATE_RSD
        ).alias("distinct_decisions"),
    )
    return _as_partition_strings(counted.where(is_valid()))


def _sources(plan: Plan) -> list[Path]:
    files = [f.directory / name for f in plan.new for name in sorted(f.closed)]
    return files + [m.files.directory / name for m in plan.merge for name in m.late]


def _write(spark: SparkSession, input_dir: Path, sources: list[Path], staging: Path) -> Outcome:
    """One Spark job: the new hours' JSON files and the late files, as Parquet."""
    observed = Observation("compact")
    records = _json_part(spark, input_dir, sources, observed)
    plain = {f"parquet.enable.dictionary#{c}": "false" for c in _UNIQUE_COLUMNS}
    records.write.options(**plain).partitionBy("date", "hour").parquet(str(staging))
    metrics = observed.get
    return Outcome(
        files=len(sources),
        bytes=sum(p.stat().st_size for p in sources),
        lines=int(metrics["lines"]),
        bad_lines=int(metrics["bad_lines"]),
        bad_hours=sorted(str(h) for h in metrics["bad_hours"]),
        distinct_decisions=int(metrics["distinct_decisions"]),
    )


def _stage(staging: Path, output: Path, hour: Hour, marker: Marker, merged: bool) -> Path:
    staged = staging / hour.relative
    staged.mkdir(parents=True, exist_ok=True)
    if merged:
        link_parquet(output / hour.relative, staged)
    (staged / MARKER).write_text(marker.to_json(hour) + "\n", encoding="utf-8")
    return staged


def execute(
    session: Callable[[], SparkSession], input_dir: Path, output: Path, plan: Plan
) -> Outcome:
    """Write, mark and commit every hour of ``plan`` (call it holding :func:`exclusive`).

    ``session`` is called only if there is something to read (hours without ``.jsonl``
    files are committed with their marker alone).
    """
    staging, replaced = run_directories(output)
    sources = _sources(plan)
    try:
        spark = session() if sources else None
        outcome = _write(spark, input_dir, sources, staging) if spark else Outcome()
        written = rows_per_hour(spark, staging, COMPACTED_SCHEMA) if spark else {}
        earlier = {m.files.hour: m.marker for m in plan.merge}
        for files in sorted([*plan.new, *(m.files for m in plan.merge)], key=lambda f: f.hour):
            hour, before = files.hour, earlier.get(files.hour)
            marker = Marker(
                (before.sources if before else {}) | files.closed,
                (before.records if before else 0) + written.get(hour, 0),
                now_iso(),
            )
            staged = _stage(staging, output, hour, marker, before is not None)
            commit(staged, output / hour.relative, replaced)
            outcome.hours.append(hour)
            outcome.records += marker.records
        return outcome
    finally:  # whatever happened: nothing staged is left, no replaced hour is lost
        clean_up(output)


def compact(
    session: Callable[[], SparkSession],
    input_dir: Path,
    output: Path,
    *,
    grace: float = DEFAULT_GRACE_S,
    now: float | None = None,
) -> list[str] | None:
    """One run: lock, plan, write, commit, clean up; the summary lines, or None when another
    run holds the lock."""
    input_dir, output = input_dir.resolve(), output.resolve()
    if output == input_dir:
        raise ValueError("the output must not be the audit directory itself")
    with exclusive(output) as held:
        if not held:
            return None
        at = time.time() if now is None else now
        clean_up(output)
        plan = plan_compaction(input_dir, output, at, grace)
        outcome = execute(session, input_dir, output, plan)
        lines = summary(plan, outcome, output, grace)
        # Hours just compacted whose facts would not shrink them (estimated during the same
        # scan) are not summed at all: only their markers are written (FACTS_MAX_SHARE).
        valid = outcome.lines - outcome.bad_lines
        no_facts = (
            {files.hour for files in plan.new}
            if outcome.distinct_decisions > FACTS_MAX_SHARE * valid
            else set()
        )
        written, kept = write_facts(session, output, no_facts)
        share = f"{FACTS_MAX_SHARE:.0%}"
        lines += _facts_line(
            "hourly",
            written,
            "hours",
            written - kept,
            f"read from their records (facts above {share} of the records)",
        )
        days, kept_days = write_daily_facts(session, output)
        lines += _facts_line(
            "daily",
            days,
            "whole days",
            days - kept_days,
            f"read from their hours (daily facts above {share} of the hourly facts and"
            " records they replace)",
        )
        return lines


def _facts_line(kind: str, count: int, unit: str, dropped: int, why: str) -> list[str]:
    """What a run wrote of one kind of facts (nothing written: no line), and how many of the
    ``count`` keep no facts (``dropped``) and ``why``."""
    if not count:
        return []
    line = f"{kind} facts (for propose and report) of {count} {unit} written"
    return [line + (f"; {dropped} of them {why}" if dropped else "")]
