"""``kafkaguard analyze report``: its arguments and what it prints; the two aggregations and
the roll-ups are :mod:`.cube`, the page :mod:`kafkaguard.audit.spark.render.html`."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from kafkaguard.audit.spark.runtime.command import (
    Job,
    LazySession,
    Out,
    read_options,
    window,
    window_input,
)

HELP: Final = "decisions by principal/resource/operation/listener"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("--html", help="write the self-contained HTML report here")
    report.add_argument("--top", type=int, default=10, help="top-N denied lists (default 10)")
    baseline = report.add_mutually_exclusive_group()
    baseline.add_argument(
        "--baseline-until",
        metavar="TIME",
        help="principals first seen at/after this time are new (default: the window's middle;"
        " the page states the baseline)",
    )
    baseline.add_argument(
        "--baseline-days",
        type=float,
        metavar="N",
        help="the window's first N days are the baseline: principals first seen after are new",
    )


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.report.cube import LARGE_TABLES, build_report, iso, report_data
    from kafkaguard.audit.spark.render.html import render
    from kafkaguard.audit.spark.runtime.output import write_tables
    from kafkaguard.audit.spark.trail.facts import stored_hour_totals
    from kafkaguard.audit.spark.trail.source import parse_time

    # The written cube (table ``hourly``) needs every hour: with --output no daily facts.
    daily = not args.output
    with window_input(session, args, facts=True, daily=daily) as (_, events):
        span = window(args)
        baseline = parse_time(args.baseline_until) if args.baseline_until else None
        built = build_report(
            events,
            span,
            top_n=args.top,
            baseline_until=baseline,
            baseline_days=args.baseline_days,
            hour_totals=stored_hour_totals(args.input, span, daily=daily, **read_options(args)),
        )
        if args.output:
            writing = time.perf_counter()
            write_tables(built.tables, args.output, partitioned=LARGE_TABLES, json=args.json)
            built.timings["write the tables (--output)"] = time.perf_counter() - writing
            out(f"report tables written to {args.output}")
        if args.html:
            page = render(report_data(built, span, datetime.now(UTC)))
            Path(args.html).write_text(page, encoding="utf-8")
            out(f"HTML report written to {args.html}")
        s, b = built.summary, built.baseline
        out(
            f"read {s.records} events in {time.perf_counter() - built.started:.1f} s"
            + "".join(f"; {name}: {sec:.1f} s" for name, sec in built.timings.items())
        )
        if b is not None and b.cutoff is not None:
            fresh = len(built.rows["new_principals"])
            out(
                f"{fresh} new principals since {iso(b.cutoff)} "
                f"(baseline {iso(b.start) or 'start'} .. {iso(b.cutoff)}: {b.basis})"
            )
        out(
            f"{s.allowed + s.denied} decisions: {s.allowed} allowed, {s.denied} denied "
            f"({s.would_deny} would-deny in log_only), {s.principals} principals"
        )
    return 0


JOB = Job("report", HELP, _arguments, _run)
