"""``kafkaguard analyze`` at scale: compact, then report and propose over JSON and Parquet.

Usage (from the repository root, with the test extras installed; Java >= 17)::

    .venv/bin/python bench/analyze_bench.py                      # 10 M records, ~15 min
    .venv/bin/python bench/analyze_bench.py --events 1000000     # a smaller run
    .venv/bin/python bench/analyze_bench.py --data /tmp/trail    # reuse generated data
    .venv/bin/python bench/analyze_bench.py --duckdb             # with the DuckDB reference
    .venv/bin/python bench/analyze_bench.py --shape repeating    # hours that repeat

Generation uses Spark itself (``spark.range`` → contract-shaped columns → JSON lines written
into ``date=YYYY-MM-DD/hour=HH`` directories, then renamed ``*.jsonl`` as the proxy's writer
names them): 7 days of traffic on two listeners (one ``log_only``), in one of two shapes
(``--shape``). ``varied`` (the default, every figure before issue 36's item 9):
1,000 principals each using ~10 of 5,000 topics and 2 of 500 groups, 200 client hosts, 5%
denied, one record in 50 an aggregate (count 2..60); nearly every record of an hour is a
distinct decision. ``repeating``: 200 principals, each with a stable set of 2 to 8 uses
(operation, resource, client host and id; ~1,000 in all, drawn from ``--seed``) that it
repeats hour after hour, allowed uses as aggregates with steady per-use rates, denied ones
as single decisions (:func:`population`, :func:`repeating_events`); an hour's distinct
decisions are then its uses, whatever the size. "Events" below are records (lines), and
decisions are more. After generating, the bench prints the records and the distinct
decisions (as the hourly facts count them) per hour.

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

``--duckdb`` adds the issue's reference (DuckDB is a benchmark reference only, never a
runtime dependency: ``pip install -e '.[bench]'``): in every round, right after the Spark
jobs on the same input, DuckDB runs ``propose``'s aggregation (:func:`observed_grants`) and
the report's cube with its main roll-ups, on the same compacted Parquet and on the same JSON
lines (validated as :func:`kafkaguard.audit.spark.trail.source.valid_records` does), and the first
round checks that DuckDB's rows equal Spark's.

``--cold`` (issue 29) runs every job as users run it instead: each a fresh ``kafkaguard
analyze`` process (``python -m kafkaguard analyze ...``), cold JVM included: ``compact``
(records, hourly and daily facts), then ``propose``, ``report --html``, ``unused`` and
``whatif`` on the compacted trail with the facts (each job's ``facts:`` line shown: what it
read from daily facts, hourly facts and records), then ``propose`` and ``report`` again
without them (both facts directories removed: the compacted records are read; the ACL files
and the report's totals compared). Wall time from the process's
start to its exit; CPU seconds of its processes (on a shared machine the steadier figure);
peak RSS: the highest ``VmHWM`` of the process's JVM (and of its Python), polled while it
runs. The driver JVM's class archive (:mod:`kafkaguard.audit.spark.runtime.class_archive`)
is there as it is for a user after a first job: when missing, a first ``report`` over half
an hour writes it before the timed jobs, and its line says so. ``--conf KEY=VALUE`` passes a
Spark setting to every job (e.g. JVM options to compare; ``spark.driver.extraJavaOptions``
replaces kafkaguard's own, the archive included). With ``--duckdb`` the reference computes
the same tables from the raw JSON lines, once. ``--spark-connect`` adds ``propose`` and
``report --html`` as fresh ``--remote`` clients of one Spark Connect server kept running
(:func:`connect_jobs`).

Peak memory: the kernel's high-water mark of resident memory (``VmHWM`` in
``/proc/<pid>/status``) of the driver JVM (the Python process's ``java`` child; in local mode
it is the executor too) and of the Python process (where DuckDB runs), reset before each job
by writing ``5`` to ``/proc/<pid>/clear_refs`` (Linux ``proc(5)``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from kafkaguard.audit.spark.jobs.compact.parquet import compact  # noqa: E402
from kafkaguard.audit.spark.jobs.propose.grants import propose  # noqa: E402
from kafkaguard.audit.spark.jobs.report.cube import (  # noqa: E402
    LARGE_TABLES,
    Report,
    build_report,
    report_data,
)
from kafkaguard.audit.spark.render.html import render  # noqa: E402
from kafkaguard.audit.spark.runtime.class_archive import class_archive  # noqa: E402
from kafkaguard.audit.spark.runtime.output import write_tables  # noqa: E402
from kafkaguard.audit.spark.runtime.session import build_session  # noqa: E402
from kafkaguard.audit.spark.solver.proposal import render_acl_file  # noqa: E402
from kafkaguard.audit.spark.trail.facts import DAILY_DIR, FACT_KEYS, FACTS_DIR  # noqa: E402
from kafkaguard.audit.spark.trail.schema import EVENT_TIME, FIELD_NAMES  # noqa: E402
from kafkaguard.audit.spark.trail.source import (  # noqa: E402
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
SHAPES = ("varied", "repeating")
"""``--shape``: :func:`varied_events` (every record a draw of its own) or
:func:`repeating_events` (a fixed population doing the same things every hour)."""
REPEATING_PRINCIPALS = 200
"""The repeating shape's population (issue 29's "200 principals"): with 2 to 8 uses each,
~1,000 uses, which at 10M records over 7 days is one record per use and minute window, what
the proxy's ``audit.allowed: aggregate`` (60 s windows) writes for clients that never stop."""
USE_SCHEMA = (
    "use long, principal string, client_host string, client_id string, operation string, "
    "resource_type string, resource_name string, log_only boolean, denied boolean, "
    "per_minute long"
)


def _pick(h: Column, choices: list[tuple[str, int]]) -> Column:
    """A weighted choice by ``h`` (0..99)."""
    expr, bound = None, 0
    for value, weight in choices:
        bound += weight
        cond = h < bound
        expr = F.when(cond, value) if expr is None else expr.when(cond, value)
    assert expr is not None
    return expr.otherwise(choices[-1][0])


def _record_ids(spark: SparkSession, events: int, days: int) -> DataFrame:
    """``id`` 0..events-1 and its time ``at``, spread evenly over ``days`` from :data:`START`
    (so each hour holds a contiguous run of ids)."""
    span_ms = days * 86_400_000
    start_ms = int(START.timestamp() * 1000)
    slices = days * 8  # each generating task covers 3 hours: ~1 file per hour directory
    ids = spark.range(0, events, 1, numPartitions=slices)
    ms = F.lit(start_ms) + (F.col("id") * F.lit(span_ms) / F.lit(events)).cast("long")
    return ids.withColumn("at", F.timestamp_millis(ms))


def varied_events(spark: SparkSession, events: int, days: int) -> DataFrame:
    """Today's shape: every field of every record drawn from hashes of its id. 1,000
    principals each using ~10 of 5,000 topics and 2 of 500 groups from 200 client hosts; 5%
    denied, one record in 50 an aggregate (count 2..60). Nearly every record of an hour is a
    distinct decision (issue 29: 922,055 facts from 1M records)."""
    h = F.abs(F.hash(F.col("id"))) % 100
    h2 = F.abs(F.hash(F.col("id") + 7)) % 1000
    principal_n = F.abs(F.hash(F.col("id"), F.lit("p"))) % PRINCIPALS
    op = F.abs(F.hash(F.col("id"), F.lit("o"))) % 100
    ops = [(f"{o}|{r}", w) for o, r, w in OPERATIONS]
    df = (
        _record_ids(spark, events, days)
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
    host = F.format_string(
        "10.%d.%d.%d", F.col("pn") % 4, (F.col("pn") + h2) % HOSTS % 250, F.col("pn") % 250
    )
    return df.select(
        "id",
        "at",
        F.format_string("User:svc-%04d", F.col("pn")).alias("principal"),
        host.alias("client_host"),
        F.format_string("client-%04d", F.col("pn")).alias("client_id"),
        "operation",
        "resource_type",
        name.alias("resource_name"),
        "log_only",
        "denied",
        "aggregate",
        F.when(F.col("aggregate"), 2 + h2 % 59).otherwise(1).cast("long").alias("count"),
    )


def _resource_name(rng: random.Random, pn: int, resource_type: str) -> str:
    """One of principal ``pn``'s team's 10 topics or 2 groups (as the varied shape names
    them), or the cluster."""
    if resource_type == "TOPIC":
        return f"team-{pn % 100:03d}.topic-{(pn * 7 + rng.randrange(10)) % TOPICS:05d}"
    if resource_type == "GROUP":
        return f"group-{(pn * 3 + rng.randrange(2)) % GROUPS:04d}"
    return "kafka-cluster"


def population(seed: int, principals: int = REPEATING_PRINCIPALS) -> list[tuple[Any, ...]]:
    """The repeating shape's uses (rows of :data:`USE_SCHEMA`), drawn from ``seed``: each
    principal runs 1 to 3 client hosts (pods) and does 2 to 8 things (an operation on one of
    its team's topics or groups, or on the cluster) from one of them, each at a steady rate
    of 1 to ~1,000 checks a minute (log-uniform: a few busy producers and consumers, many
    idle describers); 5% of the uses are denied every time (a client retrying a missing
    ACL), one principal in ten is on the ``log_only`` listener (as in the varied shape)."""
    rng = random.Random(seed)
    weights = [w for _, _, w in OPERATIONS]
    uses: list[tuple[Any, ...]] = []
    for pn in range(principals):
        hosts = [f"10.{pn % 4}.{rng.randrange(250)}.{pn % 250}" for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(2, 8)):
            operation, resource_type, _ = rng.choices(OPERATIONS, weights)[0]
            name = _resource_name(rng, pn, resource_type)
            uses.append(
                (
                    len(uses),
                    f"User:svc-{pn:04d}",
                    rng.choice(hosts),
                    f"client-{pn:04d}",
                    operation,
                    resource_type,
                    name,
                    pn % 10 == 0,
                    rng.random() < 0.05,
                    int(10 ** rng.uniform(0, 3)),
                )
            )
    return uses


def repeating_events(spark: SparkSession, events: int, days: int, seed: int) -> DataFrame:
    """The shape of real clients: record ``id`` is use ``id mod uses`` of
    :func:`population`, so every hour with at least as many records as uses holds every use
    (the same decisions hour after hour) and only the counts change. An allowed use writes
    what ``audit.allowed: aggregate`` writes (one aggregate per window, its count the use's
    rate ±50%), a denied use single decisions (denials are never aggregated)."""
    uses = population(seed)
    table = F.broadcast(spark.createDataFrame(uses, USE_SCHEMA))
    jitter = 50 + F.abs(F.hash(F.col("id"), F.lit("c"))) % 101  # 50..150 %
    count = F.greatest(F.lit(1), (F.col("per_minute") * jitter / 100).cast("long"))
    return (
        _record_ids(spark, events, days)
        .withColumn("use", F.col("id") % len(uses))
        .join(table, "use")
        .select(
            "id",
            "at",
            "principal",
            "client_host",
            "client_id",
            "operation",
            "resource_type",
            "resource_name",
            "log_only",
            "denied",
            (~F.col("denied")).alias("aggregate"),
            F.when(F.col("denied"), F.lit(1).cast("long")).otherwise(count).alias("count"),
        )
    )


def contract_records(df: DataFrame) -> DataFrame:
    """The audit contract's records (:data:`FIELD_NAMES`, then the ``date`` and ``hour``
    partition columns) of a shape's rows: the fields both shapes have in common are derived
    here, once."""
    iso = F.date_format("at", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    acl = F.when(
        ~F.col("denied"),
        F.struct(
            F.col("resource_type").alias("resource_type"),
            F.lit("LITERAL").alias("pattern_type"),
            F.col("resource_name").alias("resource_name"),
            F.col("principal").alias("principal"),
            F.lit("*").alias("host"),
            F.col("operation").alias("operation"),
            F.lit("ALLOW").alias("permission_type"),
        ),
    )
    records = df.select(
        F.lit(2).alias("schema_version"),
        F.when(F.col("aggregate"), "aggregate").otherwise("decision").alias("kind"),
        iso.alias("time"),
        F.when(F.col("aggregate"), iso).alias("window_end"),
        F.col("count"),
        F.when(F.col("log_only"), "log_only").otherwise("enforce").alias("mode"),
        F.when(F.col("log_only"), "STAGING").otherwise("EXTERNAL").alias("listener"),
        F.lit("SASL_SSL").alias("security_protocol"),
        F.col("principal"),
        F.array().cast("array<string>").alias("groups"),  # connections without groups
        F.col("client_host"),
        F.col("client_id"),
        F.lit(0).alias("api_key"),
        F.lit("Produce").alias("api_name"),
        F.lit(9).alias("api_version"),
        F.when(~F.col("aggregate"), (F.col("id") % 2147483647).cast("int")).alias("correlation_id"),
        F.col("operation"),
        F.col("resource_type"),
        F.lit("LITERAL").alias("pattern_type"),
        F.col("resource_name"),
        F.when(F.col("denied"), "DENIED").otherwise("ALLOWED").alias("result"),
        (F.col("log_only") & F.col("denied")).alias("would_deny"),
        F.when(F.col("denied"), "DefaultDeny").otherwise("AllowAcl").alias("reason"),
        F.lit(False).alias("implied"),
        acl.alias("acl"),
        F.date_format("at", "yyyy-MM-dd").alias("date"),
        F.date_format("at", "HH").alias("hour"),
    )
    assert records.columns[: len(FIELD_NAMES)] == list(FIELD_NAMES)
    return records


def generate(
    spark: SparkSession,
    events: int,
    days: int,
    directory: Path,
    shape: str = "varied",
    seed: int = 1,
) -> float:
    """Write ``events`` contract records of ``shape`` under ``directory`` (``seed``: the
    repeating shape's population; the varied one has none); returns seconds taken. The same
    arguments write the same files."""
    began = time.perf_counter()
    if shape == "varied":
        rows = varied_events(spark, events, days)
    elif shape == "repeating":
        rows = repeating_events(spark, events, days, seed)
    else:
        raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
    staging = directory.with_name(directory.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    contract_records(rows).write.partitionBy("date", "hour").option(
        "ignoreNullFields", "false"
    ).json(str(staging))
    for i, part in enumerate(sorted(staging.glob("date=*/hour=*/part-*.json"))):
        part.rename(part.with_name(f"audit-bench-{i:05d}.jsonl"))
    for junk in staging.rglob("*"):
        if junk.is_file() and not junk.name.endswith(".jsonl"):
            junk.unlink()
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    return time.perf_counter() - began


def hourly_shape(spark: SparkSession, data: Path) -> tuple[float, float]:
    """(records, distinct decisions) per hour of the trail under ``data``, averaged over its
    hours: a decision as the hourly facts count one (its hour and
    :data:`~kafkaguard.audit.spark.trail.facts.FACT_KEYS`), so their ratio is the share of
    the records that facts would keep (``analyze compact`` keeps them at most
    :data:`~kafkaguard.audit.spark.trail.facts.FACTS_MAX_SHARE`)."""
    events = read_audit(spark, str(data), json_only=True)
    hour = F.date_trunc("hour", F.col(EVENT_TIME)).alias("hour_start")
    per_decision = events.groupBy(hour, *FACT_KEYS).agg(F.count(F.lit(1)).alias("records"))
    per_hour = per_decision.groupBy("hour_start").agg(
        F.sum("records").alias("records"), F.count(F.lit(1)).alias("decisions")
    )
    row = per_hour.agg(F.avg("records").alias("r"), F.avg("decisions").alias("d")).first()
    if row is None or row["r"] is None:
        raise RuntimeError(f"no valid record under {data}")
    return float(row["r"]), float(row["d"])


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


def timed_report(spark: SparkSession, data: str, out: Path, source: Source) -> tuple[float, Report]:
    began = time.perf_counter()
    window = TimeRange()
    events = read_audit(spark, data, compacted=source[0], json_only=source[1])
    built = build_report(events, window)
    write_tables(built.tables, str(out / "report"), partitioned=LARGE_TABLES)
    (out / "report.html").write_text(render(report_data(built, window, datetime.now(UTC))))
    return time.perf_counter() - began, built


def timed_propose(
    spark: SparkSession, data: str, out: Path, source: Source
) -> tuple[float, int, DataFrame]:
    began = time.perf_counter()
    made = propose(read_audit(spark, data, compacted=source[0], json_only=source[1]))
    (out / "proposed.yaml").write_text(render_acl_file(made.acls))
    return time.perf_counter() - began, len(made.acls), made.grants


class PeakRss:
    """Peak resident memory of the driver JVM and of this Python process, per job: the
    kernel's ``VmHWM``, reset by ``clear_refs`` (``proc(5)``; the reset needs Linux >= 4.0
    and write access to the file, else the peak is since the process started)."""

    def __init__(self) -> None:
        self.pids = {"JVM": _java_child(), "Python": os.getpid()}

    def reset(self) -> None:
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                Path(f"/proc/{pid}/clear_refs").write_text("5")

    def peaks(self) -> dict[str, int]:
        """MiB by process (0 when unknown)."""
        found = {}
        for name, pid in self.pids.items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                found[name] = 0
                continue
            hwm = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")]
            kib = hwm[0] if hwm else "0"
            found[name] = int(kib) // 1024
        return found


def _java_child() -> int:
    """The JVM that pyspark started (a direct child running ``java``), or 0."""
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and cmd.endswith(b"java"):
            return int(proc.name)
    return 0


DUCKDB_JSON_COLUMNS = {
    "schema_version": "INTEGER",
    "time": "VARCHAR",
    "count": "BIGINT",
    "listener": "VARCHAR",
    "security_protocol": "VARCHAR",
    "principal": "VARCHAR",
    "client_host": "VARCHAR",
    "operation": "VARCHAR",
    "resource_type": "VARCHAR",
    "resource_name": "VARCHAR",
    "result": "VARCHAR",
    "would_deny": "BOOLEAN",
    "reason": "VARCHAR",
}
"""The fields the reference reads from a JSON line (others are skipped), typed as
:data:`kafkaguard.audit.spark.trail.schema.AUDIT_SCHEMA` types them."""

DUCKDB_GRANTS = """
SELECT principal, '*' AS host, operation, resource_type, resource_name,
       sum("count") AS decisions,
       sum(CASE WHEN would_deny THEN "count" ELSE 0 END) AS would_deny,
       max(would_deny AND reason = 'DenyAcl') AS deny_acl,
       min(client_host) AS sample_host,
       min(event_time) AS first_seen, max(event_time) AS last_seen
FROM events
WHERE (result = 'ALLOWED' AND coalesce(reason, '') <> 'SuperUser') OR would_deny
GROUP BY ALL
ORDER BY principal, host, operation, resource_type, resource_name
"""
"""``propose``'s :func:`observed_grants` (hosts as ``*``), in DuckDB's SQL."""

DUCKDB_CUBE = """
CREATE OR REPLACE TEMP TABLE cube AS
SELECT date_trunc('hour', event_time) AS hour_start,
       principal, listener, security_protocol, operation, resource_type, resource_name,
       sum(CASE WHEN result = 'ALLOWED' THEN "count" ELSE 0 END) AS allowed,
       sum(CASE WHEN result = 'DENIED' THEN "count" ELSE 0 END) AS denied,
       sum(CASE WHEN would_deny THEN "count" ELSE 0 END) AS would_deny,
       min(event_time) AS first_seen, max(event_time) AS last_seen, count(*) AS records
FROM events
GROUP BY ALL
"""
"""The report's :func:`hourly_cube`; the roll-ups below are the report's tables of the same
names (the cube is at its hourly resolution for a trail of up to eight days)."""

DUCKDB_ROLLUPS = {
    "by_principal": """
        SELECT principal, sum(allowed) AS allowed, sum(denied) AS denied,
               sum(would_deny) AS would_deny, sum(allowed) + sum(denied) AS total,
               min(first_seen) AS first_seen, max(last_seen) AS last_seen
        FROM cube GROUP BY principal ORDER BY total DESC, principal""",
    "by_resource": """
        SELECT resource_type, resource_name, sum(allowed) AS allowed, sum(denied) AS denied,
               sum(would_deny) AS would_deny, sum(allowed) + sum(denied) AS total,
               min(first_seen) AS first_seen, max(last_seen) AS last_seen
        FROM cube GROUP BY resource_type, resource_name
        ORDER BY total DESC, resource_type, resource_name""",
    "decisions_over_time": """
        SELECT hour_start, 1 AS hours, sum(allowed) AS allowed, sum(denied) AS denied,
               sum(would_deny) AS would_deny
        FROM cube GROUP BY hour_start ORDER BY hour_start""",
    "principal_topic": """
        SELECT principal, resource_name AS topic, sum(allowed) AS allowed,
               sum(denied) AS denied, sum(would_deny) AS would_deny
        FROM cube WHERE resource_type = 'TOPIC' GROUP BY principal, resource_name
        ORDER BY principal, topic""",
}


def duckdb_events(data: Path, compacted: Path | None) -> str:
    """The valid records as a DuckDB relation: the compacted Parquet as it is, or the JSON
    lines validated as :func:`kafkaguard.audit.spark.trail.source.valid_records` does."""
    if compacted is not None:
        return f"read_parquet('{compacted}/date=*/hour=*/*.parquet')"
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in DUCKDB_JSON_COLUMNS.items()) + "}"
    lines = (
        f"read_json('{data}/date=*/hour=*/*.jsonl', format='newline_delimited', "
        f"columns={columns}, hive_partitioning=false)"
    )
    return f"""(
        SELECT * EXCLUDE (would_deny), coalesce(would_deny, false) AS would_deny
        FROM (SELECT *, try_cast("time" AS TIMESTAMPTZ) AS event_time FROM {lines})
        WHERE schema_version IN (1, 2) AND "count" > 0 AND principal IS NOT NULL
          AND operation IS NOT NULL AND resource_type IS NOT NULL
          AND resource_name IS NOT NULL AND result IN ('ALLOWED', 'DENIED')
          AND event_time IS NOT NULL
    )"""


def _normal(value: Any, naive_is_local: bool) -> Any:
    """Timestamps as UTC epoch microseconds: Spark collects them naive in the local zone,
    DuckDB aware (TIMESTAMPTZ) or naive in UTC (Parquet's INT96)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.astimezone(UTC) if naive_is_local else value.replace(tzinfo=UTC)
        return round(value.timestamp() * 1_000_000)
    return value


def _rows(rows: list[Any], *, naive_is_local: bool) -> list[tuple[Any, ...]]:
    return [tuple(_normal(v, naive_is_local) for v in row) for row in rows]


def duckdb_jobs(
    data: Path, compacted: Path | None
) -> tuple[float, float, dict[str, list[tuple[Any, ...]]]]:
    """Seconds of the grants query and of the cube with its roll-ups, and their rows."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    events = duckdb_events(data, compacted)
    began = time.perf_counter()
    grants = con.execute(DUCKDB_GRANTS.replace("FROM events", f"FROM {events}")).fetchall()
    grants_s = time.perf_counter() - began
    began = time.perf_counter()
    con.execute(DUCKDB_CUBE.replace("FROM events", f"FROM {events}"))
    tables = {name: con.execute(sql).fetchall() for name, sql in DUCKDB_ROLLUPS.items()}
    report_s = time.perf_counter() - began
    con.close()
    found = {"observed_grants": grants, **tables}
    return grants_s, report_s, {n: _rows(r, naive_is_local=False) for n, r in found.items()}


def spark_rows(built: Report, grants: DataFrame) -> dict[str, list[tuple[Any, ...]]]:
    """Spark's rows of the tables the reference computes (from the jobs' cached results)."""
    found = {"observed_grants": grants.collect()}
    for name in DUCKDB_ROLLUPS:
        found[name] = built.tables[name].collect()
    return {n: _rows([tuple(r) for r in rows], naive_is_local=True) for n, rows in found.items()}


def same_rows(spark: dict[str, list[Any]], duck: dict[str, list[Any]]) -> list[str]:
    """The tables whose rows differ (order included: both sort the same way, ties aside)."""
    differ = []
    for name, rows in spark.items():
        if sorted(rows, key=repr) != sorted(duck[name], key=repr) or len(rows) != len(duck[name]):
            differ.append(f"{name} ({len(rows)} Spark rows, {len(duck[name])} DuckDB rows)")
    return differ


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


Timings = dict[str, list[float]]
"""Seconds of every round, by job."""


def _record(timings: Timings, peaks: dict[str, int], job: str, seconds: float, rss: PeakRss) -> str:
    timings.setdefault(job, []).append(seconds)
    now = rss.peaks()
    for process, mib in now.items():
        key = f"{job} [{process}]"
        peaks[key] = max(mib, peaks.get(key, 0))
    return f"{seconds:6.1f} s (peak RSS: JVM {now['JVM']} MiB, Python {now['Python']} MiB)"


def _jobs(
    spark: SparkSession,
    data: Path,
    out: Path,
    source: Source,
    timings: Timings,
    peaks: dict[str, int],
    duck: bool,
) -> None:
    """Time report and propose over ``source``, each from an empty cache (both jobs cache:
    a second run would reuse the first one's tables), then DuckDB's reference on the same
    files; the first time, check that DuckDB's rows are Spark's."""
    name = "JSON" if source[1] else "Parquet"
    rss = PeakRss()
    spark.catalog.clearCache()
    rss.reset()
    report_s, built = timed_report(spark, str(data), out, source)
    print(f"  {name:7}: report  {_record(timings, peaks, f'report  ({name})', report_s, rss)}")
    rss.reset()
    propose_s, acls, grants = timed_propose(spark, str(data), out, source)
    line = _record(timings, peaks, f"propose ({name})", propose_s, rss)
    print(f"  {name:7}: propose {line}, {acls} ACLs; load average {os.getloadavg()[0]:.1f}")
    if duck:
        rss.reset()
        compacted = Path(source[0]) if source[0] else None
        grants_s, cube_s, rows = duckdb_jobs(data, compacted)
        line = _record(timings, peaks, f"DuckDB grants  ({name})", grants_s, rss)
        print(f"  {name:7}: DuckDB grants {line}")
        line = _record(timings, peaks, f"DuckDB report tables ({name})", cube_s, rss)
        print(f"  {name:7}: DuckDB cube and roll-ups {line}")
        if f"checked {name}" not in peaks:
            peaks[f"checked {name}"] = 1
            differ = same_rows(spark_rows(built, grants), rows)
            sizes = ", ".join(f"{n} {len(r)}" for n, r in rows.items())
            verdict = f"DIFFER: {'; '.join(differ)}" if differ else f"same rows ({sizes})"
            print(f"  {name:7}: DuckDB vs Spark: {verdict}")
    spark.catalog.clearCache()


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


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(proc.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _hwm_mib(pid: int) -> tuple[bool, int, float]:
    """(is it a JVM, its VmHWM in MiB, its CPU seconds so far); (False, 0, 0) once gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        java = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
    except OSError:
        return False, 0, 0.0
    cpu = (int(stat[11]) + int(stat[12])) / CLOCK_TICKS  # utime + stime (proc(5))
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return java, int(line.split()[1]) // 1024, cpu
    return java, 0, cpu


class Cold:
    """What one fresh process took: wall seconds, CPU seconds of its processes (sampled
    every 0.2 s: what a process spends in its last 0.2 s is missed; repeatable under load,
    unlike wall time), peak RSS of its JVM and of its Python (MiB), and what it printed."""

    def __init__(self, seconds: float, cpu: float, jvm: int, python: int, printed: list[str]):
        self.seconds, self.cpu, self.jvm, self.python, self.printed = (
            seconds,
            cpu,
            jvm,
            python,
            printed,
        )


def cold_job(*argv: str) -> Cold:
    """One fresh ``kafkaguard analyze`` process (:class:`Cold`)."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkaguard", "analyze", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    jvm = python = 0
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            java, hwm, used = _hwm_mib(pid)
            cpu[pid] = max(used, cpu.get(pid, 0.0))
            if java:
                jvm = max(jvm, hwm)
            elif pid == proc.pid:
                python = max(python, hwm)
        time.sleep(0.2)
    seconds = time.perf_counter() - began
    printed = (proc.stdout.read() if proc.stdout else "").splitlines()
    if proc.returncode != 0:
        raise RuntimeError(f"analyze {' '.join(argv)} failed: {printed[-5:]}")
    return Cold(seconds, sum(cpu.values()), jvm, python, printed)


COLD_ACLS = """\
acls:
  - {principal: "User:*", operation: READ, permission: ALLOW, resource_type: TOPIC,
     pattern_type: PREFIXED, name: "t"}
  - {principal: "User:*", operation: READ, permission: ALLOW, resource_type: GROUP,
     pattern_type: PREFIXED, name: "g"}
"""


def cold(
    data: Path, out: Path, events: int, duck: bool, conf: list[str], connect: bool = False
) -> None:
    """``--cold``: every job a fresh process (module docstring), with ``--conf`` ``conf``;
    with ``connect`` also ``propose`` and ``report --html`` as fresh ``--remote`` clients of
    one Spark Connect server kept running (:func:`connect_jobs`)."""
    compacted = out / "compacted"
    acls = out / "acls.yaml"
    acls.write_text(COLD_ACLS, encoding="utf-8")
    settings = [arg for setting in conf for arg in ("--conf", setting)]
    archive = class_archive()
    if archive is not None and archive.writing:  # as users run jobs: after the first one
        first = min(data.glob("date=*/hour=*"))
        since = f"{first.parent.name[5:]}T{first.name[5:]}:00Z"
        until = f"{first.parent.name[5:]}T{first.name[5:]}:30Z"
        warm = cold_job("report", "--input", str(data), "--since", since, "--until", until)
        if not archive.path.is_file():
            raise RuntimeError(f"the first job wrote no class archive at {archive.path}")
        print(f"class archive written by a first job ({warm.seconds:.1f} s): {archive.path}")
    else:
        print(f"class archive: {archive.path if archive else 'off'}")
    common = ("--input", str(data), "--compacted", str(compacted), *settings)

    def show(label: str, result: Cold, rate: bool = False) -> None:
        extra = f"  {events / result.seconds:>10,.0f} events/s" if rate else ""
        print(
            f"{label:<34} {result.seconds:7.1f} s{extra} (CPU {result.cpu:6.1f} s); peak RSS "
            f"JVM {result.jvm} MiB, Python {result.python} MiB; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    compacting = cold_job(
        "compact", "--input", str(data), "--output", str(compacted), "--grace", "0", *settings
    )
    show("compact (records + facts)", compacting, rate=True)
    for line in compacting.printed:  # its summary: hours, records, the hours facts shrink
        print(f"  {line}")
    decisions = {}
    for label, argv in (
        ("propose (facts)", ("propose", *common, "--acl-file", str(out / "p.yaml"))),
        ("report --html (facts)", ("report", *common, "--html", str(out / "r.html"))),
        ("unused", ("unused", *common, "--acls", str(acls))),
        ("whatif", ("whatif", *common, "--acls", str(acls))),
    ):
        decisions[label] = _show_read(show, label, cold_job(*argv))
    with_facts = (out / "p.yaml").read_text(encoding="utf-8")
    for facts in (FACTS_DIR, DAILY_DIR):  # the hourly and the daily facts
        shutil.rmtree(compacted / facts, ignore_errors=True)
    _show_read(
        show, "propose (records)", cold_job("propose", *common, "--acl-file", str(out / "q.yaml"))
    )
    from_records = _show_read(
        show,
        "report --html (records)",
        cold_job("report", *common, "--html", str(out / "s.html")),
    )
    assert (out / "q.yaml").read_text(encoding="utf-8") == with_facts
    assert from_records == decisions["report --html (facts)"], "report: facts != records"
    if connect:
        connect_jobs(common, out, show)
    if duck:
        began = resource.getrusage(resource.RUSAGE_SELF)
        grants_s, report_s, _ = duckdb_jobs(data, None)
        ended = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ended.ru_utime + ended.ru_stime - began.ru_utime - began.ru_stime
        print(
            f"DuckDB on the raw JSON: grants {grants_s:.1f} s, cube + roll-ups {report_s:.1f} s "
            f"(CPU {cpu:.1f} s for both); load {os.getloadavg()[0]:.1f}"
        )


def _show_read(show: Callable[[str, Cold], None], label: str, result: Cold) -> list[str]:
    """Show a job's figures and what it says it read (its ``facts:`` line, if any); its
    totals line (report's ``N decisions: ...``), to compare reads of the same window."""
    show(label, result)
    for line in result.printed:
        if line.startswith("facts: "):
            print(f"  {line}")
    return [line for line in result.printed if " decisions: " in line]


def connect_jobs(common: tuple[str, ...], out: Path, show: Callable[[str, Cold], None]) -> None:
    """``propose`` and ``report --html`` as a team with a warm server runs them: each a fresh
    ``kafkaguard analyze --remote`` process against one ``SparkConnectServer`` (started as
    the tests start it, ``tests/support/spark_connect.py``), three rounds; the first round
    pays the server's own first queries, the later ones are what a kept server costs. CPU and
    RSS are the client's (the server's JVM is not the job's process)."""
    from tests.support.spark_connect import spark_connect_server

    with spark_connect_server(out / "connect.log") as url:
        for round_ in range(1, 4):
            for job, argv in (
                ("propose", ("propose", *common, "--acl-file", str(out / f"c{round_}.yaml"))),
                ("report --html", ("report", *common, "--html", str(out / f"c{round_}.html"))),
            ):
                show(f"{job} --remote, round {round_}", cold_job(*argv, "--remote", url))
    assert (out / "c3.yaml").read_text(encoding="utf-8") == (out / "q.yaml").read_text(
        encoding="utf-8"
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--data", type=Path, help="audit directory (generated when missing)")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="varied",
        help="the generated trail: every record drawn anew (varied), or a fixed population "
        "doing the same things every hour (repeating)",
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the repeating shape's population (default 1)"
    )
    parser.add_argument(
        "--generate-only",
        action="store_true",
        help="generate (or reuse) the trail, print its records and decisions per hour, run no job",
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", help="default: the session's (a quarter of RAM)")
    parser.add_argument("--rounds", type=int, default=2, help="JSON/Parquet job rounds")
    parser.add_argument(
        "--duckdb", action="store_true", help="the DuckDB reference (the bench extra)"
    )
    parser.add_argument("--compacted", type=Path, help="reuse this compaction's output")
    parser.add_argument(
        "--parquet-only", action="store_true", help="skip the jobs over the JSON lines"
    )
    parser.add_argument(
        "--cold", action="store_true", help="each job a fresh `kafkaguard analyze` process"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --cold: a Spark setting for every job (repeatable)",
    )
    parser.add_argument(
        "--spark-connect",
        action="store_true",
        help="with --cold: propose and report also as --remote clients of a warm server",
    )
    args = parser.parse_args()
    if args.duckdb:
        try:
            import duckdb  # noqa: F401
        except ImportError:
            parser.error("--duckdb needs DuckDB: pip install -e '.[bench]'")
    return args


def _data_name(args: argparse.Namespace) -> str:
    """The default ``--data`` directory's name (the varied shape's as before shapes)."""
    if args.shape == "varied":
        return f"kafkaguard-analyze-bench-{args.events}"
    return f"kafkaguard-analyze-bench-{args.shape}-{args.events}-seed{args.seed}"


def _trail(spark: SparkSession, args: argparse.Namespace) -> Path:
    """The trail's directory, generated when missing (or ``--regenerate``); its records and
    distinct decisions per hour printed when generated (or ``--generate-only``)."""
    data: Path = args.data or Path(tempfile.gettempdir()) / _data_name(args)
    generated = args.regenerate or not data.exists()
    if generated:
        seconds = generate(spark, args.events, args.days, data, args.shape, args.seed)
        print(f"generated {args.events:,} {args.shape} records in {seconds:.1f} s into {data}")
    if generated or args.generate_only:
        records, decisions = hourly_shape(spark, data)
        print(
            f"per hour: {records:,.0f} records, {decisions:,.0f} distinct decisions "
            f"(decisions/records {decisions / records:.3f})"
        )
    return data


def main() -> int:
    args = _arguments()
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
    out = Path(tempfile.mkdtemp(prefix="kafkaguard-analyze-out-"))
    try:
        data = _trail(spark, args)
        if args.generate_only:
            return 0
        print(f"load average before the jobs: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
        print(f"input: {_size(list(data.rglob('*.jsonl')))}, {args.days} days")
        if args.cold:
            spark.stop()  # the jobs start their own
            cold(data, out, args.events, args.duckdb, args.conf, args.spark_connect)
            return 0
        compacted = args.compacted or out / "compacted"
        if args.compacted is None:
            rss = PeakRss()
            rss.reset()
            seconds = timed_compact(spark, data, compacted, args.days)
            peak = rss.peaks()
            print(
                f"compact: {seconds:7.1f} s  {args.events / seconds:>12,.0f} events/s -> "
                f"{_size(list(compacted.rglob('*.parquet')))}; peak RSS: JVM {peak['JVM']} MiB"
            )
        timings: Timings = {}
        peaks: dict[str, int] = {}
        sources: list[Source] = [(None, True), (str(compacted), False)]
        if args.parquet_only:
            sources = sources[1:]
        for round_ in range(1, args.rounds + 1):  # alternated: JVM warm-up favours neither
            print(f"round {round_}:")
            for source in sources:
                _jobs(spark, data, out, source, timings, peaks, args.duckdb)
        for job, runs in timings.items():
            best, median = min(runs), statistics.median(runs)
            print(
                f"{job}: best {best:7.1f} s, median {median:7.1f} s "
                f"{args.events / best:>12,.0f} events/s (best); peak RSS JVM "
                f"{peaks[f'{job} [JVM]']} MiB, Python {peaks[f'{job} [Python]']} MiB"
            )
        for source in sources:
            _time_range(spark, data, args.days, source)
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
