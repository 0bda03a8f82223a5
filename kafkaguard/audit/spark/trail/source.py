"""Reading the audit trail: partition discovery, time-range pruning, and dropping bad lines.

Owns how a job turns ``--input``/``--since``/``--until`` into a DataFrame of valid records
with an ``event_time`` column. It must not aggregate; jobs do that.

A live trail is read as it is (issue 36): the writer's ``*.jsonl.inprogress`` files (the
hour being written) are read with the closed ``*.jsonl`` ones, up to their last complete
line: a line the writer has not finished parses to nulls and is dropped like any malformed
one (:func:`is_valid`). :func:`describe_input` names, for the jobs' summary, the files read
and the hours skipped and why.

Hours that ``analyze compact`` turned into Parquet (:mod:`kafkaguard.audit.spark.jobs.compact`; by
default under ``<input>/_compacted``) are read from there and their JSON lines are skipped; the
other hours are read from JSON. Both give the same rows with the same columns
(:data:`RECORD_COLUMNS`): the Parquet holds exactly the records :func:`valid_records` keeps,
``event_time`` included.

``--input kafka://host:port[,host:port]/topic`` reads the audit topic instead, in batch, from
the earliest offset to the latest: each record's value is one audit line (``audit.sink:
kafka``), parsed and validated exactly like a line of a file, so a job gives the same results
from the topic as from the files holding the same events (:func:`kafka_records`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Final, TypedDict

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DateType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from kafkaguard.audit.events import CLOUDEVENTS_SOURCE_PREFIX, CLOUDEVENTS_TYPE, MODE_EXTENSION
from kafkaguard.audit.spark.trail.schema import (
    CLOUDEVENT_FIELDS,
    COMPACTED_SCHEMA,
    EVENT_TIME,
    FIELD_NAMES,
    KAFKAGUARD_ONLY_FIELDS,
    READ_SCHEMA,
    RECORD_COLUMNS,
    SCHEMA_VERSIONS,
)

COMPACTED_DIR: Final = "_compacted"
"""Where ``analyze compact`` writes by default: inside the audit directory, under a name
Spark's file listing skips (a leading ``_``), so a JSON read of the audit directory never
descends into it and the proxy's writer never collides with it."""
_HOUR_PATH: Final = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/hour=(\d{1,2})/[^/]*$")
_EPOCH_DAY: Final = date(1970, 1, 1)
RESULTS = ("ALLOWED", "DENIED")
KAFKA_SCHEME: Final = "kafka://"
_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
"""Kafka's legal topic names (``org.apache.kafka.common.internals.Topic``)."""


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


def _kafka_name(pascal: Column) -> Column:
    """``IdempotentWrite`` -> ``IDEMPOTENT_WRITE``: the CloudEvents record's operation and
    resource type (``SecurityUtils`` spelling) as the Kafka enum names of schema version 1."""
    return F.upper(F.regexp_replace(pascal, "([a-z0-9])([A-Z])", "$1_$2"))


def _cloudevent_columns() -> dict[str, Column]:
    """Each field of the record as read from a CloudEvents line (docs/audit.md,
    "CloudEvents format"); a line of another CloudEvents ``type`` gets a null
    ``schema_version`` and is dropped as invalid."""
    data = F.col("data")
    ours = data.getField("kafkaguard")
    authz = data.getField("authorizationInfo")
    granted = authz.getField("granted")
    columns: dict[str, Column] = {name: ours.getField(name) for name in KAFKAGUARD_ONLY_FIELDS}
    source_pattern = "^" + re.escape(CLOUDEVENTS_SOURCE_PREFIX) + "(.*)$"
    columns |= {
        "schema_version": F.when(
            F.col("type") == CLOUDEVENTS_TYPE, ours.getField("schema_version")
        ),
        "time": F.col("time"),
        "mode": F.col(MODE_EXTENSION),
        "listener": F.try_url_decode(F.regexp_extract(F.col("source"), source_pattern, 1)),
        "principal": data.getField("authenticationInfo").getField("principal"),
        "client_host": data.getField("requestMetadata").getField("client_address"),
        "client_id": data.getField("request").getField("client_id"),
        "api_name": F.regexp_replace(data.getField("methodName"), r"^kafka\.", ""),
        "correlation_id": data.getField("request").getField("correlation_id").try_cast("int"),
        "operation": _kafka_name(authz.getField("operation")),
        "resource_type": _kafka_name(authz.getField("resourceType")),
        "pattern_type": authz.getField("patternType"),
        "resource_name": authz.getField("resourceName"),
        "result": F.when(granted, F.lit("ALLOWED")).when(~granted, F.lit("DENIED")),
        "groups": authz.getField("assignedPrincipals"),
    }
    return columns


def _no_groups() -> Column:
    """Version 1 records (and Parquet compacted from them) have no ``groups``: none."""
    return F.coalesce(F.col("groups"), F.array().cast(ArrayType(StringType(), False)))


def normalized(df: DataFrame) -> DataFrame:
    """Lines parsed with :data:`READ_SCHEMA` (either format) as the record's columns,
    in order, followed by ``df``'s other columns (``date``/``hour``)."""
    cloudevent = F.col("specversion").isNotNull()
    from_cloudevent = _cloudevent_columns()
    ours = [
        F.when(cloudevent, from_cloudevent[name]).otherwise(F.col(name)).alias(name)
        for name in FIELD_NAMES
    ]
    dropped = {*FIELD_NAMES, *(f.name for f in CLOUDEVENT_FIELDS)}
    return df.select(*ours, *(c for c in df.columns if c not in dropped))


def with_event_time(df: DataFrame) -> DataFrame:
    """Add ``event_time`` (null for an unparseable ``time``) and make ``would_deny`` total."""
    # try_to_timestamp: Spark 4 runs in ANSI mode, where a cast of one bad time fails the
    # whole job instead of dropping that line.
    return (
        df.withColumn(EVENT_TIME, F.try_to_timestamp(F.col("time")))
        .withColumn("would_deny", F.coalesce(F.col("would_deny"), F.lit(False)))
        .withColumn("groups", _no_groups())
    )


def is_valid() -> Column:
    """What a reader can trust, on :func:`with_event_time`'s output: malformed lines parse
    to nulls, and other schema versions may mean other things."""
    return (
        F.col("schema_version").isin(*SCHEMA_VERSIONS)
        & F.col("count").isNotNull()
        & (F.col("count") > 0)
        & F.col("principal").isNotNull()
        & F.col("operation").isNotNull()
        & F.col("resource_type").isNotNull()
        & F.col("resource_name").isNotNull()
        & F.col("result").isin(*RESULTS)
        & F.col(EVENT_TIME).isNotNull()
    )


def valid_records(df: DataFrame) -> DataFrame:
    """Drop what a reader cannot trust (:func:`is_valid`), with ``event_time`` added."""
    return with_event_time(df).where(is_valid())


def compacted_path(path: str) -> str:
    """The default home of ``analyze compact``'s Parquet for the audit directory ``path``."""
    return f"{path.rstrip('/')}/{COMPACTED_DIR}"


def hour_number(day: date, hour: int) -> int:
    """Hours since the epoch of a ``date=``/``hour=`` directory (a set of them is one cheap
    ``IN``/``INSET`` partition filter)."""
    return (day - _EPOCH_DAY).days * 24 + hour


def hour_number_column() -> Column:
    """:func:`hour_number` of the ``date``/``hour`` partition columns."""
    return F.datediff(F.col("date"), _lit_date(_EPOCH_DAY)) * 24 + F.col("hour")


def hours_of(files: Iterable[str]) -> frozenset[int]:
    """The hour directories (:func:`hour_number`) that ``files`` (paths or URIs) lie in."""
    found = set()
    for name in files:
        match = _HOUR_PATH.search(name)
        if match is not None:
            found.add(hour_number(date.fromisoformat(match.group(1)), int(match.group(2))))
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Compacted:
    """The Parquet of ``analyze compact``: its records and the hours it holds."""

    records: DataFrame
    hours: frozenset[int]


def read_compacted(spark: SparkSession, location: str) -> Compacted | None:
    """The compacted hours under ``location``, or None when there are none.

    An hour is there once its directory is (``compact`` moves it in with one rename, see
    :mod:`kafkaguard.audit.spark.jobs.compact`); the hours come from the file listing Spark makes
    anyway, so nothing beyond it is read here.
    """
    if "://" not in location and not Path(location).is_dir():
        return None
    try:
        df = spark.read.schema(COMPACTED_SCHEMA).option("basePath", location).parquet(location)
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return None
        raise
    hours = hours_of(df.inputFiles())
    if not hours:
        return None
    # The JSON side's types: Spark infers these from the directory names in both trees.
    typed = (
        df.withColumn("date", F.col("date").cast(DateType()))
        .withColumn("hour", F.col("hour").cast(IntegerType()))
        .withColumn("groups", _no_groups())  # Parquet compacted from version 1 records
    )
    return Compacted(typed.select(*RECORD_COLUMNS), hours)


def _pruned(df: DataFrame, window: TimeRange) -> DataFrame:
    """The window's partition predicate, applied first so that it reaches the file scan as
    ``PartitionFilters``."""
    pruning = window.partition_filter()
    return df.where(pruning) if pruning is not None else df


JSON_GLOB: Final = "*.{jsonl,jsonl.inprogress}"
"""The files a job reads: closed and being written (``pathGlobFilter``, Hadoop's glob)."""
IN_PROGRESS: Final = ".jsonl.inprogress"


def local_json_files(path: str) -> dict[int, tuple[int, int]] | None:
    """Per hour (:func:`hour_number`) of the ``date=/hour=`` directories under the local
    directory ``path``: its closed ``.jsonl`` and its ``.jsonl.inprogress`` files, walked on
    the driver; None when only Spark's listing can tell (a URI, or such files outside that
    layout). Directories Spark skips (a leading ``_`` or ``.``, e.g. ``_compacted``) are
    skipped here too."""
    if "://" in path:
        return None
    found = {}
    for directory, subdirectories, files in os.walk(path):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        names = [f for f in files if not f.startswith(("_", "."))]
        closed = sum(f.endswith(".jsonl") for f in names)
        live = sum(f.endswith(IN_PROGRESS) for f in names)
        if not closed + live:
            continue
        match = _HOUR_PATH.search(Path(directory, "f").as_posix())
        if match is None:
            return None
        found[hour_number(date.fromisoformat(match.group(1)), int(match.group(2)))] = (
            closed,
            live,
        )
    return found


def local_json_hours(path: str) -> frozenset[int] | None:
    """The hours of :func:`local_json_files`."""
    found = local_json_files(path)
    return None if found is None else frozenset(found)


def _compacted_hours(location: str) -> frozenset[int]:
    """The hours with Parquet under a local compacted directory (as :func:`read_compacted`
    finds them, without Spark)."""
    return hours_of(str(p) for p in Path(location).glob("date=*/hour=*/*.parquet"))


def _files(n: int, kind: str) -> str:
    return f"{n} {kind} file{'s' if n != 1 else ''}"


def _hours(n: int) -> str:
    return f"{n} hour{'s' if n != 1 else ''}"


def describe_input(
    path: str, window: TimeRange, *, compacted: str | None = None, json_only: bool = False
) -> str | None:
    """What :func:`read_audit` reads of the local trail ``path`` and what it skips, and why,
    as one line for a job's summary (None for a URI or the audit topic)."""
    files = None if is_kafka_input(path) else local_json_files(path)
    if files is None:
        return None
    stored = frozenset() if json_only else _compacted_hours(compacted or compacted_path(path))
    inside = {h for h in files if hour_overlaps(h, window)}
    read = inside - stored
    closed = sum(files[h][0] for h in read)
    live = sum(files[h][1] for h in read)
    parts = [f"input: {_files(closed, '.jsonl')}"]
    if live:
        parts[0] += (
            f" and {_files(live, IN_PROGRESS)} (being written: read up to the last complete line)"
        )
    parts[0] += f" of {_hours(len(read))}"
    from_parquet = {h for h in stored if hour_overlaps(h, window)}
    if from_parquet:
        parts.append(f"{_hours(len(from_parquet))} compacted: from Parquet (their JSON not read)")
    outside = len(set(files) - inside)
    if outside:
        parts.append(f"{_hours(outside)} of JSON outside the window skipped")
    return "; ".join(parts)


def hour_overlaps(hour: int, window: TimeRange) -> bool:
    """Whether the hour :func:`hour_number` ``hour`` has instants inside ``window``."""
    start = hour * 3600
    return (window.until is None or start < window.until.timestamp()) and (
        window.since is None or start + 3600 > window.since.timestamp()
    )


def _json_records(
    spark: SparkSession, path: str, window: TimeRange, skip: frozenset[int]
) -> DataFrame | None:
    """The valid JSON records under ``path`` outside the ``skip`` hours (None: nothing left).

    When every hour of a local trail that the window touches is skipped (compacted, or read
    from facts), the JSON is neither listed by Spark nor planned (issue 36: 2-5 s of driver
    time in a fresh process)."""
    if skip:
        local = local_json_hours(path)
        if local is not None and not any(hour_overlaps(h, window) for h in local - skip):
            return None
    df = normalized(
        spark.read.schema(READ_SCHEMA)
        .option("basePath", path)
        .option("pathGlobFilter", JSON_GLOB)
        .option("mode", "PERMISSIVE")
        .json(path)
    )
    if "date" not in df.columns or "hour" not in df.columns:
        # files directly under path: no pruning possible, keep the columns for callers
        df = df.withColumn("date", F.lit(None).cast(DateType())).withColumn(
            "hour", F.lit(None).cast(IntegerType())
        )
        return valid_records(df).select(*RECORD_COLUMNS)
    if skip:
        present = hours_of(df.inputFiles())
        if present and present <= skip:
            return None
        if present & skip:  # a partition filter: the compacted hours' files are never opened
            df = df.where(~hour_number_column().isin(sorted(present & skip)))
    return valid_records(_pruned(df, window)).select(*RECORD_COLUMNS)


_RECORD_SCHEMA: Final = StructType(
    [
        *COMPACTED_SCHEMA.fields[:-1],
        StructField("date", DateType()),
        StructField("hour", IntegerType()),
        COMPACTED_SCHEMA[EVENT_TIME],
    ]
)
"""The columns :func:`read_audit` returns (:data:`RECORD_COLUMNS`), typed."""


def is_kafka_input(path: str) -> bool:
    return path.startswith(KAFKA_SCHEME)


@dataclass(frozen=True, slots=True)
class KafkaInput:
    """``kafka://host:port[,host:port]/topic``: the audit topic and its bootstrap servers."""

    bootstrap_servers: str
    topic: str

    @classmethod
    def parse(cls, uri: str) -> KafkaInput:
        """
        >>> KafkaInput.parse("kafka://k1:9092,k2:9092/_kafkaguard-audit")
        KafkaInput(bootstrap_servers='k1:9092,k2:9092', topic='_kafkaguard-audit')
        """
        if not is_kafka_input(uri):
            raise ValueError(f"not a {KAFKA_SCHEME} URI: {uri!r}")
        servers, sep, topic = uri[len(KAFKA_SCHEME) :].partition("/")
        hosts = [h.strip() for h in servers.split(",")]
        if not sep or not all(_host_port(h) for h in hosts) or not _TOPIC.fullmatch(topic):
            raise ValueError(f"--input {uri!r}: expected {KAFKA_SCHEME}host:port[,host:port]/topic")
        return cls(",".join(hosts), topic)

    def __str__(self) -> str:
        return f"{KAFKA_SCHEME}{self.bootstrap_servers}/{self.topic}"

    def options(self, kafka_options: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Kafka source's options: ``kafka_options`` are the consumer's own settings
        (``security.protocol``, ``sasl.*``, ``ssl.*``: ``--kafka-option``), which Spark takes
        with a ``kafka.`` prefix."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers, "subscribe": self.topic}
        for key, value in (kafka_options or {}).items():
            options[key if key.startswith("kafka.") else f"kafka.{key}"] = value
        return options


def _host_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def parse_audit_values(values: DataFrame) -> DataFrame:
    """The valid records in ``values``' ``value`` column (one audit line each, in either
    format, as bytes or text), with the columns of :data:`RECORD_COLUMNS`: ``date`` and
    ``hour`` are those of ``event_time`` (UTC), the directory a file writer would have put
    the line in.

    ``from_json`` parses a malformed line to nulls, as the file reader's PERMISSIVE mode does,
    and :func:`valid_records` drops it.
    """
    parsed = values.select(
        F.from_json(F.col("value").cast(StringType()), READ_SCHEMA, {"mode": "PERMISSIVE"}).alias(
            "r"
        )
    ).select("r.*")
    records = valid_records(normalized(parsed))
    return (
        records.withColumn("date", F.to_date(F.col(EVENT_TIME)))
        .withColumn("hour", F.hour(F.col(EVENT_TIME)))
        .select(*RECORD_COLUMNS)
    )


def kafka_records(
    spark: SparkSession,
    source: KafkaInput,
    window: TimeRange | None = None,
    kafka_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The valid records of the audit topic inside ``window``: every partition from its
    earliest offset to its latest when the job starts (Spark's Kafka source in batch mode).

    The window cuts on ``event_time`` only: record timestamps are the producer's clock, not
    the decision's, so they are not used to skip offsets.
    """
    reader = spark.read.format("kafka")
    options = source.options(kafka_options) | {
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
    }
    for key, value in options.items():
        reader = reader.option(key, value)
    records = parse_audit_values(reader.load())
    exact = (window or TimeRange()).time_filter()
    return records.where(exact) if exact is not None else records


class ReadOptions(TypedDict, total=False):
    """The keyword arguments of :func:`read_audit` that say where and how to read the trail,
    as every reader of it passes them on (:func:`.facts.read_facts`, the jobs' ``--compacted``,
    ``--json-only`` and ``--kafka-option``)."""

    compacted: str | None
    json_only: bool
    kafka_options: Mapping[str, str] | None


def read_audit(
    spark: SparkSession,
    path: str,
    window: TimeRange | None = None,
    *,
    compacted: str | None = None,
    json_only: bool = False,
    kafka_options: Mapping[str, str] | None = None,
    skip_hours: frozenset[int] = frozenset(),
) -> DataFrame:
    """The valid records under ``path`` (a local path or any Hadoop URI) inside ``window``.

    Args:
        compacted: where ``analyze compact`` wrote (default ``<path>/_compacted``); its hours
            are read from Parquet, the others from JSON.
        json_only: ignore compacted Parquet (to compare it with the JSON it came from).
        kafka_options: the consumer's settings when ``path`` is ``kafka://...``
            (:func:`kafka_records`); the session needs Spark's Kafka source
            (``runtime/session.py``).
        skip_hours: hours (:func:`hour_number`) not to read, whatever their form (the
            caller has them otherwise: :func:`.facts.read_facts`).

    The partition predicate is applied before anything else so that it reaches the file scan
    as ``PartitionFilters`` (see ``bench/analyze_bench.py`` for the plan). The Parquet is
    listed before the JSON: an hour that ``compact`` moves in between is then read from its
    JSON, which still holds it (the other order could miss the hour).
    """
    window = window or TimeRange()
    if is_kafka_input(path):
        return kafka_records(spark, KafkaInput.parse(path), window, kafka_options)
    if "://" not in path and not Path(path).is_dir():
        raise ValueError(f"{path}: no such audit directory")
    stored = None if json_only else read_compacted(spark, compacted or compacted_path(path))
    skip = (stored.hours if stored else frozenset()) | skip_hours
    parts = [_json_records(spark, path, window, skip)]
    if stored is not None and not stored.hours <= skip_hours:
        kept = stored.records
        if stored.hours & skip_hours:
            kept = kept.where(~hour_number_column().isin(sorted(stored.hours & skip_hours)))
        parts.insert(0, _pruned(kept, window))
    present = [p for p in parts if p is not None]
    if not present:  # every hour skipped
        return spark.createDataFrame([], _RECORD_SCHEMA)
    df = present[0] if len(present) == 1 else present[0].unionByName(present[1])
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
