"""``kafkaguard analyze watch``: the alert rules (pure), and the real thing -- Structured
Streaming over an audit topic on Apache Kafka 4.3.1, run as a subprocess -- reporting a new
principal's first denial within 10 s of its record being produced, resuming from its
checkpoint without alerting twice.

Apache Kafka, not Tansu: Tansu's ListOffsets answers a high watermark one past a batch's first
offset (see test_kafka_input.py), and the stream reads up to it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from kafkaguard.audit.spark.jobs.watch.stream import (
    STATE_FILE,
    Alert,
    SpikeRule,
    Watcher,
    WatchState,
    baseline_of,
    new_denial_alerts,
    new_principal_alerts,
    spike_alerts,
)
from kafkaguard.audit.spark.trail.source import read_audit
from tests.support.analyze_data import rec, write_audit
from tests.support.audit_stream import WatchProcess, create_topic, produce_lines
from tests.support.kafka_broker import KafkaBroker
from tests.support.spark_kafka import require_spark_kafka

ALERT_WITHIN_S = 10.0
"""The issue's bound: from producing a record to its alert on the watch's output."""
STARTUP_S = 150.0
"""A Spark JVM, the Kafka source and the first micro-batch, on a loaded 2-core machine."""


def test_spike_rule() -> None:
    """At least ``min_count`` in the minute and more than ``factor`` x the average of the
    ``window_minutes`` before (missing minutes count 0); once per minute."""
    rule = SpikeRule(min_count=10, factor=3.0, window_minutes=4)
    state = WatchState()
    assert spike_alerts(state, {100: 8, 101: 8, 102: 8, 103: 8}, rule) == []  # under min_count
    # the average of 100..103 is 8: 24 is not more than 3 x 8, 25 is
    assert spike_alerts(state, {104: 24}, rule) == []
    [alert] = spike_alerts(state, {104: 1}, rule)
    assert (alert.alert, alert.count, alert.time) == (
        "would_deny_spike",
        25,
        "1970-01-01T01:44:00.000Z",
    )
    assert alert.detail["average"] == 8.0
    assert spike_alerts(state, {104: 50}, rule) == []  # that minute has alerted
    # after a quiet stretch, 10 is a spike: the four minutes before it count 0
    assert [a.count for a in spike_alerts(state, {110: 10}, rule)] == [10]
    assert json.loads(alert.to_json())["alert"] == "would_deny_spike"
    assert "would-deny spike: 25 in the minute, 8.0/min in the 4 before" in alert.to_text()


def test_new_principals_and_denials_once_and_state_round_trip(tmp_path: Path) -> None:
    when = datetime(2026, 11, 25, 10, 0, 1, 500000)
    first = Row(
        operation="WRITE", resource_type="TOPIC", resource_name="payments", result="DENIED",
        mode="enforce", client_host="10.0.0.9", listener="PLAINTEXT", reason="DefaultDeny",
    )  # fmt: skip
    principals = [Row(principal="User:mallory", first_time=when, count=3, first=first)]
    denials = [
        Row(principal="User:mallory", operation="WRITE", resource_type="TOPIC",
            resource_name="payments", first_time=when, count=3, first=first),
    ]  # fmt: skip
    state = WatchState(principals={"User:alice"})
    [alert] = new_principal_alerts(state, principals)
    assert alert == Alert(
        "new_principal", "2026-11-25T10:00:01.500Z", "User:mallory", "WRITE", "TOPIC",
        "payments", 3,
        {"result": "DENIED", "mode": "enforce", "client_host": "10.0.0.9", "listener": "PLAINTEXT"},
    )  # fmt: skip
    assert alert.to_text() == (
        "2026-11-25T10:00:01.500Z new principal User:mallory: DENIED WRITE TOPIC:payments"
        " from 10.0.0.9 (PLAINTEXT, enforce)"
    )
    [denial] = new_denial_alerts(state, denials)
    assert denial.alert == "new_denial" and denial.detail["reason"] == "DefaultDeny"
    assert new_principal_alerts(state, principals) == []
    assert new_denial_alerts(state, denials) == []
    state.last_batch = 7
    state.save(tmp_path / STATE_FILE)
    assert WatchState.load(tmp_path / STATE_FILE) == state
    assert WatchState.load(tmp_path / "absent.json") == WatchState()


@pytest.mark.spark
def test_watcher_on_a_batch(spark: SparkSession, tmp_path: Path) -> None:
    """The ``foreachBatch`` function on a batch of record values (bad ones dropped), with a
    baseline trail's principals and denials known; a replayed batch id alerts nothing."""
    T = "2026-11-25T10:{:02d}:00.000Z"
    baseline = write_audit(
        tmp_path / "baseline",
        [rec(T.format(0), "User:alice", "READ", "TOPIC", "orders", "DENIED", mode="log_only")],
    )
    batch = [
        rec(T.format(1), "User:alice", "READ", "TOPIC", "orders", "DENIED", mode="log_only"),
        rec(T.format(1), "User:alice", "WRITE", "TOPIC", "orders", "DENIED", count=4),
        rec(T.format(2), "User:bob", "READ", "GROUP", "g", count=2),
        rec(T.format(3), "User:bob", "READ", "GROUP", "g", "DENIED", reason="DenyAcl"),
    ]
    values = [r.to_json() for r in batch] + ["not json", '{"schema_version": 3}']
    emitted: list[Alert] = []
    watcher = Watcher(WatchState(), SpikeRule(), emitted.append, tmp_path / STATE_FILE)
    watcher.learn(*baseline_of(read_audit(spark, str(baseline))))
    watcher(spark.createDataFrame([(v,) for v in values], "value string"), 0)
    got = [(a.alert, a.time, a.principal, a.operation, a.resource_name, a.count) for a in emitted]
    assert got == [
        ("new_denial", T.format(1), "User:alice", "WRITE", "orders", 4),
        ("new_principal", T.format(2), "User:bob", "READ", "g", 3),
        ("new_denial", T.format(3), "User:bob", "READ", "g", 1),
    ]  # fmt: skip
    assert emitted[1].detail["result"] == "ALLOWED"
    assert emitted[2].detail["reason"] == "DenyAcl"
    assert WatchState.load(tmp_path / STATE_FILE).minutes == {
        29926681: 1
    }  # 10:01, minutes since the epoch
    emitted.clear()
    watcher(spark.createDataFrame([(v,) for v in values], "value string"), 0)  # a replay
    assert emitted == []


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.spark
@pytest.mark.kafka
def test_watch_alerts_within_seconds_and_resumes(
    kafka_upstream: KafkaBroker, tmp_path: Path
) -> None:
    require_spark_kafka()
    client, topic = kafka_upstream.admin_config(), "_kafkaguard-audit-watch"
    create_topic(client, topic, partitions=2)
    history = [
        rec(now_iso(), "User:alice", "WRITE", "TOPIC", "orders"),
        rec(now_iso(), "User:alice", "READ", "TOPIC", "orders", "DENIED", mode="log_only"),
    ]
    produce_lines(client, topic, [r.to_json() for r in history])
    checkpoint = tmp_path / "checkpoint"
    argv = [
        "--input", f"kafka://{kafka_upstream.bootstrap}/{topic}", "--checkpoint", str(checkpoint),
        "--trigger", "1", "--spike-min", "10",
    ]  # fmt: skip
    watch = WatchProcess(argv, tmp_path / "watch-1.log")
    try:
        # The topic's history first: alice is new to an empty stream.
        watch.wait_for(lambda line: "new principal User:alice:" in line, STARTUP_S)
        watch.wait_for(lambda line: "new denial User:alice: READ TOPIC:orders" in line, 30)

        produced = time.monotonic()
        produce_lines(
            client, topic, [rec(now_iso(), "User:mallory", "WRITE", "TOPIC", "payments",
                                   "DENIED", host="10.0.0.9").to_json()],
        )  # fmt: skip
        line = watch.wait_for(lambda line: "User:mallory" in line, ALERT_WITHIN_S)
        took = time.monotonic() - produced
        assert "new principal User:mallory: DENIED WRITE TOPIC:payments from 10.0.0.9" in line
        watch.wait_for(lambda line: "new denial User:mallory: WRITE TOPIC:payments" in line, 5)
        assert took < ALERT_WITHIN_S

        # 30 would-deny decisions at once, after a stream with one: a spike (in one minute, or
        # in two if a minute ends meanwhile; then one of them has 15 or more).
        flood = [
            rec(now_iso(), "User:alice", "READ", "TOPIC", "orders", "DENIED", mode="log_only")
            for _ in range(30)
        ]
        produce_lines(client, topic, [r.to_json() for r in flood])
        spike = watch.wait_for(lambda line: "would-deny spike" in line, ALERT_WITHIN_S)
        assert int(spike.split("would-deny spike: ", 1)[1].split()[0]) >= 10
    finally:
        assert watch.stop() == 0, watch.log.read_text(errors="replace")[-3000:]
    assert (checkpoint / STATE_FILE).exists()
    before = list(watch.lines)

    # A restart resumes from the checkpoint: nothing seen before alerts again.
    produce_lines(
        client, topic, [rec(now_iso(), "User:bob", "READ", "GROUP", "g", "DENIED").to_json()]
    )
    watch = WatchProcess(argv, tmp_path / "watch-2.log")
    try:
        watch.wait_for(lambda line: "new principal User:bob:" in line, STARTUP_S)
        watch.wait_for(lambda line: "new denial User:bob: READ GROUP:g" in line, 30)
        later = watch.drain(3)
    finally:
        assert watch.stop() == 0, watch.log.read_text(errors="replace")[-3000:]
    again = [line for line in watch.lines if "alice" in line or "mallory" in line]
    assert not again, again
    assert not [line for line in later if "would-deny spike" in line]
    assert [line for line in before if "would-deny spike" in line]
