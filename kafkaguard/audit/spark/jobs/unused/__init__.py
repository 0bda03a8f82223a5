"""``kafkaguard analyze unused``: its arguments and what it prints; which ACLs matched which
decisions is :mod:`.usage`."""

from __future__ import annotations

import argparse
from typing import Final

from kafkaguard.audit.spark.runtime.command import Job, LazySession, Out, window_input

HELP: Final = "ACLs in the current store that matched no decision"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(unused: argparse.ArgumentParser) -> None:
    unused.add_argument("--acls", help="the ACL file to check (default: --config's store)")
    unused.add_argument("--config", help="the proxy config: its ACL store and authorizer settings")


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.unused.usage import acl_usage, unused_acls
    from kafkaguard.audit.spark.runtime.cache import cached
    from kafkaguard.audit.spark.runtime.output import write_tables
    from kafkaguard.audit.spark.runtime.replay import load_policy
    from kafkaguard.policy.explain import acl_text

    with window_input(session, args, facts=False) as (_, events):
        policy = load_policy(args.acls, args.config)
        usage = cached(acl_usage(events, policy))
        unused = unused_acls(usage)
        if args.output:
            write_tables({"acl_usage": usage, "unused_acls": unused}, args.output, json=args.json)
        indexes = [r["acl_index"] for r in unused.select("acl_index").collect()]
        out(f"{len(indexes)} of {len(policy.acls)} ACLs ({policy.source}) matched no decision:")
        for i in indexes:
            out(f"  {acl_text(policy.acls[i])}")
    return 0


JOB = Job("unused", HELP, _arguments, _run, connect=False)  # replays on RDDs: no Connect
