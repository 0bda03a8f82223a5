"""``kafkaguard analyze propose``: its arguments and what it writes; the observed grants are
:mod:`.grants`, the rules that turn them into ACLs :mod:`kafkaguard.audit.spark.solver.proposal`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kafkaguard.audit.spark.runtime.command import (
    Job,
    LazySession,
    Out,
    read_options,
    window,
    window_input,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kafkaguard.audit.spark.solver.proposal import ProposedAcl

HELP: Final = "least-privilege ACLs for the observed access"
"""The job's line in ``kafkaguard analyze --help``."""


def _arguments(propose: argparse.ArgumentParser) -> None:
    propose.add_argument(
        "--prefix-min-topics",
        type=int,
        default=0,
        metavar="N",
        help="one PREFIXED ACL for >= N topics of a principal sharing a prefix (default 0: off)",
    )
    propose.add_argument(
        "--hosts", choices=("any", "exact"), default="any", help="ACL host: * or observed IPs"
    )
    propose.add_argument(
        "--groups",
        action="store_true",
        help="a Group: ACL where every observed member of a group (>= 2, membership from the"
        " records) used the same access; user ACLs for the rest",
    )
    propose.add_argument("--acl-file", help="write the ACL file here (default: stdout)")
    propose.add_argument(
        "--commands-file", help="write kafka-acls commands here (with --bootstrap-server)"
    )
    propose.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="the proxy (or broker) the --commands-file commands connect to; required with it",
    )


def _check(args: argparse.Namespace) -> None:
    if args.commands_file and not args.bootstrap_server:
        # No default: a made-up address (localhost:9092) would send the commands elsewhere.
        raise ValueError(
            "--commands-file needs --bootstrap-server HOST:PORT, the address of the proxy "
            "(or broker) its kafka-acls commands connect to"
        )


def _membership(spark: SparkSession, args: argparse.Namespace) -> dict[str, frozenset[str]]:
    """The window's group membership, from the same hours and records the grants come from."""
    from kafkaguard.audit.spark.trail.facts import read_membership

    return read_membership(spark, args.input, window(args), **read_options(args))


def _run(session: LazySession, args: argparse.Namespace, out: Out) -> int:
    from kafkaguard.audit.spark.jobs.propose.grants import proposal_tables, propose
    from kafkaguard.audit.spark.runtime.output import write_tables
    from kafkaguard.audit.spark.solver.proposal import render_acl_file, render_commands

    # Hourly facts keep no client address but the smallest: --hosts exact reads the records.
    with window_input(session, args, facts=args.hosts != "exact") as (spark, events):
        if args.prefix_min_topics < 0 or args.prefix_min_topics == 1:
            raise ValueError("--prefix-min-topics must be 0 (off) or at least 2")
        made = propose(
            events,
            exact_hosts=args.hosts == "exact",
            prefix_min_topics=args.prefix_min_topics,
            members=_membership(spark, args) if args.groups else None,
        )
        principals = len({a.binding.entry.principal for a in made.acls})
        header = [
            f"Proposed by `kafkaguard analyze propose` from {args.input}"
            f" (window {args.since or 'start'} .. {args.until or 'end'}).",
            f"{len(made.acls)} ALLOW ACLs for {principals} principals: every observed allowed"
            " or would-deny access, nothing else. Review before loading.",
        ]
        if args.groups:
            header.append(_groups_line(made.acls))
        text = render_acl_file(made.acls, header)
        if args.acl_file:
            Path(args.acl_file).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        if args.commands_file:
            Path(args.commands_file).write_text(
                render_commands(made.acls, args.bootstrap_server), encoding="utf-8"
            )
        if args.output:
            write_tables(proposal_tables(spark, made), args.output, json=args.json)
        note = f"; {made.skipped} unusable tuples skipped" if made.skipped else ""
        sys.stderr.write(f"proposed {len(made.acls)} ACLs for {principals} principals{note}\n")
    return 0


def _groups_line(acls: Sequence[ProposedAcl]) -> str:
    grouped = [a for a in acls if a.binding.entry.principal.startswith("Group:")]
    return (
        f"--groups: {len(grouped)} Group: ACLs, each where every observed member of the group"
        " used it (membership as the records name it; each ACL names its members). A group"
        " ACL also grants the group's members the window did not see: check who is in each"
        " group before loading."
    )


JOB = Job("propose", HELP, _arguments, _run, _check)
