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


def write_audit(directory: Path, records: list[AuditEvent], *, junk: bool = True) -> Path:
    """Write ``records`` as the writer would; with ``junk``, add what readers must ignore: a
    half-written ``.inprogress`` file and, in a closed file of the earliest hour,
    :data:`JUNK_LINES` bad lines (malformed, another schema version, a bad time, and a last
    line cut short without its newline)."""
    files = AuditFiles(directory, max_file_bytes=1 << 30, max_file_seconds=1e9)
    for r in records:
        files.write(epoch(r.time), (r.to_json() + "\n").encode())
    files.close()
    if junk and records:
        hour = min(directory.glob("date=*/hour=*"))
        (hour / "audit-zz-1-99.jsonl.inprogress").write_text(
            records[0].to_json()[:40] + "\n", encoding="utf-8"
        )
        bad_time = json.dumps({**json.loads(records[0].to_json()), "time": "garbage"})
        (hour / "audit-zz-1-98.jsonl").write_text(
            '{"schema_version": 1, "kind": "decis\nnot json at all\n{"schema_version": 2}\n'
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
