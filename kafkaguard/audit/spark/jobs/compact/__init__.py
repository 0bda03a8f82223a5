"""``kafkaguard analyze compact``: its arguments and what it prints; the run (lock, plan, write,
commit) is :mod:`.parquet`, the on-disk protocol :mod:`kafkaguard.audit.spark.trail.hours`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from kafkaguard.audit.spark.runtime.command import Job, LazySession, Out

HELP: Final = "turn the closed hours of the audit trail into Parquet (incremental)"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(compact: argparse.ArgumentParser) -> None:
    from kafkaguard.audit.spark.trail.hours import DEFAULT_GRACE_S  # no pyspark: see its doc

    compact.add_argument("--input", required=True, help="the proxy's (local) audit directory")
    compact.add_argument("--output", help="the Parquet directory (default: INPUT/_compacted)")
    compact.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="an hour is closed once it ended, and its directory last changed, this long ago"
        f" (default {DEFAULT_GRACE_S:.0f}; above audit.aggregate_window_seconds)",
    )


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.compact.parquet import compact
    from kafkaguard.audit.spark.trail.source import compacted_path

    if "://" in args.input or (args.output and "://" in args.output):
        raise ValueError("compact works on the proxy's local audit directory (a path, no URI)")
    output = Path(args.output or compacted_path(args.input))
    lines = compact(session.get, Path(args.input), output, grace=args.grace)
    if lines is None:
        out(f"another compaction holds {output}; nothing done")
        return 0
    for line in lines:
        out(line)
    return 0


JOB = Job("compact", HELP, _arguments, _run, windowed=False, kafka=False)  # a local path
