"""Hourly and daily facts (``analyze compact`` pre-aggregates for ``propose`` and ``report``):
the same results as the records, written incrementally and idempotently, read only when
current; daily facts for whole days of the window only, their hours from beside them.

(``test_analyze_compact.py`` runs every job from JSON and from compacted hours with facts.)
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from kafkaguard.audit.events import AuditEvent
from kafkaguard.audit.spark.jobs.propose.grants import enforced_refusals, observed_grants
from kafkaguard.audit.spark.jobs.report.cube import build_report
from kafkaguard.audit.spark.trail.facts import (
    DAILY_DIR,
    DAY_MARKER,
    FACT_COLUMNS,
    FACTS_DIR,
    HOUR_TOTALS_FILE,
    MEMBERS_FILE,
    choose_facts,
    read_facts,
    read_membership,
    stored_hour_totals,
    to_facts,
    write_facts,
)
from kafkaguard.audit.spark.trail.hours import MARKER, Hour
from kafkaguard.audit.spark.trail.source import TimeRange, parse_time, read_audit
from tests.audit.spark.jobs.compact.test_parquet import (
    ACLS,
    GRACE,
    NOW,
    TRAIL,
    T,
    _compact,
    _embedded,
    _trail,
    analyze,
)
from tests.support.analyze_data import ENG, GROUPS_TRAIL, ONCALL, rec, set_mtimes

pytestmark = pytest.mark.spark

HOURS = [Hour("2026-11-22", h) for h in (10, 11, 12)]


def _repeated(records: list[AuditEvent]) -> list[AuditEvent]:
    """Each record and the same decision again a little later: an hour of them has half as
    many facts as records, so compaction keeps its facts (``FACTS_MAX_SHARE``)."""
    again = [replace(r, time=r.time[:-2] + str(int(r.time[-2]) + 1) + "Z") for r in records]
    return sorted([*records, *again], key=lambda r: r.time)


def _from_facts(spark: SparkSession, trail: Path, window: TimeRange) -> set[str]:
    """The hours a read takes from facts (the results are compared with the records')."""
    found = choose_facts(str(trail), window)
    return {h.relative for h in found.hours} if found else set()


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


DAY = "2026-11-21"
D = DAY + "T{:02d}:{}.000Z"
DAY_HOURS = [Hour(DAY, h) for h in range(24)]
WHOLE_DAY = TimeRange(parse_time(DAY), parse_time("2026-11-22"))
DAILY_LINE = "daily facts (for propose and report) of 1 whole days written"


def _day(missing: int | None = None) -> list[AuditEvent]:
    """Every hour of :data:`DAY` but ``missing``: the same few decisions twice or more (each
    hour keeps hourly facts, 3 or 4 of 7 or 9 records: below the share, as the compaction's
    estimate of all hours must be for them to be summed; the day's are fewer still), from
    several client hosts, with groups that change at noon, and a principal first seen at 18:00
    (new principals)."""
    out = []
    for h in (h for h in range(24) if h != missing):
        bob = (ENG, ONCALL) if h < 12 else (ENG,)
        out += [
            rec(D.format(h, "05:00"), "User:app", "WRITE", "TOPIC", "orders", count=h + 2,
                host=f"10.0.0.{h % 3 + 1}", groups=(ENG,)),
            rec(D.format(h, "05:30"), "User:app", "WRITE", "TOPIC", "orders", host="10.0.1.9",
                groups=(ENG,)),
            rec(D.format(h, "05:45"), "User:app", "WRITE", "TOPIC", "orders", host="10.0.1.9",
                groups=(ENG,)),
            rec(D.format(h, "20:00"), "User:bob", "READ", "TOPIC", "orders", "DENIED",
                mode="log_only", groups=bob),
            rec(D.format(h, "21:00"), "User:bob", "READ", "TOPIC", "orders", "DENIED",
                mode="log_only", groups=bob),
            rec(D.format(h, "40:00"), "User:carol", "DESCRIBE", "GROUP", "g", "DENIED"),
            rec(D.format(h, "41:00"), "User:carol", "DESCRIBE", "GROUP", "g", "DENIED"),
        ]  # fmt: skip
        if h >= 18:
            late = [rec(D.format(h, f"5{m}:00"), "User:late", "READ", "TOPIC", "payments",
                        host="10.0.2.1") for m in (0, 1)]  # fmt: skip
            out += late
    return out


def _day_trail(directory: Path, missing: int | None = None) -> Path:
    """:data:`DAY` (all 24 hours, or all but ``missing``), then the hours of :data:`TRAIL`
    (2026-11-22, 10-12 closed, 13 open)."""
    return _trail(directory, [*_day(missing), *TRAIL])


def _same_as_records(spark: SparkSession, trail: Path, window: TimeRange) -> None:
    """propose's grants and refusals, report's rows and totals and the membership from the
    facts a read takes (daily where whole days allow) equal those of the records alone."""
    facts = read_facts(spark, str(trail), window)
    records = read_audit(spark, str(trail), window, json_only=True)
    assertDataFrameEqual(observed_grants(facts), observed_grants(records))
    assertDataFrameEqual(enforced_refusals(facts), enforced_refusals(records))
    hours = stored_hour_totals(str(trail), window)
    ours = build_report(facts, window, hour_totals=hours)
    theirs = build_report(records, window)
    assert (ours.summary, ours.rows, ours.hours) == (theirs.summary, theirs.rows, theirs.hours)
    finer = build_report(read_facts(spark, str(trail), window, daily=False), window)
    for name, table in finer.tables.items():  # the hourly table: read without daily facts
        assertDataFrameEqual(table, theirs.tables[name])
    members = read_membership(spark, str(trail), window)
    assert members == read_membership(spark, str(trail), window, json_only=True)


def _chosen(trail: Path, window: TimeRange) -> tuple[tuple[str, ...], set[str]]:
    """The days a read takes from daily facts, and the hours from hourly facts."""
    choice = choose_facts(str(trail), window)
    assert choice is not None
    return choice.days, {h.label for h in choice.hours}


def test_daily_facts_are_read_for_whole_days_and_give_the_records_results(
    spark: SparkSession, tmp_path: Path
) -> None:
    trail = _day_trail(tmp_path / "audit")
    lines = _compact(spark, trail)
    assert (
        lines[-2] == "hourly facts (for propose and report) of 27 hours written; 3 of them"
        " read from their records (facts above 50% of the records)"
    )
    assert lines[-1] == DAILY_LINE
    stored = trail / "_compacted" / DAILY_DIR / f"date={DAY}"
    beside = {p.name for p in stored.iterdir() if ".parquet" not in p.name}
    assert beside == {MEMBERS_FILE, HOUR_TOTALS_FILE, DAY_MARKER}
    day_rows = read_facts(spark, str(trail), WHOLE_DAY)
    assert day_rows.count() == 4  # app, bob, carol, late: one fact each for the day
    assert day_rows.where("hour_start IS NOT NULL").count() == 0  # a daily fact has no hour
    members = json.loads((stored / MEMBERS_FILE).read_text(encoding="utf-8"))
    assert members["members"] == {"User:app": [ENG], "User:bob": [ENG, ONCALL]}
    totals = json.loads((stored / HOUR_TOTALS_FILE).read_text(encoding="utf-8"))["hours"]
    assert totals["05"] == {"allowed": 9, "denied": 4, "would_deny": 2}
    assert totals["18"] == {"allowed": 24, "denied": 4, "would_deny": 2}

    windows = {  # window: (days from daily facts, hours from hourly facts)
        TimeRange(): ((DAY,), set()),
        WHOLE_DAY: ((DAY,), set()),
        TimeRange(parse_time(DAY), parse_time("2026-11-22T11:30Z")): ((DAY,), set()),
        TimeRange(parse_time(f"{DAY}T05:00Z"), parse_time("2026-11-22T12:00Z")): (
            (),
            {h.label for h in DAY_HOURS[5:]},
        ),
        TimeRange(until=parse_time(f"{DAY}T23:59:59Z")): ((), {h.label for h in DAY_HOURS[:23]}),
    }
    for window, chosen in windows.items():
        assert _chosen(trail, window) == chosen, window
        _same_as_records(spark, trail, window)
    # The written hourly cube needs hours a daily fact has not: refused, never drawn at 00:00.
    with pytest.raises(PySparkException, match="needs every hour"):
        build_report(
            read_facts(spark, str(trail)), TimeRange(), hour_totals=stored_hour_totals(str(trail))
        ).tables["hourly"].collect()
    # Daily facts read without their hours: the series would be short, so the report refuses.
    with pytest.raises(ValueError, match="daily facts read without their hours"):
        build_report(read_facts(spark, str(trail)), TimeRange())

    # Idempotent: a second run writes nothing, says nothing about facts, moves nothing.
    before = {p: p.stat().st_ino for p in (trail / "_compacted").rglob("*")}
    again = _compact(spark, trail)
    assert not any("facts (for propose" in line for line in again), again
    assert {p: p.stat().st_ino for p in (trail / "_compacted").rglob("*")} == before


def test_the_jobs_name_and_use_daily_facts_with_the_records_results(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """propose's ACL file, report's page data and lines, unused and whatif as run from the
    command line: the same from the compacted trail with daily facts as from the JSON."""
    trail = _day_trail(tmp_path / "audit")
    _compact(spark, trail)
    (tmp_path / "acls.yaml").write_text(ACLS, encoding="utf-8")
    found = {}
    for run, extra in (("facts", ()), ("records", ("--json-only",))):
        out = tmp_path / run
        out.mkdir()
        common = ("--input", str(trail), "--until", "2026-11-22T11:30Z", *extra)
        capsys.readouterr()
        printed = {
            "propose": analyze(spark, "propose", *common, "--acl-file", str(out / "p.yaml")),
            "report": analyze(spark, "report", *common, "--html", str(out / "r.html")),
            "unused": analyze(spark, "unused", *common, "--acls", str(tmp_path / "acls.yaml")),
            "whatif": analyze(spark, "whatif", *common, "--acls", str(tmp_path / "acls.yaml")),
        }
        lines = {  # the paths written and the seconds taken are no results
            job: [re.sub(r"\d+\.\d s\b", "<s>", x.replace(str(out), "OUT")) for x in got]
            for job, (code, got) in printed.items()
            if code == 0
        }
        found[run] = (
            lines,
            (out / "p.yaml").read_text(encoding="utf-8"),
            _embedded(out / "r.html"),
            [line for line in capsys.readouterr().err.splitlines() if line.startswith("facts:")],
        )
    assert len(found["facts"][0]) == 4
    assert found["facts"][:3] == found["records"][:3]
    assert "User:late" in found["facts"][1]
    assert found["facts"][3] == 2 * [  # propose's and report's read
        "facts: 1 day from daily facts, 0 hours from hourly facts, 2 hours from records"
    ]
    assert found["records"][3] == []  # --json-only: no facts at all


def test_a_day_with_an_hour_missing_has_no_daily_facts(spark: SparkSession, tmp_path: Path) -> None:
    trail = _day_trail(tmp_path / "audit", missing=7)
    lines = _compact(spark, trail)
    assert not any("daily facts" in line for line in lines)
    assert not (trail / "_compacted" / DAILY_DIR).exists()
    assert _chosen(trail, TimeRange()) == ((), {h.label for h in DAY_HOURS if h.hour != 7})
    _same_as_records(spark, trail, TimeRange())


def test_a_recompacted_hour_makes_its_day_stale_until_the_next_compact(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An hour's marker changes (merged late files, or compacted again): the day's facts
    are not read (its hours are), and the next run writes them again, late records included."""
    trail = _day_trail(tmp_path / "audit")
    _compact(spark, trail)
    hour = trail / DAY_HOURS[5].relative
    late = rec(D.format(5, "59:59"), "User:late", "ALTER", "TOPIC", "orders", count=5)
    (hour / "audit-20261122T131500-9-1.jsonl").write_text(2 * (late.to_json() + "\n"))
    set_mtimes(hour, NOW)
    assert _chosen(trail, TimeRange())[0] == (DAY,)  # not merged yet: no job reads the file
    lines = _compact(spark, trail, NOW + 2 * GRACE)
    assert lines[-2:] == ["hourly facts (for propose and report) of 1 hours written", DAILY_LINE]
    assert _chosen(trail, TimeRange())[0] == (DAY,)
    grants = observed_grants(read_facts(spark, str(trail))).where("operation = 'ALTER'")
    assert [(r["principal"], r["decisions"]) for r in grants.collect()] == [("User:late", 10)]
    _same_as_records(spark, trail, TimeRange())

    # Hour 12's marker rewritten (as a new compaction of it writes one): the day is stale.
    marker = trail / "_compacted" / DAY_HOURS[12].relative / MARKER
    marker.write_text(marker.read_text(encoding="utf-8").replace("\n", "\n "), encoding="utf-8")
    assert _chosen(trail, TimeRange()) == ((), {h.label for h in DAY_HOURS if h.hour != 12})
    _same_as_records(spark, trail, TimeRange())
    lines = _compact(spark, trail, NOW + 3 * GRACE)
    assert lines[-2:] == ["hourly facts (for propose and report) of 1 hours written", DAILY_LINE]
    assert _chosen(trail, TimeRange())[0] == (DAY,)


def test_daily_facts_are_kept_only_where_they_shrink_what_the_day_reads(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Every record of the day a distinct decision: neither hourly nor daily facts shrink
    it, so the day keeps its marker alone (current, not computed again) and its records are
    read."""
    distinct = [
        rec(D.format(h, "10:00"), f"User:u{h}", "READ", "TOPIC", f"t{h}-{m}")
        for h in range(24)
        for m in range(2)
    ]
    trail = _trail(tmp_path / "audit", distinct)
    lines = _compact(spark, trail)
    assert lines[-1] == (
        "daily facts (for propose and report) of 1 whole days written; 1 of them read from "
        "their hours (daily facts above 50% of the hourly facts and records they replace)"
    )
    stored = trail / "_compacted" / DAILY_DIR / f"date={DAY}"
    assert [p.name for p in stored.iterdir()] == [DAY_MARKER]
    assert _chosen(trail, TimeRange()) == ((), set())
    _same_as_records(spark, trail, TimeRange())
    assert not any("facts (for propose" in line for line in _compact(spark, trail))


def test_an_unreadable_day_file_is_an_error(spark: SparkSession, tmp_path: Path) -> None:
    trail = _day_trail(tmp_path / "audit")
    _compact(spark, trail)
    stored = trail / "_compacted" / DAILY_DIR / f"date={DAY}"
    (stored / HOUR_TOTALS_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="unreadable hour totals"):
        stored_hour_totals(str(trail))
    (stored / MEMBERS_FILE).write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match="unreadable group membership"):
        read_membership(spark, str(trail))
    (stored / MEMBERS_FILE).unlink()  # without it, the day is not current: its hours are read
    assert _chosen(trail, TimeRange())[0] == ()
