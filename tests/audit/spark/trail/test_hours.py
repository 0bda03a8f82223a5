"""``analyze compact``'s protocol without a JVM: the closed-hour rule, markers, late files,
the lock, the commit and the clean-up (:mod:`kafkaguard.audit.spark.trail.hours`)."""

from __future__ import annotations

import os
from pathlib import Path

from kafkaguard.audit.spark.trail.hours import (
    MARKER,
    Hour,
    Marker,
    clean_up,
    commit,
    exclusive,
    link_parquet,
    plan_compaction,
)
from tests.support.analyze_data import epoch, rec, set_mtimes, write_audit

GRACE = 900.0
END_12 = epoch("2026-11-22T13:00:00Z")
"""The end of the trail's last hour."""


def _trail(tmp_path: Path) -> Path:
    records = [
        rec("2026-11-22T10:15:00.000Z", "User:a", "READ", "TOPIC", "t"),
        rec("2026-11-22T11:30:00.000Z", "User:b", "READ", "TOPIC", "t"),
        rec("2026-11-22T12:05:00.000Z", "User:c", "READ", "TOPIC", "t"),
    ]
    trail = write_audit(tmp_path / "audit", records, junk=False)
    for hour in (10, 11, 12):  # the writer closes an hour's files 5 s after it ends
        set_mtimes(trail / Hour("2026-11-22", hour).relative, END_12 - (12 - hour) * 3600 + 5)
    return trail


def _labels(hours: list[Hour]) -> list[str]:
    return [h.label for h in hours]


def test_an_hour_is_closed_once_it_ended_grace_seconds_ago(tmp_path: Path) -> None:
    trail, out = _trail(tmp_path), tmp_path / "out"
    plan = plan_compaction(trail, out, END_12 + GRACE - 1, GRACE)
    assert _labels([f.hour for f in plan.new]) == ["2026-11-22T10", "2026-11-22T11"]
    assert _labels(plan.open) == ["2026-11-22T12"]
    # Hour 12 ended 900 s ago, but its directory changed (the writer's close) 895 s ago.
    assert _labels(plan_compaction(trail, out, END_12 + GRACE, GRACE).open) == ["2026-11-22T12"]
    plan = plan_compaction(trail, out, END_12 + 5 + GRACE, GRACE)
    assert (plan.open, len(plan.new)) == ([], 3)


def test_a_file_or_directory_changed_within_the_grace_keeps_an_old_hour_open(
    tmp_path: Path,
) -> None:
    trail, out = _trail(tmp_path), tmp_path / "out"
    now = END_12 + 3 * GRACE
    hour_10 = trail / "date=2026-11-22" / "hour=10"
    hour_11 = trail / "date=2026-11-22" / "hour=11"
    [file_10] = hour_10.glob("*.jsonl")
    os.utime(file_10, (now - 10, now - 10))  # a straggler written into it 10 s ago
    os.utime(hour_11, (now - 10, now - 10))  # a file renamed or created in it 10 s ago
    plan = plan_compaction(trail, out, now, GRACE)
    assert _labels(plan.open) == ["2026-11-22T10", "2026-11-22T11"]
    assert _labels([f.hour for f in plan.new]) == ["2026-11-22T12"]


def test_an_inprogress_file_keeps_its_hour_open_until_it_is_abandoned(tmp_path: Path) -> None:
    trail, out = _trail(tmp_path), tmp_path / "out"
    now = END_12 + 3 * GRACE
    hour_10 = trail / "date=2026-11-22" / "hour=10"
    late = hour_10 / "audit-20261122T131000-9-1.jsonl.inprogress"
    late.write_text(rec("2026-11-22T10:59:59.000Z", "User:z", "READ", "TOPIC", "t").to_json())
    os.utime(late, (now - 1, now - 1))  # being written: the hour is open
    os.utime(hour_10, (END_12, END_12))
    plan = plan_compaction(trail, out, now, GRACE)
    assert (_labels(plan.open), plan.abandoned) == (["2026-11-22T10"], 0)
    # Untouched for longer than the grace: a writer that stopped without closing it.
    os.utime(late, (now - GRACE, now - GRACE))
    plan = plan_compaction(trail, out, now, GRACE)
    assert (plan.open, plan.abandoned, len(plan.new)) == ([], 1, 3)
    assert "audit-20261122T131000-9-1.jsonl.inprogress" not in plan.new[0].closed


def _mark(out: Path, hour: Hour, sources: dict[str, int]) -> None:
    directory = out / hour.relative
    directory.mkdir(parents=True)
    marker = Marker(sources, 1, "2026-11-22T14:00:00Z")
    (directory / MARKER).write_text(marker.to_json(hour), encoding="utf-8")


def test_compacted_hours_are_skipped_and_late_files_found(tmp_path: Path) -> None:
    trail, out = _trail(tmp_path), tmp_path / "out"
    now = END_12 + 3 * GRACE
    names = {h: {p.name: p.stat().st_size for p in (trail / h.relative).glob("*.jsonl")} for h in (
        Hour("2026-11-22", 10), Hour("2026-11-22", 11), Hour("2026-11-22", 12)
    )}  # fmt: skip
    _mark(out, Hour("2026-11-22", 10), names[Hour("2026-11-22", 10)])
    _mark(out, Hour("2026-11-22", 11), {})  # compacted before its file arrived
    (out / Hour("2026-11-22", 12).relative).mkdir(parents=True)  # no marker
    plan = plan_compaction(trail, out, now, GRACE)
    assert plan.done == 1
    assert plan.new == []
    [merge] = plan.merge
    assert (merge.files.hour.label, merge.late) == ("2026-11-22T11", list(names[merge.files.hour]))
    assert _labels(plan.unmarked) == ["2026-11-22T12"]
    # The late file's hour is not closed again yet: it waits.
    os.utime(trail / "date=2026-11-22" / "hour=11", (now - 1, now - 1))
    plan = plan_compaction(trail, out, now, GRACE)
    assert (plan.merge, _labels(plan.late_waiting)) == ([], ["2026-11-22T11"])


def test_markers_round_trip_and_a_broken_one_is_none(tmp_path: Path) -> None:
    hour = Hour("2026-11-22", 7)
    assert (hour.relative, hour.label) == ("date=2026-11-22/hour=07", "2026-11-22T07")
    assert hour.end == epoch("2026-11-22T08:00:00Z")
    marker = Marker({"b.jsonl": 2, "a.jsonl": 1}, 3, "2026-11-22T09:00:00Z")
    (tmp_path / MARKER).write_text(marker.to_json(hour), encoding="utf-8")
    assert Marker.read(tmp_path / MARKER) == marker
    (tmp_path / MARKER).write_text('{"sources": [', encoding="utf-8")
    assert Marker.read(tmp_path / MARKER) is None
    assert Marker.read(tmp_path / "missing") is None


def test_one_run_at_a_time(tmp_path: Path) -> None:
    with exclusive(tmp_path / "out") as first:
        assert first
        with exclusive(tmp_path / "out") as second:
            assert not second
    with exclusive(tmp_path / "out") as again:
        assert again


def test_commit_moves_a_whole_hour_and_keeps_the_one_it_replaces(tmp_path: Path) -> None:
    staged, replaced = tmp_path / "s" / "hour=10", tmp_path / "r"
    target = tmp_path / "out" / "date=d" / "hour=10"
    staged.mkdir(parents=True)
    (staged / "part-1.parquet").write_bytes(b"new")
    commit(staged, target, replaced)
    assert (target / "part-1.parquet").read_bytes() == b"new" and not staged.exists()
    staged.mkdir(parents=True)
    (staged / "part-2.parquet").write_bytes(b"newer")
    commit(staged, target, replaced)
    assert [p.name for p in target.iterdir()] == ["part-2.parquet"]
    assert (replaced / "date=d" / "hour=10" / "part-1.parquet").read_bytes() == b"new"


def test_clean_up_puts_back_a_half_swapped_hour_and_removes_the_rest(tmp_path: Path) -> None:
    swapped = tmp_path / "_replaced-1-2" / "date=2026-11-22" / "hour=10"  # new one never came
    done = tmp_path / "_replaced-1-2" / "date=2026-11-22" / "hour=11"  # new one is in place
    staging = tmp_path / "_tmp-1-2" / "date=2026-11-22" / "hour=11"
    for directory in (swapped, done, staging, tmp_path / "date=2026-11-22" / "hour=11"):
        directory.mkdir(parents=True)
    (swapped / "part-0.parquet").write_bytes(b"old 10")
    (done / "part-0.parquet").write_bytes(b"old 11")
    clean_up(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["date=2026-11-22"]
    hour_10 = tmp_path / "date=2026-11-22" / "hour=10" / "part-0.parquet"
    assert hour_10.read_bytes() == b"old 10"
    assert not list((tmp_path / "date=2026-11-22" / "hour=11").iterdir())


def test_linked_files_keep_their_paths(tmp_path: Path) -> None:
    compacted, staged = tmp_path / "hour=10", tmp_path / "staged"
    compacted.mkdir()
    staged.mkdir()
    (compacted / "part-0.parquet").write_bytes(b"x")
    (compacted / MARKER).write_text("{}", encoding="utf-8")
    link_parquet(compacted, staged)
    assert [p.name for p in staged.iterdir()] == ["part-0.parquet"]
    assert (staged / "part-0.parquet").stat().st_ino == (compacted / "part-0.parquet").stat().st_ino
