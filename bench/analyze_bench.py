"""``kafkaguard analyze`` at scale: compact, then report and propose over JSON and Parquet.

Usage (from the repository root, with the test extras installed; Java >= 17)::

    .venv/bin/python bench/analyze_bench.py                      # 10 M records, ~30-45 min
    .venv/bin/python bench/analyze_bench.py --events 1000000     # a smaller run
    .venv/bin/python bench/analyze_bench.py --data /tmp/trail    # reuse generated data

Generation uses Spark itself (``spark.range`` → contract-shaped columns → JSON lines written
into ``date=YYYY-MM-DD/hour=HH`` directories, then renamed ``*.jsonl`` as the proxy's writer
names them): 7 days of traffic, 1,000 principals each using ~10 of 5,000 topics and 2 of 500
groups, 200 client hosts, two listeners (one ``log_only``), 5% denied, one record in 50 an
aggregate (count 2..60) — so "events" below are records (lines), and decisions are more.

Then, in local mode (``local[*]``, loopback, the session's local defaults: shuffle
partitions = 2 × cores, driver memory a bounded quarter of RAM; ``--driver-memory`` overrides):

* ``compact``: every hour of the trail (all closed: nothing writes it) into Parquet under a
  fresh directory, with the compaction's own summary;
* ``report`` (all tables as Parquet, plus the HTML page) and ``propose`` (observed grants →
  ACLs, verified with the StandardAuthorizer) over the JSON lines (``json_only``) and over
  the compacted Parquet — the same jobs, the same results — in ``--rounds`` alternating
  rounds from an empty cache, the best time of each kept;
* a time-range query (one day of the seven) over each: the physical plan's
  ``PartitionFilters`` and the scan's ``numPartitions`` (hour directories actually read)
  against the total.

Each job is timed from reading the files to its last output; events/s is records / seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from kafkaguard.audit.spark.compact import compact  # noqa: E402
from kafkaguard.audit.spark.html_report import render  # noqa: E402
from kafkaguard.audit.spark.output import write_tables  # noqa: E402
from kafkaguard.audit.spark.proposal import render_acl_file  # noqa: E402
from kafkaguard.audit.spark.propose import propose  # noqa: E402
from kafkaguard.audit.spark.report import LARGE_TABLES, build_report, report_data  # noqa: E402
from kafkaguard.audit.spark.schema import FIELD_NAMES  # noqa: E402
from kafkaguard.audit.spark.session import build_session  # noqa: E402
from kafkaguard.audit.spark.source import (  # noqa: E402
    TimeRange,
    partition_filters,
    read_audit,
    scan_statistics,
)

START = datetime(2026, 11, 16, tzinfo=UTC)
PRINCIPALS, TOPICS, GROUPS, HOSTS = 1000, 5000, 500, 200
# (operation, resource type, weight): a producer/consumer mix
OPERATIONS = (
    ("WRITE", "TOPIC", 30),
    ("READ", "TOPIC", 30),
    ("DESCRIBE", "TOPIC", 20),
    ("READ", "GROUP", 12),
    ("DESCRIBE", "GROUP", 5),
    ("IDEMPOTENT_WRITE", "CLUSTER", 2),
    ("DESCRIBE_CONFIGS", "TOPIC", 1),
)


def _pick(h: F.Column, choices: list[tuple[str, int]]) -> F.Column:
    """A weighted choice by ``h`` (0..99)."""
    expr, bound = None, 0
    for value, weight in choices:
        bound += weight
        cond = h < bound
        expr = F.when(cond, value) if expr is None else expr.when(cond, value)
    assert expr is not None
    return expr.otherwise(choices[-1][0])


def generate(spark: SparkSession, events: int, days: int, directory: Path) -> float:
    """Write ``events`` contract records under ``directory``; returns seconds taken."""
    began = time.perf_counter()
    span_ms = days * 86_400_000
    start_ms = int(START.timestamp() * 1000)
    slices = days * 8  # each generating task covers 3 hours: ~1 file per hour directory
    ids = spark.range(0, events, 1, numPartitions=slices)
    h = F.abs(F.hash(F.col("id"))) % 100
    h2 = F.abs(F.hash(F.col("id") + 7)) % 1000
    principal_n = F.abs(F.hash(F.col("id"), F.lit("p"))) % PRINCIPALS
    op = F.abs(F.hash(F.col("id"), F.lit("o"))) % 100
    ms = F.lit(start_ms) + (F.col("id") * F.lit(span_ms) / F.lit(events)).cast("long")
    at = F.timestamp_millis(ms)
    ops = [(f"{o}|{r}", w) for o, r, w in OPERATIONS]
    df = (
        ids.withColumn("at", at)
        .withColumn("opres", _pick(op, ops))
        .withColumn("operation", F.split("opres", r"\|")[0])
        .withColumn("resource_type", F.split("opres", r"\|")[1])
        .withColumn("pn", principal_n)
        .withColumn("log_only", (F.col("pn") % 10) == 0)
        .withColumn("denied", h < 5)
        .withColumn("aggregate", (h2 < 20) & ~F.col("denied"))
    )
    topic = F.format_string(
        "team-%03d.topic-%05d", F.col("pn") % 100, (F.col("pn") * 7 + h2 % 10) % TOPICS
    )
    group = F.format_string("group-%04d", (F.col("pn") * 3 + h2 % 2) % GROUPS)
    name = (
        F.when(F.col("resource_type") == "TOPIC", topic)
        .when(F.col("resource_type") == "GROUP", group)
        .otherwise(F.lit("kafka-cluster"))
    )
    result = F.when(F.col("denied"), "DENIED").otherwise("ALLOWED")
    principal = F.format_string("User:svc-%04d", F.col("pn"))
    acl = F.when(
        ~F.col("denied"),
        F.struct(
            F.col("resource_type").alias("resource_type"),
            F.lit("LITERAL").alias("pattern_type"),
            name.alias("resource_name"),
            principal.alias("principal"),
            F.lit("*").alias("host"),
            F.col("operation").alias("operation"),
            F.lit("ALLOW").alias("permission_type"),
        ),
    )
    iso = F.date_format("at", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    mode = F.when(F.col("log_only"), "log_only").otherwise("enforce")
    records = df.select(
        F.lit(1).alias("schema_version"),
        F.when(F.col("aggregate"), "aggregate").otherwise("decision").alias("kind"),
        iso.alias("time"),
        F.when(F.col("aggregate"), iso).alias("window_end"),
        F.when(F.col("aggregate"), 2 + h2 % 59).otherwise(1).cast("long").alias("count"),
        mode.alias("mode"),
        F.when(F.col("log_only"), "STAGING").otherwise("EXTERNAL").alias("listener"),
        F.lit("SASL_SSL").alias("security_protocol"),
        principal.alias("principal"),
        F.format_string(
            "10.%d.%d.%d", F.col("pn") % 4, (F.col("pn") + h2) % HOSTS % 250, F.col("pn") % 250
        ).alias("client_host"),
        F.format_string("client-%04d", F.col("pn")).alias("client_id"),
        F.lit(0).alias("api_key"),
        F.lit("Produce").alias("api_name"),
        F.lit(9).alias("api_version"),
        F.when(~F.col("aggregate"), (F.col("id") % 2147483647).cast("int")).alias("correlation_id"),
        F.col("operation"),
        F.col("resource_type"),
        F.lit("LITERAL").alias("pattern_type"),
        name.alias("resource_name"),
        result.alias("result"),
        (F.col("log_only") & F.col("denied")).alias("would_deny"),
        F.when(F.col("denied"), "DefaultDeny").otherwise("AllowAcl").alias("reason"),
        F.lit(False).alias("implied"),
        acl.alias("acl"),
        F.date_format("at", "yyyy-MM-dd").alias("date"),
        F.date_format("at", "HH").alias("hour"),
    )
    assert records.columns[: len(FIELD_NAMES)] == list(FIELD_NAMES)
    staging = directory.with_name(directory.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    records.write.partitionBy("date", "hour").option("ignoreNullFields", "false").json(str(staging))
    for i, part in enumerate(sorted(staging.glob("date=*/hour=*/part-*.json"))):
        part.rename(part.with_name(f"audit-bench-{i:05d}.jsonl"))
    for junk in staging.rglob("*"):
        if junk.is_file() and not junk.name.endswith(".jsonl"):
            junk.unlink()
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    return time.perf_counter() - began


def timed_compact(spark: SparkSession, data: Path, output: Path, days: int) -> float:
    """Compact every hour of the generated trail (grace 0: nothing writes it)."""
    began = time.perf_counter()
    now = max(time.time(), (START + timedelta(days=days + 1)).timestamp())
    lines = compact(lambda: spark, data, output, grace=0.0, now=now)
    seconds = time.perf_counter() - began
    for line in lines or ["another compaction holds the lock"]:
        print(f"  {line}")
    return seconds


Source = tuple[str | None, bool]
"""``read_audit``'s ``compacted`` and ``json_only``."""


def timed_report(spark: SparkSession, data: str, out: Path, source: Source) -> float:
    began = time.perf_counter()
    window = TimeRange()
    events = read_audit(spark, data, compacted=source[0], json_only=source[1])
    built = build_report(events, window)
    write_tables(built.tables, str(out / "report"), partitioned=LARGE_TABLES)
    (out / "report.html").write_text(render(report_data(built, window, datetime.now(UTC))))
    return time.perf_counter() - began


def timed_propose(spark: SparkSession, data: str, out: Path, source: Source) -> tuple[float, int]:
    began = time.perf_counter()
    made = propose(read_audit(spark, data, compacted=source[0], json_only=source[1]))
    (out / "proposed.yaml").write_text(render_acl_file(made.acls))
    return time.perf_counter() - began, len(made.acls)


def pruning(
    spark: SparkSession, data: str, days: int, source: Source
) -> tuple[list[str], dict[str, int], float]:
    """One day of the window: the plan's PartitionFilters, the scan's metrics and the
    seconds the (pruned) scan took."""
    day = START + timedelta(days=days // 2)
    window = TimeRange(day, day + timedelta(days=1))
    df: DataFrame = read_audit(
        spark, data, window, compacted=source[0], json_only=source[1]
    ).select("count")
    began = time.perf_counter()
    stats = scan_statistics(df)
    return partition_filters(df), stats, time.perf_counter() - began


def _jobs(
    spark: SparkSession, data: Path, out: Path, source: Source, best: dict[str, float]
) -> None:
    """Time report and propose over ``source``, each from an empty cache (both jobs cache:
    a second run would reuse the first one's tables); keep each job's best time."""
    name = "JSON" if source[1] else "Parquet"
    spark.catalog.clearCache()
    report_s = timed_report(spark, str(data), out, source)
    spark.catalog.clearCache()
    propose_s, acls = timed_propose(spark, str(data), out, source)
    print(
        f"  {name:7}: report {report_s:6.1f} s, propose {propose_s:6.1f} s ({acls} ACLs);"
        f" load average {os.getloadavg()[0]:.1f}"
    )
    for job, seconds in ((f"report  ({name})", report_s), (f"propose ({name})", propose_s)):
        best[job] = min(seconds, best.get(job, seconds))


def _time_range(spark: SparkSession, data: Path, days: int, source: Source) -> None:
    filters, stats, seconds = pruning(spark, str(data), days, source)
    total = sum(1 for _ in data.glob("date=*/hour=*"))
    name = "JSON lines" if source[1] else "compacted Parquet"
    print(f"time-range query (1 day of {days}, {name}): PartitionFilters: [{'; '.join(filters)}]")
    print(
        f"  hour directories read: {stats['numPartitions']} of {total}; "
        f"files {stats['numFiles']}, {stats['filesSize'] / 1e9:.2f} GB; {seconds:.1f} s"
    )


def _size(files: list[Path]) -> str:
    return f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e9:.2f} GB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--data", type=Path, help="audit directory (generated when missing)")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", help="default: the session's (a quarter of RAM)")
    parser.add_argument("--rounds", type=int, default=2, help="JSON/Parquet job rounds")
    args = parser.parse_args()
    conf = {"spark.sql.maxMetadataStringLength": "2000"}  # print PartitionFilters whole
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    spark = build_session(args.master, conf, app_name="kafkaguard analyze bench")
    settings = spark.sparkContext.getConf()
    print(
        f"Spark: {args.master}, spark.sql.shuffle.partitions="
        f"{spark.conf.get('spark.sql.shuffle.partitions')}, "
        f"spark.driver.memory={settings.get('spark.driver.memory')}"
    )
    data = args.data or Path(tempfile.gettempdir()) / f"kafkaguard-analyze-bench-{args.events}"
    out = Path(tempfile.mkdtemp(prefix="kafkaguard-analyze-out-"))
    try:
        if args.regenerate or not data.exists():
            seconds = generate(spark, args.events, args.days, data)
            print(f"generated {args.events:,} records in {seconds:.1f} s into {data}")
        print(f"load average before the jobs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
        print(f"input: {_size(list(data.rglob('*.jsonl')))}, {args.days} days")
        compacted = out / "compacted"
        seconds = timed_compact(spark, data, compacted, args.days)
        print(
            f"compact: {seconds:7.1f} s  {args.events / seconds:>12,.0f} events/s -> "
            f"{_size(list(compacted.rglob('*.parquet')))}"
        )
        best: dict[str, float] = {}
        for round_ in range(1, args.rounds + 1):  # alternated: JVM warm-up favours neither
            print(f"round {round_}:")
            for source in ((None, True), (str(compacted), False)):
                _jobs(spark, data, out, source, best)
        for job, seconds in best.items():
            print(f"{job}: {seconds:7.1f} s  {args.events / seconds:>12,.0f} events/s (best)")
        for source in ((None, True), (str(compacted), False)):
            _time_range(spark, data, args.days, source)
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
