"""Small audit trails for the Spark tests, written by the proxy's own writer classes.

Records are :class:`kafkaguard.audit.events.AuditEvent` (the contract) and files are laid out
by :class:`kafkaguard.audit.writer.AuditFiles`, so the tests read exactly what the proxy
writes: ``date=YYYY-MM-DD/hour=HH/audit-*.jsonl``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from kafkaguard.audit.config import FORMAT_KAFKAGUARD
from kafkaguard.audit.events import SCHEMA_VERSION, AuditEvent
from kafkaguard.audit.writer import AuditFiles

DEFAULT_REASON = {"ALLOWED": "AllowAcl", "DENIED": "DefaultDeny"}


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def rec(
    time: str,
    principal: str,
    operation: str,
    resource_type: str,
    resource_name: str,
    result: str = "ALLOWED",
    *,
    count: int = 1,
    mode: str = "enforce",
    reason: str | None = None,
    listener: str = "PLAINTEXT",
    security_protocol: str = "PLAINTEXT",
    host: str = "10.0.0.1",
    api_key: int = 0,
    groups: tuple[str, ...] = (),
) -> AuditEvent:
    """One record; ``time`` like ``2026-11-22T10:15:03.123Z``; count > 1 is an aggregate."""
    aggregate = count > 1
    return AuditEvent(
        schema_version=SCHEMA_VERSION,
        kind="aggregate" if aggregate else "decision",
        time=time,
        window_end=time if aggregate else None,
        count=count,
        mode=mode,
        listener=listener,
        security_protocol=security_protocol,
        principal=principal,
        groups=groups,
        client_host=host,
        client_id="client-1",
        api_key=api_key,
        api_name="Produce",
        api_version=9,
        correlation_id=None if aggregate else 7,
        operation=operation,
        resource_type=resource_type,
        pattern_type="LITERAL",
        resource_name=resource_name,
        result=result,
        would_deny=mode == "log_only" and result == "DENIED",
        reason=reason or DEFAULT_REASON[result],
        implied=False,
        acl=None,
    )


def write_audit(
    directory: Path,
    records: list[AuditEvent],
    *,
    junk: bool = True,
    formats: tuple[str, ...] = (FORMAT_KAFKAGUARD,),
) -> Path:
    """Write ``records`` as the writer would, the i-th in ``formats[i % len(formats)]``
    (``audit.format``; several make a mixed trail); with ``junk``, add what readers must ignore: a
    half-written ``.inprogress`` file and, in a closed file of the earliest hour,
    :data:`JUNK_LINES` bad lines (malformed, another schema version, a bad time, and a last
    line cut short without its newline)."""
    files = AuditFiles(directory, max_file_bytes=1 << 30, max_file_seconds=1e9)
    for i, r in enumerate(records):
        files.write(epoch(r.time), r.encode(formats[i % len(formats)]) + b"\n")
    files.close()
    if junk and records:
        hour = min(directory.glob("date=*/hour=*"))
        (hour / "audit-zz-1-99.jsonl.inprogress").write_text(
            records[0].to_json()[:40] + "\n", encoding="utf-8"
        )
        bad_time = json.dumps({**json.loads(records[0].to_json()), "time": "garbage"})
        (hour / "audit-zz-1-98.jsonl").write_text(
            '{"schema_version": 1, "kind": "decis\nnot json at all\n{"schema_version": 3}\n'
            + bad_time  # valid but for its time: Spark's ANSI cast would fail the whole job
            + "\n\n"  # a blank line is no line (Spark skips it)
            + records[0].to_json()[:-20],  # half-written: cut, no newline
            encoding="utf-8",
        )
    return directory


JUNK_LINES = 5
"""Bad lines :func:`write_audit` adds with ``junk``."""


def set_mtimes(directory: Path, when: float) -> None:
    """Make ``directory`` and everything under it look last modified at ``when`` (epoch s):
    how old a trail looks decides which hours ``analyze compact`` takes as closed."""
    for path in [directory, *directory.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


LONG_TOPIC = "payments." + "settlement-reconciliation." * 9 + "x" * 3 + ".v2"
"""A topic name of Kafka's greatest length, 249 characters (``Topic.MAX_NAME_LENGTH``)."""
LONG_PRINCIPAL = "User:CN=nightly-reconciliation-batch.payments.example.com,OU=Settlement,O=Example"
WIDE_PRINCIPAL = "User:データ連携サービス"
"""East Asian wide characters: twice as wide as the Latin ones in a monospaced font."""


def report_trail() -> list[AuditEvent]:
    """A week of traffic to chart (2026-11-16 .. 2026-11-22): 30 principals by 30 topics —
    more than the heatmap shows — with every share denied from none to all, cells without
    traffic, the longest topic name Kafka allows, long and wide principal names, counts in
    the millions, and principals that first appear on each day (for the baseline)."""
    topics = [f"orders.region-{j:02d}" for j in range(28)]
    topics += [LONG_TOPIC, "payments.eu-west-1.settlement.reconciliation.daily-aggregates"]
    principals = [f"User:service-{i:02d}" for i in range(28)] + [LONG_PRINCIPAL, WIDE_PRINCIPAL]
    records = []
    for i, principal in enumerate(principals):
        day = 16 + i % 7  # first seen on this day
        for j, topic in enumerate(topics):
            pattern = (i * 7 + j * 3) % 6
            if pattern == 0:
                continue  # no traffic in this cell
            when = f"2026-11-{day:02d}T{(i + j) % 24:02d}:{j % 60:02d}:00.000Z"
            allowed, denied = {1: (5, 0), 2: (4, 1), 3: (1, 1), 4: (1, 9), 5: (0, 3)}[pattern]
            if allowed:
                records.append(rec(when, principal, "READ", "TOPIC", topic, count=allowed))
            if denied:
                mode = "log_only" if (i + j) % 2 else "enforce"
                records.append(
                    rec(when, principal, "WRITE", "TOPIC", topic, "DENIED", count=denied, mode=mode)
                )
    # Three busy hours, one of each colour of the over-time chart (whose axis shows millions).
    records += [
        rec("2026-11-22T12:00:00.000Z", principals[0], "READ", "TOPIC", topics[0], count=2_345_678),
        rec("2026-11-22T13:00:00.000Z", LONG_PRINCIPAL, "WRITE", "TOPIC", LONG_TOPIC, "DENIED",
            count=623_456, mode="log_only"),
        rec("2026-11-22T14:00:00.000Z", WIDE_PRINCIPAL, "WRITE", "TOPIC", topics[-1], "DENIED",
            count=1_234_567),
    ]  # fmt: skip
    return sorted(records, key=lambda r: r.time)


def version_1_line(record: AuditEvent) -> str:
    """``record`` as a proxy before groups wrote it: schema version 1, no ``groups`` key."""
    fields = {k: v for k, v in json.loads(record.to_json()).items() if k != "groups"}
    return json.dumps({**fields, "schema_version": 1}, separators=(",", ":"))


def write_version_1(directory: Path, records: list[AuditEvent]) -> None:
    """Write ``records`` as version 1 lines, one closed file per hour, where a proxy before
    groups put them (beside any later files of the same hours)."""
    by_hour: dict[Path, list[str]] = {}
    for r in records:
        day, hour = r.time[:10], r.time[11:13]
        by_hour.setdefault(directory / f"date={day}" / f"hour={hour}", []).append(version_1_line(r))
    for hour_dir, lines in by_hour.items():
        hour_dir.mkdir(parents=True, exist_ok=True)
        (hour_dir / "audit-v1-0-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


ENG, ONCALL = "Group:eng", "Group:oncall"
G = "2026-11-22T{}.000Z"
GROUPS_TRAIL = [
    rec(G.format("10:05:00"), "User:alice", "WRITE", "TOPIC", "orders", count=3, groups=(ENG,)),
    rec(G.format("10:06:00"), "User:alice", "READ", "TOPIC", "audit", groups=(ENG,)),
    rec(G.format("10:07:00"), "User:carol", "WRITE", "TOPIC", "orders"),
    rec(G.format("10:08:00"), "User:root", "ALTER", "CLUSTER", "kafka-cluster", groups=(ENG,),
        reason="SuperUser"),
    rec(G.format("11:10:00"), "User:bob", "WRITE", "TOPIC", "orders", count=2,
        groups=(ENG, ONCALL)),
]  # fmt: skip
"""A trail of group members (tests/audit/spark: propose --groups, unused, facts): every
observed member of ``Group:eng`` (alice, bob; root is a super user, no ACL applies to it)
wrote ``orders``, only alice read ``audit``; carol is in no group; ``Group:oncall`` has one
observed member."""


def without_groups(records: list[AuditEvent]) -> list[AuditEvent]:
    """The same records from connections without groups."""
    return [AuditEvent(**{**r.to_dict(), "groups": ()}) for r in records]  # type: ignore[arg-type]
