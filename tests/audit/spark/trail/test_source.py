"""The reading side of the audit contract: schema, partition discovery, pruning, bad lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit import events
from kafkaguard.audit.config import FORMAT_KAFKAGUARD
from kafkaguard.audit.spark.trail.schema import ACL_FIELDS, AUDIT_SCHEMA, FIELD_NAMES
from kafkaguard.audit.spark.trail.source import (
    TimeRange,
    describe_input,
    parse_time,
    partition_filters,
    read_audit,
    scan_statistics,
)
from kafkaguard.audit.writer import AuditFiles
from kafkaguard.policy.explain import acl_json
from kafkaguard.policy.model import AclOperation, ResourceType, acl_binding
from tests.support.analyze_data import epoch, rec, write_audit, write_version_1

pytestmark = pytest.mark.spark


def test_schema_mirrors_the_writer_field_list() -> None:
    assert FIELD_NAMES == events.FIELD_NAMES
    assert [f.name for f in AUDIT_SCHEMA.fields] == list(events.FIELD_NAMES)
    acl = acl_json(acl_binding(ResourceType.TOPIC, "t", "User:a", AclOperation.READ))
    assert tuple(acl) == ACL_FIELDS


def test_every_field_of_a_written_record_is_read(spark: SparkSession, tmp_path: Path) -> None:
    record = rec("2026-11-22T10:15:03.123Z", "User:alice", "WRITE", "TOPIC", "orders")
    binding = acl_binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.WRITE)
    record = events.AuditEvent(**{**record.to_dict(), "acl": acl_json(binding)})  # type: ignore[arg-type]
    write_audit(tmp_path, [record], junk=False)
    row = read_audit(spark, str(tmp_path)).collect()[0].asDict(recursive=True)
    expected = json.loads(record.to_json())
    assert {k: row[k] for k in FIELD_NAMES} == expected
    assert row["date"] == datetime(2026, 11, 22).date()
    assert row["hour"] == 10
    assert row["event_time"].astimezone(UTC) == datetime(2026, 11, 22, 10, 15, 3, 123000, UTC)


def _trail(tmp_path: Path) -> str:
    records = [
        rec("2026-11-21T23:59:59.999Z", "User:a", "READ", "TOPIC", "t"),
        rec("2026-11-22T00:00:00.000Z", "User:b", "READ", "TOPIC", "t"),
        rec("2026-11-22T10:30:00.000Z", "User:c", "READ", "TOPIC", "t", count=5),
        rec("2026-11-22T11:00:00.000Z", "User:d", "READ", "TOPIC", "t"),
        rec("2026-11-23T00:00:00.001Z", "User:e", "READ", "TOPIC", "t"),
    ]
    return str(write_audit(tmp_path, records))


def test_junk_is_ignored_and_counts_are_kept(spark: SparkSession, tmp_path: Path) -> None:
    df = read_audit(spark, _trail(tmp_path)).select("principal", "count")
    counts = {"a": 1, "b": 1, "c": 5, "d": 1, "e": 1}
    assertDataFrameEqual(df, [Row(principal=f"User:{p}", count=c) for p, c in counts.items()])


@pytest.mark.parametrize(
    ("since", "until", "principals"),
    [
        ("2026-11-22", "2026-11-23", ["User:b", "User:c", "User:d"]),
        ("2026-11-22T10:30:00Z", "2026-11-22T11:00:00Z", ["User:c"]),
        ("2026-11-22T10:30:00.001Z", None, ["User:d", "User:e"]),
        (None, "2026-11-22T01:00:00+01:00", ["User:a"]),
    ],
)
def test_time_window_is_exact(
    spark: SparkSession, tmp_path: Path, since: str | None, until: str | None, principals: list[str]
) -> None:
    window = TimeRange(parse_time(since) if since else None, parse_time(until) if until else None)
    df = read_audit(spark, _trail(tmp_path), window).select("principal")
    assertDataFrameEqual(df, [Row(principal=p) for p in principals])


def test_time_window_prunes_partitions(spark: SparkSession, tmp_path: Path) -> None:
    window = TimeRange(parse_time("2026-11-22T10:15:00Z"), parse_time("2026-11-22T12:00:00Z"))
    df = read_audit(spark, _trail(tmp_path), window)
    [filters] = partition_filters(df)
    assert "date" in filters and "hour" in filters
    # Of the four hour directories only hours 10 and 11 are scanned: pruned before the read.
    stats = scan_statistics(df)
    assert stats["numPartitions"] == 2


def test_parse_time_and_window_validation() -> None:
    assert parse_time("2026-11-22T10:15:03.123Z") == datetime(2026, 11, 22, 10, 15, 3, 123000, UTC)
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_time("yesterday")
    with pytest.raises(ValueError, match="not before"):
        TimeRange(parse_time("2026-11-23"), parse_time("2026-11-22"))


def test_a_directory_without_partitions_is_read_unpruned(
    spark: SparkSession, tmp_path: Path
) -> None:
    line = rec("2026-11-22T10:15:03.123Z", "User:x", "READ", "TOPIC", "t").to_json()
    (tmp_path / "audit-1.jsonl").write_text(line + "\n", encoding="utf-8")
    window = TimeRange(parse_time("2026-11-22"), None)
    assertDataFrameEqual(
        read_audit(spark, str(tmp_path), window).select("principal", "hour"),
        [Row(principal="User:x", hour=None)],
    )


def test_a_live_trail_is_read_up_to_the_last_complete_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The hour being written (issue 36): its ``.jsonl.inprogress`` file is read, the line
    the writer is in the middle of is not, and the summary line says so."""
    records = [
        rec("2026-11-22T10:05:00.000Z", "User:a", "READ", "TOPIC", "t", count=2),
        rec("2026-11-22T10:06:00.000Z", "User:a", "WRITE", "TOPIC", "t"),
        rec("2026-11-22T11:01:00.000Z", "User:b", "READ", "TOPIC", "t", count=4),
    ]
    files = AuditFiles(tmp_path, max_file_bytes=1 << 30, max_file_seconds=1e9)
    try:
        for r in records:
            files.write(epoch(r.time), r.encode(FORMAT_KAFKAGUARD) + b"\n")
        files.flush()
        live = sorted(tmp_path.rglob("*.jsonl.inprogress"))
        assert len(live) == 2  # nothing closed: hours 10 and 11 are both being written
        with live[-1].open("a", encoding="utf-8") as f:
            f.write(records[0].to_json()[:-10])  # the writer, mid-line
        counts = read_audit(spark, str(tmp_path)).groupBy("principal").sum("count").collect()
        assert sorted((r[0], r[1]) for r in counts) == [("User:a", 3), ("User:b", 4)]
        assert describe_input(str(tmp_path), TimeRange()) == (
            "input: 0 .jsonl files and 2 .jsonl.inprogress files (being written: read up to"
            " the last complete line) of 2 hours"
        )
        until = TimeRange(until=parse_time("2026-11-22T11:00:00Z"))
        assert describe_input(str(tmp_path), until) == (
            "input: 0 .jsonl files and 1 .jsonl.inprogress file (being written: read up to"
            " the last complete line) of 1 hour; 1 hour of JSON outside the window skipped"
        )
    finally:
        files.close()


def test_a_version_1_and_a_version_2_trail_in_one_directory(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A proxy upgraded mid-hour: version 1 lines (no groups: read as none) beside version 2
    ones, from JSON, from compacted Parquet, and from Parquet compacted before version 2
    (no ``groups`` column)."""
    old = [rec("2026-11-22T10:01:00.000Z", "User:alice", "READ", "TOPIC", "t", count=2)]
    new = [
        rec("2026-11-22T10:30:00.000Z", "User:alice", "READ", "TOPIC", "t", groups=("Group:eng",)),
        rec("2026-11-22T11:00:00.000Z", "User:bob", "READ", "TOPIC", "t"),
    ]
    write_version_1(tmp_path, old)
    write_audit(tmp_path, new, junk=False)
    expected = [
        Row(schema_version=1, principal="User:alice", groups=[], count=2),
        Row(schema_version=2, principal="User:alice", groups=["Group:eng"], count=1),
        Row(schema_version=2, principal="User:bob", groups=[], count=1),
    ]
    columns = ("schema_version", "principal", "groups", "count")
    assertDataFrameEqual(read_audit(spark, str(tmp_path)).select(*columns), expected)
    # Hour 10 as Parquet compacted from version 1 records: no groups column at all.
    stored = tmp_path / "_compacted"
    hour_10 = read_audit(spark, str(tmp_path)).where("hour = 10").drop("groups", "date", "hour")
    hour_10.write.parquet(str(stored / "date=2026-11-22" / "hour=10"))
    both = read_audit(spark, str(tmp_path))
    assert "from Parquet" in str(describe_input(str(tmp_path), TimeRange()))
    assertDataFrameEqual(
        both.select(*columns),
        [Row(**{**r.asDict(), "groups": []}) if r.principal == "User:alice" else r
         for r in expected],
    )  # fmt: skip
