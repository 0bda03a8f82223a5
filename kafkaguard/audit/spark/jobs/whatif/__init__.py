"""``kafkaguard analyze whatif``: its arguments, what it prints and its exit code; the replay
and its flips are :mod:`.flips`."""

from __future__ import annotations

import argparse
from typing import Final

from kafkaguard.audit.spark.runtime.command import Job, LazySession, Out, window_input

HELP: Final = "replay the window against another ACL set"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(whatif: argparse.ArgumentParser) -> None:
    whatif.add_argument("--acls", required=True, help="the proposed ACL file")
    whatif.add_argument("--config", help="the proxy config whose authorizer settings apply")
    whatif.add_argument("--show", type=int, default=50, help="flips to print (default 50)")
    whatif.add_argument(
        "--fail-on-breakage",
        action="store_true",
        help="exit 3 when some allowed decision would be denied",
    )


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.whatif.flips import flips, replay, summarize, summary_table
    from kafkaguard.audit.spark.runtime.cache import cached
    from kafkaguard.audit.spark.runtime.output import write_tables
    from kafkaguard.audit.spark.runtime.replay import load_policy

    with window_input(session, args, facts=False) as (_, events):
        policy = load_policy(args.acls, args.config)
        replayed = cached(replay(events, policy))
        flipped = cached(flips(replayed))
        counts = summarize(flipped)
        if args.output:
            tables = {
                "whatif_replay": replayed,
                "whatif_flips": flipped,
                "whatif_summary": summary_table(flipped, counts),
            }
            write_tables(tables, args.output, json=args.json)
        for c in counts:
            out(f"{c.direction}: {c.decisions} decisions ({c.tuples} distinct requests)")
        for r in flipped.limit(args.show).collect():
            out(
                f"  {r['direction']} x{r['count']}: {r['principal']}{_groups(r['groups'])} "
                f"{r['operation']} "
                f"{r['resource_type']}:{r['resource_name']} from {r['client_host']} "
                f"({r['listener']}) -> {r['reason']}"
            )
        errors = replayed.where(replayed["error"].isNotNull()).count()
        if errors:
            out(f"{errors} recorded tuples could not be replayed (see whatif_replay.error)")
    breaking = counts[0].decisions > 0
    return 3 if args.fail_on_breakage and breaking else 0


def _groups(groups: list[str] | None) -> str:
    """A member's groups after its principal (two flips of one principal with other groups
    are other requests); nothing for a connection without groups."""
    return f" [{', '.join(groups)}]" if groups else ""


JOB = Job("whatif", HELP, _arguments, _run, connect=False)  # replays on RDDs: no Connect
