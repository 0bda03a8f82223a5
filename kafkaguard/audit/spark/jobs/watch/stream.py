"""``kafkaguard analyze watch``: Structured Streaming over the audit topic, alerting within
seconds on what a rollout must not miss.

Three alerts (docs/audit.md, "Reading the audit topic"):

``new_principal``
    a principal never seen before: not in the stream so far, nor in the ``--baseline`` trail.
``new_denial``
    a denial pattern never seen before: the (principal, operation, resource type, resource
    name) of a DENIED decision (enforced, or would-deny in log_only) never denied before.
``would_deny_spike``
    a minute (of event time) whose log_only would-deny count is at least
    :attr:`SpikeRule.min_count` and more than :attr:`SpikeRule.factor` times the average of
    the :attr:`SpikeRule.window_minutes` minutes before it (minutes without any counting 0).
    It fires once per minute, as soon as the count crosses, not when the minute ends.

Each micro-batch (a processing-time trigger, 1 s by default) is reduced by Spark to three
small tables -- first decision per principal, first denial per pattern, would-deny count per
minute -- and ``foreachBatch`` compares them with a small state kept in the driver: the sets of
known principals and denial patterns, and the recent minutes' counts. With ``--checkpoint`` the
state is saved next to Spark's offsets after every batch, tagged with the batch id, so a
restart resumes both where they stopped and a batch that Spark replays after a crash (the
at-least-once contract of ``foreachBatch``) alerts once. The state grows with distinct
principals and patterns only, never with the traffic.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from kafkaguard.audit.spark.trail.schema import EVENT_TIME
from kafkaguard.audit.spark.trail.source import KafkaInput, parse_audit_values

STATE_FILE: Final = "kafkaguard-watch-state.json"
"""The driver's state, inside ``--checkpoint`` beside Spark's ``offsets/`` and ``commits/``."""
STATE_VERSION: Final = 1
LATE_MINUTES: Final = 60
"""Minute counts are kept this long past the spike rule's window, for late events."""

Pattern = tuple[str, str, str, str]
"""A denial pattern: principal, operation, resource type, resource name."""


@dataclass(frozen=True, slots=True)
class SpikeRule:
    """When a minute's would-deny count is a spike (see the module doc)."""

    min_count: int = 20
    factor: float = 3.0
    window_minutes: int = 10

    def __post_init__(self) -> None:
        if self.min_count < 1 or self.factor < 0 or self.window_minutes < 1:
            raise ValueError("spike rule: min count >= 1, factor >= 0, window >= 1 minute")


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert; ``time`` is the event time (ISO-8601 UTC) of what triggered it."""

    alert: str
    time: str
    principal: str | None = None
    operation: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    count: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        body = {
            "alert": self.alert,
            "time": self.time,
            "principal": self.principal,
            "operation": self.operation,
            "resource_type": self.resource_type,
            "resource_name": self.resource_name,
            "count": self.count,
            **self.detail,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=False)

    def to_text(self) -> str:
        d = self.detail
        if self.alert == "would_deny_spike":
            return (
                f"{self.time} would-deny spike: {self.count} in the minute, "
                f"{d['average']:.1f}/min in the {d['window_minutes']} before"
            )
        what = f"{self.operation} {self.resource_type}:{self.resource_name}"
        where = f"from {d.get('client_host')} ({d.get('listener')}, {d.get('mode')})"
        if self.alert == "new_principal":
            return f"{self.time} new principal {self.principal}: {d.get('result')} {what} {where}"
        return f"{self.time} new denial {self.principal}: {what} {where}, x{self.count}"


@dataclass
class WatchState:
    """What the driver remembers between micro-batches."""

    principals: set[str] = field(default_factory=set)
    denials: set[Pattern] = field(default_factory=set)
    minutes: dict[int, int] = field(default_factory=dict)
    """Would-deny count per minute (minutes since the epoch, event time)."""
    spiked: set[int] = field(default_factory=set)
    last_batch: int = -1

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "last_batch": self.last_batch,
                "principals": sorted(self.principals),
                "denials": sorted(self.denials),
                "minutes": {str(m): c for m, c in sorted(self.minutes.items())},
                "spiked": sorted(self.spiked),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> WatchState:
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"watch state version {data.get('version')!r} is not supported")
        return cls(
            principals=set(data["principals"]),
            denials={(p, o, t, n) for p, o, t, n in data["denials"]},
            minutes={int(m): int(c) for m, c in data["minutes"].items()},
            spiked={int(m) for m in data["spiked"]},
            last_batch=int(data["last_batch"]),
        )

    def save(self, path: Path) -> None:
        """Atomically: a crash leaves the previous state or this one."""
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(self.to_json(), encoding="utf-8")
        partial.replace(path)

    @classmethod
    def load(cls, path: Path) -> WatchState:
        return cls.from_json(path.read_text(encoding="utf-8")) if path.exists() else cls()


def _iso(value: datetime) -> str:
    if value.tzinfo is None:  # Spark hands timestamps over as naive UTC (session time zone)
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _minute_iso(minute: int) -> str:
    return _iso(datetime.fromtimestamp(minute * 60, UTC))


def new_principal_alerts(state: WatchState, rows: Iterable[Row]) -> list[Alert]:
    """``rows``: a batch's first decision per principal (``principal``, ``first_time``,
    ``first``: the decision's fields). Known principals are skipped; the others are learnt."""
    alerts = []
    for row in rows:
        if row["principal"] in state.principals:
            continue
        state.principals.add(row["principal"])
        first = row["first"]
        alerts.append(
            Alert(
                "new_principal",
                _iso(row["first_time"]),
                row["principal"],
                first["operation"],
                first["resource_type"],
                first["resource_name"],
                int(row["count"]),
                {k: first[k] for k in ("result", "mode", "client_host", "listener")},
            )
        )
    return alerts


def new_denial_alerts(state: WatchState, rows: Iterable[Row]) -> list[Alert]:
    """``rows``: a batch's DENIED decisions grouped by pattern, with ``first_time``,
    ``count`` and ``first`` (the first denial's fields)."""
    alerts = []
    for row in rows:
        pattern = (row["principal"], row["operation"], row["resource_type"], row["resource_name"])
        if pattern in state.denials:
            continue
        state.denials.add(pattern)
        first = row["first"]
        alerts.append(
            Alert(
                "new_denial",
                _iso(row["first_time"]),
                *pattern,
                count=int(row["count"]),
                detail={k: first[k] for k in ("mode", "reason", "client_host", "listener")},
            )
        )
    return alerts


def spike_alerts(state: WatchState, counts: Mapping[int, int], rule: SpikeRule) -> list[Alert]:
    """Add a batch's would-deny ``counts`` per minute to the state and alert on each minute
    that became a spike (once per minute); minutes older than the rule needs are forgotten."""
    for minute, count in counts.items():
        state.minutes[minute] = state.minutes.get(minute, 0) + count
    alerts = []
    for minute in sorted(counts):
        count = state.minutes[minute]
        if minute in state.spiked or count < rule.min_count:
            continue
        before = range(minute - rule.window_minutes, minute)
        average = sum(state.minutes.get(m, 0) for m in before) / rule.window_minutes
        if count > rule.factor * average:
            state.spiked.add(minute)
            detail = {
                "average": average,
                "window_minutes": rule.window_minutes,
                "min_count": rule.min_count,
                "factor": rule.factor,
            }
            alerts.append(
                Alert("would_deny_spike", _minute_iso(minute), count=count, detail=detail)
            )
    if state.minutes:
        oldest = max(state.minutes) - rule.window_minutes - LATE_MINUTES
        state.minutes = {m: c for m, c in state.minutes.items() if m >= oldest}
        state.spiked = {m for m in state.spiked if m >= oldest}
    return alerts


_FIRST_DECISION = ("operation", "resource_type", "resource_name", "result", "mode")
_WHERE = ("client_host", "listener")


def _first(*columns: str) -> Any:
    """The fields of the group's earliest record (``min_by`` on event time)."""
    return F.min_by(F.struct(*columns), F.col(EVENT_TIME)).alias("first")


def principal_firsts(records: DataFrame) -> DataFrame:
    return records.groupBy("principal").agg(
        F.min(EVENT_TIME).alias("first_time"),
        F.sum("count").alias("count"),
        _first(*_FIRST_DECISION, *_WHERE),
    )


def denial_firsts(records: DataFrame) -> DataFrame:
    return (
        records.where(F.col("result") == "DENIED")
        .groupBy("principal", "operation", "resource_type", "resource_name")
        .agg(
            F.min(EVENT_TIME).alias("first_time"),
            F.sum("count").alias("count"),
            _first("mode", "reason", *_WHERE),
        )
    )


def would_deny_minutes(records: DataFrame) -> DataFrame:
    minute = F.floor(F.unix_seconds(F.col(EVENT_TIME)) / 60).cast("long")
    return (
        records.where(F.col("would_deny"))
        .groupBy(minute.alias("minute"))
        .agg(F.sum("count").alias("count"))
    )


Emit = Callable[[Alert], None]


class Watcher:
    """The ``foreachBatch`` function: a batch of Kafka records in, alerts out."""

    def __init__(self, state: WatchState, rule: SpikeRule, emit: Emit, state_path: Path | None):
        self.state, self.rule, self.emit, self.state_path = state, rule, emit, state_path
        self.batches = 0

    def learn(self, principals: Iterable[str], denials: Iterable[Pattern]) -> None:
        """Take a baseline's principals and denial patterns as known (no alerts)."""
        self.state.principals.update(principals)
        self.state.denials.update(denials)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if batch_id <= self.state.last_batch:
            return  # alerted before a restart: foreachBatch is at-least-once
        records = parse_audit_values(batch).persist()
        try:
            alerts = new_principal_alerts(self.state, principal_firsts(records).collect())
            alerts += new_denial_alerts(self.state, denial_firsts(records).collect())
            counts = {r["minute"]: int(r["count"]) for r in would_deny_minutes(records).collect()}
            alerts += spike_alerts(self.state, counts, self.rule)
        finally:
            records.unpersist()
        self.state.last_batch = batch_id
        if self.state_path is not None:
            self.state.save(self.state_path)
        for alert in sorted(alerts, key=lambda a: a.time):
            self.emit(alert)
        self.batches += 1


def open_sink(output: str) -> tuple[Emit, Callable[[], None]]:
    """``console`` (one line of text per alert on stdout) or ``jsonl:PATH`` (one JSON object
    per line, appended); each alert is flushed as it is written."""
    if output == "console":

        def to_console(alert: Alert) -> None:
            sys.stdout.write(alert.to_text() + "\n")
            sys.stdout.flush()

        return to_console, lambda: None
    kind, sep, path = output.partition(":")
    if kind != "jsonl" or not sep or not path:
        raise ValueError(f"--output must be console or jsonl:PATH, not {output!r}")
    stream: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the caller

    def to_file(alert: Alert) -> None:
        stream.write(alert.to_json() + "\n")
        stream.flush()

    return to_file, stream.close


@dataclass(frozen=True, slots=True)
class WatchOptions:
    source: KafkaInput
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    checkpoint: str | None = None
    starting_offsets: str = "earliest"
    trigger_seconds: float = 1.0
    rule: SpikeRule = SpikeRule()


def baseline_of(records: DataFrame) -> tuple[list[str], list[Pattern]]:
    """The principals and denial patterns of a trail, for :meth:`Watcher.learn`."""
    principals = [r["principal"] for r in records.select("principal").distinct().collect()]
    denied = records.where(F.col("result") == "DENIED").select(
        "principal", "operation", "resource_type", "resource_name"
    )
    patterns = [(r[0], r[1], r[2], r[3]) for r in denied.distinct().collect()]
    return principals, patterns


def watch(
    spark: SparkSession,
    options: WatchOptions,
    emit: Emit,
    stop: threading.Event,
    *,
    baseline: DataFrame | None = None,
    started: Callable[[str], None] | None = None,
) -> int:
    """Run until ``stop`` is set (or the query fails: its exception is raised); returns the
    number of micro-batches processed."""
    state_path = None
    if options.checkpoint is not None:
        Path(options.checkpoint).mkdir(parents=True, exist_ok=True)
        state_path = Path(options.checkpoint) / STATE_FILE
    watcher = Watcher(
        WatchState.load(state_path) if state_path else WatchState(), options.rule, emit, state_path
    )
    if baseline is not None:
        watcher.learn(*baseline_of(baseline))
    reader = spark.readStream.format("kafka")
    settings = options.source.options(options.kafka_options) | {
        "startingOffsets": options.starting_offsets,
        # Retention deleting records the watch has not read yet is no reason to stop watching.
        "failOnDataLoss": "false",
    }
    for key, value in settings.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .select("value")
        .writeStream.foreachBatch(watcher)
        .trigger(processingTime=f"{int(options.trigger_seconds * 1000)} milliseconds")
        .queryName("kafkaguard-watch")
    )
    if options.checkpoint is not None:
        writer = writer.option("checkpointLocation", str(Path(options.checkpoint).resolve()))
    resuming = options.checkpoint is not None and (Path(options.checkpoint) / "offsets").is_dir()
    query = writer.start()
    try:
        if started is not None:
            where = "its checkpoint" if resuming else f"the {options.starting_offsets} offsets"
            started(f"watching {options.source} from {where}")
        while not stop.is_set():
            if query.awaitTermination(1):
                break
    finally:
        if query.isActive:
            query.stop()
    failure = query.exception()
    if failure is not None:
        raise failure
    return watcher.batches
