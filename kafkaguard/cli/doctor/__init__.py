"""``kafkaguard doctor --config FILE``: connect as the proxy would and print a checklist an
operator can act on (docs/doctor.md).

Three parts: :mod:`.gather` does the I/O (configuration, upstream, ACL store), :mod:`.checks`
turns the :mod:`.facts` into findings, :mod:`.report` prints them as text or JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafkaguard.cli.doctor.checks import evaluate, exit_code
from kafkaguard.cli.doctor.gather import collect
from kafkaguard.cli.doctor.report import render_text, report_json

DESCRIPTION = """\
Check a configuration against the world as kafkaguard run would meet it, and print a
checklist: each upstream bootstrap server (reachable, over the upstream TLS and SASL), the
broker addresses the cluster advertises (which clients must not be able to reach), each
listener and the addresses it advertises, the ACL store (loaded, how many ACLs, where from;
a Kafka-topic store's cleanup.policy, delete.retention.ms and retention.ms), super users and
allow_everyone_if_no_acl_found per listener, and with the OPA authorizer its server's
/health and a probe decision. Warnings: a listener without TLS on a non-loopback address,
allow_everyone_if_no_acl_found true, super users on a PLAINTEXT listener, a broker
advertising one of the proxy's own addresses, OPA's allow_on_error true. Nothing is bound,
no ACL written, no topic created.
A check that could not run is a failure.
Exit status: 0 nothing wrong, 1 a check failed or a warning applies (--allow-warnings: 0 on
warnings alone), 2 usage error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the proxy's configuration")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document (shape: docs/doctor.md)"
    )
    parser.add_argument(
        "--allow-warnings",
        action="store_true",
        help="exit 0 when there are warnings but no failures",
    )


def run(args: argparse.Namespace) -> int:
    facts = collect(args.config)
    findings = evaluate(facts)
    if args.json:
        document = report_json(facts, findings, allow_warnings=args.allow_warnings)
        print(json.dumps(document, indent=2))  # noqa: T201
    else:
        for line in render_text(facts, findings, allow_warnings=args.allow_warnings):
            print(line)  # noqa: T201
    return exit_code(findings, allow_warnings=args.allow_warnings)
