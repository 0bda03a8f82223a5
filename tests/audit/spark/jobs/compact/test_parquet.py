"""``analyze compact``: closed hours become Parquet, and every job reads them with exactly the
results it had from the JSON lines (bad lines included), incrementally and idempotently."""

from __future__ import annotations

import json
import re
import shutil
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard import cli
from kafkaguard.audit.spark import main as analyze_main
from kafkaguard.audit.spark.jobs.compact.parquet import compact, read_lines
from kafkaguard.audit.spark.render.html import DATA_ELEMENT_ID
from kafkaguard.audit.spark.trail.hours import MARKER, Hour, Marker, exclusive
from kafkaguard.audit.spark.trail.source import (
    TimeRange,
    hour_number,
    parse_time,
    partition_filters,
    read_audit,
    scan_statistics,
)
from tests.support.analyze_data import JUNK_LINES, epoch, rec, set_mtimes, write_audit

pytestmark = pytest.mark.spark

GRACE = 900.0
T = "2026-11-22T{}.000Z"
LOG_ONLY = {"mode": "log_only", "result": "DENIED"}
SASL = {"listener": "SASL", "security_protocol": "SASL_PLAINTEXT"}
TRAIL = [
    rec(T.format("10:05:00"), "User:app", "WRITE", "TOPIC", "orders", count=7),
    rec(T.format("10:20:00"), "User:app", "DESCRIBE", "TOPIC", "orders"),
    rec(T.format("10:40:00"), "User:bob", "READ", "TOPIC", "orders", "DENIED"),
    rec(T.format("11:10:00"), "User:bob", "READ", "GROUP", "g", count=3, host="10.0.0.2"),
    rec(T.format("11:30:00"), "User:carol", "READ", "TOPIC", "payments", **LOG_ONLY, **SASL),
    rec(T.format("12:00:00"), "User:carol", "WRITE", "TOPIC", "payments", count=4, **SASL),
    rec(T.format("12:59:59"), "User:dave", "DESCRIBE", "CLUSTER", "kafka-cluster", "DENIED"),
    rec(T.format("13:15:00"), "User:app", "READ", "TOPIC", "orders", count=2),  # open hour
    rec(T.format("13:20:00"), "User:erin", "READ", "TOPIC", "x", **LOG_ONLY),
]
NOW = epoch("2026-11-22T13:16:00Z")
"""Hours 10-12 are closed (12 ended 16 minutes ago); hour 13 is not over."""
ACLS = """\
acls:
  - {principal: User:app, operation: WRITE, permission: ALLOW, resource_type: TOPIC, name: orders}
  - {principal: User:carol, operation: READ, permission: ALLOW, resource_type: TOPIC,
     name: payments}
  - {principal: User:nobody, operation: READ, permission: ALLOW, resource_type: TOPIC, name: q}
"""
REPORT_TABLES = (
    "decisions_over_time", "by_principal", "by_resource", "by_operation", "by_listener",
    "top_denied_principals", "top_denied_resources", "principal_topic", "new_principals",
    "hourly",
)  # fmt: skip
JOB_TABLES = {
    "propose": ("proposed_acls", "principal_roles", "observed_grants"),
    "unused": ("acl_usage", "unused_acls"),
    "whatif": ("whatif_replay", "whatif_flips", "whatif_summary"),
}


def _trail(directory: Path, records: list[Any] = TRAIL, *, junk: bool = True) -> Path:
    trail = write_audit(directory, records, junk=junk)
    set_mtimes(trail, epoch("2026-11-22T13:00:05Z"))  # hour 12's files closed at 13:00:05
    return trail


def _compact(spark: SparkSession, trail: Path, now: float = NOW) -> list[str]:
    lines = compact(lambda: spark, trail, trail / "_compacted", grace=GRACE, now=now)
    assert lines is not None
    return lines


def analyze(spark: SparkSession, *argv: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    args = cli.build_parser().parse_args(["analyze", *argv])
    return analyze_main.run(args, spark, lines.append), lines


def _embedded(page: Path) -> dict[str, Any]:
    text = page.read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(
        text.split(f'id="{DATA_ELEMENT_ID}">', 1)[1].split("</script>", 1)[0]
    )
    del data["generated_at"]
    del data["run"]["steps"], data["run"]["seconds"]  # how long it took: not a result
    return data


def _jobs(spark: SparkSession, trail: Path, out: Path, *extra: str) -> dict[str, Any]:
    """Every job over ``trail``: what it printed, its ACL file and HTML data (not its tables:
    :func:`_same_tables` compares those)."""
    (out / "acls.yaml").parent.mkdir(parents=True, exist_ok=True)
    (out / "acls.yaml").write_text(ACLS, encoding="utf-8")
    common = ("--input", str(trail), *extra)
    found: dict[str, Any] = {}
    found["report"] = analyze(
        spark, "report", *common, "--since", "2026-11-22T10:30Z", "--output",
        str(out / "report"), "--html", str(out / "report.html"),
    )  # fmt: skip
    code, lines = found["report"]  # the run's timings are not results
    found["report"] = (code, [re.sub(r"\d+\.\d s\b", "<seconds>", line) for line in lines])
    found["html"] = _embedded(out / "report.html")
    found["propose"] = analyze(
        spark, "propose", *common, "--acl-file", str(out / "proposed.yaml"),
        "--prefix-min-topics", "2", "--output", str(out / "propose"),
    )  # fmt: skip
    found["acl file"] = (out / "proposed.yaml").read_text(encoding="utf-8")
    for job in ("unused", "whatif"):
        found[job] = analyze(
            spark, job, *common, "--acls", str(out / "acls.yaml"), "--output", str(out / job)
        )
    normal: dict[str, Any] = json.loads(json.dumps(found))  # (code, lines) as [code, lines]
    return normal


def _same_tables(spark: SparkSession, expected: Path, actual: Path) -> None:
    tables = [("report", t) for t in REPORT_TABLES]
    tables += [(job, t) for job, names in JOB_TABLES.items() for t in names]
    for job, table in tables:
        assertDataFrameEqual(
            spark.read.parquet(str(actual / job / f"{table}.parquet")),
            spark.read.parquet(str(expected / job / f"{table}.parquet")),
        )


def test_every_job_gives_the_json_results_from_compacted_hours(
    spark: SparkSession, tmp_path: Path
) -> None:
    trail = _trail(tmp_path / "audit")
    from_json = _jobs(spark, trail, tmp_path / "json")
    code, printed = from_json["report"]
    assert (code, printed[-1]) == (
        0,
        "13 decisions: 9 allowed, 4 denied (2 would-deny in log_only), 5 principals",
    )
    assert not list((tmp_path / "json" / "report").glob("*.json"))  # JSON copies: --json only

    lines = _compact(spark, trail)
    out = trail / "_compacted"
    assert lines[0].startswith(f"compacted 3 hours (2026-11-22T10 .. 2026-11-22T12) into {out}: ")
    assert "7 records; read 4 files" in lines[0]
    assert lines[1] == (
        f"bad lines: {JUNK_LINES} (malformed, cut short or another schema version; skipped) in "
        "2026-11-22T10"
    )
    assert (
        "not closed yet (ended less than 900 s ago or changed since): 1 hour: 2026-11-22T13"
        in lines
    )
    assert "ignored 1 .jsonl.inprogress file in closed hours" in lines[-2]
    assert lines[-1] == (  # each hour's records are distinct decisions: facts do not pay
        "hourly facts (for propose and report) of 3 hours written; 3 of them read from their "
        "records (facts above 50% of the records)"
    )
    assert not (out / Hour("2026-11-22", 13).relative).exists()
    marker = Marker.read(out / Hour("2026-11-22", 10).relative / MARKER)
    assert marker is not None and marker.records == 3
    assert sorted(marker.sources) == sorted(
        p.name for p in (trail / Hour("2026-11-22", 10).relative).glob("*.jsonl")
    )

    # Hours 10-12 come from Parquet (their JSON files are never opened), hour 13 from JSON.
    plan = str(read_audit(spark, str(trail))._jdf.queryExecution().executedPlan().toString())
    assert "Format: Parquet" in plan and "Format: JSON" in plan
    skipped = ",".join(str(hour_number(date(2026, 11, 22), h)) for h in (10, 11, 12))
    assert "NOT ((datediff(" in " ".join(partition_filters(read_audit(spark, str(trail))))
    assert f") IN ({skipped})" in " ".join(partition_filters(read_audit(spark, str(trail))))
    # A window of compacted hours only: the JSON is neither listed nor planned (issue 36).
    closed = TimeRange(until=parse_time("2026-11-22T13:00:00Z"))
    plan = str(read_audit(spark, str(trail), closed)._jdf.queryExecution().executedPlan())
    assert "Format: Parquet" in plan and "Format: JSON" not in plan

    compacted = _jobs(spark, trail, tmp_path / "parquet")
    assert compacted == _rename(from_json, tmp_path / "json", tmp_path / "parquet")
    _same_tables(spark, tmp_path / "json", tmp_path / "parquet")
    assert _jobs(spark, trail, tmp_path / "again", "--json-only") == _rename(
        from_json, tmp_path / "json", tmp_path / "again"
    )

    # Retention deletes the JSON of compacted hours: the jobs do not notice.
    for hour in (10, 11, 12):
        shutil.rmtree(trail / Hour("2026-11-22", hour).relative)
    without_json = _jobs(spark, trail, tmp_path / "retained")
    assert without_json == _rename(from_json, tmp_path / "json", tmp_path / "retained")
    _same_tables(spark, tmp_path / "json", tmp_path / "retained")


def _rename(found: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """``found`` as it reads with output paths under ``new`` instead of ``old``."""
    return json.loads(json.dumps(found).replace(str(old), str(new)))


def test_compaction_is_incremental_and_idempotent(spark: SparkSession, tmp_path: Path) -> None:
    first = [r for r in TRAIL if r.time < T.format("12")]
    trail = _trail(tmp_path / "audit", first, junk=False)
    out = trail / "_compacted"
    assert _compact(spark, trail)[0].startswith("compacted 2 hours (2026-11-22T10 .. ")
    files = _files(out)

    again = _compact(spark, trail)
    assert again[0] == f"nothing to compact into {out}"
    assert "already compacted: 2 hours" in again
    assert _files(out) == files  # nothing rewritten

    # A new hour is written and closes: only it is compacted.
    write_audit(trail, [r for r in TRAIL if T.format("12") <= r.time < T.format("13")], junk=False)
    set_mtimes(trail / Hour("2026-11-22", 12).relative, epoch("2026-11-22T13:00:05Z"))
    lines = _compact(spark, trail)
    assert lines[0].startswith(f"compacted 1 hour (2026-11-22T12) into {out}: 2 records;")
    assert "already compacted: 2 hours" in lines
    assert {k: v for k, v in _files(out).items() if k in files} == files
    assert read_audit(spark, str(trail)).count() == 7
    assert "Format: JSON" not in _plan(spark, trail)  # every hour is compacted


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` (but the lock): inode and modification time."""
    return {
        str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in directory.rglob("*")
        if p.is_file() and p.name != "_compact.lock"
    }


def _plan(spark: SparkSession, trail: Path) -> str:
    return str(read_audit(spark, str(trail))._jdf.queryExecution().executedPlan().toString())


def test_a_late_file_is_merged_once_its_hour_closes_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    trail = _trail(tmp_path / "audit", TRAIL[:3], junk=False)  # hour 10 only
    _compact(spark, trail)
    out = trail / "_compacted"
    compacted = out / Hour("2026-11-22", 10).relative
    before = _files(compacted)
    hour = trail / Hour("2026-11-22", 10).relative
    for early in hour.glob("*.jsonl"):
        early.unlink()  # retention: the merge must not need them
    late = rec(T.format("10:59:59"), "User:late", "READ", "TOPIC", "orders", count=5)
    (hour / "audit-20261122T131500-9-1.jsonl").write_text(late.to_json() + "\n")
    now = NOW + 600
    set_mtimes(hour, now - 60)
    lines = _compact(spark, trail, now)
    assert (
        "late files in compacted hours, merged once the hour is closed again "
        "(until then no job reads them): 2026-11-22T10"
    ) in lines
    lines = _compact(spark, trail, now + GRACE)
    assert lines[0].startswith("compacted 1 hour (2026-11-22T10) into ")
    assert "4 records; read 1 file" in lines[0]
    assert "late files merged into 1 compacted hour: 2026-11-22T10" in lines
    counts = {
        r["principal"]: r["sum(count)"]
        for r in read_audit(spark, str(trail)).groupBy("principal").sum("count").collect()
    }
    assert counts == {"User:app": 8, "User:bob": 1, "User:late": 5}
    # The hour's earlier files are still there, under the same names: a job that listed
    # them before the merge reads them after it.
    after = _files(compacted)
    assert {k: after[k] for k in before if k != MARKER} == {
        k: v for k, v in before.items() if k != MARKER
    }
    marker = Marker.read(compacted / MARKER)
    assert marker is not None and marker.records == 4
    assert "audit-20261122T131500-9-1.jsonl" in marker.sources
    assert not list(out.glob("_*-*"))  # no staging or replaced directory left
    assert "already compacted: 1 hour" in _compact(spark, trail, now + 2 * GRACE)


def test_compact_on_the_command_line(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real parser and clock: a trail of 2020 is long closed."""
    records = [rec("2020-03-01T10:00:00.000Z", "User:a", "READ", "TOPIC", "t", count=2)]
    trail = write_audit(tmp_path / "audit", records, junk=False)
    set_mtimes(trail, epoch("2020-03-01T11:00:05Z"))
    out = tmp_path / "parquet"
    code, lines = analyze(spark, "compact", "--input", str(trail), "--output", str(out))
    assert code == 0
    assert lines[0].startswith(f"compacted 1 hour (2020-03-01T10) into {out}: 1 record;")
    code, lines = analyze(spark, "report", "--input", str(trail), "--compacted", str(out))
    assert code == 0
    assert lines[-1] == "2 decisions: 2 allowed, 0 denied (0 would-deny in log_only), 1 principals"

    # Nothing to do: no Spark session is even built.
    def no_jvm(*_: object, **__: object) -> SparkSession:
        raise AssertionError("a session was built")

    monkeypatch.setattr("kafkaguard.audit.spark.runtime.session.build_session", no_jvm)
    args = cli.build_parser().parse_args(
        ["analyze", "compact", "--input", str(trail), "--output", str(out)]
    )
    printed: list[str] = []
    assert analyze_main.run(args, None, printed.append) == 0
    assert printed[0] == f"nothing to compact into {out}"
    with exclusive(out):
        assert analyze_main.run(args, None, printed.append) == 0
    assert printed[-1] == f"another compaction holds {out}; nothing done"


def test_compact_refuses_a_uri(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = analyze(spark, "compact", "--input", "hdfs://nn/audit")
    assert code == 1
    assert "compact works on the proxy's local audit directory" in capsys.readouterr().err


def test_compaction_reads_the_root_with_a_filter_on_its_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    """One path for Spark to list (no listing job however many files), and only the files
    asked for are opened; ``date``/``hour`` as the directories spell them."""
    trail = _trail(tmp_path / "audit").resolve()
    first = sorted((trail / Hour("2026-11-22", 10).relative).glob("*.jsonl"))[:1]
    files = first + sorted((trail / Hour("2026-11-22", 12).relative).glob("*.jsonl"))
    lines = read_lines(spark, trail, files)
    spark.conf.set("spark.sql.maxMetadataStringLength", "100000")  # the plan's Location whole
    try:
        plan = str(lines._jdf.queryExecution().executedPlan())
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    assert f"InMemoryFileIndex(1 paths)[file:{trail}]" in plan
    assert scan_statistics(lines)["numFiles"] == len(files)
    hours = {(r.date, r.hour) for r in lines.select("date", "hour").distinct().collect()}
    assert hours == {("2026-11-22", "10"), ("2026-11-22", "12")}


def test_columns_unique_per_record_are_written_without_a_dictionary(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A record's time and correlation id are new in every record: written plainly (the
    dictionary's hashing and its fallback were a fifth of the write, issue 36); the
    columns that repeat keep Parquet's dictionary encoding."""
    import pyarrow.parquet as pq

    ops = ("READ", "WRITE", "DESCRIBE")
    records = [  # an hour of a few principals' repeated checks, each at its own time
        rec(f"2026-11-22T10:{i // 60:02d}:{i % 60:02d}.000Z", f"User:app{i % 4}", ops[i % 3],
            "TOPIC", f"t{i % 5}")
        for i in range(600)
    ]  # fmt: skip
    trail = _trail(tmp_path / "audit", records, junk=False)
    _compact(spark, trail)
    (first,) = sorted((trail / "_compacted").glob("date=*/hour=*/*.parquet"))
    chunks = pq.ParquetFile(first).metadata.row_group(0)
    encodings = {
        chunks.column(i).path_in_schema: set(chunks.column(i).encodings)
        for i in range(chunks.num_columns)
    }
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    for unique in ("time", "event_time", "correlation_id"):
        assert not encodings[unique] & dictionary, (unique, encodings[unique])
    for repeating in ("principal", "operation", "resource_name"):
        assert encodings[repeating] & dictionary, (repeating, encodings[repeating])
