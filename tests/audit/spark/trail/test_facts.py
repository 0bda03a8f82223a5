"""Hourly facts (``analyze compact`` pre-aggregates for ``propose`` and ``report``): the
same results as the records, written incrementally and idempotently, read only when current.

(``test_analyze_compact.py`` runs every job from JSON and from compacted hours with facts.)
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.events import AuditEvent
from kafkaguard.audit.spark.jobs.propose.grants import observed_grants
from kafkaguard.audit.spark.jobs.report.cube import build_report
from kafkaguard.audit.spark.trail.facts import (
    FACT_COLUMNS,
    FACTS_DIR,
    MEMBERS_FILE,
    fact_hours,
    read_facts,
    read_membership,
    to_facts,
    write_facts,
)
from kafkaguard.audit.spark.trail.hours import MARKER, Hour
from kafkaguard.audit.spark.trail.source import TimeRange, parse_time, read_audit
from tests.audit.spark.jobs.compact.test_parquet import GRACE, NOW, TRAIL, T, _compact, _trail
from tests.support.analyze_data import GROUPS_TRAIL, rec, set_mtimes

pytestmark = pytest.mark.spark

HOURS = [Hour("2026-11-22", h) for h in (10, 11, 12)]


def _repeated(records: list[AuditEvent]) -> list[AuditEvent]:
    """Each record and the same decision again a little later: an hour of them has half as
    many facts as records, so compaction keeps its facts (``FACTS_MAX_SHARE``)."""
    again = [replace(r, time=r.time[:-2] + str(int(r.time[-2]) + 1) + "Z") for r in records]
    return sorted([*records, *again], key=lambda r: r.time)


def _from_facts(spark: SparkSession, trail: Path, window: TimeRange) -> set[str]:
    """The hours a read takes from facts (the results are compared with the records')."""
    found = fact_hours(str(trail), window)
    return {h.relative for h in found[1]} if found else set()


def _same_results(spark: SparkSession, trail: Path, window: TimeRange) -> None:
    facts = read_facts(spark, str(trail), window)
    records = read_audit(spark, str(trail), window, json_only=True)
    assertDataFrameEqual(observed_grants(facts), observed_grants(records))
    with pytest.raises(ValueError, match="exact hosts need the records"):
        observed_grants(facts, exact_hosts=True)
    ours, theirs = build_report(facts, window), build_report(records, window)
    assert ours.summary == theirs.summary
    for name, table in ours.tables.items():
        assertDataFrameEqual(table, theirs.tables[name])


def test_facts_are_read_where_current_and_give_the_records_results(
    spark: SparkSession, tmp_path: Path
) -> None:
    trail = _trail(tmp_path / "audit", _repeated(TRAIL))
    lines = _compact(spark, trail)
    assert lines[-1] == "hourly facts (for propose and report) of 3 hours written"
    out = trail / "_compacted"
    for hour in HOURS:  # each hour's facts carry its marker
        marker = (out / hour.relative / MARKER).read_text(encoding="utf-8")
        assert (out / FACTS_DIR / hour.relative / MARKER).read_text(encoding="utf-8") == marker
    whole = TimeRange()
    assert _from_facts(spark, trail, whole) == {h.relative for h in HOURS}
    cut = TimeRange(parse_time("2026-11-22T10:30Z"), parse_time("2026-11-22T12:00:01Z"))
    assert _from_facts(spark, trail, cut) == {HOURS[1].relative}  # 10 and 12: cut by it
    assert _from_facts(spark, trail, TimeRange(until=parse_time("2026-11-22T12:00Z"))) == {
        HOURS[0].relative,
        HOURS[1].relative,
    }
    for window in (whole, cut):
        _same_results(spark, trail, window)
    # Hour 11's records gone (its JSON and its Parquet): its facts still answer.
    for part in [
        *(out / HOURS[1].relative).glob("*.parquet"),
        *(trail / HOURS[1].relative).glob("*.jsonl"),
    ]:
        part.unlink()
    hour_11 = "hour_start = '2026-11-22 11:00:00'"
    assert read_facts(spark, str(trail)).where(hour_11).count() > 0
    assert to_facts(read_audit(spark, str(trail))).where(hour_11).count() == 0
    # Idempotent: a second run writes nothing, and says nothing about facts.
    assert not any("hourly facts" in line for line in _compact(spark, trail))


def test_a_merged_hour_gets_new_facts_and_missing_facts_are_backfilled(
    spark: SparkSession, tmp_path: Path
) -> None:
    trail = _trail(tmp_path / "audit", _repeated(TRAIL[:3]), junk=False)  # hour 10 only
    _compact(spark, trail)
    hour = trail / HOURS[0].relative
    late = rec(T.format("10:59:59"), "User:late", "READ", "TOPIC", "orders", count=5)
    (hour / "audit-20261122T131500-9-1.jsonl").write_text(2 * (late.to_json() + "\n"))
    set_mtimes(hour, NOW)
    # Until the hour is merged, its facts stay current: the late file is read by no job.
    assert _from_facts(spark, trail, TimeRange()) == {HOURS[0].relative}
    lines = _compact(spark, trail, NOW + 2 * GRACE)
    assert lines[-1] == "hourly facts (for propose and report) of 1 hours written"
    grants = observed_grants(read_facts(spark, str(trail)))
    totals = grants.groupBy("principal").sum("decisions").collect()
    assert {r[0]: r[1] for r in totals} == {"User:app": 16, "User:late": 10}
    _same_results(spark, trail, TimeRange())

    shutil.rmtree(trail / "_compacted" / FACTS_DIR)  # compacted before facts existed
    assert _from_facts(spark, trail, TimeRange()) == set()
    _same_results(spark, trail, TimeRange())
    lines = _compact(spark, trail, NOW + 3 * GRACE)
    assert lines[-1] == "hourly facts (for propose and report) of 1 hours written"
    assert _from_facts(spark, trail, TimeRange()) == {HOURS[0].relative}


def test_facts_are_kept_only_for_hours_they_shrink(spark: SparkSession, tmp_path: Path) -> None:
    """Hour 10 repeats its decisions (facts: half its records), hours 11 and 12 do not (facts:
    as many as the records): the facts of 10 are read, the records of 11 and 12, with the
    results of the records alone."""
    hour_10 = [r for r in TRAIL if r.time < T.format("11")]
    repeated = _repeated(_repeated(hour_10))  # 12 records, 3 facts; 7 facts of 16 records
    trail = _trail(tmp_path / "audit", [*repeated, *TRAIL[len(hour_10) :]])
    lines = _compact(spark, trail)
    assert lines[-1] == (
        "hourly facts (for propose and report) of 3 hours written; 2 of them read from their "
        "records (facts above 50% of the records)"
    )
    out = trail / "_compacted"
    for hour in HOURS[1:]:  # current (the hour's marker), but no facts: its records are read
        facts = out / FACTS_DIR / hour.relative
        marker = (out / hour.relative / MARKER).read_text(encoding="utf-8")
        assert [p.name for p in facts.iterdir()] == [MARKER]
        assert (facts / MARKER).read_text(encoding="utf-8") == marker
    assert any((out / FACTS_DIR / HOURS[0].relative).glob("*.parquet"))
    whole = TimeRange()
    cut = TimeRange(parse_time("2026-11-22T10:00Z"), parse_time("2026-11-22T11:30Z"))
    assert _from_facts(spark, trail, whole) == _from_facts(spark, trail, cut) == {HOURS[0].relative}
    for window in (whole, cut):
        _same_results(spark, trail, window)
    # Hours read from their records are current: a second run computes nothing.
    assert not any("hourly facts" in line for line in _compact(spark, trail))


def test_hours_estimated_not_to_shrink_are_not_read(spark: SparkSession, tmp_path: Path) -> None:
    """The compaction's estimate says the facts would not shrink these hours: their markers
    are written without reading them (no session is even asked for)."""
    trail = _trail(tmp_path / "audit", _repeated(TRAIL))
    out = trail / "_compacted"
    _compact(spark, trail)
    shutil.rmtree(out / FACTS_DIR)

    def no_session() -> SparkSession:
        raise AssertionError("hours estimated not to shrink were read")

    assert write_facts(no_session, out, set(HOURS)) == (3, 0)
    for hour in HOURS:
        assert [p.name for p in (out / FACTS_DIR / hour.relative).iterdir()] == [MARKER]
    assert _from_facts(spark, trail, TimeRange()) == set()
    _same_results(spark, trail, TimeRange())


def test_group_membership_is_kept_beside_the_facts(spark: SparkSession, tmp_path: Path) -> None:
    """Membership is no fact key: each hour with facts has its own small membership file, and
    a read of the window gets what the records say; facts without one (written before groups
    were recorded) are not current until the next run writes them again."""
    trail = _trail(tmp_path / "audit", _repeated(GROUPS_TRAIL))
    _compact(spark, trail)
    facts = trail / "_compacted" / FACTS_DIR
    members_10 = json.loads((facts / HOURS[0].relative / MEMBERS_FILE).read_text())
    assert members_10 == {"version": 1, "members": {"User:alice": ["Group:eng"]}}  # root: super
    assert "groups" not in FACT_COLUMNS
    expected = {
        "User:alice": frozenset({"Group:eng"}),
        "User:bob": frozenset({"Group:eng", "Group:oncall"}),
    }
    assert _from_facts(spark, trail, TimeRange()) == {h.relative for h in HOURS[:2]}
    assert read_membership(spark, str(trail)) == expected
    assert read_membership(spark, str(trail), json_only=True) == expected
    until_11 = TimeRange(until=parse_time("2026-11-22T11:00Z"))
    assert read_membership(spark, str(trail), until_11) == {"User:alice": expected["User:alice"]}

    (facts / HOURS[0].relative / MEMBERS_FILE).unlink()
    assert _from_facts(spark, trail, TimeRange()) == {HOURS[1].relative}
    assert read_membership(spark, str(trail)) == expected  # hour 10's from its records
    lines = _compact(spark, trail, NOW + GRACE)
    assert lines[-1] == "hourly facts (for propose and report) of 1 hours written"
    assert _from_facts(spark, trail, TimeRange()) == {h.relative for h in HOURS[:2]}

    (facts / HOURS[1].relative / MEMBERS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable group membership"):
        read_membership(spark, str(trail))
