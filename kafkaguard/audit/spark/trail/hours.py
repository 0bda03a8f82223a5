"""The audit trail's hour directories: which are closed, which are compacted, and the commit.

Owns the on-disk protocol of ``analyze compact`` (:mod:`kafkaguard.audit.spark.jobs.compact` runs
the Spark side) and needs no Spark, so the command line and the tests can use it without a JVM.

The proxy's writer (:mod:`kafkaguard.audit.writer`) puts each record in the
``date=YYYY-MM-DD/hour=HH`` directory of its own time, in files it renames from
``.jsonl.inprogress`` to ``.jsonl`` when it closes them. It closes an hour's files 5 s after
the hour ends, but a record can reach an hour later than that: an aggregation window ending
after the hour (``audit.aggregate_window_seconds`` longer than what is left of it), a queue
drained late, a stalled disk — the writer then opens a new file in the old hour. So an hour
is **closed**, and only then compacted, when

1. it ended at least ``grace`` seconds ago (``--grace``, default 900), and
2. nothing in its directory changed for ``grace`` seconds: neither the directory (a file
   created, renamed or deleted in it) nor any file in it (modification times).

An ``.jsonl.inprogress`` file in a closed hour belongs to a writer that stopped without
closing it; readers never read one, so neither does compaction (it is reported).

Layout of the output (default ``<audit dir>/_compacted``)::

    date=2026-11-22/hour=10/part-*.parquet         the hour's valid records
    date=2026-11-22/hour=10/_kafkaguard_compacted.json   its marker: sources, records, when
    _compact.lock      held (flock) by the run in progress
    _tmp-*/            a run's staging area; _replaced-*/  hours being replaced by a merge

Spark's file listing skips names starting with ``_``: readers see the hour directories only.
An hour directory is staged complete, marker included, synced, and moved into place with one
``rename`` (:func:`commit`): it is there whole or not at all, and its presence is what makes
the hour compacted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Final

DEFAULT_GRACE_S: Final = 900.0
"""Fifteen minutes: well above the writer's own 5 s and the default 60 s aggregation
window; set ``--grace`` above ``audit.aggregate_window_seconds`` if that is longer."""
MARKER: Final = "_kafkaguard_compacted.json"
MARKER_FORMAT: Final = 1
LOCK_FILE: Final = "_compact.lock"
CLOSED_SUFFIX: Final = ".jsonl"
OPEN_SUFFIX: Final = ".jsonl.inprogress"
TMP_PREFIX: Final = "_tmp-"
REPLACED_PREFIX: Final = "_replaced-"
_DATE_DIR: Final = re.compile(r"date=(\d{4}-\d{2}-\d{2})")
_HOUR_DIR: Final = re.compile(r"hour=(\d{2})")


@dataclass(frozen=True, slots=True, order=True)
class Hour:
    """One ``date=YYYY-MM-DD/hour=HH`` partition (UTC)."""

    date: str
    hour: int

    @property
    def relative(self) -> str:
        return f"date={self.date}/hour={self.hour:02d}"

    @property
    def label(self) -> str:
        return f"{self.date}T{self.hour:02d}"

    @property
    def end(self) -> float:
        """Epoch seconds at which the hour ends."""
        day = datetime.combine(date.fromisoformat(self.date), datetime.min.time(), UTC)
        return day.timestamp() + (self.hour + 1) * 3600


@dataclass(slots=True)
class HourFiles:
    """What one hour directory of the input holds."""

    hour: Hour
    directory: Path
    closed: dict[str, int] = field(default_factory=dict)
    """``.jsonl`` file name → bytes."""
    unclosed: int = 0
    """``.jsonl.inprogress`` files."""
    last_change: float = 0.0
    """Newest modification time of the directory and of anything in it."""

    def is_closed(self, now: float, grace: float) -> bool:
        """The closed-hour rule (module docstring)."""
        return now >= self.hour.end + grace and self.last_change <= now - grace


@dataclass(frozen=True, slots=True)
class Marker:
    """What a compacted hour holds: written into the hour directory before its commit."""

    sources: dict[str, int]
    """The ``.jsonl`` files compacted into the hour, with their sizes."""
    records: int
    compacted_at: str

    def to_json(self, hour: Hour) -> str:
        return json.dumps(
            {
                "format": MARKER_FORMAT,
                "hour": hour.label,
                "compacted_at": self.compacted_at,
                "records": self.records,
                "sources": dict(sorted(self.sources.items())),
            },
            indent=1,
        )

    @staticmethod
    def read(path: Path) -> Marker | None:
        """The marker at ``path``; None when it is missing or unreadable."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            sources = {str(k): int(v) for k, v in data["sources"].items()}
            return Marker(sources, int(data["records"]), str(data["compacted_at"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def _mtime(path: Path) -> float:
    """A file that vanishes while it is looked at (renamed by the writer) changed now."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def _scan_hour(hour: Hour, directory: Path) -> HourFiles:
    found = HourFiles(hour, directory, last_change=_mtime(directory))
    for entry in os.scandir(directory):
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            found.last_change = time.time()
            continue
        found.last_change = max(found.last_change, stat.st_mtime)
        if entry.name.endswith(CLOSED_SUFFIX) and entry.is_file(follow_symlinks=False):
            found.closed[entry.name] = stat.st_size
        elif entry.name.endswith(OPEN_SUFFIX):
            found.unclosed += 1
    return found


def scan_input(directory: Path) -> list[HourFiles]:
    """Every well-formed ``date=/hour=`` directory of the trail, oldest first."""
    hours = []
    for day in sorted(directory.iterdir()):
        day_match = _DATE_DIR.fullmatch(day.name)
        if day_match is None or not day.is_dir():
            continue
        for hour_dir in sorted(day.iterdir()):
            hour_match = _HOUR_DIR.fullmatch(hour_dir.name)
            if hour_match is not None and hour_dir.is_dir():
                hour = Hour(day_match.group(1), int(hour_match.group(1)))
                hours.append(_scan_hour(hour, hour_dir))
    return hours


@dataclass(frozen=True, slots=True)
class Merge:
    """A compacted hour that received files since, and is closed again."""

    files: HourFiles
    marker: Marker
    late: list[str]


@dataclass(slots=True)
class Plan:
    """What one run does (``new``, ``merge``) and finds (the rest), from the listings only."""

    new: list[HourFiles] = field(default_factory=list)
    merge: list[Merge] = field(default_factory=list)
    open: list[Hour] = field(default_factory=list)
    late_waiting: list[Hour] = field(default_factory=list)
    """Compacted hours with late files, not closed again yet."""
    unmarked: list[Hour] = field(default_factory=list)
    """Compacted hours whose marker is unreadable (no late-file check)."""
    done: int = 0
    abandoned: int = 0
    """``.jsonl.inprogress`` files in the hours this run compacts (reported once)."""


def _place(plan: Plan, files: HourFiles, output: Path, closed: bool) -> None:
    target = output / files.hour.relative
    if not target.is_dir():
        if closed:
            plan.new.append(files)
            plan.abandoned += files.unclosed
        else:
            plan.open.append(files.hour)
        return
    marker = Marker.read(target / MARKER)
    if marker is None:
        plan.unmarked.append(files.hour)
        return
    late = sorted(set(files.closed) - set(marker.sources))
    if not late:
        plan.done += 1
    elif closed:
        plan.merge.append(Merge(files, marker, late))
        plan.abandoned += files.unclosed
    else:
        plan.late_waiting.append(files.hour)


def plan_compaction(input_dir: Path, output: Path, now: float, grace: float) -> Plan:
    plan = Plan()
    for files in scan_input(input_dir):
        _place(plan, files, output, files.is_closed(now, grace))
    return plan


@contextlib.contextmanager
def exclusive(output: Path) -> Iterator[bool]:
    """Hold ``<output>/_compact.lock`` (an advisory ``flock``); False if another run has it."""
    output.mkdir(parents=True, exist_ok=True)
    with open(output / LOCK_FILE, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(slots=True)
class Outcome:
    """What :func:`execute` did."""

    hours: list[Hour] = field(default_factory=list)
    records: int = 0
    """Records now in the committed hours (a merged hour's earlier records included)."""
    files: int = 0
    bytes: int = 0
    lines: int = 0
    """Lines of the JSON files read in this run (blank lines are no lines)."""
    bad_lines: int = 0
    bad_hours: list[str] = field(default_factory=list)
    distinct_decisions: int = 0
    """An estimate (HyperLogLog) of the distinct (hour, decision) of the lines read: the
    hourly facts they would make (:func:`.facts.write_facts` decides from it)."""


def _fsync(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def link_parquet(compacted: Path, staged: Path) -> None:
    """Hard-link every data file of the compacted hour ``compacted`` into ``staged`` (same
    names): the new version of the hour keeps the paths of the old one, so a job that listed
    them before the swap still finds them after it."""
    for item in compacted.iterdir():
        if item.name != MARKER and item.is_file():
            os.link(item, staged / item.name)


def commit(staged: Path, target: Path, replaced: Path) -> None:
    """Move the complete hour directory ``staged`` to ``target`` (one rename), after syncing
    it; a previous version of the hour is moved under ``replaced`` first (:func:`clean_up`
    puts it back if a crash comes between the two renames)."""
    for item in staged.iterdir():
        _fsync(item)
    _fsync(staged, directory=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        keep = replaced / target.parent.name / target.name
        keep.parent.mkdir(parents=True, exist_ok=True)
        os.rename(target, keep)
    os.rename(staged, target)
    _fsync(target.parent, directory=True)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_directories(output: Path) -> tuple[Path, Path]:
    """This run's staging directory and the one the hours it replaces are moved to."""
    stamp = f"{os.getpid()}-{time.time_ns()}"
    return output / f"{TMP_PREFIX}{stamp}", output / f"{REPLACED_PREFIX}{stamp}"


def clean_up(output: Path) -> None:
    """Undo what a crashed run left (only the lock holder writes, so whatever is there is
    stale): a replaced hour whose place is empty goes back (the crash came between the two
    renames of :func:`commit`), then staging and replaced directories are deleted."""
    for entry in sorted(output.iterdir()):
        if entry.name.startswith(REPLACED_PREFIX):
            for hour in entry.glob("date=*/hour=*"):
                place = output / hour.parent.name / hour.name
                if not place.exists():
                    os.rename(hour, place)
        if entry.name.startswith((TMP_PREFIX, REPLACED_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _span(hours: list[Hour]) -> str:
    if not hours:
        return ""
    first, last = min(hours).label, max(hours).label
    return first if first == last else f"{first} .. {last}"


def _listed(hours: list[Hour], limit: int = 6) -> str:
    labels = [h.label for h in sorted(hours)]
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return ", ".join(labels[:limit]) + more


def summary(plan: Plan, outcome: Outcome, output: Path, grace: float) -> list[str]:
    """The printed report of one run: what was compacted, the bad lines, what was left."""
    lines = [
        f"compacted {_n(len(outcome.hours), 'hour')} ({_span(outcome.hours)}) into {output}: "
        f"{_n(outcome.records, 'record')}; read {_n(outcome.files, 'file')}, "
        f"{outcome.bytes / 1e6:,.1f} MB, {_n(outcome.lines, 'line')}"
        if outcome.hours
        else f"nothing to compact into {output}"
    ]
    bad = f"bad lines: {outcome.bad_lines:,}"
    if outcome.bad_lines:
        bad += " (malformed, cut short or another schema version; skipped) in "
        bad += ", ".join(outcome.bad_hours)
    lines.append(bad)
    if plan.merge:
        hours = [m.files.hour for m in plan.merge]
        lines.append(f"late files merged into {_n(len(hours), 'compacted hour')}: {_listed(hours)}")
    lines.append(f"already compacted: {_n(plan.done, 'hour')}")
    if plan.open:
        lines.append(
            f"not closed yet (ended less than {grace:.0f} s ago or changed since): "
            f"{_n(len(plan.open), 'hour')}: {_listed(plan.open)}"
        )
    if plan.late_waiting:
        lines.append(
            "late files in compacted hours, merged once the hour is closed again "
            f"(until then no job reads them): {_listed(plan.late_waiting)}"
        )
    if plan.unmarked:
        lines.append(f"compacted hours without a readable {MARKER}: {_listed(plan.unmarked)}")
    if plan.abandoned:
        lines.append(
            f"ignored {_n(plan.abandoned, '.jsonl.inprogress file')} in closed hours"
            " (a writer stopped without closing it; no job reads one)"
        )
    return lines
